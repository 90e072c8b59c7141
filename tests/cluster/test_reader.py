"""The reader's protocol handling through the real kubernetes client: pagination, 410 Gone,
retries with backoff, timeouts, cut connections, 403 and 404."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakeapi import FakeCluster, kubeconfig, serve
from kubernetes import config
from seedcluster import objects

from auditor.sources.kubeapi import KubernetesTransport, Reader, ReadOptions

PODS = "/api/v1/pods"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[FakeCluster, object]]:
    fake = FakeCluster(objects("before") + _extra_pods(23), {"/apis/cilium.io/v2/ciliumnetworkpolicies"})
    with serve(fake) as url:
        api = config.new_client_from_config(config_file=str(kubeconfig(tmp_path / "k", url)))
        yield fake, api
        api.close()


def _extra_pods(n: int) -> list[dict]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"web-{i}",
                "namespace": "web",
                "labels": {"app": "web"},
                "managedFields": [{"manager": "kubectl"}],
            },
            "spec": {"nodeName": "lab-worker3", "containers": []},
            "status": {"phase": "Running"},
        }
        for i in range(n)
    ]


def _reader(
    api: object, sleeps: list[float], timeout: tuple[float, float] = (5.0, 10.0), **options: object
) -> Reader:
    return Reader(
        KubernetesTransport(api, timeout), ReadOptions(**{"page_size": 4, **options}), sleeps.append
    )  # type: ignore[arg-type]


def _pods(read) -> list[str]:  # type: ignore[no-untyped-def]
    return sorted(o["metadata"]["name"] for o in read.objects if o["kind"] == "Pod")


def test_paginated_complete_read(cluster: tuple[FakeCluster, object]) -> None:
    fake, api = cluster
    sleeps: list[float] = []
    read = _reader(api, sleeps).read("lab")
    assert read.incomplete == [] and read.server_version == "v1.34.2"
    assert len(_pods(read)) == 28 and read.counts["Pod (v1)"] == 28
    assert sum(1 for r in fake.requests if r.startswith(PODS) and "continue=" in r) == 6  # 7 pages of 4
    assert all("managedFields" not in o["metadata"] for o in read.objects)
    assert all(o["kind"] and o["apiVersion"] for o in read.objects)  # list items get them back
    assert {p.what for p in read.absent} >= {
        "PyTorchJob (kubeflow.org/v1)",
        "JobSet (jobset.x-k8s.io/v1alpha2)",
    }
    assert sleeps == []
    # Pods owned by a kind the reader lists keep only what placement needs; bare pods stay whole.
    pods = {o["metadata"]["name"]: o for o in read.objects if o["kind"] == "Pod"}
    owned = pods["trainer-coordinator-7d9f8-x2x4q"]
    assert set(owned["spec"]) == {"nodeName"} and owned["status"]["phase"] == "Running"
    assert owned["metadata"]["labels"]["role"] == "coordinator" and owned["metadata"]["ownerReferences"]
    assert "containers" in pods["web-0"]["spec"]


def test_expired_continue_token_restarts_the_list(cluster: tuple[FakeCluster, object]) -> None:
    fake, api = cluster
    fake.faults.gone[PODS] = 2
    read = _reader(api, []).read("lab")
    assert read.incomplete == [] and len(_pods(read)) == 28  # complete, no duplicates
    assert sum(1 for r in fake.requests if r == f"{PODS}?limit=4") == 3


def test_a_list_that_keeps_expiring_is_reported(cluster: tuple[FakeCluster, object]) -> None:
    fake, api = cluster
    fake.faults.gone[PODS] = 100
    read = _reader(api, [], relists=2).read("lab")
    [problem] = read.incomplete
    assert problem.what == "Pod (v1)" and "410" in problem.message and _pods(read) == []


def test_server_errors_and_throttling_are_retried_with_backoff(cluster: tuple[FakeCluster, object]) -> None:
    fake, api = cluster
    fake.faults.fail[PODS] = 3
    fake.faults.throttle["/api/v1/nodes"] = 1
    sleeps: list[float] = []
    read = _reader(api, sleeps, backoff_seconds=0.5).read("lab")
    assert read.incomplete == [] and len(_pods(read)) == 28
    # Nodes 429 once; pods 500 three times, doubling. The lists run concurrently, so the two
    # resources' sleeps interleave in any order: compare them as a multiset.
    assert sorted(sleeps) == [0.5, 0.5, 1.0, 2.0]


def test_persistent_failure_is_a_clear_partial_read(cluster: tuple[FakeCluster, object]) -> None:
    fake, api = cluster
    fake.faults.fail[PODS] = 1000
    read = _reader(api, [], attempts=3).read("lab")
    [problem] = read.incomplete
    assert (
        problem.problem == "failed"
        and "gave up after 3 attempts" in problem.message
        and "500" in problem.message
    )


def test_timeouts_and_cut_connections_are_retried(cluster: tuple[FakeCluster, object]) -> None:
    fake, api = cluster
    fake.faults.cut[PODS] = 2
    read = _reader(api, []).read("lab")
    assert read.incomplete == [] and len(_pods(read)) == 28
    fake.faults.slow["/api/v1/services"] = 1.0
    read = _reader(api, [], timeout=(2.0, 0.2), attempts=2).read("lab")
    [problem] = read.incomplete
    assert problem.what == "Service (v1)" and "timed out" in problem.message.lower()


def test_forbidden_reads_carry_the_rbac_rule(cluster: tuple[FakeCluster, object]) -> None:
    fake, api = cluster
    fake.faults.forbidden |= {PODS, "/apis/cilium.io/v2/ciliumnetworkpolicies"}
    read = _reader(api, []).read("lab")
    rules = {p.what: p.rbac for p in read.incomplete}
    assert rules == {
        "Pod (v1)": 'apiGroups: [""], resources: ["pods"], verbs: ["list"]',
        "CiliumNetworkPolicy (cilium.io/v2)": 'apiGroups: ["cilium.io"], resources: ["ciliumnetworkpolicies"], verbs: ["list"]',
    }


def test_an_unreadable_cilium_config_namespace_does_not_make_the_audit_partial(
    cluster: tuple[FakeCluster, object],
) -> None:
    fake, api = cluster
    fake.singles.pop("/api/v1/namespaces/kube-system/configmaps/cilium-config")
    fake.faults.forbidden.add("/api/v1/namespaces/cilium/configmaps/cilium-config")
    read = _reader(api, []).read("lab")
    assert read.incomplete == []
    [note] = [p for p in read.absent if "cilium-config" in p.what]
    assert (
        note.what == "ConfigMap cilium/cilium-config" and 'resourceNames: ["cilium-config"]' in note.message
    )


def test_the_fake_servers_cached_pages_are_the_same_pages(cluster: tuple[FakeCluster, object]) -> None:
    import json

    fake, api = cluster
    first = _reader(api, []).read("lab")
    fake.preserialize()
    again = _reader(api, []).read("lab")
    assert json.dumps(first.objects, sort_keys=True) == json.dumps(again.objects, sort_keys=True)


def _owned_pod(name: str, **extra: object) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "web",
            "uid": f"uid-{name}",
            "labels": {"app": "web", "pod-template-hash": "5d8f7"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "web-5d8f7",
                    "uid": "rs",
                    "controller": True,
                }
            ],
            "managedFields": [{"manager": "kube-controller-manager", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {
            "nodeName": "lab-worker3",
            "hostNetwork": False,
            "containers": [{"name": "main", "image": "web:1", "env": [{"name": "A", "value": "b" * 500}]}],
        },
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.7",
            "podIPs": [{"ip": "10.0.0.7"}],
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            ],
            "containerStatuses": [{"name": "main", "ready": True}],
        },
        **extra,
    }


def test_pod_pages_decode_partially_to_the_same_objects_as_a_whole_decode(tmp_path: Path) -> None:
    """Owned pods are decoded only as far as slim_pod reads them; the result must be what slimming
    the whole pod gives. Pods of other shapes (bare, owned by an unknown kind, odd metadata) are
    decoded whole and come out as before."""
    import copy

    from auditor.sources.kubeapi import slim_pod

    foreign = _owned_pod("foreign")
    foreign["metadata"]["ownerReferences"][0]["kind"] = "SomethingElse"
    odd = _owned_pod("odd")
    odd["spec"] = ["not", "an", "object"]  # falls back to the whole decode, slimmed as before
    pods = [_owned_pod(f"owned-{i}") for i in range(5)] + [foreign, odd, *_extra_pods(2)]
    fake = FakeCluster(copy.deepcopy(pods))
    with serve(fake) as url:
        api = config.new_client_from_config(config_file=str(kubeconfig(tmp_path / "k", url)))
        try:
            read = _reader(api, [], page_size=3).read("lab")
        finally:
            api.close()
    got = {o["metadata"]["name"]: o for o in read.objects if o["kind"] == "Pod"}
    for pod in pods:
        whole = copy.deepcopy(pod)
        whole["metadata"].pop("managedFields", None)
        assert got[pod["metadata"]["name"]] == slim_pod(whole), pod["metadata"]["name"]
    assert set(got["owned-0"]["spec"]) == {"nodeName", "hostNetwork"}
    assert got["owned-0"]["status"]["conditions"] == [pods[0]["status"]["conditions"][1]]
    assert "containers" in got["foreign"]["spec"] and got["odd"]["spec"] == {}  # slimmed as before


def test_lists_run_concurrently_across_resources(cluster: tuple[FakeCluster, object]) -> None:
    """Five slow lists take about one delay, not five, and the objects keep the resource order."""
    import time

    fake, api = cluster
    slow = [
        "/api/v1/nodes",
        "/api/v1/pods",
        "/api/v1/services",
        "/apis/apps/v1/deployments",
        "/apis/batch/v1/jobs",
    ]
    for path in slow:
        fake.faults.slow[path] = 0.6
    start = time.perf_counter()
    read = _reader(api, [], page_size=500, concurrency=8).read("lab")
    assert time.perf_counter() - start < 0.6 * 3
    assert read.incomplete == []
    sequential = _reader(api, [], page_size=500, concurrency=1)
    for path in slow:
        fake.faults.slow[path] = 0.0
    again = sequential.read("lab")
    assert [(o["kind"], o["metadata"]["name"]) for o in read.objects] == [
        (o["kind"], o["metadata"]["name"]) for o in again.objects
    ]
