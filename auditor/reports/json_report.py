"""The JSON contract (schema placement-auditor/findings/v1, DESIGN.md)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from auditor import TOOL_NAME, __version__
from auditor.audit.scan import ScanResult
from auditor.model.findings import ObjectRef
from auditor.rules.groups import Group, GroupEdge

SCHEMA = "placement-auditor/findings/v1"


def to_document(result: ScanResult) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "tool": {"name": TOOL_NAME, "version": __version__},
        "summary": result.summary(),
        "findings": [f.to_json() for f in result.findings],
        "errors": [e.to_json() for e in result.errors],
        "waived": [{"finding": w.finding.to_json(), "waiver": w.waiver.to_json()} for w in result.waived],
        "expired_waivers": [
            {"fingerprint": x.finding.fingerprint, "waiver": x.waiver.to_json()}
            for x in result.expired_waivers
        ],
        "notes": list(result.notes),
        "network": result.network,
        **({"groups": _groups(result)} if result.groups is not None else {}),
    }


def _groups(result: ScanResult) -> list[dict[str, Any]]:
    assert result.groups is not None
    by_workload = Counter(f.workload.identity for f in result.findings)
    return [_group(g, by_workload[g.workload.identity]) for g in result.groups.groups]


def _group(g: Group, findings: int) -> dict[str, Any]:
    return {
        **g.workload.to_json(),
        "recognised_as": g.recognised_as,
        "roles": [
            {
                "name": r.name,
                "replicas": r.replicas,
                "feasible_zones": list(r.feasible_zones),
                "unschedulable": r.unschedulable,
            }
            for r in g.roles
        ],
        "edges": [_edge(e) for e in g.edges],
        "reached_from": [_workload(r) for r in g.reached_from],
        "findings": findings,
    }


def _by_source_zone(pairs: tuple[tuple[str, str], ...]) -> dict[str, list[str]]:
    """Zone pairs as source zone → destination zones: a third of the size of a list of pairs."""
    out: dict[str, list[str]] = {}
    for source, destination in pairs:
        out.setdefault(source, []).append(destination)
    return out


def _workload(ref: ObjectRef) -> dict[str, str]:
    return {"apiVersion": ref.api_version, "kind": ref.kind, "namespace": ref.namespace, "name": ref.name}


def _edge(e: GroupEdge) -> dict[str, Any]:
    other = e.destination_workload
    return {
        "from": {"role": e.source},
        "to": {
            "role": e.destination,
            "workload": None
            if other is None
            else {
                "apiVersion": other.api_version,
                "kind": other.kind,
                "namespace": other.namespace,
                "name": other.name,
            },
        },
        "port": e.port,
        "ports": e.ports,
        "protocol": e.protocol,
        "origin": e.origin,
        "reason": e.reason,
        "verdict": {
            "analysed": e.analysed,
            "allowed": _by_source_zone(e.allowed),
            "denied": _by_source_zone(e.denied),
            "split": e.split,
            "coupling": e.coupling,
        },
    }


def render(result: ScanResult) -> str:
    return json.dumps(to_document(result), indent=2) + "\n"
