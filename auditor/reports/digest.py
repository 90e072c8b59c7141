"""The daily digest per team: a summary first, then the top groups, what the admission webhook
stopped, the changes, waivers expiring soon and audit coverage, each list capped (LIST_LIMIT) so the
HTML stays far below the ~100 KB at which Gmail clips a message; maps are links, never inline SVG
(docs/reports.md, "Daily digest"). Pure: the caller passes the store's data and the time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from fnmatch import fnmatchcase
from typing import Any

from auditor import templating
from auditor.model.findings import SEVERITY_RANK
from auditor.reports import ACTIVE, BLOCKED_RULES, overview
from auditor.settings.service import DigestSettings, Team

LIST_LIMIT = 10  # groups, blocked groups and each kind of change listed; the rest is "and N more"


@dataclass(frozen=True, slots=True)
class Digest:
    team: Team
    subject: str
    text: str
    html: str
    counts: Mapping[str, int]


def routed(team: Team, finding: Mapping[str, Any]) -> bool:
    """Whether the team gets the finding: its target, namespace and workload labels all match
    (each criterion the team leaves empty matches everything)."""
    if team.targets and finding["target"] not in team.targets:
        return False
    ns = finding["workload"]["namespace"]
    if team.namespaces and not any(fnmatchcase(ns, pattern) for pattern in team.namespaces):
        return False
    labels = finding["workload"].get("labels") or {}
    return all(key in labels and fnmatchcase(labels[key], pattern) for key, pattern in team.labels)


def routed_answer(team: Team, answer: Mapping[str, Any]) -> bool:
    """Whether the team gets an admission answer (or a count of them): its cluster is one of the
    team's targets and its namespace matches, as for findings. An answer carries no workload labels,
    so a team that routes by label gets none."""
    if team.targets and answer["cluster"] not in team.targets:
        return False
    if team.namespaces and not any(fnmatchcase(answer["namespace"], p) for p in team.namespaces):
        return False
    return not team.labels


def stopped_at_admission(team: Team, summary: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The team's "Stopped at admission" section of an admission summary (AdmissionSummary's
    JSON): the denials (LIST_LIMIT of them), how many were warned, and how many dry runs would
    have been denied; None when there is none of the three."""
    if summary is None:
        return None
    counts = {"denied": 0, "warned": 0, "would_deny": 0}
    for c in summary["by_namespace"]:
        if not routed_answer(team, c):
            continue
        if c["outcome"] == "denied":
            counts["would_deny" if c["dry_run"] else "denied"] += c["answers"]
        elif c["outcome"] == "warned" and not c["dry_run"]:
            counts["warned"] += c["answers"]
    if not any(counts.values()):
        return None
    denied = [d for d in summary["denied"] if routed_answer(team, d)][:LIST_LIMIT]
    return {**counts, "listed": denied, "more": max(0, counts["denied"] - len(denied))}


