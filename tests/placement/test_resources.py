"""Quantities, pod requests and the node/pod filters' edge cases not covered by the upstream tables."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from auditor.model.objects import Node, PodTemplate
from auditor.model.source import SourceRef
from auditor.placement.filters import feasible_zones, filter_node
from auditor.placement.podfilters import (
    InterPodAffinity,
    TopologySpread,
    existing_pod,
)
from auditor.placement.resources import (
    fits,
    milli_value,
    parse_quantity,
    pod_requests,
    pods_per_node,
    whole_value,
)
from auditor.sources.objects import RawObject, parse_node
from auditor.workloads.podspec import parse_pod

ZONE = "topology.kubernetes.io/zone"


def node(name: str, labels: dict[str, str] | None = None, allocatable: dict[str, str] | None = None) -> Node:
    obj = {
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "status": {"allocatable": allocatable or {}},
    }
    return parse_node(RawObject(obj, SourceRef("<test>")))


def pod(spec: dict[str, Any], labels: dict[str, str] | None = None) -> PodTemplate:
    return parse_pod({"labels": labels or {}}, spec, "")


def container(requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": "c", "image": "x", "resources": resources}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Fraction(1, 2)),
        ("2", Fraction(2)),
        (2, Fraction(2)),
        (0.5, Fraction(1, 2)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("1Ki", Fraction(1024)),
        ("1Ei", Fraction(2**60)),
        ("1k", Fraction(1000)),
        ("1M", Fraction(10**6)),
        ("1G", Fraction(10**9)),
        ("1T", Fraction(10**12)),
        ("1P", Fraction(10**15)),
        ("1E", Fraction(10**18)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("1.5e3", Fraction(1500)),
        ("2e-3", Fraction(2, 1000)),
        ("100u", Fraction(1, 10**4)),
        ("1n", Fraction(1, 10**9)),
        (".5", Fraction(1, 2)),
        ("+1", Fraction(1)),
        ("-1m", Fraction(-1, 1000)),
        ("0", Fraction(0)),
        # Finer than a nano is rounded up to 1n (apimachinery rounds non-zero amounts up).
        ("0.1n", Fraction(1, 10**9)),
        # SI values are capped at the int64 maximum, exponent forms are not.
        ("99999999999999999999", Fraction(2**63 - 1)),
        ("1e20", Fraction(10**20)),
    ],
)
def test_quantities_parse_exactly(text: Any, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text", ["", "abc", "1K", "1 ", " 1", "1Gib", "1e", "e3", "--1", "1.2.3", "m", ".", "1e1001", "１"]
)
def test_garbage_quantities_are_rejected_naming_the_text(text: str) -> None:
    with pytest.raises(ValueError, match="invalid quantity") as err:
        parse_quantity(text)
    assert repr(text) in str(err.value)


@pytest.mark.parametrize("value", [None, True, [1], {"a": 1}])
def test_non_scalar_quantities_are_rejected(value: Any) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(value)


def test_scheduler_units_round_up() -> None:
    assert milli_value(parse_quantity("0.5m")) == 1
    assert milli_value(parse_quantity("0.1")) == 100
    assert milli_value(parse_quantity("1.0001")) == 1001
    assert whole_value(parse_quantity("1.5")) == 2
    assert whole_value(parse_quantity("1Mi")) == 2**20


def test_limits_fill_absent_requests() -> None:
    template = pod(
        {"containers": [container(requests={"cpu": "1"}, limits={"cpu": "2", "nvidia.com/gpu": 1})]}
    )
    assert pod_requests(template) == {"cpu": Fraction(1), "nvidia.com/gpu": Fraction(1)}


def test_sidecars_add_to_the_app_containers_and_to_later_init_containers() -> None:
    spec = {
        "containers": [container({"cpu": "1"})],
        "initContainers": [
            {**container({"cpu": "1"}), "restartPolicy": "Always"},
            container({"cpu": "2"}),  # runs next to the first sidecar: 3
            {**container({"cpu": "3"}), "restartPolicy": "Always"},
        ],
    }
    assert pod_requests(pod(spec))["cpu"] == 5  # app 1 + sidecars 4 outweighs the init peak 3
    spec["initContainers"].append(container({"cpu": "7"}))  # runs next to both sidecars: 11
    assert pod_requests(pod(spec))["cpu"] == 11


def test_pod_level_limits_default_the_request_only_where_no_container_requests() -> None:
    spec = {
        "containers": [container({"memory": "1Gi"})],
        "resources": {"limits": {"cpu": "2", "memory": "4Gi"}},
        "overhead": {"cpu": "100m"},
    }
    reqs = pod_requests(pod(spec))
    assert reqs["cpu"] == Fraction(21, 10)  # the limit, plus overhead
    assert reqs["memory"] == 2**30  # the containers' aggregate


def test_gpu_pod_does_not_fit_a_node_without_gpus() -> None:
    template = pod({"containers": [container(limits={"nvidia.com/gpu": "8"})]})
    assert (
        fits(template, node("cpu", allocatable={"cpu": "64", "pods": "110"})) == "Insufficient nvidia.com/gpu"
    )
    assert fits(template, node("gpu", allocatable={"cpu": "64", "nvidia.com/gpu": "8"})) is None
    assert fits(template, node("small", allocatable={"nvidia.com/gpu": "4"})) == "Insufficient nvidia.com/gpu"


def test_unknown_capacity_fits() -> None:
    template = pod({"containers": [container({"cpu": "100", "memory": "1Ti", "example.com/fpga": "1"})]})
    assert fits(template, node("unknown")) is None  # no allocatable data at all
    # cpu/memory/pods missing from a partial allocatable are unknown; an extended resource is 0.
    partial = node("partial", allocatable={"nvidia.com/gpu": "8"})
    assert fits(template, partial) == "Insufficient example.com/fpga"
    assert fits(pod({"containers": [container({"cpu": "100"})]}), partial) is None


def test_pods_per_node_is_the_fit_filter_applied_pod_after_pod() -> None:
    # noderesources/fit.go fitsRequest: each pod takes a pods slot and its requests; identical pods
    # fit an empty node while every requested resource's allocatable covers them all.
    gpu8 = node("g", allocatable={"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "8"})
    full_gpu = pod({"containers": [container(limits={"nvidia.com/gpu": "8"})]})
    assert pods_per_node(full_gpu, gpu8.allocatable) == (1, "nvidia.com/gpu")
    half = pod({"containers": [container({"cpu": "40", "nvidia.com/gpu": "4"})]})
    assert pods_per_node(half, gpu8.allocatable) == (2, "cpu")  # 96 // 40 = 2, 8 // 4 = 2: ties by name
    milli = pod({"containers": [container({"cpu": "1500m"})]})
    assert pods_per_node(milli, node("c", allocatable={"cpu": "4", "pods": "110"}).allocatable) == (2, "cpu")
    tiny = pod({"containers": [container({"cpu": "1m"})]})
    assert pods_per_node(tiny, gpu8.allocatable) == (110, "pods")
    # Unknown capacity bounds nothing; a missing extended resource is 0 (the filter rejects the node).
    assert pods_per_node(full_gpu, node("u").allocatable) is None
    assert pods_per_node(full_gpu, node("cpu", allocatable={"cpu": "64"}).allocatable) == (
        0,
        "nvidia.com/gpu",
    )
    assert (
        pods_per_node(
            pod({"containers": [container({"cpu": "1"})]}),
            node("m", allocatable={"memory": "1Gi"}).allocatable,
        )
        is None
    )
    broken = pod({"containers": [container({"cpu": "lots"})]})
    assert pods_per_node(broken, gpu8.allocatable) is None  # the resource filter names the field


def test_resources_without_a_domain_are_ignored_as_kube_scheduler_does() -> None:
    template = pod({"containers": [container({"storage": "10Gi", "requests.cpu": "1"})]})
    assert fits(template, node("n", allocatable={"cpu": "1"})) is None


def test_each_pod_takes_a_pod_slot() -> None:
    template = pod({"containers": [container()]})
    full = node("n", allocatable={"pods": "1"})
    assert fits(template, full) is None
    assert fits(template, full, [template]) == "Too many pods"


def test_filter_node_reports_resources_after_taints_and_bad_quantities() -> None:
    n = node("n", allocatable={"cpu": "1", "memory": "1Gi", "pods": "10"})
    big = filter_node(pod({"containers": [container({"cpu": "2"})]}), n)
    assert (big.ok, big.plugin, big.code) == (False, "NodeResourcesFit", "UnschedulableAndUnresolvable")
    busy = filter_node(
        pod({"containers": [container({"cpu": "1"})]}),
        n,
        existing=[pod({"containers": [container({"cpu": "500m"})]})],
    )
    assert (busy.ok, busy.code) == (False, "Unschedulable")
    bad = filter_node(pod({"containers": [container({"cpu": "lots"})]}), n)
    assert (bad.ok, bad.plugin) == (False, "NodeResourcesFit")
    assert "'lots'" in bad.reason


def test_volume_zones_confine_the_pod_to_the_claims_zones() -> None:
    nodes = [node("a", {ZONE: "za"}), node("b", {ZONE: "zb"}), node("c", {ZONE: "zc"})]
    template = pod(
        {
            "containers": [container()],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "scratch", "emptyDir": {}},
            ],
        }
    )
    assert feasible_zones(template, nodes, ZONE) == ["za", "zb", "zc"]  # default: no volume data
    zones = {"data": frozenset({"zb", "zc"}), "other": frozenset({"za"})}
    assert feasible_zones(template, nodes, ZONE, zones) == ["zb", "zc"]
    result = filter_node(template, nodes[0], zones)
    assert (result.plugin, result.code) == ("VolumeZone", "UnschedulableAndUnresolvable")
    # A node without any zone/region label passes (a single-zone cluster).
    assert filter_node(template, node("bare"), zones).ok


def test_node_affinity_gt_lt_parse_int64_strictly() -> None:
    def gt(value: str) -> PodTemplate:
        term = {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": [value]}]}
        aff = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        }
        return pod({"containers": [container()], "affinity": aff})

    assert filter_node(gt("3"), node("n", {"gen": "04"})).ok
    assert not filter_node(gt("3"), node("n", {"gen": "4_0"})).ok  # Go's ParseInt takes no underscores
    assert not filter_node(
        gt("1_0"), node("n", {"gen": "40"})
    ).ok  # invalid requirement: term matches nothing


def _affinity_pod(term: dict[str, Any], labels: dict[str, str]) -> PodTemplate:
    aff = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return pod({"containers": [container()], "affinity": aff}, labels)


def test_pod_affinity_namespace_selector_matches_namespace_labels() -> None:
    nodes = [node("a", {ZONE: "za"}), node("b", {ZONE: "zb"})]
    coordinator = existing_pod(
        {"metadata": {"namespace": "team-a", "labels": {"role": "master"}}, "spec": {"nodeName": "a"}}
    )
    term = {
        "labelSelector": {"matchLabels": {"role": "master"}},
        "namespaceSelector": {"matchLabels": {"team": "a"}},
        "topologyKey": ZONE,
    }
    worker = _affinity_pod(term, {"role": "worker"})
    ns_labels = {"team-a": {"team": "a"}}
    state = InterPodAffinity.build(worker, "ml", nodes, [coordinator], ns_labels)
    assert [state.filter(n).ok for n in nodes] == [True, False]
    # Without the namespace's labels the selector matches nothing, and the worker waits.
    assert not InterPodAffinity.build(worker, "ml", nodes, [coordinator]).filter(nodes[0]).ok
    # kubernetes.io/metadata.name is always there.
    by_name = {**term, "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}}}
    follower = _affinity_pod(by_name, {"role": "worker"})
    assert InterPodAffinity.build(follower, "ml", nodes, [coordinator]).filter(nodes[0]).ok


def test_first_pod_exemption_needs_a_pod_matching_its_own_term() -> None:
    nodes = [node("a", {ZONE: "za"}), node("b", {ZONE: "zb"})]
    term = {"labelSelector": {"matchLabels": {"job": "j"}}, "topologyKey": ZONE}
    first = _affinity_pod(term, {"job": "j"})
    follower = _affinity_pod(term, {"job": "other"})
    assert all(InterPodAffinity.build(first, "ml", nodes, []).filter(n).ok for n in nodes)
    assert not any(InterPodAffinity.build(follower, "ml", nodes, []).filter(n).ok for n in nodes)


def test_match_label_keys_narrow_the_spread_selector_to_the_pods_own_values() -> None:
    nodes = [node("a", {ZONE: "za"}), node("b", {ZONE: "zb"})]
    old = [
        existing_pod(
            {"metadata": {"namespace": "ml", "labels": {"app": "t", "rev": "1"}}, "spec": {"nodeName": "a"}}
        )
        for _ in range(3)
    ]
    constraint = {
        "maxSkew": 1,
        "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "t"}},
    }
    template = pod(
        {"containers": [container()], "topologySpreadConstraints": [constraint]}, {"app": "t", "rev": "2"}
    )
    assert [TopologySpread.build(template, "ml", nodes, old).filter(n).ok for n in nodes] == [False, True]
    keyed = pod(
        {
            "containers": [container()],
            "topologySpreadConstraints": [{**constraint, "matchLabelKeys": ["rev"]}],
        },
        {"app": "t", "rev": "2"},
    )
    assert all(TopologySpread.build(keyed, "ml", nodes, old).filter(n).ok for n in nodes)
