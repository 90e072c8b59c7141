"""`auditor connectivity`: the namespace × zone map must agree with the per-pair engine."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from support import DATA, inventory

from auditor.audit.connectivity import UNKNOWN_ZONE, Cell, connectivity
from auditor.cli import main
from auditor.inventory import policy_engine, role_endpoint
from auditor.reachability.matrix import ClassMatrix
from auditor.reachability.ports import PortSet

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import synth

LAB = DATA / "seed-lab"


@pytest.mark.parametrize(
    ("protocol", "ports"),
    [("TCP", (1024, 65535)), ("TCP", (8080, 8080)), ("TCP", (5000, 9100)), ("UDP", (53, 53))],
)
def test_cell_counts_match_the_engine_pair_by_pair(protocol: str, ports: tuple[int, int]) -> None:
    inv = inventory(objects=synth.generate(300, 40, seed=5, cilium_share=0.3))
    assert not inv.errors and not inv.nodes
    cmap = connectivity(inv, protocol, ports)
    assert cmap.notes and "no Node objects" in cmap.notes[0]
    roles = [r for w in inv.workloads for r in w.roles]
    eps = [role_endpoint(inv, r, None, None) for r in roles]
    engine = policy_engine(inv)
    identity = ClassMatrix(engine, eps).pod_identity
    representative = {identity[i]: ep for i, ep in enumerate(eps)}
    in_cell: dict[Cell, set[int]] = {}
    for r, i in zip(roles, identity, strict=True):
        in_cell.setdefault(Cell(r.workload.namespace, UNKNOWN_ZONE), set()).add(i)
    probe = PortSet.of(ports)
    verdict: dict[tuple[int, int], bool] = {}
    expected = {}
    for a, srcs in in_cell.items():
        for b, dsts in in_cell.items():
            allowed = 0
            for s in srcs:
                for d in dsts:
                    if (s, d) not in verdict:
                        conns = engine.flow(representative[s], representative[d]).allowed_conns()
                        verdict[(s, d)] = not (probe - conns.ports(protocol))
                    allowed += verdict[(s, d)]
            expected[(a, b)] = (len(srcs) * len(dsts), allowed)
    got = {(p.source, p.destination): (p.class_pairs, p.allowed) for p in cmap.pairs}
    assert got == expected
    states = {p.state for p in cmap.pairs}
    assert states & {"partial", "closed"}  # the synthetic policies close something
    assert sum(c.pods for c in cmap.cells) == sum(r.replicas for r in roles)


def test_seed_lab_zone_boundary(capsys: pytest.CaptureFixture[str]) -> None:
    args = [str(LAB / "policies.yaml"), str(LAB / "nodes.yaml")]
    assert main(["connectivity", str(LAB / "before"), *args]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "placement-auditor/connectivity/v1"
    assert doc["probe"] == {"protocol": "TCP", "ports": "32768-60999"}
    states = {(p["from"]["zone"], p["to"]["zone"]): p["state"] for p in doc["pairs"]}
    assert states == {
        ("zone-a", "zone-a"): "open",
        ("zone-a", "zone-b"): "closed",
        ("zone-b", "zone-a"): "closed",
        ("zone-b", "zone-b"): "open",
    }
    assert [(c["zone"], c["pods"]) for c in doc["cells"]] == [("zone-a", 4), ("zone-b", 1)]
    assert main(["connectivity", str(LAB / "after"), *args, "--port", "9999", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "from_namespace,from_zone,to_namespace,to_zone,state,class_pairs,allowed_class_pairs",
        "ml-demo,zone-a,ml-demo,zone-a,open,4,4",
    ]


def test_bad_port_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["connectivity", "--example", "seed-lab", "--port", "9-2"])
    assert exc.value.code == 2
    assert "a port or range" in capsys.readouterr().err


def test_numpy_is_only_needed_for_the_bulk_probe_counts() -> None:
    """Without numpy (the [matrix] extra), in a process of its own where importing it fails (a
    compiled module keeps the modules it imported, so blocking it after an import in this process
    would prove nothing there): the audit and the full map work, the bulk count says what to
    install."""
    import subprocess

    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, auditor.cli, auditor.audit.connectivity, auditor.audit.scan; print('numpy' in sys.modules)",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    assert loaded.stdout.strip() == "False"
    script = f"""
import sys
sys.modules["numpy"] = None  # as if the [matrix] extra were not installed
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
from pathlib import Path
from support import inventory
from auditor.audit.connectivity import connectivity
from auditor.inventory import policy_engine, role_endpoint
from auditor.reachability.matrix import ClassMatrix, ConnectivityMap
LAB = Path({str(LAB)!r})
inv = inventory(paths=[LAB / "before", LAB / "policies.yaml", LAB / "nodes.yaml"])
print([p.state for p in connectivity(inv).pairs])
eps = [role_endpoint(inv, r, None, None) for w in inv.workloads for r in w.roles]
matrix = ClassMatrix(policy_engine(inv), eps)
print(bool(ConnectivityMap(matrix).blocks))  # the full map is Python ints too
try:
    matrix.allowed_pod_pairs("TCP", 8080)
except ImportError as exc:
    print(exc)
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    states, blocks, message = run.stdout.strip().splitlines()
    assert states == "['open', 'closed', 'closed', 'open']" and blocks == "True"
    assert "pip install 'placement-auditor[matrix]'" in message


def test_roles_are_placed_as_the_scan_places_them() -> None:
    # The map reads the same placement settings as the scan: with the ExtendedResourceToleration
    # admission plugin on, a GPU pod tolerates the nvidia.com/gpu taint and lands on the GPU nodes.
    from dataclasses import replace

    from auditor.settings.config import KubernetesSettings, Settings

    text = """\
apiVersion: v1
kind: Node
metadata: {name: g1, labels: {topology.kubernetes.io/zone: za, kubernetes.io/hostname: g1}}
spec: {taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]}
status: {allocatable: {cpu: '8', memory: 64Gi, pods: '110', nvidia.com/gpu: '8'}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: trainer, namespace: ml}
spec:
  replicas: 1
  selector: {matchLabels: {app: trainer}}
  template:
    metadata: {labels: {app: trainer}}
    spec: {containers: [{name: t, image: x, resources: {limits: {nvidia.com/gpu: 1}}}]}
"""
    off = connectivity(inventory(text=text))
    assert "1 role(s) can land on no node and are not in the map" in off.notes
    on = Settings(kubernetes=replace(KubernetesSettings(), extended_resource_toleration=True))
    placed = connectivity(inventory(text=text, settings=on))
    assert not any("can land on no node" in n for n in placed.notes)
    assert any(c.cell == Cell("ml", "za") for c in placed.cells)
