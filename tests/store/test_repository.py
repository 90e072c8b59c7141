"""The store on SQLite and PostgreSQL: runs, lifecycle across runs, slots, recovery, queries."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

import pytest
from dbsupport import Clock
from factory import finding
from sqlalchemy import func, select

from auditor.store.records import RuleCost, WaiverNote
from auditor.store.repository import (
    BadCursor,
    FindingFilter,
    RunOutcome,
    SlotTaken,
    Store,
    TargetSpec,
    WaiverSeen,
    decode_cursor,
    encode_cursor,
)
from auditor.store.schema import CostEstimate, Observation, Run
from auditor.store.schema import Finding as FindingRow

TARGET = TargetSpec("infra", "git", "https://example.com/infra.git", "main", ("clusters",), (), "0 6 * * *")


def _run(store: Store, clock: Clock, findings: list, status: str = "succeeded", **kw: object) -> int:
    clock.advance(days=1)
    run_id = store.claim_run("infra", None, "cli", "host:1")
    store.complete_run(run_id, RunOutcome(status, "abc123", findings, **kw))  # type: ignore[arg-type]
    return run_id


def _statuses(store: Store) -> dict[str, str]:
    page = store.findings(FindingFilter(target="infra"), 500)
    return {f.workload.name: f.status for f in page.items}


def test_lifecycle_across_runs(store: Store, clock: Clock) -> None:
    store.sync_targets([TARGET])
    a, b, c = (
        finding("a", cost=100.0),
        finding("b", cost=50.5),
        finding("c", rule="cross-zone-blocked", severity="critical"),
    )
    first = _run(store, clock, [a, b])
    assert _statuses(store) == {"a": "new", "b": "new"}
    _run(store, clock, [a, b, c])
    assert _statuses(store) == {"a": "open", "b": "open", "c": "new"}
    third = _run(store, clock, [a])
    assert _statuses(store) == {"a": "open", "b": "resolved", "c": "resolved"}
    _run(store, clock, [a, b])
    assert _statuses(store) == {"a": "open", "b": "reopened", "c": "resolved"}
    summary = store.run(third)
    assert summary is not None and summary.resolved == 2 and summary.findings == 1
    # History: one entry per run that saw or resolved it.
    fid = next(f.id for f in store.findings(FindingFilter(), 50).items if f.workload.name == "b")
    detail = store.finding(fid)
    assert detail is not None
    assert [h.status for h in detail.history] == ["new", "open", "resolved", "reopened"]
    assert detail.resolved_at is None  # reopened clears it
    assert detail.detail["fingerprint"] == b.fingerprint
    first_run = store.run(first)
    assert first_run is not None and first_run.estimated_monthly_cost_usd == 150.5
    assert first_run.cost_by_rule == {"cross-zone-traffic": RuleCost(2, 150.5)}


def test_partial_and_failed_runs_resolve_nothing(store: Store, clock: Clock) -> None:
    store.sync_targets([TARGET])
    a, b = finding("a"), finding("b")
    _run(store, clock, [a, b])
    _run(store, clock, [a], status="partial", errors=[{"file": "x.yaml", "line": 1, "message": "bad"}])
    assert _statuses(store) == {"a": "open", "b": "new"}  # b untouched
    run_id = store.claim_run("infra", None, "cli", "host:1")
    store.fail_run(run_id, "fetching: the remote cannot be reached")
    assert _statuses(store) == {"a": "open", "b": "new"}
    failed = store.run(run_id)
    assert failed is not None and failed.status == "failed" and "cannot be reached" in failed.error
    with pytest.raises(ValueError):
        store.complete_run(store.claim_run("infra", None, "cli", "h:1"), RunOutcome("failed", None, []))


def test_waived_findings_are_kept_and_marked(store: Store, clock: Clock) -> None:
    store.sync_targets([TARGET])
    a = finding("a", cost=10.0)
    waiver = WaiverSeen(
        a.fingerprint, "document:waivers.yaml:accept-a", "accepted until the move", date(2027, 1, 1), False
    )
    run_id = _run(store, clock, [], waived=[(a, waiver)])
    [row] = store.findings(FindingFilter(status="waived"), 10).items
    assert row.waiver == WaiverNote("accepted until the move", date(2027, 1, 1))
    summary = store.run(run_id)
    assert summary is not None and summary.waived == 1 and summary.findings == 0
    assert summary.estimated_monthly_cost_usd is None  # waived cost is not counted
    _run(store, clock, [a])  # the waiver expired
    assert _statuses(store) == {"a": "open"}


def test_one_slot_runs_once(store: Store) -> None:
    store.sync_targets([TARGET])
    store.claim_run("infra", "2026-12-02T06:00:00Z", "schedule", "host-a:1")
    with pytest.raises(SlotTaken):
        store.claim_run("infra", "2026-12-02T06:00:00Z", "schedule", "host-b:2")
    # Manual runs have no slot and never collide.
    store.claim_run("infra", None, "api", "host-a:1")
    store.claim_run("infra", None, "api", "host-a:1")


def test_recover_marks_dead_and_stale_runs_interrupted(store: Store, clock: Clock) -> None:
    store.sync_targets([TARGET])
    _run(store, clock, [finding("a")])
    dead = store.claim_run("infra", None, "cli", "host:dead")
    alive = store.claim_run("infra", None, "cli", "host:alive")
    stale = store.claim_run("infra", None, "cli", "other-host:7")
    clock.advance(minutes=10)
    store.heartbeat(alive)
    recovered = store.recover_interrupted(
        lambda owner: owner == "host:dead", clock.now - timedelta(minutes=5)
    )
    assert sorted(recovered) == sorted([dead, stale])
    states = {r.id: r.status for r in store.runs("infra", 10).items}
    assert states[dead] == states[stale] == "interrupted" and states[alive] == "running"
    assert _statuses(store) == {"a": "new"}  # nothing lost, nothing resolved


def test_one_transaction_per_run(store: Store, clock: Clock) -> None:
    """A failure while completing leaves no observation, cost row or status change behind."""
    store.sync_targets([TARGET])
    _run(store, clock, [finding("a")])
    run_id = store.claim_run("infra", None, "cli", "h:1")
    bad = finding("b")
    object.__setattr__(bad, "rule", "x" * 500)  # longer than the column: PostgreSQL refuses it
    with store.sessions() as s:
        before = (
            s.scalar(select(func.count()).select_from(Observation)),
            s.scalar(select(func.count()).select_from(CostEstimate)),
        )
    try:
        store.complete_run(run_id, RunOutcome("succeeded", "x", [finding("c"), bad]))
    except Exception:
        with store.sessions() as s:
            after = (
                s.scalar(select(func.count()).select_from(Observation)),
                s.scalar(select(func.count()).select_from(CostEstimate)),
            )
            assert after == before
            assert s.get_one(Run, run_id).status == "running"
        assert _statuses(store) == {"a": "new"}
    else:  # SQLite does not enforce VARCHAR lengths: then the run is simply complete
        assert store.engine.dialect.name == "sqlite"


def test_filters_and_cursor_pagination(store: Store, clock: Clock) -> None:
    store.sync_targets([TARGET, TargetSpec("lab", "directory", "/srv/lab")])
    many = [
        finding(f"job-{i:03}", severity="high" if i % 3 == 0 else "medium", namespace=f"ns{i % 4}")
        for i in range(120)
    ]
    _run(store, clock, many)
    seen: list[int] = []
    cursor = None
    while True:
        page = store.findings(FindingFilter(target="infra", severity="high"), 7, cursor)
        seen.extend(f.id for f in page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == 40 and seen == sorted(seen, reverse=True)
    assert len(store.findings(FindingFilter(namespace="ns1"), 500).items) == 30
    assert store.findings(FindingFilter(target="lab"), 500).items == []
    # Hostile values are just values.
    assert store.findings(FindingFilter(rule="x' OR '1'='1"), 500).items == []
    assert store.findings(FindingFilter(namespace="ns1; DROP TABLE findings; --"), 500).items == []
    assert len(store.findings(FindingFilter(), 500).items) == 120
    assert store.findings(FindingFilter(since=clock.now + timedelta(hours=1)), 5).items == []
    assert len(store.findings(FindingFilter(since=clock.now - timedelta(hours=1)), 500).items) == 120


def test_cursor_round_trip_and_garbage() -> None:
    assert decode_cursor(encode_cursor(123456)) == 123456
    for bad in ("", "!!!", "djE6LTE", encode_cursor(1)[:-1] + "A" * 40, "v1:5"):
        with pytest.raises(BadCursor):
            decode_cursor(bad)


def test_targets_sync_updates_and_reports_last_success(store: Store, clock: Clock) -> None:
    store.sync_targets([TARGET])
    store.sync_targets(
        [TargetSpec("infra", "git", "https://example.com/infra.git", "release", (), (), "0 7 * * *")]
    )
    [t] = store.targets()
    assert t.branch == "release" and t.schedule == "0 7 * * *" and t.last_successful_run_at is None
    _run(store, clock, [])
    [t] = store.targets()
    assert t.last_successful_run_at == clock.now


def test_active_findings_counted_per_severity(store: Store, clock: Clock) -> None:
    store.sync_targets([TARGET])
    a, b, c = (
        finding("a", severity="medium"),
        finding("b", severity="medium"),
        finding("c", rule="cross-zone-blocked", severity="critical"),
    )
    _run(store, clock, [a, b, c])
    assert store.active_by_severity("infra") == {"medium": 2, "critical": 1}
    _run(store, clock, [a])  # b and c resolved: no longer active
    assert store.active_by_severity("infra") == {"medium": 1}
    with pytest.raises(KeyError):
        store.active_by_severity("nope")


def test_every_column_written_across_runs(store: Store, clock: Clock) -> None:
    """What each run writes, column by column (PostgreSQL copies the rows, SQLite inserts them):
    new, seen again with changes, waived, resolved, reopened, and waived after being resolved."""
    store.sync_targets([TARGET])
    a, c = finding("a", cost=12.5), finding("c", rule="cross-zone-blocked")
    b = finding("b", message='b:\ttab \\ back\\slash\nnew line "quoted" é \\N')  # COPY's escapes
    waiver = WaiverSeen(c.fingerprint, "document:w.yaml:c", "until the move", date(2027, 1, 1), False)
    r1 = _run(store, clock, [a, b, c], labels={a.workload.identity: {"team": "ml", "tier": "é"}})
    t1 = clock.now
    listed = store.findings(FindingFilter(target="infra"), 10).items
    assert [f.workload.name for f in listed] == ["c", "b", "a"]  # ids in the order first reported
    assert [f.workload.labels for f in listed] == [{}, {}, {"team": "ml", "tier": "é"}]
    changed = finding("a", severity="high", message="a: now high ✓")  # the same fingerprint
    r2 = _run(store, clock, [changed], waived=[(c, waiver)])  # b resolved, c waived
    r3 = _run(store, clock, [b, c])  # b reopened, c no longer waived, a resolved
    t3 = clock.now
    r4 = _run(store, clock, [b], waived=[(a, waiver)])  # a waived (not reopened), c resolved
    t4 = clock.now
    with store.sessions() as s:
        rows = {r.workload: r for r in s.scalars(select(FindingRow))}
        observed = s.execute(
            select(FindingRow.workload, Observation.run_id, Observation.status, Observation.severity)
            .join(Observation, Observation.finding_id == FindingRow.id)
            .order_by(FindingRow.workload, Observation.run_id)
        ).all()

    def columns(row: FindingRow) -> dict[str, object]:
        values = {c.key: getattr(row, c.key) for c in FindingRow.__table__.columns}
        return {
            k: v.replace(tzinfo=v.tzinfo or UTC) if isinstance(v, datetime) else v
            for k, v in values.items()
            if k not in ("id", "target_id")
        }

    assert columns(rows["a"]) == {
        "fingerprint": a.fingerprint,
        "rule": "cross-zone-traffic",
        "severity": "medium",
        "certainty": "likely",
        "namespace": "ml",
        "kind": "PyTorchJob",
        "workload": "a",
        "file": "jobs/a.yaml",
        "line": 3,
        "message": "a: Worker → Master crosses zones",
        "detail": a.to_json(),
        "labels": {},
        "status": "waived",
        "first_seen_at": t1,
        "last_seen_at": t4,
        "resolved_at": t3,  # resolved by run 3; waived since, not reopened
        "first_run_id": r1,
        "last_run_id": r4,
        "estimated_monthly_cost_usd": 12.5,
        "estimated_slowdown_pct": None,
        "waiver_reason": "until the move",
        "waiver_expires": date(2027, 1, 1),
        "acknowledged_by": None,  # only the API writes these (tests/service/test_api_writes.py)
        "acknowledged_at": None,
        "acknowledgement_note": None,
    }
    b_row, c_row = rows["b"], rows["c"]
    assert b_row.message == b.message and b_row.detail == b.to_json()
    assert (b_row.status, b_row.resolved_at, b_row.first_run_id, b_row.last_run_id) == (
        "open",
        None,
        r1,
        r4,
    )
    assert (c_row.status, c_row.waiver_reason, c_row.last_run_id) == ("resolved", None, r3)
    assert c_row.resolved_at is not None and c_row.resolved_at.replace(tzinfo=UTC) == t4
    assert [tuple(o) for o in observed] == [
        ("a", r1, "new", "medium"),
        ("a", r2, "open", "high"),
        ("a", r3, "resolved", "high"),
        ("a", r4, "waived", "medium"),
        ("b", r1, "new", "medium"),
        ("b", r2, "resolved", "medium"),
        ("b", r3, "reopened", "medium"),
        ("b", r4, "open", "medium"),
        ("c", r1, "new", "medium"),
        ("c", r2, "waived", "medium"),
        ("c", r3, "open", "medium"),
        ("c", r4, "resolved", "medium"),
    ]
    detail = store.finding(rows["a"].id)
    assert detail is not None and detail.detail == a.to_json()
    # A list reads the same record, without the extras.
    listed = store.findings(FindingFilter(target="infra"), 10).items
    assert [
        replace(f, history=None, detail=None) for f in map(store.finding, (r.id for r in listed)) if f
    ] == listed
