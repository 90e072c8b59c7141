"""Pod templates and workloads are read once into typed values: the core sees no raw manifest."""

from __future__ import annotations

import dataclasses
import typing
from fractions import Fraction

import pytest
from support import inventory

from auditor import yamlio
from auditor.inventory import role_claim_zones
from auditor.model.objects import Claim, Container, PodRequests, PodTemplate, Role, Workload, WorkloadRef
from auditor.model.source import SourceRef
from auditor.placement.resources import pod_requests
from auditor.rules.model import annotation
from auditor.rules.packs import annotation_waivers
from auditor.workloads.adapters import _options, adapt
from auditor.workloads.dataports import ompi_range, sysctl_range
from auditor.workloads.podspec import parse_pod


@pytest.mark.parametrize("cls", [PodTemplate, Workload])
def test_no_field_of_the_core_model_is_typed_any(cls: type) -> None:
    hints = typing.get_type_hints(cls)
    assert {f.name for f in dataclasses.fields(cls)} & {"spec", "raw"} == set()
    assert [name for name, hint in hints.items() if hint is typing.Any] == []


def test_containers_keep_literal_env_values_and_string_arguments() -> None:
    spec = {
        "containers": [
            {
                "name": "trainer",
                "env": [
                    {"name": "MASTER_ADDR", "value": "master-0"},
                    {"name": "RANK", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "PORT", "value": 23456},  # not a string: the API would reject it
                    "junk",
                ],
                "command": ["torchrun", "--nnodes=2"],
                "args": ["train.py", 3],
            },
            None,
        ],
        "initContainers": [
            {"name": "wait", "command": ["sh", "-c", "until nslookup master; do sleep 1; done"]},
            {"name": "proxy", "restartPolicy": "Always", "env": "not-a-list"},
            "junk",
        ],
    }
    t = parse_pod({}, spec, "")
    assert t.containers == (
        Container("trainer", (("MASTER_ADDR", "master-0"),), ("torchrun", "--nnodes=2"), ("train.py",)),
    )
    assert [(c.name, c.restart_policy, c.env) for c in t.init_containers] == [
        ("wait", "", ()),
        ("proxy", "Always", ()),
    ]


def test_claims_and_sysctls_are_read_leniently() -> None:
    spec = {
        "containers": [{"name": "c"}],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "scratch", "emptyDir": {}},
            {"name": "nameless", "persistentVolumeClaim": {}},
            "junk",
        ],
        "securityContext": {
            "sysctls": [{"name": "net.ipv4.ip_local_port_range", "value": "40000 40100"}, "junk"]
        },
    }
    t = parse_pod({}, spec, "")
    assert t.claims == (Claim("data"),)
    assert t.sysctls == (("net.ipv4.ip_local_port_range", "40000 40100"),)
    assert parse_pod({}, {"volumes": {"a": 1}, "securityContext": []}, "").claims == ()


def test_pod_requests_are_summed_once_with_sidecars_and_init_containers() -> None:
    spec = {
        "containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}],
        "initContainers": [
            {"name": "s1", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
            {"name": "init", "resources": {"limits": {"cpu": "6"}}},  # 6 + sidecar 1 = peak 7
            {"name": "s2", "restartPolicy": "Always", "resources": {"requests": {"cpu": "3"}}},
        ],
        "overhead": {"memory": "1Mi"},
    }
    t = parse_pod({}, spec, "")
    assert t.pod_requests == PodRequests((("cpu", Fraction(7)), ("memory", Fraction(2**20))))
    assert pod_requests(t) == {"cpu": 7, "memory": 2**20}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (
            {"containers": [{"resources": {"requests": {"cpu": "lots"}}}]},
            "spec.containers[0].resources.requests.cpu",
        ),
        ({"initContainers": [{"resources": {"limits": []}}]}, "spec.initContainers[0].resources.limits"),
        ({"resources": {"limits": {"memory": "1Zi"}}}, "spec.resources.limits.memory"),
        ({"overhead": "1"}, "spec.overhead"),
    ],
)
def test_a_bad_quantity_is_kept_as_an_error_naming_its_field(spec: dict[str, object], field: str) -> None:
    t = parse_pod({}, spec, "")  # reading the template does not fail: the resource filter says why
    assert t.pod_requests.amounts == ()
    assert t.pod_requests.error is not None and t.pod_requests.error.startswith(f"{field}")
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
        pod_requests(t)


