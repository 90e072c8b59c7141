"""A Markdown summary of a scan (or a `--diff-base` scan), for a CI job summary
(`$GITHUB_STEP_SUMMARY`) or a pull-request comment. Built from the JSON contract, so it says
nothing the JSON does not. Text from the audited files is escaped: a workload name cannot inject
links, HTML or table cells."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_SPECIAL = re.compile(r"([\\`*_{}\[\]<>()#+!|~])")
_ICON = {"critical": "🛑", "high": "🔴", "medium": "🟠", "low": "🔵"}


def escape(text: object) -> str:
    """Plain text safe in a Markdown table cell: one line, Markdown and HTML characters escaped."""
    flat = " ".join(str(text).split())
    return _SPECIAL.sub(r"\\\1", flat).replace("&", "&amp;")


def _row(f: Mapping[str, Any]) -> str:
    w = f["workload"]
    where = f"{w.get('file') or ''}:{w.get('line') or 0}" if w.get("file") else ""
    cost = f.get("estimated_monthly_cost_usd")
    name = f"{w['kind']} {w['namespace']}/{w['name']}" if w.get("namespace") else f"{w['kind']} {w['name']}"
    cells = [
        f"{_ICON.get(f['severity'], '')} {f['severity']}",
        f"`{escape(f['rule'])}`",
        escape(name),
        escape(f["certainty"]),
        escape(where),
        f"${cost:,.2f}" if isinstance(cost, (int, float)) else "",
        escape(f["message"]),
    ]
    return "| " + " | ".join(cells) + " |"


_HEAD = (
    "| severity | rule | workload | certainty | where | est. monthly cost | message |\n"
    "|---|---|---|---|---|---|---|"
)


def render(document: Mapping[str, Any]) -> str:
    summary = document["summary"]
    diff = document.get("diff")
    lines = ["## Placement Auditor", ""]
    if diff is not None:
        lines.append(
            f"Change against `{escape(diff['base_ref'])}` (merge base `{escape(diff['merge_base'][:12])}`): "
            f"**{diff['introduced']} introduced**, {diff['resolved']} resolved, "
            f"{diff['unchanged']} unchanged."
        )
    else:
        by = ", ".join(f"{n} {s}" for s, n in summary.get("by_severity", {}).items()) or "none"
        lines.append(f"**{summary['findings']} finding(s)** ({by}).")
    if summary.get("estimated_monthly_cost_usd"):
        lines.append(f"Estimated inter-zone cost: ${summary['estimated_monthly_cost_usd']:,.2f}/month.")
    if not summary.get("complete", True):
        lines += ["", "⚠️ **The audit is partial**; not audited:", ""]
        lines += [f"- `{escape(n['path'])}`: {escape(n['reason'])}" for n in summary.get("not_audited", [])]
    findings = [f for f in document["findings"] if f.get("change", "introduced") == "introduced"]
    resolved = [f for f in document["findings"] if f.get("change") == "resolved"]
    if findings:
        title = "Introduced by this change" if diff is not None else "Findings"
        lines += ["", f"### {title}", "", _HEAD, *(_row(f) for f in findings)]
    if resolved:
        lines += ["", "### Resolved by this change", "", _HEAD, *(_row(f) for f in resolved)]
    if document.get("errors"):
        lines += ["", f"<details><summary>{len(document['errors'])} input error(s)</summary>", ""]
        lines += [
            f"- `{escape(e['file'])}:{e.get('line', 0)}`: {escape(e['message'])}" for e in document["errors"]
        ]
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"
