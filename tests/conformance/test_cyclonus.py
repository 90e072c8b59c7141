"""cyclonus `analyze --mode probe` truth tables (tests/data/netpol/cyclonus).

The probe model (examples/probe.json) has 9 pods; seven NetworkPolicies in namespace y. The golden
output holds, per probe (TCP 80, 81, 82), an Ingress, an Egress and a Combined 9×9 table: rows are
sources, columns destinations, '.' allowed, 'X' denied, 'N'/'?' no server (nothing to compare).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from support import NETPOL, inventory, pod_endpoints

from auditor.inventory import policy_engine
from auditor.reachability.policy import Direction

CYCLONUS = NETPOL / "cyclonus"
PROBE: dict[str, Any] = json.loads((CYCLONUS / "examples" / "probe.json").read_text())


def _objects() -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = []
    for ns, labels in PROBE["Resources"]["Namespaces"].items():
        objs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}})
    for pod in PROBE["Resources"]["Pods"]:
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod["Name"], "namespace": pod["Namespace"], "labels": pod["Labels"]},
                "spec": {
                    "containers": [
                        {
                            "name": c["Name"],
                            "ports": [
                                {
                                    "containerPort": c["Port"],
                                    "name": c["PortName"],
                                    "protocol": c["Protocol"].upper(),
                                }
                            ],
                        }
                        for c in pod["Containers"]
                    ]
                },
                "status": {"podIP": pod["IP"]},
            }
        )
    return objs


def _tables() -> list[dict[str, dict[tuple[str, str], str]]]:
    """Per probe: {"Ingress"|"Egress"|"Combined": {(src, dst): cell}}."""
    probes: list[dict[str, dict[tuple[str, str], str]]] = []
    current: dict[str, dict[tuple[str, str], str]] = {}
    section = ""
    columns: list[str] = []
    for line in (CYCLONUS / "examples" / "cyclonus-output" / "analyze-probe.txt").read_text().splitlines():
        if line.rstrip(":") in ("Ingress", "Egress", "Combined"):
            section = line.rstrip(":")
            if section == "Ingress" and current:
                probes.append(current)
                current = {}
            current[section] = {}
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if not cells or len(cells) < 2:
            continue
        if cells[0] == "":
            columns = [c.lower() for c in cells[1:]]
            continue
        for dst, cell in zip(columns, cells[1:], strict=True):
            current[section][(cells[0], dst)] = cell
    if current and any(current.values()):
        probes.append(current)
    return [p for p in probes if p.get("Combined")]


TABLES = _tables()
# Probe 3 (TCP 82) has no server in the model: its tables hold only N/? cells and nothing to compare.
CASES = [
    (i, probe["Port"], section)
    for i, probe in enumerate(PROBE["Probes"])
    if i < len(TABLES)
    for section in ("Ingress", "Egress", "Combined")
    if any(c in (".", "X") for c in TABLES[i][section].values())
]


def test_golden_tables_parsed() -> None:
    assert len(TABLES) == 3 and all(len(t["Combined"]) == 81 for t in TABLES)


@pytest.mark.parametrize(("index", "port", "section"), CASES, ids=[f"tcp{p}-{s}" for _, p, s in CASES])
def test_cyclonus_table(index: int, port: int, section: str) -> None:
    inv = inventory([CYCLONUS / "networkpolicies" / "simple-example"], _objects())
    assert not inv.errors, inv.errors
    eps = pod_endpoints(inv)
    engine = policy_engine(inv)
    mismatches = []
    compared = 0
    for (src, dst), cell in TABLES[index][section].items():
        if cell not in (".", "X"):
            continue  # N: no server on that port, ?: not probed
        compared += 1
        if section == "Combined":
            allowed = engine.flow(eps[src], eps[dst]).allows("TCP", port)
        elif section == "Ingress":
            allowed = engine.directional(eps[dst], Direction.INGRESS, eps[src]).at("TCP", port).allowed
        else:
            allowed = engine.directional(eps[src], Direction.EGRESS, eps[dst]).at("TCP", port).allowed
        if allowed != (cell == "."):
            mismatches.append(f"{src}->{dst}: want {cell}")
    assert not mismatches, mismatches
    assert compared == 81
