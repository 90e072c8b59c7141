"""Compliance reports from the store: status per target and rule mapped to a framework's control
ids, waivers and evidence, in the formats docs/reports.md lists, with a sha256 manifest of the export."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from markupsafe import Markup

from auditor import TOOL_NAME, __version__, templating
from auditor.model.findings import SEVERITIES, SEVERITY_RANK
from auditor.reports import ACTIVE, StoredResult, junit, policyreport, sarif, zonemap
from auditor.reports.csv_report import _safe
from auditor.rules import RULES
from auditor.settings.service import ReportSettings

FORMATS = ("csv", "json", "html", "pdf", "sarif", "junit", "policyreport", "openreports")
SCHEMA = "placement-auditor/compliance/v1"


@dataclass(frozen=True, slots=True)
class Report:
    generated_at: str
    framework: str
    since: str | None
    rows: list[dict[str, Any]]  # target × rule status
    findings: list[dict[str, Any]]
    waivers: list[dict[str, Any]]
    targets: list[dict[str, Any]]
    runs: list[dict[str, Any]]


def build(
    export: Mapping[str, Any], settings: ReportSettings, now: datetime, since: datetime | None
) -> Report:
    rules = [r.META.id for r in RULES]
    extra = sorted({f["rule"] for f in export["findings"]} - set(rules))
    rows = []
    for t in export["targets"]:
        evidence = t.get("last_successful_run") or {}
        for rule in [*rules, *extra]:
            mine = [f for f in export["findings"] if f["target"] == t["name"] and f["rule"] == rule]
            active = [f for f in mine if f["status"] in ACTIVE]
            waived = [f for f in mine if f["status"] == "waived"]
            if not evidence:
                status = "not-audited"
            elif active:
                status = "fail"
            elif waived:
                status = "waived"
            else:
                status = "pass"
            rows.append(
                {
                    "target": t["name"],
                    "rule": rule,
                    "controls": list(settings.controls_of(rule)),
                    "status": status,
                    "open_findings": len(active),
                    "waived_findings": len(waived),
                    "evidence_run": evidence.get("id"),
                    "evidence_revision": evidence.get("revision"),
                    "evidence_time": evidence.get("finished_at"),
                }
            )
    return Report(
        now.isoformat().replace("+00:00", "Z"),
        settings.framework,
        since.isoformat() if since else None,
        rows,
        list(export["findings"]),
        list(export["waivers"]),
        list(export["targets"]),
        list(export["runs"]),
    )


def to_json(report: Report) -> str:
    return json.dumps(
        {
            "schema": SCHEMA,
            "tool": {"name": TOOL_NAME, "version": __version__},
            "generated_at": report.generated_at,
            "framework": report.framework,
            "since": report.since,
            "status": report.rows,
            "findings": report.findings,
            "waivers": report.waivers,
            "evidence": {"targets": report.targets, "runs": report.runs},
        },
        indent=2,
    )


def to_csv(report: Report) -> str:
    out = io.StringIO()
    fields = [
        "target",
        "rule",
        "controls",
        "status",
        "open_findings",
        "waived_findings",
        "evidence_run",
        "evidence_revision",
        "evidence_time",
    ]
    writer = csv.DictWriter(out, fields, lineterminator="\n")
    writer.writeheader()
    for row in report.rows:
        writer.writerow({k: _safe(v) for k, v in {**row, "controls": " ".join(row["controls"])}.items()})
    return out.getvalue()


# What each default control asks, in our words (SOC 2, Trust Services Criteria 2017), so a reader
# of the report sees why a placement finding is evidence for it. Ids of other frameworks print
# without a description.
CONTROL_DESCRIPTIONS = {
    "CC6.6": "Logical access security measures protect against threats from sources outside the "
    "system boundaries: network policies restrict which workloads may reach which.",
    "CC7.1": "Detection and monitoring procedures identify configuration changes that introduce "
    "vulnerabilities or failures: placements that a policy blocks are detected before or after they ship.",
    "CC8.1": "Changes to infrastructure and software are authorised, designed, tested and approved: "
    "placement labels and policies are changed deliberately and consistently.",
    "A1.1": "Current processing capacity and use are maintained, monitored and evaluated: split "
    "training groups lose throughput and pay for inter-zone traffic.",
    "A1.2": "Environmental protections, recovery infrastructure and availability are designed and "
    "operated to meet objectives: a training group whose members cannot reach each other is unavailable.",
}
MAPS_IN_APPENDIX = 25  # group maps drawn in the evidence appendix (blocked groups first)


def content_hash(report: Report) -> str:
    """sha256 of the report's data (its compliance/v1 JSON): the same data gives the same hash,
    whichever format it is rendered to; printed on the PDF's cover."""
    return hashlib.sha256(to_json(report).encode()).hexdigest()


