"""/readyz tells the truth about a SQLite store: a file deleted, replaced (by another file or a
directory), corrupted in place or made immutable fails readiness, not only a server that is
down. Real files, the real API over HTTP."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from dbsupport import Clock
from httpsupport import call, serving

from auditor.service.api import create_app
from auditor.service.runner import AuditRunner
from auditor.service.scheduler import Scheduler
from auditor.settings.config import load_settings
from auditor.sources.manifests import Tools
from auditor.store import database
from auditor.store.repository import Store


def _deleted(db: Path) -> None:
    db.unlink()


def _replaced_by_a_copy(db: Path) -> None:
    shutil.copy(db, db.with_suffix(".new"))
    db.with_suffix(".new").replace(db)


def _replaced_by_a_directory(db: Path) -> None:
    db.unlink()
    db.mkdir()


def _corrupted_in_place(db: Path) -> None:
    # Same inodes, garbage content (the write-ahead log too: it holds the newest pages).
    for path in (db, db.with_name(db.name + "-wal")):
        if path.exists():
            size = max(path.stat().st_size, 4096)
            with path.open("r+b") as handle:
                handle.write((b"garbage, not a database " * (size // 24 + 1))[:size])


def _immutable(db: Path) -> None:
    # Tests run as root: chmod does not stop root from writing, an immutable file does.
    if (
        shutil.which("chattr") is None
        or subprocess.run(["chattr", "+i", str(db)], check=False).returncode != 0
    ):
        pytest.skip("chattr +i is not available on this file system")


@pytest.fixture
def sqlite_service(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    db = tmp_path / "store.db"
    engine = database.make_engine(f"sqlite:///{db}")
    database.upgrade(engine)
    settings = load_settings(None)
    clock = Clock()
    store = Store(engine, clock)
    runner = AuditRunner(settings, store, Tools(None, None), owner="test:1")
    scheduler = Scheduler(settings, runner, clock)
    scheduler.start()
    try:
        with serving(create_app(store, runner, scheduler, "")) as base:
            yield base, db
    finally:
        scheduler.shutdown()
        engine.dispose()
        subprocess.run(["chattr", "-i", str(db)], capture_output=True, check=False)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (_deleted, "is gone"),
        (_replaced_by_a_copy, "was replaced since the service opened it"),
        (_replaced_by_a_directory, "is not a regular file"),
        (_corrupted_in_place, "corrupt"),
        (_immutable, "cannot be written"),
    ],
    ids=["deleted", "replaced", "directory", "corrupted", "immutable"],
)
def test_readyz_fails_when_the_sqlite_file_is_damaged(
    sqlite_service: tuple[str, Path], damage: Callable[[Path], None], reason: str
) -> None:
    base, db = sqlite_service
    status, body, _ = call(f"{base}/readyz")
    assert status == 200 and body["checks"]["database"] == "ok", body
    damage(db)
    status, body, _ = call(f"{base}/readyz")
    assert status == 503, body
    assert reason in body["checks"]["database"], body
