"""CSV: one row per finding, spreadsheet-friendly (no formulas: cells starting with = + - @ are quoted)."""

from __future__ import annotations

import csv
import io

from auditor.reports import Audited

COLUMNS = (
    "rule",
    "severity",
    "certainty",
    "kind",
    "namespace",
    "name",
    "file",
    "line",
    "from_role",
    "to_role",
    "port",
    "protocol",
    "estimated_monthly_cost_usd",
    "estimated_slowdown_pct",
    "policies",
    "fingerprint",
    "message",
)


def _safe(value: object) -> str:
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def render(result: Audited) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for f in result.findings:
        e = f.edge
        writer.writerow(
            [
                _safe(v)
                for v in (
                    f.rule,
                    f.severity,
                    f.certainty,
                    f.workload.kind,
                    f.workload.namespace,
                    f.workload.name,
                    f.workload.file,
                    f.workload.line,
                    e.from_role if e else "",
                    e.to_role if e else "",
                    e.port if e else "",
                    e.protocol if e else "",
                    f.estimated_monthly_cost_usd,
                    f.estimated_slowdown_pct,
                    "; ".join(f"{p.kind} {p.namespace}/{p.name}" for p in f.policies),
                    f.fingerprint,
                    f.message,
                )
            ]
        )
    return out.getvalue()
