"""The connectivity map as JSON (schema placement-auditor/connectivity/v1) or CSV (one row per
ordered pair of cells)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from auditor import TOOL_NAME, __version__
from auditor.audit.connectivity import Cell, ConnectivityMap
from auditor.model.source import LoadError
from auditor.reports.csv_report import _safe

SCHEMA = "placement-auditor/connectivity/v1"
COLUMNS = (
    "from_namespace",
    "from_zone",
    "to_namespace",
    "to_zone",
    "state",
    "class_pairs",
    "allowed_class_pairs",
)


def _cell(c: Cell) -> dict[str, str]:
    return {"namespace": c.namespace, "zone": c.zone}


def to_document(cmap: ConnectivityMap, network: str, errors: list[LoadError]) -> dict[str, Any]:
    states = [p.state for p in cmap.pairs]
    return {
        "schema": SCHEMA,
        "tool": {"name": TOOL_NAME, "version": __version__},
        "probe": {"protocol": cmap.protocol, "ports": f"{cmap.ports[0]}-{cmap.ports[1]}"},
        "summary": {
            "cells": len(cmap.cells),
            "pairs": len(cmap.pairs),
            **{s: states.count(s) for s in ("open", "partial", "closed")},
            "errors": len(errors),
        },
        "cells": [
            {**_cell(c.cell), "pods": c.pods, "roles": c.roles, "classes": c.classes} for c in cmap.cells
        ],
        "pairs": [
            {
                "from": _cell(p.source),
                "to": _cell(p.destination),
                "state": p.state,
                "class_pairs": p.class_pairs,
                "allowed_class_pairs": p.allowed,
            }
            for p in cmap.pairs
        ],
        "notes": list(cmap.notes),
        "network": network,
        "errors": [e.to_json() for e in errors],
    }


def render_json(cmap: ConnectivityMap, network: str, errors: list[LoadError]) -> str:
    return json.dumps(to_document(cmap, network, errors), indent=2) + "\n"


def render_csv(cmap: ConnectivityMap) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for p in cmap.pairs:
        row = (
            p.source.namespace,
            p.source.zone,
            p.destination.namespace,
            p.destination.zone,
            p.state,
            p.class_pairs,
            p.allowed,
        )
        writer.writerow([_safe(v) for v in row])
    return out.getvalue()
