"""Writing a completed run's plan (`lifecycle.RunPlan`) into the findings tables, inside the run's
transaction: finding rows inserted, updated and resolved, one observation per finding, the cost
estimate per rule.

The rows are built once, as tuples in the column order below, and written by one of two writers:

- PostgreSQL: COPY. The new findings' ids are drawn from the table's sequence first (one
  statement), so the rows and their observations are copied straight into the tables, with no
  RETURNING and no second read; updated findings are copied into a temporary table (dropped at
  commit) and applied by one UPDATE … FROM. JSON is encoded once, by orjson. Every index stays
  live; the work is the same the server does for an INSERT, without a round trip per batch.
- Any other database (SQLite): Core executemany, in chunks the driver takes well.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

import orjson
from sqlalchemy import Table, bindparam, insert, select, update
from sqlalchemy.orm import Session

from auditor.model.findings import Finding
from auditor.store import lifecycle
from auditor.store.schema import CostEstimate, Observation, Run
from auditor.store.schema import Finding as FindingRow

if TYPE_CHECKING:
    import psycopg

_FINDINGS = cast(Table, FindingRow.__table__)
_OBSERVATIONS = cast(Table, Observation.__table__)

# What every finding a run saw gets written (a new one and one seen before alike).
SEEN_COLUMNS = (
    "rule",
    "severity",
    "certainty",
    "namespace",
    "kind",
    "workload",
    "file",
    "line",
    "message",
    "detail",
    "estimated_monthly_cost_usd",
    "estimated_slowdown_pct",
    "labels",
    "status",
    "last_seen_at",
    "last_run_id",
    "waiver_reason",
    "waiver_expires",
)
# A new finding's row: its id (PostgreSQL; drawn from the sequence) and identity, then SEEN_COLUMNS.
NEW_COLUMNS = ("target_id", "fingerprint", "first_seen_at", "first_run_id", *SEEN_COLUMNS)
OBSERVATION_COLUMNS = (
    "finding_id",
    "run_id",
    "status",
    "severity",
    "certainty",
    "estimated_monthly_cost_usd",
    "estimated_slowdown_pct",
)
CHUNK = 5000
Change = lifecycle.Change[Any]


def write_plan(
    session: Session,
    run: Run,
    plan: lifecycle.RunPlan[Any],
    labels: Callable[[Finding], dict[str, str]],
    now: datetime,
) -> None:
    """Write `plan` for `run` (see the module docstring). `labels`: a finding's workload labels."""
    postgres = session.connection().dialect.name == "postgresql"
    # On PostgreSQL the JSON columns take text (orjson's); elsewhere SQLAlchemy's JSON type
    # encodes the values itself.
    encode: Callable[[Any], Any] = _json_text if postgres else _same
    run_id, target_id = run.id, run.target_id

    def seen(change: Change) -> tuple[Any, ...]:
        """The SEEN_COLUMNS of a finding the run saw."""
        f, waiver, ref = change.finding, change.hidden_by, change.finding.workload
        return (
            f.rule,
            f.severity,
            f.certainty,
            ref.namespace[:253],
            ref.kind[:120],
            ref.name[:253],
            ref.file,
            ref.line,
            f.message,
            encode(f.to_json()),
            f.estimated_monthly_cost_usd,
            f.estimated_slowdown_pct,
            encode(labels(f)),
            change.transition.status,
            now,
            run_id,
            waiver.reason if waiver else None,
            waiver.expires if waiver else None,
        )

    def new_row(change: Change) -> tuple[Any, ...]:  # NEW_COLUMNS
        return (target_id, change.fingerprint, now, run_id, *seen(change))

    def again_row(change: Change) -> tuple[Any, ...]:  # (id, reopened, *SEEN_COLUMNS)
        assert change.before is not None
        return (change.before.id, change.transition.reopened, *seen(change))

    fresh = [c for c in plan.seen if c.before is None]
    again = [c for c in plan.seen if c.before is not None]
    resolved = [s.id for s in plan.resolved]
    ids = {c.fingerprint: c.before.id for c in again if c.before is not None}
    if postgres:
        ids.update(_write_postgresql(session, fresh, again, new_row, again_row, resolved, now))
    else:
        new = [new_row(c) for c in fresh]
        ids.update(_write_generic(session, target_id, new, list(map(again_row, again)), resolved, now))
    observations = [
        (ids[c.fingerprint], run_id, c.transition.status, *_observed(c.finding)) for c in plan.seen
    ]
    observations += [(s.id, run_id, "resolved", s.severity, s.certainty, None, None) for s in plan.resolved]
    if postgres:
        _copy(_driver(session), "observations", OBSERVATION_COLUMNS, observations)
    else:
        for chunk in _chunks(observations, 2 * CHUNK):
            session.execute(
                insert(_OBSERVATIONS), [dict(zip(OBSERVATION_COLUMNS, r, strict=True)) for r in chunk]
            )
    for rule in sorted(plan.count_by_rule):
        session.add(
            CostEstimate(
                run_id=run_id,
                target_id=target_id,
                rule=rule,
                findings=plan.count_by_rule[rule],
                monthly_usd=round(plan.cost_by_rule.get(rule, 0.0), 2),
                at=now,
            )
        )