def _blocked_first(findings: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(
        findings, key=lambda f: (f["rule"] not in BLOCKED_RULES, SEVERITY_RANK.get(f["severity"], 9), f["id"])
    )


def build(
    team: Team,
    settings: DigestSettings,
    export: Mapping[str, Any],
    changes: Mapping[str, Sequence[Mapping[str, Any]]],
    trends: Mapping[str, Sequence[Mapping[str, Any]]],
    since: datetime,
    now: datetime,
    first: bool = False,
    admission: Mapping[str, Any] | None = None,
) -> Digest:
    """`first`: the team has had no digest yet (so nothing is "since the last digest").
    `admission`: the admission webhook's answers since `since` (AdmissionSummary's JSON)."""
    active = [f for f in export["findings"] if f["status"] in ACTIVE and routed(team, f)]
    new = _blocked_first([f for f in changes.get("new", []) if routed(team, f)])
    reopened = _blocked_first([f for f in changes.get("reopened", []) if routed(team, f)])
    resolved = [f for f in changes.get("resolved", []) if routed(team, f)]
    costly = sorted(
        (f for f in active if f.get("estimated_monthly_cost_usd")),
        key=lambda f: -float(f["estimated_monthly_cost_usd"]),
    )[:5]
    total = round(sum(float(f.get("estimated_monthly_cost_usd") or 0) for f in active), 2)
    targets = [t for t in export["targets"] if not team.targets or t["name"] in team.targets]
    before = 0.0
    for t in targets:
        earlier = [
            r
            for r in trends.get(t["name"], [])
            if r["finished_at"] and r["finished_at"] < since.isoformat().replace("+00:00", "Z")
        ]
        before += float((earlier[-1]["estimated_monthly_cost_usd"] if earlier else 0) or 0)
    trend = round(total - before, 2)
    soon = (now + timedelta(days=settings.expiring_within_days)).date()
    expiring = [
        w
        for w in export["waivers"]
        if not w["expired"]
        and date.fromisoformat(w["expires"]) <= soon
        and (not team.targets or w["target"] in team.targets)
    ]
    coverage = []
    stale_before = now - timedelta(hours=settings.stale_after_hours)
    for t in targets:
        last, ok = t.get("last_run"), t.get("last_successful_run")
        if t.get("retired_at"):
            problem = f"removed from the GitHub App on {t['retired_at']}: no longer audited"
        elif last is not None and last["status"] in ("failed", "interrupted"):
            problem = f"last run {last['status']}: {last.get('error') or ''}".strip()
        elif ok is None:
            problem = "never audited successfully"
        elif datetime.fromisoformat(ok["finished_at"].replace("Z", "+00:00")) < stale_before:
            problem = f"stale: last successful run {ok['finished_at']}"
        else:
            continue
        coverage.append({"target": t["name"], "problem": problem})
    blocked = _blocked_first([f for f in active if f["rule"] in BLOCKED_RULES])
    items = [overview.Item.from_json(f) for f in active]
    summary = overview.overview(items, {}, LIST_LIMIT)
    # Blocked groups first, then the rest by severity and cost.
    blocked_groups = {
        (f["target"], f["workload"]["kind"], f["workload"]["namespace"], f["workload"]["name"])
        for f in blocked
    }
    groups, _ = overview.top_groups(items, len(items) or 1)
    groups.sort(key=lambda g: (g.target, g.kind, g.namespace, g.name) not in blocked_groups)  # stable
    stopped = stopped_at_admission(team, admission)
    values = {
        "team": team,
        "since": since,
        "now": now,
        "first": first,
        "summary": summary,
        "new": new,
        "reopened": reopened,
        "resolved": resolved,
        "blocked": blocked,
        "blocked_groups": len(blocked_groups),
        "groups": groups[:LIST_LIMIT],
        "more_groups": max(0, len(groups) - LIST_LIMIT),
        "limit": LIST_LIMIT,
        "costly": costly,
        "total": total,
        "trend": None if first else trend,
        "expiring": expiring,
        "coverage": coverage,
        "base_url": settings.base_url,
        "admission": stopped,
    }
    denied_at_admission = stopped["denied"] if stopped else 0
    subject = (
        f"[placement-auditor] {team.name}: {len(blocked_groups)} blocked, {len(new)} new,"
        f" {len(resolved)} resolved"
        f", ${total:,.0f}/month inter-AZ"
        + (f", {denied_at_admission} denied at admission" if denied_at_admission else "")
    )
    text = _env(False).get_template("digest.txt.j2").render(**values)
    html = _env(True).get_template("digest.html.j2").render(**values)
    counts = {
        "new": len(new),
        "reopened": len(reopened),
        "resolved": len(resolved),
        "blocked": len(blocked_groups),
        "admission_denied": denied_at_admission,
    }
    return Digest(team, subject, text, html, counts)


def _env(html: bool) -> Any:
    return templating.sandbox("email", autoescape=html, trim_blocks=True, lstrip_blocks=True)
