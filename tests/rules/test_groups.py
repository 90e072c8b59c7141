"""What a scan understood: the `groups` of the JSON report and the table's `understood:` line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support import inventory

from auditor.cli import main
from auditor.rules.groups import GENERIC, groups
from auditor.rules.model import build_model

NODES = """\
apiVersion: v1
kind: NodeList
items:
- {apiVersion: v1, kind: Node, metadata: {name: a1, labels: {topology.kubernetes.io/zone: za}}, status: {allocatable: {cpu: "64", nvidia.com/gpu: "8"}}}
- {apiVersion: v1, kind: Node, metadata: {name: b1, labels: {topology.kubernetes.io/zone: zb}}, status: {allocatable: {cpu: "64", nvidia.com/gpu: "8"}}}
"""

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: nginx}]
"""

PYTORCHJOB = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: bert, namespace: ml}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers: [{name: pytorch, image: x, ports: [{name: pytorchjob-port, containerPort: 23457}]}]
    Worker:
      replicas: 2
      template:
        spec:
          containers: [{name: pytorch, image: x}]
"""

MASTER_ONLY = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: solo, namespace: ml}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers: [{name: pytorch, image: x}]
"""

TALKS_TO = """\
apiVersion: v1
kind: Service
metadata: {name: cache, namespace: shop}
spec:
  selector: {app: cache}
  ports: [{port: 6379, targetPort: 6379}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: cache, namespace: shop}
spec:
  selector: {matchLabels: {app: cache}}
  template:
    metadata: {labels: {app: cache}}
    spec:
      containers: [{name: redis, image: redis, ports: [{containerPort: 6379}]}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: shop}
spec:
  selector: {matchLabels: {app: api}}
  template:
    metadata:
      labels: {app: api}
      annotations: {placement-auditor.io/talks-to: "cache:6379"}
    spec:
      containers: [{name: api, image: x}]
"""


def scan_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    main(["scan", *args, "--format", "json"])
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def scan_table(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    main(["scan", *args])
    return capsys.readouterr().out


def write(tmp_path: Path, *parts: str) -> str:
    path = tmp_path / "repo.yaml"
    path.write_text("\n---\n".join(p.strip() for p in parts) + "\n")
    return str(path)


def by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["name"]: g for g in doc["groups"]}


def test_seed_before_lists_its_group_with_the_blocked_edge(capsys: pytest.CaptureFixture[str]) -> None:
    doc = scan_json(capsys, "--example", "seed-lab/before")
    groups = by_name(doc)
    assert set(groups) == {"trainer-workers", "trainer-coordinator"}
    workers = groups["trainer-workers"]
    assert workers["kind"] == "Job" and workers["line"] > 0 and workers["file"].endswith("workload.yaml")
    assert workers["recognised_as"] == GENERIC
    assert workers["roles"] == [
        {"name": "trainer-workers", "replicas": 4, "feasible_zones": ["zone-a"], "unschedulable": False}
    ]
    [edge] = workers["edges"]
    assert edge["from"] == {"role": "trainer-workers"}
    assert edge["to"]["role"] == "trainer-coordinator"
    assert edge["to"]["workload"]["kind"] == "Deployment"
    assert (edge["port"], edge["ports"], edge["protocol"]) == (9999, "9999", "TCP")
    assert edge["origin"] == "service-reference"
    assert edge["reason"] == "names Service ml-demo/trainer-coordinator"
    verdict = edge["verdict"]
    assert verdict["analysed"] is True
    assert verdict["allowed"] == {} and verdict["denied"] == {"zone-a": ["zone-b"]}
    assert verdict["split"] == "always"
    assert workers["findings"] == 1
    coordinator = groups["trainer-coordinator"]
    assert coordinator["roles"][0]["feasible_zones"] == ["zone-b"]
    assert coordinator["edges"] == [] and coordinator["findings"] == 0
    assert [w["name"] for w in coordinator["reached_from"]] == ["trainer-workers"]
    summary = doc["summary"]
    assert (summary["groups"], summary["edges"], summary["workloads_without_edges"]) == (2, 1, 0)
    assert summary["unlisted_workloads_by_kind"] == {}


def test_seed_after_lists_the_group_with_no_finding(capsys: pytest.CaptureFixture[str]) -> None:
    doc = scan_json(capsys, "--example", "seed-lab/after")
    assert doc["findings"] == []
    workers = by_name(doc)["trainer-workers"]
    [edge] = workers["edges"]
    assert edge["verdict"]["allowed"] == {"zone-a": ["zone-a"]} and edge["verdict"]["denied"] == {}
    assert edge["verdict"]["split"] is None
    assert workers["findings"] == 0


