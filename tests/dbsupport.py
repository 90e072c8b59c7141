"""Databases for store tests: every test runs on SQLite (a file in tmp_path) and on PostgreSQL
(127.0.0.1:5432, database `test`, one fresh schema per test, dropped afterwards)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import Engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from world import postgres

from auditor.store import database

PG_URL = os.environ.get("AUDITOR_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@contextmanager
def pg_schema() -> Iterator[str]:
    """A fresh PostgreSQL schema at PG_URL (benchmarks/world/postgres.py); yields its name."""
    with postgres.pg_schema(PG_URL) as name:
        yield name


def pg_url(schema: str) -> str:
    """PG_URL whose connections use `schema`."""
    return postgres.pg_url(PG_URL, schema)


@contextmanager
def engine_for(backend: str, tmp_path: Path, migrate: bool = True) -> Iterator[Engine]:
    if backend == "sqlite":
        engine = database.make_engine(f"sqlite:///{tmp_path / 'store.db'}")
        if migrate:
            database.upgrade(engine)
        try:
            yield engine
        finally:
            engine.dispose()
        return
    with pg_schema() as schema:
        engine = database.make_engine(pg_url(schema))
        if migrate:
            database.upgrade(engine)
        try:
            yield engine
        finally:
            engine.dispose()


DEFAULT_NOW = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)


def pinned_now() -> datetime:
    """Where test clocks start: `AUDITOR_TEST_NOW` (ISO time, UTC unless it says otherwise) when set —
    tests/test_any_hour.py runs the time-sensitive suites at several such instants — else 06:00 UTC
    on 1 December 2026, the default slot of the bundled schedule."""
    text = os.environ.get("AUDITOR_TEST_NOW", "")
    if not text:
        return DEFAULT_NOW
    value = datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


class Clock:
    """A settable clock for the store (the core reads no clock; the store is told the time)."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start if start is not None else pinned_now()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now
