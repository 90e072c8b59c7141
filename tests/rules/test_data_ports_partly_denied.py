"""Data-plane ports (DESIGN.md "Data-plane ports"): a range edge is blocked only when every port of
it is denied; a partial deny is `data-ports-partly-denied`; declared ports beat the range; and
`explain` answers the question a scan finding is about the way the finding does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import inventory

from auditor.audit.explain import explain
from auditor.audit.scan import scan
from auditor.cli import main
from auditor.model.findings import Finding
from auditor.settings.config import NetworkConfig, Settings

ONE_ZONE_NODES = """
apiVersion: v1
kind: Node
metadata: {name: a, labels: {topology.kubernetes.io/zone: za}}
"""
TWO_ZONE_NODES = """
apiVersion: v1
kind: NodeList
items:
- {apiVersion: v1, kind: Node, metadata: {name: a, labels: {topology.kubernetes.io/zone: za}}}
- {apiVersion: v1, kind: Node, metadata: {name: b, labels: {topology.kubernetes.io/zone: zb}}}
"""
# Workers all-reduce over NCCL (a data-plane ring); they reach the master's rendezvous on 23456.
JOB = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: train, namespace: ml}
spec:
  pytorchReplicaSpecs:
    Master: {replicas: 1, template: {spec: {POD_SPEC containers: [{name: t, image: x}]}}}
    Worker: {replicas: 4, template: {spec: {POD_SPEC containers: [{name: t, image: x}]}}}
"""
# A cluster-wide deny of node-exporter's port, as platform teams write it.
DENY_9100 = """
apiVersion: policy.networking.k8s.io/v1alpha1
kind: AdminNetworkPolicy
metadata: {name: no-node-exporter-port}
spec:
  priority: 10
  subject: {namespaces: {}}
  ingress:
  - name: deny-9100
    action: Deny
    from: [{namespaces: {}}]
    ports: [{portNumber: {protocol: TCP, port: 9100}}]
"""
DENY_RANGE = DENY_9100.replace(
    "portNumber: {protocol: TCP, port: 9100}", "portRange: {protocol: TCP, start: 40000, end: 40999}"
)
# Everything in the namespace is isolated, and only the rendezvous port is let in.
ONLY_23456 = """
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: only-rendezvous, namespace: ml}
spec:
  podSelector: {}
  ingress: [{ports: [{port: 23456}]}]
"""
WIDE = Settings(network=NetworkConfig(cni="generic", ephemeral_ports=(1024, 65535)))
DEFAULT = Settings(network=NetworkConfig(cni="generic"))


def doc(*parts: str) -> str:
    return "\n---\n".join(p.strip() for p in parts) + "\n"


def job(pod_spec: str = "") -> str:
    return JOB.replace("POD_SPEC ", pod_spec)


def run(text: str, settings: Settings = DEFAULT) -> list[Finding]:
    inv = inventory(text=text, settings=settings)
    assert not inv.errors, inv.errors
    return scan(inv).findings


def rules(found: list[Finding]) -> list[tuple[str, str, str]]:
    return [(f.rule, f.severity, f.certainty) for f in found]


def test_a_deny_of_one_port_in_the_range_is_intermittent_not_blocked() -> None:
    found = run(doc(ONE_ZONE_NODES, job(), DENY_9100), WIDE)
    assert rules(found) == [("data-ports-partly-denied", "medium", "always")]
    (f,) = found
    assert f.symptoms == ("intermittent",)
    assert f.edge is not None and f.edge.port is None
    # One finding for the group's ring, naming each of its edges.
    assert "Master → Worker, Worker → Master, Worker → Worker" in f.message
    assert "ports 9100 of them are denied" in f.message and "TCP/1024-65535" in f.message
    assert "intermittent" in f.message and "random port" in f.message
    assert [p.name for p in f.policies] == ["no-node-exporter-port"]


def test_the_default_range_does_not_hold_9100() -> None:
    """Linux picks from 32768-60999: the old 1024-65535 made a deny of 9100 'blocked always'."""
    assert run(doc(ONE_ZONE_NODES, job(), DENY_9100)) == []


def test_a_deny_of_everything_but_the_rendezvous_port_blocks_the_ring() -> None:
    found = run(doc(ONE_ZONE_NODES, job(), ONLY_23456))
    # One finding per ring edge (Master → Worker, Worker → Master, Worker → Worker); the
    # rendezvous edge Worker → Master:23456 is allowed.
    assert rules(found) == [("traffic-blocked", "critical", "always")] * 3
    for f in found:
        assert f.edge is not None and f.edge.port is None and "TCP/32768-60999" in f.message
        assert [p.name for p in f.policies] == ["only-rendezvous"]


def test_a_split_group_with_a_partial_deny_still_crosses_zones() -> None:
    found = run(doc(TWO_ZONE_NODES, job(), DENY_9100), WIDE)
    assert sorted(rules(found)) == [
        ("cross-zone-traffic", "medium", "likely"),
        ("data-ports-partly-denied", "medium", "always"),
    ]


