"""The audit log (issue 36) on SQLite and PostgreSQL: appended with the store's clock, paged newest
first, filtered, and append-only in the database itself (its triggers refuse UPDATE, DELETE and,
on PostgreSQL, TRUNCATE — whatever code holds the connection)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from dbsupport import Clock
from sqlalchemy import delete, text, update
from sqlalchemy.exc import DBAPIError

from auditor.store.repository import BadCursor, Store, TargetSpec
from auditor.store.schema import AuditEntry


def test_entries_are_appended_and_paged_newest_first(store: Store, clock: Clock) -> None:
    first = store.append_audit("cli:ana@laptop", "run.start", "lab", detail="run 1")
    clock.advance(minutes=5)
    store.append_audit("token:0123456789ab", "run.start", "prod", address="10.0.0.7", outcome="refused")
    clock.advance(minutes=5)
    store.append_audit("service", "pull-request.open", "lab ml/job", detail="#4 https://x/4")
    page = store.audit_log(limit=2)
    assert [e.action for e in page.items] == ["pull-request.open", "run.start"]
    assert page.items[1].address == "10.0.0.7" and page.items[1].outcome == "refused"
    assert page.next_cursor is not None
    rest = store.audit_log(limit=2, cursor=page.next_cursor)
    assert [e.id for e in rest.items] == [first] and rest.next_cursor is None
    (only,) = store.audit_log(actor="cli:ana@laptop").items
    assert only.at == clock() - timedelta(minutes=10) and only.at.tzinfo is not None
    assert [e.subject for e in store.audit_log(action="run.start").items] == ["prod", "lab"]
    assert [e.actor for e in store.audit_log(since=clock()).items] == ["service"]
    with pytest.raises(BadCursor):
        store.audit_log(cursor="not-a-cursor")


def test_fields_are_cut_to_their_columns_and_outcomes_checked(store: Store) -> None:
    store.append_audit("a" * 1000, "b" * 100, "c" * 1000, address="d" * 100, detail="e" * 5000)
    (e,) = store.audit_log().items
    assert (len(e.actor), len(e.action), len(e.subject), len(e.address), len(e.detail)) == (
        256,
        64,
        512,
        64,
        2000,
    )
    with pytest.raises(ValueError, match="outcome"):
        store.append_audit("x", "y", "z", outcome="maybe")


def test_the_database_refuses_to_change_or_delete_an_entry(store: Store) -> None:
    entry = store.append_audit("cli:ana@laptop", "run.start", "lab")
    for statement in (
        update(AuditEntry).where(AuditEntry.id == entry).values(actor="someone-else"),
        delete(AuditEntry).where(AuditEntry.id == entry),
    ):
        with pytest.raises(DBAPIError, match="append-only"), store.engine.begin() as connection:
            connection.execute(statement)
    if store.engine.dialect.name == "postgresql":
        with pytest.raises(DBAPIError, match="append-only"), store.engine.begin() as connection:
            connection.execute(text("TRUNCATE audit_log"))
    (kept,) = store.audit_log().items
    assert kept.actor == "cli:ana@laptop"


def test_a_fix_pull_request_is_recorded_once_per_state(store: Store) -> None:
    store.sync_targets([TargetSpec("lab", "directory", "/x")])
    store.record_pull_request("lab", "ml/job", "fix/a", 4, "https://git/4", "open", "f1")
    store.record_pull_request("lab", "ml/job", "fix/a", 4, "https://git/4", "open", "f1")  # unchanged
    store.record_pull_request("lab", "ml/job", "fix/a", 4, "https://git/4", "superseded", "f1")
    assert [e.action for e in store.audit_log().items] == ["pull-request.superseded", "pull-request.open"]
    assert all(e.actor == "service" and e.subject == "lab ml/job" for e in store.audit_log().items)
