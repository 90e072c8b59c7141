"""The JSON contract (schema placement-auditor/findings/v1, DESIGN.md)."""

from __future__ import annotations

import json
from typing import Any

from auditor import TOOL_NAME, __version__
from auditor.scan import ScanResult

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
    }


def render(result: ScanResult) -> str:
    return json.dumps(to_document(result), indent=2) + "\n"
