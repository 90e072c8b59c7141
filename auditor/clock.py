"""Time as an input.

Every component that needs the time (the scheduler, the store, digests, waivers, pull-request
pacing, snapshot headers, metrics) is handed a `Clock` by the composition root (`bootstrap`) and
never reads the wall clock itself, so tests pin the time and nothing depends on the hour a test or a
CI run happens to start. Dates are UTC dates: a waiver `until: 2026-12-03` ends at midnight UTC, not
at midnight wherever the process happens to run.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime

Clock = Callable[[], datetime]
"""Returns the current time as an aware datetime."""


def system_clock() -> datetime:
    """The wall clock, in UTC. Only the composition root and entry points should name this."""
    return datetime.now(UTC)


def utc_date(clock: Clock) -> date:
    """Today's date in UTC by `clock` (what decides whether a waiver is in force)."""
    return clock().astimezone(UTC).date()