def _summary(report: Report) -> dict[str, Any]:
    active = [f for f in report.findings if f["status"] in ACTIVE]
    by_sev = {s: sum(f["severity"] == s for f in active) for s in SEVERITIES}
    status = {
        s: sum(r["status"] == s for r in report.rows) for s in ("fail", "waived", "pass", "not-audited")
    }
    controls: dict[str, dict[str, Any]] = {}
    for r in report.rows:
        for c in r["controls"]:
            entry = controls.setdefault(c, {"id": c, "rules": [], "status": "pass", "open": 0})
            if r["rule"] not in entry["rules"]:
                entry["rules"].append(r["rule"])
            entry["open"] += r["open_findings"]
            order = ("fail", "not-audited", "waived", "pass")
            if order.index(r["status"]) < order.index(entry["status"]):
                entry["status"] = r["status"]
    for c in controls.values():
        c["description"] = CONTROL_DESCRIPTIONS.get(c["id"], "")
    cost = round(sum(float(f.get("estimated_monthly_cost_usd") or 0) for f in active), 2)
    ordered = sorted(
        report.findings,
        key=lambda f: (
            f["status"] not in ACTIVE,
            SEVERITY_RANK.get(f["severity"], 9),
            -float(f.get("estimated_monthly_cost_usd") or 0),
            f["id"],
        ),
    )
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for f in ordered:
        if f.get("detail", {}).get("edge"):
            w = f["workload"]
            groups.setdefault((f["target"], w["kind"], w["namespace"], w["name"]), []).append(f)
    periods = sorted(r["started_at"] for r in report.runs if r.get("started_at"))
    return {
        "active": len(active),
        "by_severity": by_sev,
        "status": status,
        "controls": sorted(controls.values(), key=lambda c: c["id"]),
        "cost": cost,
        "ordered": ordered,
        "groups": groups,
        "period_start": report.since or (periods[0] if periods else None),
        "failing_targets": sorted({r["target"] for r in report.rows if r["status"] == "fail"}),
        "unaudited_targets": sorted({r["target"] for r in report.rows if r["status"] == "not-audited"}),
    }


def to_html(report: Report) -> str:
    env = templating.sandbox("report", autoescape=True)
    summary = _summary(report)
    maps = []
    for (target, kind, ns, name), items in list(summary["groups"].items())[:MAPS_IN_APPENDIX]:
        title = f"{kind} {ns}/{name} [{target}]"
        maps.append((title, Markup(zonemap.svg(zonemap.from_findings(title, [f["detail"] for f in items])))))
    return env.get_template("report.html.j2").render(
        report=report,
        s=summary,
        maps=maps,
        more_maps=max(0, len(summary["groups"]) - MAPS_IN_APPENDIX),
        content_hash=content_hash(report),
        tool={"name": TOOL_NAME, "version": __version__},
    )


def to_pdf(report: Report) -> bytes:
    from weasyprint import HTML

    return bytes(HTML(string=to_html(report)).write_pdf())


def to_policyreport(report: Report, flavour: str = "wgpolicyk8s") -> str:
    """PolicyReport objects per namespace (reports/policyreport.py): wgpolicyk8s.io/v1alpha2
    or openreports.io/v1alpha1."""
    entries = policyreport.entries_from_export(report.findings, report.rows)
    now = datetime.fromisoformat(report.generated_at.replace("Z", "+00:00"))
    return policyreport.render(policyreport.build(entries, policyreport.FLAVOURS[flavour], now))


_TEXT: dict[str, Callable[[Report], str]] = {
    "json": to_json,
    "csv": to_csv,
    "html": to_html,
    "sarif": lambda report: sarif.render(StoredResult.of(report.findings, report.targets)),
    "junit": lambda report: junit.render(StoredResult.of(report.findings, report.targets)),
    "policyreport": to_policyreport,
    "openreports": lambda report: to_policyreport(report, "openreports"),
}


def render(report: Report, fmt: str) -> bytes:
    if fmt == "pdf":
        return to_pdf(report)
    if fmt not in _TEXT:
        raise ValueError(f"unknown format {fmt}")
    return _TEXT[fmt](report).encode()


def write(report: Report, fmt: str, output: Path) -> Path:
    """Write the export and its sha256 manifest (`<output>.sha256`, sha256sum format); return it."""
    data = render(report, fmt)
    output.write_bytes(data)
    manifest = output.with_name(output.name + ".sha256")
    manifest.write_text(f"{hashlib.sha256(data).hexdigest()}  {output.name}\n")
    return manifest
