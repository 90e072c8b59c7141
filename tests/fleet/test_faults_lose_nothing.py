"""What the soak (benchmarks/soak.py) found or guards, one piece at a time: a delivery is remembered
only once its work is queued, so a broker or database away, or a process killed between the two
steps, never turns GitHub's redelivery into a refused replay; a task waits out a database that is
away (never a failed run, never acknowledged as done); the leader sends again, on its next recover
tick, a scheduled slot or a digest it could not enqueue, and only once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from dbsupport import Clock, engine_for
from fleetsupport import SECRET, push_event
from seedrepo import seed_files
from sqlalchemy.exc import IntegrityError, OperationalError

from auditor.service.hooks import GitHubHook
from auditor.service.leader import FleetScheduler
from auditor.service.runner import AuditRunner
from auditor.service.tasks import AuditTask, DatabaseAway, patiently
from auditor.service.webhooks import signature
from auditor.settings.config import load_settings
from auditor.settings.service import GitHubAppSettings
from auditor.sources.manifests import Tools
from auditor.store import database
from auditor.store.fleet import FleetStore
from auditor.store.repository import Store, TargetSpec


def _away() -> OperationalError:
    return OperationalError("SELECT 1", {}, ConnectionRefusedError("connection refused"))


class Dispatch:
    """Records what it was given; fails the first `fail` calls as a broker that is away would."""

    def __init__(self, fail: int = 0) -> None:
        self.fail, self.audits, self.digests = fail, [], 0

    def audit(self, task: AuditTask) -> None:
        if self.fail:
            self.fail -= 1
            raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        self.audits.append(task)

    def digest(self) -> None:
        if self.fail:
            self.fail -= 1
            raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        self.digests += 1


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[FleetStore, Clock]]:
    clock = Clock()
    with engine_for("sqlite", tmp_path) as engine:
        yield FleetStore(engine, clock), clock


def _hook(fleet: FleetStore, clock: Clock, dispatch: Any, tmp_path: Path) -> GitHubHook:
    key = tmp_path / "app.pem"
    key.write_text("unused")
    return GitHubHook(GitHubAppSettings(4242, str(key)), SECRET, fleet, dispatch, clock)


def _push(hook: GitHubHook, clock: Clock, delivery: str, after: str = "a" * 40) -> tuple[int, dict[str, Any]]:
    body = json.dumps(push_event(after, clock())).encode()
    return hook.handle("push", delivery, signature(SECRET, body), body)


def test_a_delivery_that_could_not_be_queued_is_accepted_when_redelivered(
    fleet: tuple[FleetStore, Clock], tmp_path: Path
) -> None:
    store, clock = fleet
    dispatch = Dispatch(fail=1)
    hook = _hook(store, clock, dispatch, tmp_path)
    status, body = _push(hook, clock, "d-1")
    assert status == 503 and "redeliver" in body["error"]
    assert not store.delivery_seen("d-1")
    status, _ = _push(hook, clock, "d-1")  # GitHub's redelivery: same id, same body
    assert status == 202 and [t.task_key for t in dispatch.audits] == ["push:acme/infra:" + "a" * 40]
    assert _push(hook, clock, "d-1")[0] == 409  # now a replay


def test_a_kill_between_queueing_and_remembering_loses_nothing(
    fleet: tuple[FleetStore, Clock], tmp_path: Path
) -> None:
    """The work was queued, then the database refused the id (or the process died): the answer
    is 503, the redelivery is accepted and queued again, and the task key makes both one run."""
    store, clock = fleet
    dispatch = Dispatch()
    hook = _hook(store, clock, dispatch, tmp_path)
    real = store.remember_delivery
    store.remember_delivery = lambda *a: (_ for _ in ()).throw(_away())  # type: ignore[method-assign]
    assert _push(hook, clock, "d-2")[0] == 503
    store.remember_delivery = real  # type: ignore[method-assign]
    assert _push(hook, clock, "d-2")[0] == 202
    assert len({t.task_key for t in dispatch.audits}) == 1 and len(dispatch.audits) == 2


def test_a_database_away_answers_503_not_a_traceback(fleet: tuple[FleetStore, Clock], tmp_path: Path) -> None:
    store, clock = fleet
    hook = _hook(store, clock, Dispatch(), tmp_path)
    store.delivery_seen = lambda _d: (_ for _ in ()).throw(_away())  # type: ignore[method-assign]
    status, body = _push(hook, clock, "d-3")
    assert status == 503 and body == {"error": "the work could not be queued; redeliver later"}


def test_transient_errors_are_told_from_wrong_statements() -> None:
    assert database.is_transient(_away())
    assert not database.is_transient(IntegrityError("INSERT", {}, ValueError("duplicate key")))
    assert not database.is_transient(ValueError("a bug"))
    wrapped = RuntimeError("storing failed")
    wrapped.__cause__ = _away()
    assert database.is_transient(wrapped)
    # Raised by the driver itself, past SQLAlchemy: the store's bulk writes use psycopg's cursor
    # (the soak's full disk found this: psycopg.errors.DiskFull, an OperationalError).
    import sqlite3

    import psycopg

    assert database.is_transient(psycopg.errors.DiskFull('could not extend file "base/5/2658"'))
    assert database.is_transient(psycopg.errors.AdminShutdown("terminating connection"))
    assert database.is_transient(sqlite3.OperationalError("database is locked"))
    assert not database.is_transient(psycopg.errors.UniqueViolation("duplicate key"))
    assert not database.is_transient(sqlite3.IntegrityError("UNIQUE constraint failed"))


def test_patiently_waits_out_the_database_then_gives_the_task_back() -> None:
    now = [0.0]
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        now[0] += seconds

    calls = [0]

    def flaky() -> str:
        calls[0] += 1
        if calls[0] < 4:
            raise _away()
        return "done"

    assert patiently(flaky, 60, "t", sleep, lambda: now[0]) == "done"
    assert pauses == [1.0, 2.0, 4.0]
    # Away for good: the pauses grow to 15 s, then the task goes back on the queue.
    pauses.clear()
    with pytest.raises(DatabaseAway, match="stayed away"):
        patiently(lambda: (_ for _ in ()).throw(_away()), 60, "t", sleep, lambda: now[0])
    assert pauses == [1.0, 2.0, 4.0, 8.0, 15.0, 15.0, 15.0] and sum(pauses) == 60
    # Anything else is not waited for.
    with pytest.raises(ValueError):
        patiently(lambda: (_ for _ in ()).throw(ValueError("a bug")), 60, "t", sleep, lambda: now[0])


def test_a_worker_raises_a_database_away_instead_of_recording_a_failed_run(tmp_path: Path) -> None:
    for name, source in seed_files("before").items():
        (tmp_path / "repo" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "repo" / name).write_text(Path(source).read_text())
    config = tmp_path / "auditor.yaml"
    config.write_text(
        f"targets:\n  - name: lab\n    directory: '{tmp_path / 'repo'}'\n"
        "    paths: [training, policies]\n    nodes: [nodes/nodes.yaml]\n"
    )
    settings = load_settings(config)
    with engine_for("sqlite", tmp_path) as engine:
        store = Store(engine, Clock())
        store.sync_targets(TargetSpec(t.name, t.kind, t.location) for t in settings.targets)
        runner = AuditRunner(settings, store, Tools(None, None))
        run_id = runner.start("lab", None, "api")
        store.complete_run = lambda *a: (_ for _ in ()).throw(_away())  # type: ignore[method-assign]
        runner.raise_transient = True
        with pytest.raises(OperationalError):
            runner.execute(run_id, "lab")
        runner.raise_transient = False
        run_id = runner.start("lab", None, "api")
        assert runner.execute(run_id, "lab").status == "failed"  # the embedded service records it


def test_the_leader_sends_a_slot_it_could_not_enqueue_on_the_next_tick_once(tmp_path: Path) -> None:
    config = tmp_path / "auditor.yaml"
    config.write_text(
        f"service: {{catch_up: false}}\ntargets:\n  - name: lab\n    directory: '{tmp_path}'\n"
        "    schedule: '*/5 * * * *'\n"
        "digest:\n  smtp: {host: 127.0.0.1}\n  schedule: '0 6 * * *'\n"
        "  teams:\n    - {name: ml, to: [ml@example.com]}\n"
    )
    settings = load_settings(config)
    clock = Clock(datetime(2026, 12, 1, 6, 0, tzinfo=UTC))  # the 06:00 slots of both
    with engine_for("sqlite", tmp_path) as engine:
        store = Store(engine, clock)
        runner = AuditRunner(settings, store, Tools(None, None))
        dispatch = Dispatch(fail=2)

        class Always:
            def is_leader(self) -> bool:
                return True

        scheduler = FleetScheduler(settings, runner, clock, Always(), dispatch)  # type: ignore[arg-type]
        scheduler.run_scheduled("lab")  # the broker is away
        scheduler.send_digests()
        assert dispatch.audits == [] and dispatch.digests == 0
        scheduler.recover()  # the next tick: both sent
        scheduler.recover()  # and not again
        assert [t.slot for t in dispatch.audits] == [scheduler.sent["lab"]] and dispatch.digests == 1
        clock.advance(minutes=5)
        scheduler.recover()
        assert len(dispatch.audits) == 2 and len({t.task_key for t in dispatch.audits}) == 2
