"""Finding lifecycle: the status a stored finding takes after a run. Pure.

- Seen for the first time: `new`. Seen again: `open`. Seen after it was resolved: `reopened`.
- Hidden by a waiver in force: `waived` (it is still observed, so its history goes on).
- Not seen by a *succeeded* run of the same target: `resolved` (once; the time is kept).
- A `partial` run (some files could not be read) adds and updates what it saw but resolves
  nothing: the unreadable file may hold the workload. A `failed` or `interrupted` run changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


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
