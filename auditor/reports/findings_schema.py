"""The JSON Schema of `placement-auditor/findings/v1` (docs/schemas/findings-v1.schema.json).

Declared once here from the shapes `Finding.to_json`, `LoadError.to_json` and the JSON report
write; tests validate every report the corpus produces against it, so it cannot drift from them.
"""

from __future__ import annotations

import json
from typing import Any

from auditor.model.findings import SEVERITIES

JSON = dict[str, Any]
SCHEMA_ID = "https://placement-auditor.dev/schemas/findings-v1.schema.json"


def _obj(doc: str, props: dict[str, JSON], optional: tuple[str, ...] = (), closed: bool = True) -> JSON:
    """An object schema: every property is required but the `optional` ones."""
    out: JSON = {"type": "object", "description": doc, "properties": props}
    out["required"] = [k for k in props if k not in optional]
    if closed:
        out["additionalProperties"] = False
    return out


def _t(kind: str | list[str], doc: str, **more: Any) -> JSON:
    return {"type": kind, "description": doc, **more}


def _arr(items: JSON, doc: str) -> JSON:
    return {"type": "array", "items": items, "description": doc}


_REF = {
    "apiVersion": _t("string", "apiVersion of the object."),
    "kind": _t("string", "Kind of the object."),
    "namespace": _t("string", 'Namespace ("" for cluster-scoped objects).'),
    "name": _t("string", "Name of the object."),
}
_AT = {
    "file": _t("string", "File the object was read from."),
    "line": _t("integer", "1-based line; 0: unknown."),
}
# An end of an edge: the role and the zones it lands in.
_END = {"role": _t("string", "Role label."), "zones": _arr(_t("string", "Zone."), "Zones.")}

FINDING = _obj(
    "One finding.",
    {
        "rule": _t("string", "Rule id (built-in or a pack's custom rule)."),
        "severity": {"enum": list(SEVERITIES), "description": "Effective severity (after the packs)."},
        "certainty": {
            "enum": ["observed", "always", "likely", "possible"],
            "description": "observed: seen on running pods; always/likely/possible: over the placements "
            "the scheduler allows.",
        },
        "symptoms": _arr(_t("string", "blocked, slowdown, cost or intermittent."), "What the user sees."),
        "workload": _obj("The workload (or policy) the finding is about.", {**_REF, **_AT}),
        "edge": {
            "anyOf": [
                _obj(
                    "The communication edge, with the zones of the placements concerned.",
                    {
                        "from": _obj("Source role.", _END),
                        "to": _obj("Destination role.", _END),
                        "port": _t(["integer", "null"], "Destination port; null: a data-plane port range."),
                        "protocol": _t("string", "TCP, UDP or SCTP."),
                    },
                ),
                {"type": "null"},
            ],
            "description": "null for findings about a role or object.",
        },
        "policies": _arr(
            _obj(
                "A deciding policy.",
                {"kind": _REF["kind"], "namespace": _REF["namespace"], "name": _REF["name"], **_AT},
            ),
            "The policies that decided.",
        ),
        "estimated_monthly_cost_usd": _t(
            ["number", "null"], "Inter-AZ transfer per month, USD; null: not estimated."
        ),
        "estimated_slowdown_pct": _t(["number", "null"], "Estimated step-time slowdown, percent."),
        "message": _t("string", "What is wrong, for people."),
        "fingerprint": _t(
            "string", "Stable id: rule + target + workload identity + edge.", pattern="^[0-9a-f]{32}$"
        ),
        "assumptions": _arr(_t("string", "An assumption."), "What the cost estimate assumed."),
        "evidence": _arr(_t("string", "A measurement."), "Measurements backing the finding (Prometheus)."),
        "target": _t("string", "What a custom rule evaluated (its role); part of the fingerprint."),
        "change": {
            "enum": ["introduced", "resolved"],
            "description": "`scan --diff-base`: whether the change introduces the finding or resolves it.",
        },
        "side": {
            "enum": ["head", "base"],
            "description": "`scan --diff-base`: the tree the finding was seen in (the working tree, or the "
            "merge base).",
        },
    },
    optional=("assumptions", "evidence", "target", "change", "side"),
)

ERROR = _obj(
    "A problem with the input: the audit went on without it.",
    {
        "file": _AT["file"],
        "line": _AT["line"],
        "message": _t("string", "What is wrong."),
        "object": _t("string", "The object (Kind namespace/name)."),
        "field": _t("string", "The field path inside the object."),
        "side": {"enum": ["base"], "description": "`scan --diff-base`: an error of the merge base's tree."},
    },
    optional=("object", "field", "side"),
)

WAIVER = _obj("A waiver (document or annotation).", {}, closed=False)


def document_schema() -> JSON:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "placement-auditor findings report (placement-auditor/findings/v1)",
        **_obj(
            "`auditor scan --format json`: the stable contract (DESIGN.md). Readers must ignore keys they "
            "do not know inside `summary` and `groups`.",
            {
                "schema": {
                    "const": "placement-auditor/findings/v1",
                    "description": "Contract name and version.",
                },
                "tool": _obj(
                    "The tool.", {"name": _t("string", "Tool name."), "version": _t("string", "Version.")}
                ),
                "summary": _obj(
                    "Counts and totals.",
                    {
                        "findings": _t("integer", "Number of findings."),
                        "by_severity": _t("object", "Findings per severity (severities with none left out)."),
                        "estimated_monthly_cost_usd": _t(
                            ["number", "null"], "Sum of the findings' estimates."
                        ),
                        "errors": _t("integer", "Number of error entries."),
                        "complete": _t("boolean", "False: part of the input was not audited (exit 3)."),
                    },
                    optional=("complete",),
                    closed=False,
                ),
                "findings": _arr(FINDING, "The findings, most severe first."),
                "errors": _arr(ERROR, "Problems with the input."),
                "waived": _arr(
                    _obj("A finding a waiver hides.", {"finding": FINDING, "waiver": WAIVER}),
                    "Hidden findings.",
                ),
                "expired_waivers": _arr(
                    _obj(
                        "A waiver past its date: its finding is reported again.",
                        {"fingerprint": FINDING["properties"]["fingerprint"], "waiver": WAIVER},
                    ),
                    "Expired waivers.",
                ),
                "notes": _arr(_t("string", "A note."), "What the audit assumed or could not do."),
                "network": _t("string", "The CNI settings in force and where they came from."),
                "groups": _arr(
                    _obj("A training group the scan recognised.", {}, closed=False),
                    "What the scan understood (present for scans, absent for stored results).",
                ),
                "diff": _obj(
                    "`scan --diff-base REF`: what was compared. `findings` then holds the introduced and "
                    "the resolved findings (each with `change` and `side`).",
                    {
                        "base_ref": _t("string", "REF as given."),
                        "merge_base": _t("string", "The merge base of REF and HEAD (commit id)."),
                        "head": _t("string", "HEAD's commit id (the working tree was audited)."),
                        "head_tree": _t("string", "What was audited on the head side."),
                        "introduced": _t("integer", "Findings the change introduces."),
                        "resolved": _t("integer", "Findings the change resolves."),
                        "unchanged": _t("integer", "Findings on both sides (not listed)."),
                    },
                ),
            },
            optional=("waived", "expired_waivers", "notes", "network", "groups", "diff"),
        ),
    }


def render_schema() -> str:
    """docs/schemas/findings-v1.schema.json (a test keeps the file current)."""
    return json.dumps(document_schema(), indent=2, ensure_ascii=False) + "\n"