def _write_postgresql(
    session: Session,
    fresh: Sequence[Change],
    again: Sequence[Change],
    new_row: Callable[[Change], tuple[Any, ...]],
    again_row: Callable[[Change], tuple[Any, ...]],
    resolved: Sequence[int],
    now: datetime,
) -> dict[str, int]:
    """COPY the rows, each built as it is copied (the server indexes the rows sent while the next
    are built); returns the ids of the new findings, by fingerprint."""
    connection = _driver(session)
    ids: dict[str, int] = {}
    with connection.cursor() as cursor:
        if fresh:
            cursor.execute(
                "SELECT nextval(pg_get_serial_sequence('findings', 'id')) FROM generate_series(1, %s)",
                (len(fresh),),
            )
            drawn = sorted(int(r[0]) for r in cursor.fetchall())
            _copy(
                connection,
                "findings",
                ("id", *NEW_COLUMNS),
                ((fid, *new_row(c)) for fid, c in zip(drawn, fresh, strict=True)),
            )
            ids.update((c.fingerprint, fid) for fid, c in zip(drawn, fresh, strict=True))
        if again:
            # Same column types as the table (CREATE … AS … WITH NO DATA), no constraints.
            cursor.execute(
                "CREATE TEMPORARY TABLE finding_updates ON COMMIT DROP AS "
                f"SELECT id, false AS reopened, {', '.join(SEEN_COLUMNS)} FROM findings WITH NO DATA"
            )
            _copy(connection, "finding_updates", ("id", "reopened", *SEEN_COLUMNS), map(again_row, again))
            cursor.execute("ANALYZE finding_updates (id)")  # the join key: what the plan needs
            assignments = ", ".join(f"{c} = u.{c}" for c in SEEN_COLUMNS)
            # A reopened finding is no longer resolved; others keep their resolved_at.
            cursor.execute(
                f"UPDATE findings AS f SET {assignments}, "
                "resolved_at = CASE WHEN u.reopened THEN NULL ELSE f.resolved_at END "
                "FROM finding_updates AS u WHERE f.id = u.id"
            )
        if resolved:
            cursor.execute(
                "UPDATE findings SET status = 'resolved', resolved_at = %s WHERE id = ANY(%s)",
                (now, list(resolved)),
            )
    return ids


def _write_generic(
    session: Session,
    target_id: int,
    new: Sequence[tuple[Any, ...]],
    seen_again: Sequence[tuple[Any, ...]],
    resolved: Sequence[int],
    now: datetime,
) -> dict[str, int]:
    """Core executemany; returns the ids of the new findings, by fingerprint."""
    ids: dict[str, int] = {}
    if new:
        for chunk in _chunks(new, CHUNK):
            session.execute(insert(_FINDINGS), [dict(zip(NEW_COLUMNS, r, strict=True)) for r in chunk])
        # One read maps the new fingerprints to their ids (RETURNING would parse every batch again).
        wanted = {row[1] for row in new}
        query = select(FindingRow.id, FindingRow.fingerprint).where(FindingRow.target_id == target_id)
        ids.update((fp, fid) for fid, fp in session.execute(query) if fp in wanted)
    if seen_again:
        by_id = _FINDINGS.c.id == bindparam("finding_id")
        values: dict[str, Any] = {c: bindparam(c) for c in SEEN_COLUMNS}
        kept = update(_FINDINGS).where(by_id).values(values)
        reopened = update(_FINDINGS).where(by_id).values({**values, "resolved_at": None})
        for flag, statement in ((False, kept), (True, reopened)):
            rows = [
                {"finding_id": r[0], **dict(zip(SEEN_COLUMNS, r[2:], strict=True))}
                for r in seen_again
                if r[1] is flag
            ]
            for chunk in _chunks(rows, CHUNK):
                session.execute(statement, chunk)
    for chunk in _chunks(resolved, CHUNK):
        session.execute(
            update(_FINDINGS).where(_FINDINGS.c.id.in_(chunk)).values(status="resolved", resolved_at=now)
        )
    return ids


def _copy(
    connection: psycopg.Connection[Any], table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]
) -> None:
    with (
        connection.cursor() as cursor,
        cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy,
    ):
        for row in rows:
            copy.write_row(row)


def _driver(session: Session) -> psycopg.Connection[Any]:
    """The psycopg connection under the session's, in the same transaction."""
    return cast("psycopg.Connection[Any]", session.connection().connection.driver_connection)


def _json_text(value: Any) -> str:
    return orjson.dumps(value).decode()


def _same(value: Any) -> Any:
    return value


def _observed(f: Finding) -> tuple[str, str, float | None, float | None]:
    return f.severity, f.certainty, f.estimated_monthly_cost_usd, f.estimated_slowdown_pct


def _chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
