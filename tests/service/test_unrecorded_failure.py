"""A run whose failure cannot be written (the SQLite file is away) ends `failed` with the error
once the database is back, even when another process meanwhile marked it `interrupted` (its
heartbeat stopped): the process that ran it knows why it ended. Real SQLite files."""

from __future__ import annotations

from pathlib import Path

from dbsupport import Clock

from auditor.service.runner import AuditRunner
from auditor.settings.config import load_settings
from auditor.sources.manifests import Tools
from auditor.store import database
from auditor.store.repository import Store, TargetSpec


def test_an_unwritable_failure_is_recorded_failed_not_interrupted(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    url = f"sqlite:///{db}"
    engine = database.make_engine(url)
    database.upgrade(engine)
    config = tmp_path / "auditor.yaml"
    config.write_text(f"targets:\n  - name: lab\n    directory: '{tmp_path / 'absent'}'\n")
    settings = load_settings(config)
    clock = Clock()
    store = Store(engine, clock)
    store.sync_targets(TargetSpec(t.name, t.kind, t.location) for t in settings.targets)
    runner = AuditRunner(settings, store, Tools(None, None), owner="host-a:1")
    run_id = runner.start("lab", None, "cli")
    # The database goes away under the run: the file is moved aside and a directory stands in
    # its place, so writing the failure fails with an I/O error.
    engine.dispose()
    db.rename(tmp_path / "aside.db")
    db.mkdir()
    result = runner.execute(run_id, "lab")
    assert result.status == "failed" and "does not exist" in (result.error or "")
    # Back: another replica sees a run without heartbeat and marks it interrupted first.
    db.rmdir()
    (tmp_path / "aside.db").rename(db)
    clock.advance(seconds=settings.service.stale_after_seconds + 60)
    other_engine = database.make_engine(url)
    other = AuditRunner(settings, Store(other_engine, clock), Tools(None, None), owner="host-b:1")
    assert other.recover() == [run_id]
    runner.recover()
    run = store.run(run_id)
    assert run is not None and run.status == "failed", run
    assert "does not exist" in run.error
    other_engine.dispose()
    engine.dispose()
