"""The admission webhook's answers in the store, on SQLite and PostgreSQL: stored once per
(cluster, request uid) also when replicas race, paged newest first, summed with dry runs apart."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest
from admissionsupport import decision
from dbsupport import Clock
from sqlalchemy import func, select

from auditor.store.records import AdmissionCount
from auditor.store.repository import BadCursor, Store, encode_admission_cursor
from auditor.store.schema import AdmissionDecision


def _rows(store: Store) -> int:
    with store.sessions() as session:
        return int(session.scalar(select(func.count()).select_from(AdmissionDecision)) or 0)


def test_a_retried_request_is_stored_once(store: Store, clock: Clock) -> None:
    first = decision("uid-1", clock())
    assert store.record_admission(first) is True
    # The API server retries the same request (same uid) after a timeout: a second answer, later.
    assert store.record_admission(replace(first, at=clock() + timedelta(seconds=10), latency_ms=3.0)) is False
    assert _rows(store) == 1
    (stored,) = store.admission_decisions().items
    assert stored.at == clock() and stored.latency_ms == 12.5 and stored.at.tzinfo is not None
    # The same uid from another cluster is another request.
    assert store.record_admission(replace(first, cluster="prod-us")) is True
    assert _rows(store) == 2


def test_replicas_racing_on_one_request_store_it_once(store: Store, clock: Clock) -> None:
    answer = decision("uid-race", clock())
    results: list[bool] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def insert() -> None:
        start.wait()
        try:
            results.append(store.record_admission(answer))
        except BaseException as exc:  # the test reports whatever escaped
            errors.append(exc)

    threads = [threading.Thread(target=insert) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == [] and sorted(results) == [False] * 7 + [True]
    assert _rows(store) == 1


def test_every_field_is_kept_and_times_are_utc(store: Store, clock: Clock) -> None:
    plus_two = clock().astimezone(timezone(timedelta(hours=2)))
    answer = decision(
        "uid-full",
        plus_two,
        "warned",
        namespace="",
        user="system:serviceaccount:ci:deployer" + "x" * 400,
        rules=("cross-zone-blocked", "cross-zone-traffic"),
        groups=("ml/a", "ml/b"),
        messages=("one", "two"),
        reason="",
        dry_run=True,
    )
    store.record_admission(answer)
    (stored,) = store.admission_decisions().items
    assert stored.at == clock() and stored.at.utcoffset() == timedelta(0)
    assert len(stored.user) == 256 and stored.user.startswith("system:serviceaccount:ci:deployer")
    assert stored.rules == ("cross-zone-blocked", "cross-zone-traffic") and stored.groups == ("ml/a", "ml/b")
    assert stored.messages == ("one", "two") and stored.fingerprints == answer.fingerprints
    assert (stored.namespace, stored.dry_run, stored.mode, stored.outcome) == ("", True, "warn", "warned")
    # `since` in another offset means the same instant.
    assert store.admission_decisions(since=plus_two).items == [stored]
    assert store.admission_decisions(since=plus_two + timedelta(microseconds=1)).items == []


def test_pages_newest_first_with_filters(store: Store, clock: Clock) -> None:
    base = clock()
    for i in range(7):
        store.record_admission(decision(f"d{i}", base + timedelta(minutes=i), "denied"))
    # Two answers in the same microsecond: the cursor still separates them (by id).
    store.record_admission(decision("same-a", base + timedelta(minutes=3), "warned"))
    store.record_admission(decision("same-b", base + timedelta(minutes=3), "warned", cluster="lab"))
    store.record_admission(decision("old", base - timedelta(days=2), "allowed"))
    seen: list[str] = []
    cursor = None
    while True:
        page = store.admission_decisions(limit=4, cursor=cursor)
        seen.extend(d.uid for d in page.items)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert len(seen) == len(set(seen)) == 10
    assert seen[:4] == ["d6", "d5", "d4", "same-b"] and seen[-1] == "old"
    assert seen.index("same-b") < seen.index("same-a") < seen.index("d3")
    denied = store.admission_decisions(outcome="denied", limit=5)
    assert [d.uid for d in denied.items] == ["d6", "d5", "d4", "d3", "d2"] and denied.next_cursor
    rest = store.admission_decisions(outcome="denied", limit=5, cursor=denied.next_cursor)
    assert [d.uid for d in rest.items] == ["d1", "d0"] and rest.next_cursor is None
    assert [d.uid for d in store.admission_decisions(cluster="lab").items] == ["same-b"]
    recent = store.admission_decisions(since=base + timedelta(minutes=5))
    assert [d.uid for d in recent.items] == ["d6", "d5"]
    assert store.admission_decisions(cluster="nowhere").items == []


@pytest.mark.parametrize(
    "cursor",
    [
        "not-a-cursor",
        "",
        "djE6MTIz",
        encode_admission_cursor(datetime(2026, 1, 1, tzinfo=UTC), 1)[:-3] + "!!!",
    ],
)
def test_a_foreign_cursor_is_refused(store: Store, cursor: str) -> None:
    with pytest.raises(BadCursor):
        store.admission_decisions(cursor=cursor)


def test_the_summary_counts_dry_runs_apart(store: Store, clock: Clock) -> None:
    now = clock()
    since = now - timedelta(hours=24)
    answers = [
        decision("a1", now, "allowed"),
        decision("a2", now, "allowed", namespace="web"),
        decision("w1", now, "warned", rules=("cross-zone-traffic",)),
        decision("w2", now, "warned", rules=("cross-zone-traffic", "cross-zone-blocked")),
        decision("d1", now - timedelta(hours=1), "denied"),
        decision("d2", now, "denied", cluster="lab", operation="UPDATE"),
        # `kubectl apply --dry-run=server`: would have been denied, changed nothing.
        decision("dry1", now, "denied", dry_run=True),
        decision("dry2", now, "warned", dry_run=True, rules=("cross-zone-traffic",)),
        decision("fo", now, "failed-open", reason="model not synced"),
        decision("old", now - timedelta(hours=25), "denied"),  # before the window
    ]
    for a in answers:
        store.record_admission(a)
    summary = store.admission_summary(since)
    assert summary.since == since
    assert summary.outcomes == {"allowed": 2, "denied": 2, "failed-open": 1, "warned": 2}
    assert summary.dry_run == {"denied": 1, "warned": 1}
    assert summary.by_rule == (
        ("denied", "cross-zone-blocked", 2),
        ("warned", "cross-zone-traffic", 2),
        ("warned", "cross-zone-blocked", 1),
    )
    assert summary.dry_run_by_rule == (
        ("denied", "cross-zone-blocked", 1),
        ("warned", "cross-zone-traffic", 1),
    )
    assert [d.uid for d in summary.denied] == ["d2", "d1"]  # newest first, no dry run
    assert AdmissionCount("prod-eu", "ml-research", "denied", True, 1) in summary.by_namespace
    assert AdmissionCount("prod-eu", "web", "allowed", False, 1) in summary.by_namespace
    assert sum(c.answers for c in summary.by_namespace) == 9
    lab = store.admission_summary(since, cluster="lab")
    assert lab.outcomes == {"denied": 1} and lab.dry_run == {} and [d.uid for d in lab.denied] == ["d2"]
    assert store.admission_summary(since, denied_limit=1).denied[0].uid == "d2"
    empty = store.admission_summary(now + timedelta(seconds=1))
    assert (empty.outcomes, empty.dry_run, empty.by_rule, empty.denied) == ({}, {}, (), ())
