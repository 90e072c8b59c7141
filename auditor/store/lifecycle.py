"""Finding lifecycle: the status a stored finding takes after a run, and everything a completed run
changes (`plan_run`), decided before the store writes anything. Pure.

- Seen for the first time: `new`. Seen again: `open`. Seen after it was resolved: `reopened`.
- Hidden by a waiver in force: `waived` (it is still observed, so its history goes on).
- Not seen by a *succeeded* run of the same target: `resolved` (once; the time is kept).
- A `partial` run (some files could not be read) adds and updates what it saw but resolves
  nothing: the unreadable file may hold the workload. A `failed` or `interrupted` run changes nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Generic, TypeVar

from auditor.model.findings import Finding

W = TypeVar("W")  # what hides a waived finding (the store's WaiverSeen)


class Seen(Enum):
    REPORTED = "reported"
    WAIVED = "waived"


@dataclass(frozen=True, slots=True)
class Transition:
    status: str
    resolved: bool = False  # became resolved in this run
    reopened: bool = False


def after_run(previous: str | None, seen: Seen | None, run_status: str) -> Transition | None:
    """The status after a run, or None when the finding is untouched (no row change)."""
    if run_status not in ("succeeded", "partial"):
        return None
    if seen is Seen.WAIVED:
        return Transition("waived")
    if seen is Seen.REPORTED:
        if previous is None:
            return Transition("new")
        if previous == "resolved":
            return Transition("reopened", reopened=True)
        return Transition("open")
    # Not seen in this run.
    if previous is None or previous == "resolved" or run_status != "succeeded":
        return None
    return Transition("resolved", resolved=True)


@dataclass(frozen=True, slots=True)
class Stored:
    """What the store holds of a finding before a run."""

    id: int
    status: str
    severity: str
    certainty: str


@dataclass(frozen=True, slots=True)
class Change(Generic[W]):
    """A finding the run saw: its transition, and what hid it (a waiver) if anything."""

    fingerprint: str
    finding: Finding
    transition: Transition
    hidden_by: W | None
    before: Stored | None


@dataclass
class RunPlan(Generic[W]):
    """What a completed run changes in the store: decided before anything is written."""

    seen: list[Change[W]]
    resolved: list[Stored]
    new: int = 0
    reopened: int = 0
    waived: int = 0
    # Reported (not waived) findings and their estimated monthly cost, per rule.
    count_by_rule: Counter[str] = field(default_factory=Counter)
    cost_by_rule: dict[str, float] = field(default_factory=dict)

    @property
    def reported(self) -> int:
        return sum(self.count_by_rule.values())

    @property
    def total_cost(self) -> float | None:
        return round(sum(self.cost_by_rule.values()), 2) if self.cost_by_rule else None


def plan_run(
    previous: Mapping[str, Stored],
    reported: Iterable[Finding],
    waived: Iterable[tuple[Finding, W]],
    run_status: str,
) -> RunPlan[W]:
    """The changes a `succeeded` or `partial` run makes: each seen finding's transition (the first
    of a fingerprint wins), the findings it resolves, and the counts and costs it records."""
    seen: dict[str, tuple[Finding, Seen, W | None]] = {}
    for f in reported:
        seen.setdefault(f.fingerprint, (f, Seen.REPORTED, None))
    for f, waiver in waived:
        seen.setdefault(f.fingerprint, (f, Seen.WAIVED, waiver))
    plan: RunPlan[W] = RunPlan([], [])
    for fp, (f, how, hidden_by) in seen.items():
        before = previous.get(fp)
        change = after_run(before.status if before else None, how, run_status)
        assert change is not None  # a seen finding always changes in a completed run
        plan.seen.append(Change(fp, f, change, hidden_by, before))
        plan.new += change.status == "new"
        plan.reopened += change.reopened
        if change.status == "waived":
            plan.waived += 1
            continue
        plan.count_by_rule[f.rule] += 1
        if f.estimated_monthly_cost_usd is not None:
            plan.cost_by_rule[f.rule] = plan.cost_by_rule.get(f.rule, 0.0) + f.estimated_monthly_cost_usd
    for fp, stored in previous.items():
        if fp not in seen:
            change = after_run(stored.status, None, run_status)
            if change is not None and change.resolved:
                plan.resolved.append(stored)
    return plan