def test_templates_differing_in_their_containers_are_not_equal() -> None:
    a = parse_pod({}, {"containers": [{"name": "c", "args": ["--x"]}]}, "")
    b = parse_pod({}, {"containers": [{"name": "c", "args": ["--y"]}]}, "")
    assert a != b
    assert hash(a) == hash(b)  # containers are compared, not hashed: templates key many caches


def test_data_port_settings_come_from_the_typed_template() -> None:
    spec = {
        "containers": [
            {"name": "a", "env": [{"name": "OMPI_MCA_btl_tcp_port_min_v4", "value": "5000"}]},
            {"name": "b", "args": ["--mca btl_tcp_port_range_v4", "10"]},
        ],
        "securityContext": {"sysctls": [{"name": "net.ipv4.ip_local_port_range", "value": "40000 40100"}]},
    }
    source = SourceRef("<test>")
    role = Role(WorkloadRef("v1", "Pod", "ml", "p", source), "p", 1, parse_pod({}, spec, ""), source)
    assert sysctl_range(role) == (40000, 40100)
    assert ompi_range(role) == (5000, 5009)


WORKLOAD = """\
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
  namespace: ml
  annotations:
    placement-auditor.io/gradient-bytes: "100"
    empty:
    placement-auditor.io/waive: cross-zone-traffic
spec:
  replicas: 2
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: db}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {storageClassName: zonal}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: zonal}
provisioner: example.com/disk
allowedTopologies:
- matchLabelExpressions:
  - {key: topology.kubernetes.io/zone, values: [zone-a]}
"""


def test_workload_annotations_keep_order_empty_values_and_lines() -> None:
    inv = inventory(text=WORKLOAD)
    (w,) = inv.workloads
    assert w.annotations.items == (
        ("placement-auditor.io/gradient-bytes", "100"),
        ("empty", None),
        ("placement-auditor.io/waive", "cross-zone-traffic"),
    )
    assert w.annotations.text()["empty"] == ""  # what CEL rules see
    assert annotation(w, "empty") == "None"
    assert w.annotations.line_of("placement-auditor.io/waive", 1) == 9
    _, errors = annotation_waivers(w, ["cross-zone-traffic"])
    assert [(e.line, e.field) for e in errors][:1] == [
        (9, "metadata.annotations[placement-auditor.io/waive]")
    ]


def test_statefulset_claim_templates_are_typed_claims_with_their_class() -> None:
    inv = inventory(text=WORKLOAD)
    (role,) = inv.workloads[0].roles
    assert role.template.claims == (Claim("data-db", "zonal"),)
    assert role_claim_zones(inv, role) == {"data-db": frozenset({"zone-a"})}


@pytest.mark.parametrize(
    ("kind", "spec", "options"),
    [
        ("PyTorchJob", {"elasticPolicy": {"rdzvPort": "29401"}}, {"elastic": True, "rdzv_port": 29401}),
        ("PyTorchJob", {"elasticPolicy": {}}, {"elastic": True, "rdzv_port": None}),
        (
            "RayJob",
            {"rayClusterSpec": {"headGroupSpec": {"rayStartParams": {"port": 6380}}}},
            {"ray_port": 6380},
        ),
        ("RayCluster", {"headGroupSpec": {"rayStartParams": {"port": "auto"}}}, {"ray_port": None}),
        ("JobSet", {"coordinator": {"replicatedJob": "driver"}}, {"coordinator": "driver"}),
        ("JobSet", {"coordinator": "driver"}, {"coordinator": None}),
    ],
)
def test_operator_options_are_read_at_adapt_time(
    kind: str, spec: dict[str, object], options: dict[str, object]
) -> None:
    got = _options(WorkloadRef("v1", kind, "ml", "job", SourceRef("<test>")), spec)
    assert {k: getattr(got, k) for k in options} == options


def test_volcano_plugins_are_read_with_their_arguments() -> None:
    obj = yamlio.load_text(
        """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: mpi, namespace: ml}
spec:
  plugins: {mpi: ["--master=boss", "--port=2222", "junk"], svc: []}
  tasks:
  - {name: boss, replicas: 1, template: {spec: {containers: [{name: c}]}}}
  - {name: worker, replicas: 2, template: {spec: {containers: [{name: c}]}}}
""",
        "<text>",
    )[0][0].data
    w = adapt(obj, WorkloadRef("batch.volcano.sh/v1alpha1", "Job", "ml", "mpi", SourceRef("<test>")))
    assert w.options.plugin("mpi") == {"master": "boss", "port": "2222"}
    assert w.options.plugin("svc") == {}
    assert w.options.plugin("pytorch") is None
