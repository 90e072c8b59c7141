"""SARIF 2.1.0 for GitHub code scanning: one run, rules with help, results with locations and
partialFingerprints (so GitHub tracks a finding across commits)."""

from __future__ import annotations

import json
from typing import Any

from auditor import TOOL_NAME, __version__
from auditor.rules import RULES
from auditor.scan import ScanResult

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {"critical": "error", "high": "error", "medium": "warning", "low": "note"}
# GitHub's security-severity: critical ≥ 9, high 7–8.9, medium 4–6.9, low < 4.
_SECURITY_SEVERITY = {"critical": "9.5", "high": "8.0", "medium": "5.0", "low": "2.0"}


def _uri(path: str) -> str:
    """Paths as the user gave them; GitHub resolves relative ones against the repository root."""
    return path.removeprefix("./")


def to_document(result: ScanResult) -> dict[str, Any]:
    rules = []
    index = {}
    for i, rule in enumerate(RULES):
        meta = rule.META
        index[meta.id] = i
        doc = (rule.__doc__ or "").strip()
        rules.append(
            {
                "id": meta.id,
                "name": "".join(p.capitalize() for p in meta.id.split("-")),
                "shortDescription": {"text": meta.title},
                "fullDescription": {"text": doc.split("\n\n")[0].replace("\n", " ")},
                "help": {"text": doc, "markdown": doc},
                "defaultConfiguration": {"level": _LEVEL[meta.severity]},
                "properties": {
                    "security-severity": _SECURITY_SEVERITY[meta.severity],
                    "tags": list(meta.symptoms),
                },
            }
        )
    results = []
    for f in result.findings:
        location = {
            "physicalLocation": {
                "artifactLocation": {"uri": _uri(f.workload.file or "unknown")},
                "region": {"startLine": max(1, f.workload.line)},
            }
        }
        related = [
            {
                "id": n,
                "physicalLocation": {
                    "artifactLocation": {"uri": _uri(p.file)},
                    "region": {"startLine": max(1, p.line)},
                },
                "message": {"text": f"{p.kind} {p.namespace + '/' if p.namespace else ''}{p.name}"},
            }
            for n, p in enumerate(f.policies)
            if p.file
        ]
        results.append(
            {
                "ruleId": f.rule,
                "ruleIndex": index[f.rule],
                "level": _LEVEL[f.severity],
                "message": {"text": f.message},
                "locations": [location],
                "relatedLocations": related,
                "partialFingerprints": {"placementAuditor/v1": f.fingerprint},
                "properties": {
                    "certainty": f.certainty,
                    "severity": f.severity,
                    "estimated_monthly_cost_usd": f.estimated_monthly_cost_usd,
                },
            }
        )
    notifications = [
        {
            "level": "error",
            "message": {"text": e.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": _uri(e.file)},
                        "region": {"startLine": max(1, e.line)},
                    }
                }
            ],
        }
        for e in result.errors
    ]
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": TOOL_NAME,
                        "version": __version__,
                        "semanticVersion": __version__,
                        "rules": rules,
                    }
                },
                "results": results,
                "invocations": [{"executionSuccessful": True, "toolExecutionNotifications": notifications}],
            }
        ],
    }


def render(result: ScanResult) -> str:
    return json.dumps(to_document(result), indent=2) + "\n"
