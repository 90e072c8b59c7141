"""Compliance reports from the store: status per target and rule, each rule mapped to the control
ids of a configurable framework, waivers with reason and expiry, evidence (run ids, commit SHAs,
times), in csv, json, html, pdf, sarif, junit or wgpolicyk8s.io PolicyReport objects, with a sha256
manifest of the export."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from markupsafe import Markup

from auditor import TOOL_NAME, __version__, templating
from auditor.model.findings import EdgeRef, Finding, ObjectRef, PolicyMention
from auditor.reports import junit, sarif, zonemap
from auditor.rules import RULES
from auditor.scan import ScanResult
from auditor.service_config import ReportSettings

FORMATS = ("csv", "json", "html", "pdf", "sarif", "junit", "policyreport")
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
            active = [f for f in mine if f["status"] in ("new", "open", "reopened")]
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
        cells = {**row, "controls": " ".join(row["controls"])}
        # A cell starting with = + - @ would be a formula in a spreadsheet.
        writer.writerow(
            {k: ("'" + v if isinstance(v, str) and v[:1] in "=+-@\t\r" else v) for k, v in cells.items()}
        )
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
    active = [f for f in report.findings if f["status"] in ("new", "open", "reopened")]
    by_sev = {s: sum(f["severity"] == s for f in active) for s in ("critical", "high", "medium", "low")}
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
    rank = {"critical": 0, "high": 1, "medium": 2, "low": 3}
    ordered = sorted(
        report.findings,
        key=lambda f: (
            f["status"] not in ("new", "open", "reopened"),
            rank.get(f["severity"], 9),
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


def _finding(item: Mapping[str, Any]) -> Finding:
    d = item.get("detail") or {}
    w = d.get("workload") or {}
    e = d.get("edge")
    return Finding(
        rule=item["rule"],
        severity=item["severity"],
        certainty=item["certainty"],
        symptoms=tuple(d.get("symptoms") or ()),
        workload=ObjectRef(
            w.get("apiVersion", ""),
            w.get("kind", ""),
            w.get("namespace", ""),
            w.get("name", ""),
            w.get("file", ""),
            int(w.get("line") or 0),
        ),
        message=item["message"],
        edge=EdgeRef(
            e["from"]["role"],
            tuple(e["from"]["zones"]),
            e["to"]["role"],
            tuple(e["to"]["zones"]),
            e.get("port"),
            e.get("protocol", "TCP"),
        )
        if e
        else None,
        policies=tuple(
            PolicyMention(p["kind"], p["namespace"], p["name"], p["file"], int(p["line"]))
            for p in d.get("policies") or []
        ),
        estimated_monthly_cost_usd=item.get("estimated_monthly_cost_usd"),
        estimated_slowdown_pct=item.get("estimated_slowdown_pct"),
    )


def _scan_result(report: Report) -> ScanResult:
    active = [f for f in report.findings if f["status"] in ("new", "open", "reopened")]
    return ScanResult(sorted(_finding(f) for f in active), [])


def to_policyreport(report: Report) -> str:
    """wgpolicyk8s.io/v1alpha2 PolicyReport per namespace (ClusterPolicyReport for the rest)."""
    by_ns: dict[str, list[dict[str, Any]]] = {}
    for f in report.findings:
        ns = f["workload"]["namespace"] or ""
        result = {
            "policy": f["rule"],
            "rule": f["rule"],
            "category": "placement",
            "severity": {"critical": "critical", "high": "high", "medium": "medium", "low": "low"}.get(
                f["severity"], "info"
            ),
            "result": "skip" if f["status"] == "waived" else "fail",
            "message": f["message"][:1000],
            "source": TOOL_NAME,
            "scored": True,
            "timestamp": {
                "seconds": int(datetime.fromisoformat(f["last_seen_at"].replace("Z", "+00:00")).timestamp()),
                "nanos": 0,
            },
            "resources": [
                {
                    "apiVersion": f["detail"].get("workload", {}).get("apiVersion", ""),
                    "kind": f["workload"]["kind"],
                    "name": f["workload"]["name"],
                    "namespace": ns,
                }
            ],
            "properties": {
                "fingerprint": f["fingerprint"],
                "certainty": f["certainty"],
                "target": f["target"],
                "controls": ",".join(_controls(report, f["rule"])),
            },
        }
        by_ns.setdefault(ns, []).append(result)
    docs = []
    for ns, results in sorted(by_ns.items()):
        summary = {
            "pass": 0,
            "fail": sum(r["result"] == "fail" for r in results),
            "warn": 0,
            "error": 0,
            "skip": sum(r["result"] == "skip" for r in results),
        }
        meta: dict[str, Any] = {
            "name": f"{TOOL_NAME}-{ns or 'cluster'}",
            "labels": {"app.kubernetes.io/managed-by": TOOL_NAME},
        }
        if ns:
            meta["namespace"] = ns
        docs.append(
            {
                "apiVersion": "wgpolicyk8s.io/v1alpha2",
                "kind": "PolicyReport" if ns else "ClusterPolicyReport",
                "metadata": meta,
                "scope": None,
                "summary": summary,
                "results": results,
            }
        )
    for d in docs:
        d.pop("scope")
    return yaml.safe_dump_all(docs, sort_keys=False) if docs else ""


def _controls(report: Report, rule: str) -> list[str]:
    return next((r["controls"] for r in report.rows if r["rule"] == rule), [])


def render(report: Report, fmt: str) -> bytes:
    if fmt == "json":
        return to_json(report).encode()
    if fmt == "csv":
        return to_csv(report).encode()
    if fmt == "html":
        return to_html(report).encode()
    if fmt == "pdf":
        return to_pdf(report)
    if fmt == "sarif":
        return sarif.render(_scan_result(report)).encode()
    if fmt == "junit":
        return junit.render(_scan_result(report)).encode()
    if fmt == "policyreport":
        return to_policyreport(report).encode()
    raise ValueError(f"unknown format {fmt}")


def write(report: Report, fmt: str, output: Path) -> Path:
    """Write the export and its sha256 manifest (`<output>.sha256`, sha256sum format); return it."""
    data = render(report, fmt)
    output.write_bytes(data)
    manifest = output.with_name(output.name + ".sha256")
    manifest.write_text(f"{hashlib.sha256(data).hexdigest()}  {output.name}\n")
    return manifest


def manifest_ok(manifest: Path) -> bool:
    digest, _, name = manifest.read_text().strip().partition("  ")
    return hashlib.sha256((manifest.parent / name).read_bytes()).hexdigest() == digest


__all__: Sequence[str] = ("FORMATS", "Report", "build", "render", "write")