@pytest.mark.parametrize(
    ("sysctl", "expected"),
    [
        (None, [("data-ports-partly-denied", "medium", "always")]),  # 40000-40999 inside 32768-60999
        ("50000 50999", []),  # the pods' kernel range misses the denied ports
        ("40100 40200", [("traffic-blocked", "critical", "always")] * 3),  # every port of it denied
    ],
)
def test_the_pod_sysctl_narrows_the_range(sysctl: str | None, expected: list[tuple[str, str, str]]) -> None:
    spec = (
        f"securityContext: {{sysctls: [{{name: net.ipv4.ip_local_port_range, value: '{sysctl}'}}]}}, "
        if sysctl
        else ""
    )
    found = run(doc(ONE_ZONE_NODES, job(spec), DENY_RANGE))
    assert rules(found) == expected
    if sysctl is None:
        assert "ports 40000-40999 of them are denied" in found[0].message


VOLCANO = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: vc, namespace: ml}
spec:
  plugins: {svc: []}
  tasks:
  - name: ps
    replicas: 1
    template: {spec: {containers: [{name: t, image: x, ports: [{containerPort: 2222}]}]}}
  - name: worker
    replicas: 2
    template: {spec: {containers: [{name: t, image: x, ports: [{containerPort: 2222}]}]}}
"""
ONLY_2222 = ONLY_23456.replace("23456", "2222").replace("only-rendezvous", "only-2222")


def test_a_declared_container_port_beats_the_range() -> None:
    """The svc plugin's tasks declare 2222: a policy letting only 2222 in blocks nothing (it
    blocked 'the ephemeral range' before, while explain on 2222 said allowed)."""
    assert run(doc(ONE_ZONE_NODES, VOLCANO, ONLY_2222)) == []
    undeclared = VOLCANO.replace(", ports: [{containerPort: 2222}]", "")
    blocked = run(doc(ONE_ZONE_NODES, undeclared, ONLY_2222))
    # ps ↔ worker and worker ↔ worker, each on the data-plane range.
    assert rules(blocked) == [("traffic-blocked", "critical", "always")] * 3
    assert all(f.edge is not None and f.edge.port is None for f in blocked)


def _role(f: Finding, role: str) -> str:
    return f"{f.workload.namespace}/{f.workload.name}/{role}"


@pytest.mark.parametrize(
    ("manifests", "settings"),
    [
        (doc(ONE_ZONE_NODES, job(), DENY_9100), WIDE),
        (doc(ONE_ZONE_NODES, job(), ONLY_23456), DEFAULT),
        (doc(ONE_ZONE_NODES, job(), DENY_RANGE), DEFAULT),
    ],
    ids=["partial", "blocked", "partial-range"],
)
def test_explain_agrees_with_scan_on_the_finding_question(manifests: str, settings: Settings) -> None:
    inv = inventory(text=manifests, settings=settings)
    f = scan(inv).findings[0]
    assert f.edge is not None
    exp = explain(inv, _role(f, f.edge.from_role), _role(f, f.edge.to_role), "ephemeral")
    verdict = {"data-ports-partly-denied": "partial", "traffic-blocked": "deny"}[f.rule]
    assert exp.outcome == verdict
    assert f"TCP/{exp.ports_text}" in f.message
    if verdict == "partial":
        denied = str(exp.decisive.denied)
        assert f"ports {denied} of them are denied" in f.message
        # One denied port asked alone is denied; an allowed one is allowed.
        first = exp.decisive.denied.intervals[0][0]
        assert not explain(inv, _role(f, "Worker"), _role(f, "Worker"), str(first)).allowed
        assert explain(inv, _role(f, "Worker"), _role(f, "Worker"), "45000").allowed
    else:
        # The rendezvous edge on its declared port has no finding, and explain allows it.
        assert explain(inv, _role(f, "Worker"), _role(f, "Master"), "23456").outcome == "allow"


def test_explain_agrees_on_a_declared_port() -> None:
    inv = inventory(text=doc(ONE_ZONE_NODES, VOLCANO, ONLY_2222), settings=DEFAULT)
    assert scan(inv).findings == []
    assert explain(inv, "ml/vc/worker", "ml/vc/ps", "2222").outcome == "allow"


def test_explain_cli_answers_a_range_question(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifests = tmp_path / "m.yaml"
    manifests.write_text(doc(ONE_ZONE_NODES, job(), DENY_RANGE))
    args = ["explain", str(manifests), "--from", "ml/train/Worker", "--to", "ml/train/Worker"]
    assert main([*args, "--port", "ephemeral", "--format", "json"]) == 0  # partial: not blocked
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "partial" and out["ports"] == "32768-60999" and out["port"] is None
    assert out["placements"][0]["denied_ports"] == "40000-40999"
    assert out["ingress"]["verdict"] == "deny"
    assert {d["name"] for d in out["ingress"]["decided_by"]} == {"no-node-exporter-port"}
    assert main([*args, "--port", "40000-40999"]) == 1
    assert "DENIED" in capsys.readouterr().out
    assert main([*args, "--port", "41000-41999"]) == 0
    assert main([*args, "--port", "5-1"]) == 2
