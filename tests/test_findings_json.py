"""Finding.to_json / Finding.from_json are inverses: what the store keeps is the finding itself."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from auditor.audit.scan import scan
from auditor.model.findings import EdgeRef, Finding, ObjectRef, PolicyMention
from tests.support import DATA, inventory

SEED = DATA / "seed-lab"
CORPUS = DATA / "workloads"


TWO_ZONES = """
apiVersion: v1
kind: NodeList
items:
""" + "".join(
    f"""- apiVersion: v1
  kind: Node
  metadata:
    name: node-{i}
    labels: {{topology.kubernetes.io/zone: zone-{"ab"[i % 2]}, kubernetes.io/hostname: node-{i}}}
  status: {{allocatable: {{cpu: "64", memory: 512Gi, nvidia.com/gpu: "8", pods: "110"}}}}
"""
    for i in range(8)
)


def test_every_scanned_finding_survives_its_json(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(TWO_ZONES)
    runs = [
        (SEED / "before", SEED / "policies.yaml", SEED / "nodes.yaml"),
        (CORPUS, SEED / "nodes.yaml"),
        (CORPUS, nodes),
        (CORPUS, SEED / "policies.yaml", nodes),
    ]
    rules = set()
    for paths in runs:
        for f in scan(inventory(paths=list(paths))).findings:
            back = Finding.from_json(f.to_json())
            assert back == f
            assert back.to_json() == f.to_json()
            assert back.fingerprint == f.fingerprint
            if f.edge is not None:
                assert back.role == f.role == f.edge.from_role  # the role key survives through the edge
            rules.add(f.rule)
    # The corpus exercises edge and role rules alike, or this test means little.
    assert {"cross-zone-blocked", "cross-zone-traffic", "role-unschedulable"} <= rules, rules


def test_every_field_round_trips_including_the_optional_ones() -> None:
    f = Finding(
        rule="cross-zone-traffic",
        severity="medium",
        certainty="likely",
        symptoms=("slowdown", "cost"),
        workload=ObjectRef("kubeflow.org/v1", "PyTorchJob", "ml", "bert", "jobs/bert.yaml", 12),
        message="allowed but crosses zones",
        edge=EdgeRef("Worker", ("zone-a",), "Master", ("zone-b", "zone-c"), None, "UDP"),
        policies=(PolicyMention("NetworkPolicy", "ml", "deny", "p.yaml", 3),),
        estimated_monthly_cost_usd=812.5,
        estimated_slowdown_pct=41.0,
        assumptions=("ring all-reduce",),
        target="prod-repo",
        evidence=("bytes sent 1.2 GB/s",),
        role="Worker",
    )
    back = Finding.from_json(f.to_json())
    assert (back, back.role, back.target, back.assumptions, back.evidence) == (
        f,
        "Worker",
        "prod-repo",
        f.assumptions,
        f.evidence,
    )
    # The target is part of the fingerprint, so it is in the JSON when set (and only then).
    assert "target" not in replace(f, target="").to_json()


def test_role_key_indexes_the_model() -> None:
    result = scan(inventory(paths=[SEED / "before", SEED / "policies.yaml", SEED / "nodes.yaml"]))
    assert result.model is not None
    for f in result.findings:
        assert f.role_key is not None
        role = result.model.role(f.role_key)
        assert role is not None and role.label == f.role
        analysis = result.model.edge_of(f)
        assert analysis is not None and analysis.edge.destination.label == f.edge.to_role  # type: ignore[union-attr]


def test_the_order_key_sorts_as_findings_compare() -> None:
    """FINDING_ORDER is the tuple the generated __lt__ compares: ties on severity, workload and
    rule are broken by the later fields alike."""
    import random

    from auditor.model.findings import FINDING_ORDER, EdgeRef, Finding, ObjectRef, PolicyMention

    rng = random.Random(17)
    findings = []
    for _ in range(600):
        edge = EdgeRef(rng.choice("ab"), ("z1",), "c", ("z2",), rng.choice([80, 443]))
        findings.append(
            Finding(
                rule=rng.choice(["cross-zone-blocked", "traffic-blocked"]),
                severity=rng.choice(["high", "medium"]),
                certainty=rng.choice(["always", "likely"]),
                symptoms=("blocked",),
                workload=ObjectRef(
                    "kubeflow.org/v1", "PyTorchJob", "ml", rng.choice("xy"), "f.yaml", rng.randint(1, 3)
                ),
                message=rng.choice(["m1", "m2", "m3"]),
                edge=edge,
                policies=(PolicyMention("NetworkPolicy", "ml", rng.choice("pq"), "p.yaml", 1),),
                target=rng.choice(["", "t"]),
            )
        )
    compared = 0
    for _ in range(5):
        rng.shuffle(findings)
        try:
            expected = sorted(findings)
        except TypeError:  # None against an edge, after every earlier field tied: both raise
            continue
        assert sorted(findings, key=FINDING_ORDER) == expected
        compared += 1
    assert compared, "the findings could be ordered at least once"
