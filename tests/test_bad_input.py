"""Hostile and broken input: each problem is one clear error entry, the valid policies still decide."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import DATA

from auditor.cli import main
from auditor.settings.config import Settings
from auditor.sources.manifests import load_inventory

VALID_POLICY = """\
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-ingress, namespace: ml-demo}
spec:
  podSelector: {matchLabels: {role: coordinator}}
  policyTypes: [Ingress]
"""

WORKLOADS = """\
apiVersion: v1
kind: Pod
metadata: {name: coord, namespace: ml-demo, labels: {role: coordinator}}
spec: {containers: [{name: c, image: busybox, ports: [{containerPort: 9999}]}]}
---
apiVersion: v1
kind: Pod
metadata: {name: worker, namespace: ml-demo, labels: {role: worker}}
spec: {containers: [{name: c, image: busybox}]}
"""


@pytest.fixture
def messy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "valid.yaml").write_text(VALID_POLICY)
    (root / "workloads.yaml").write_text(WORKLOADS)
    (root / "broken.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x\n  data: [\n")
    bomb = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 12):
        prev = chr(ord("a") + i - 1)
        cur = chr(ord("a") + i)
        bomb.append(
            f"{cur}: &{cur} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]"
        )
    (root / "bomb.yaml").write_text("\n".join(bomb) + "\n")
    (root / "deep.yaml").write_text("x: " + "[" * 20000 + "]" * 20000 + "\n")
    (root / "unknown-field.yaml").write_text(
        VALID_POLICY.replace("metadata: {name: deny-ingress", "metadata: {name: typo").replace(
            "  policyTypes: [Ingress]", "  policyTyeps: [Ingress]"
        )
    )
    (root / "wrong-type.yaml").write_text(
        VALID_POLICY.replace("deny-ingress", "wrong-type").replace(
            "policyTypes: [Ingress]", "policyTypes: Ingress"
        )
    )
    (root / "binary.yaml").write_bytes(b"\x7fELF\x00\x01\x02" + bytes(range(256)))
    secret = tmp_path / "outside-secret.yaml"
    secret.write_text("apiVersion: v1\nkind: Secret\nmetadata: {name: TOPSECRET-MARKER}\n")
    (root / "escape.yaml").symlink_to(secret)
    return root


def test_every_problem_is_an_error_entry_and_valid_policies_still_decide(messy: Path) -> None:
    inv = load_inventory([messy], Settings())
    by_file = {Path(e.file).name: e for e in inv.errors}
    assert set(by_file) == {
        "broken.yaml",
        "bomb.yaml",
        "deep.yaml",
        "unknown-field.yaml",
        "wrong-type.yaml",
        "binary.yaml",
        "escape.yaml",
    }, inv.errors
    assert "outside the scanned tree" in by_file["escape.yaml"].message
    assert by_file["unknown-field.yaml"].field == "spec.policyTyeps"
    assert by_file["unknown-field.yaml"].object == "NetworkPolicy ml-demo/typo"
    assert by_file["unknown-field.yaml"].line == 6
    assert (
        by_file["wrong-type.yaml"].field == "spec.policyTypes"
        and "must be a list" in by_file["wrong-type.yaml"].message
    )
    assert by_file["broken.yaml"].line >= 3
    assert all(e.line >= 0 and e.message for e in inv.errors)
    assert "TOPSECRET-MARKER" not in repr(inv)
    assert [p.ref.name for p in inv.policies] == ["deny-ingress"]


def test_explain_still_answers_with_errors_listed(messy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "explain",
            str(messy),
            "--from",
            "ml-demo/worker",
            "--to",
            "ml-demo/coord",
            "--port",
            "9999",
            "--format",
            "json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["verdict"] == "deny"
    assert out["ingress"]["decided_by"][0]["name"] == "deny-ingress"
    assert len(out["errors"]) == 7


@pytest.mark.parametrize(
    ("snippet", "field"),
    [
        ("  ingress:\n  - from:\n    - {}\n", "spec.ingress[0].from[0]"),
        (
            "  ingress:\n  - from:\n    - ipBlock: {cidr: 10.0.0.0/8}\n      podSelector: {}\n",
            "spec.ingress[0].from[0]",
        ),
        (
            "  ingress:\n  - from:\n    - ipBlock: {cidr: 10.0.0.0/8, except: [192.168.0.0/16]}\n",
            "spec.ingress[0].from[0].ipBlock.except[0]",
        ),
        ("  ingress:\n  - ports:\n    - {port: http, endPort: 90}\n", "spec.ingress[0].ports[0].endPort"),
        ("  ingress:\n  - ports:\n    - {port: 80, protocol: ICMP}\n", "spec.ingress[0].ports[0].protocol"),
        (
            "  ingress:\n  - from:\n    - podSelector: {matchExpressions: [{key: a, operator: In}]}\n",
            "spec.ingress[0].from[0].podSelector.matchExpressions[0].values",
        ),
        (
            "  ingress:\n  - from:\n    - podSelector: {matchLabels: {gpu: true}}\n",
            "spec.ingress[0].from[0].podSelector.matchLabels.gpu",
        ),
    ],
)
def test_invalid_networkpolicy_fields_are_named(tmp_path: Path, snippet: str, field: str) -> None:
    (tmp_path / "p.yaml").write_text(VALID_POLICY + snippet)
    inv = load_inventory([tmp_path], Settings())
    assert [e.field for e in inv.errors] == [field], inv.errors
    assert inv.errors[0].object == "NetworkPolicy ml-demo/deny-ingress"
    assert inv.policies == []


def test_cilium_bad_rule_drops_only_that_rule(tmp_path: Path) -> None:
    (tmp_path / "cnp.yaml").write_text("""\
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: two, namespace: ml-demo}
specs:
- endpointSelector: {matchLabels: {app: a}}
  ingress:
  - fromEntities: [galaxy]
- endpointSelector: {matchLabels: {app: b}}
  ingress:
  - fromEntities: [cluster]
""")
    inv = load_inventory([tmp_path], Settings())
    assert len(inv.errors) == 1 and inv.errors[0].field == "specs[0].ingress[0].fromEntities[0]"
    assert "unknown entity 'galaxy'" in inv.errors[0].message
    assert len(inv.policies) == 1


def test_seed_lab_has_no_errors() -> None:
    inv = load_inventory([DATA / "seed-lab"], Settings())
    assert inv.errors == [] and len(inv.policies) == 3 and len(inv.nodes) == 5


def test_pod_field_paths_start_at_the_object_root(tmp_path: Path) -> None:
    (tmp_path / "pod.yaml").write_text("""\
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ml-demo}
spec:
  containers: [{name: c, image: x}]
  initContainers:
  - {name: side, image: x, restartPolicy: Always, ports: {}}
""")
    inv = load_inventory([tmp_path], Settings())
    assert [(e.field, e.line) for e in inv.errors] == [("spec.initContainers[0].ports", 7)]
