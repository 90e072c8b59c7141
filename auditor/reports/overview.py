"""The overview of findings, per target or fleet-wide: counts by severity and rule, the estimated
monthly cost, the trend over runs and the top groups, and the order lists use (severity, then cost).
Pure, over small typed rows (`Item`), whichever way the findings were read (a fresh scan or the
store)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from auditor.model.findings import SEVERITY_RANK
from auditor.reports import ACTIVE

SEVERITIES = tuple(SEVERITY_RANK)  # most severe first (the web pages read them from here)


@dataclass(frozen=True, slots=True)
class Item:
    id: int
    target: str
    rule: str
    severity: str
    status: str
    kind: str
    namespace: str
    name: str
    file: str
    line: int
    cost: float | None  # estimated monthly USD

    @classmethod
    def from_json(cls, f: Mapping[str, Any]) -> Item:
        w = f["workload"]
        return cls(
            int(f["id"]),
            str(f["target"]),
            str(f["rule"]),
            str(f["severity"]),
            str(f["status"]),
            str(w.get("kind") or ""),
            str(w.get("namespace") or ""),
            str(w.get("name") or ""),
            str(w.get("file") or ""),
            int(w.get("line") or 0),
            f.get("estimated_monthly_cost_usd"),
        )

    @property
    def group(self) -> tuple[str, str, str, str]:
        return (self.target, self.kind, self.namespace, self.name)


def order(item: Item) -> tuple[int, float, int]:
    """Severity first, then the costliest, then the newest."""
    return (SEVERITY_RANK.get(item.severity, 9), -(item.cost or 0.0), -item.id)


@dataclass(frozen=True, slots=True)
class TopGroup:
    target: str
    kind: str
    namespace: str
    name: str
    severity: str  # the worst of its findings
    findings: int
    cost: float
    first_id: int  # its worst finding, for a link


@dataclass(frozen=True, slots=True)
class TrendPoint:
    label: str  # ISO time of the run
    findings: int
    cost: float


@dataclass(frozen=True, slots=True)
class Overview:
    active: int
    by_severity: tuple[tuple[str, int], ...]
    by_rule: tuple[tuple[str, int], ...]
    monthly_cost: float
    top_groups: tuple[TopGroup, ...]
    more_groups: int
    trend: tuple[TrendPoint, ...]


def top_groups(items: Iterable[Item], limit: int) -> tuple[list[TopGroup], int]:
    groups: dict[tuple[str, str, str, str], list[Item]] = {}
    for i in items:
        groups.setdefault(i.group, []).append(i)
    tops = []
    for (target, kind, ns, name), mine in groups.items():
        worst = min(mine, key=order)
        tops.append(
            TopGroup(
                target, kind, ns, name, worst.severity, len(mine), sum(i.cost or 0 for i in mine), worst.id
            )
        )
    tops.sort(key=lambda g: (SEVERITY_RANK.get(g.severity, 9), -g.cost, g.target, g.namespace, g.name))
    return tops[:limit], max(0, len(tops) - limit)


def fleet_trend(trends: Mapping[str, Sequence[Mapping[str, Any]]]) -> tuple[TrendPoint, ...]:
    """Per run of any target (oldest first): the fleet's findings and cost, each target counted as
    of its latest run at that time."""
    events = sorted(
        (str(r["finished_at"]), name, int(r["findings"] or 0), float(r["estimated_monthly_cost_usd"] or 0))
        for name, runs in trends.items()
        for r in runs
        if r.get("finished_at")
    )
    latest: dict[str, tuple[int, float]] = {}
    points = []
    for at, name, findings, cost in events:
        latest[name] = (findings, cost)
        points.append(
            TrendPoint(at, sum(v[0] for v in latest.values()), round(sum(v[1] for v in latest.values()), 2))
        )
    return tuple(points)


def overview(
    items: Iterable[Item], trends: Mapping[str, Sequence[Mapping[str, Any]]], top: int = 10
) -> Overview:
    active = [i for i in items if i.status in ACTIVE]
    sev = Counter(i.severity for i in active)
    rules = Counter(i.rule for i in active)
    groups, more = top_groups(active, top)
    return Overview(
        len(active),
        tuple((s, sev.get(s, 0)) for s in SEVERITIES),
        tuple(sorted(rules.items(), key=lambda kv: (-kv[1], kv[0]))),
        round(sum(i.cost or 0 for i in active), 2),
        tuple(groups),
        more,
        fleet_trend(trends),
    )