def test_a_lone_deployment_is_counted_not_listed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    repo = write(tmp_path, NODES, DEPLOYMENT)
    doc = scan_json(capsys, repo)
    assert doc["groups"] == []
    assert doc["summary"]["groups"] == 0 and doc["summary"]["workloads_without_edges"] == 1
    assert doc["summary"]["unlisted_workloads_by_kind"] == {"Deployment": 1}
    line = next(ln for ln in scan_table(capsys, repo).splitlines() if ln.startswith("understood:"))
    assert line == (
        "understood: 0 training groups and 0 other workloads with edges (0 roles, 0 edges); "
        "1 workload with no communication edges (not listed: 1 Deployment)"
    )


def test_training_kind_edges_name_their_origin(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    doc = scan_json(capsys, write(tmp_path, NODES, PYTORCHJOB, MASTER_ONLY))
    bert, solo = by_name(doc)["bert"], by_name(doc)["solo"]
    assert bert["recognised_as"] == "PyTorchJob"
    assert {(r["name"], r["replicas"]) for r in bert["roles"]} == {("Master", 1), ("Worker", 2)}
    assert all(r["feasible_zones"] == ["za", "zb"] for r in bert["roles"])
    origins = {(e["from"]["role"], e["to"]["role"], e["port"], e["origin"]) for e in bert["edges"]}
    assert ("Worker", "Master", 23457, "named-port") in origins  # the Master's pytorchjob-port
    assert ("Worker", "Worker", None, "operator-default") in origins  # all-reduce, ephemeral ports
    ring = next(e for e in bert["edges"] if e["port"] is None)
    assert ring["ports"] == "32768-60999" and ring["to"]["workload"] is None
    assert ring["verdict"]["split"] == "likely"
    # Recognised, nothing to check: a one-pod PyTorchJob has no edge, and is listed anyway.
    assert solo["recognised_as"] == "PyTorchJob" and solo["edges"] == []
    assert doc["summary"]["workloads_without_edges"] == 1
    assert doc["summary"]["unlisted_workloads_by_kind"] == {}


def test_annotation_edge_origin(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    doc = scan_json(capsys, write(tmp_path, NODES, TALKS_TO))
    api = by_name(doc)["api"]
    [edge] = api["edges"]
    assert edge["origin"] == "annotation" and edge["port"] == 6379
    assert edge["reason"] == "annotation placement-auditor.io/talks-to: cache:6379"
    assert by_name(doc)["cache"]["recognised_as"] == GENERIC


def test_an_unschedulable_end_is_listed_unanalysed() -> None:
    unplaceable = PYTORCHJOB.replace(
        "containers: [{name: pytorch, image: x}]",
        "nodeSelector: {pool: none}\n          containers: [{name: pytorch, image: x}]",
    )
    found = groups(build_model(inventory(text=NODES + "---\n" + unplaceable)))
    [group] = found.groups
    worker = next(r for r in group.roles if r.name == "Worker")
    assert worker.unschedulable and worker.feasible_zones == ()
    assert group.edges and all(not e.analysed and not e.allowed and not e.denied for e in group.edges)
    assert (found.training, found.edges, found.workloads_without_edges) == (1, len(group.edges), 0)


def test_table_prints_the_understood_line_with_and_without_findings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for example in ("seed-lab/before", "seed-lab/after"):
        out = scan_table(capsys, "--example", example)
        assert (
            "understood: 0 training groups and 2 other workloads with edges (2 roles, 1 edge); "
            "0 workloads with no communication edges\n"
        ) in out


def test_role_endpoints_are_the_inventorys_role_endpoints() -> None:
    """RoleEndpoints (the audit model's cache) makes each (role, zone) endpoint as
    inventory.role_endpoint does, on the first feasible node of that zone."""
    from auditor.inventory import role_endpoint
    from auditor.resources import examples_dir
    from auditor.rules.model import RoleEndpoints, place_inventory_roles

    seed = examples_dir() / "seed-lab"
    for inv in (
        inventory([seed / "before", seed / "nodes.yaml", seed / "policies.yaml"]),
        inventory(text="---\n".join((NODES, PYTORCHJOB, DEPLOYMENT))),
    ):
        roles = [r for w in inv.workloads for r in w.roles]
        placements = place_inventory_roles(inv, roles)
        cache = RoleEndpoints(inv)
        by_name = {n.name: n for n in inv.nodes}
        compared = 0
        for role in roles:
            placement = placements[role]
            for zone in placement.zones:
                first = next(
                    by_name[n] for n in placement.nodes if by_name[n].label_map.get(cache.zone_key) == zone
                )
                assert cache.get(role, zone, placement) == role_endpoint(inv, role, zone, first)
                compared += 1
        assert compared >= 2
