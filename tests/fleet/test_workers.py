"""Audits on real Celery workers (redis-server of its own, PostgreSQL): a worker killed with
SIGKILL mid-audit leaves its task unacknowledged; the broker gives it to another worker after the
visibility timeout, which takes over the same run once the dead worker's lease expired, and the
run is completed once with its findings stored once. Two scheduler replicas never both fire."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from dbsupport import Clock, pg_schema, pg_url
from fleetsupport import redis_server
from gitsupport import Origin
from seedrepo import seed_files
from sqlalchemy import func, select
from workersupport import barrier_git, kill9, start_worker, stop, wait_for

from auditor.bootstrap import build_store
from auditor.service.leader import FleetScheduler, Leadership
from auditor.service.runner import AuditRunner
from auditor.service.tasks import AuditTask, ToBroker, celery_app
from auditor.settings.config import load_settings
from auditor.sources.manifests import Tools
from auditor.store.schema import Finding, Observation, Run


@pytest.fixture
def pg(tmp_path: Path) -> Iterator[str]:
    with pg_schema() as schema:
        yield pg_url(schema)


def _config(tmp_path: Path, name: str, db: str, broker: str, origin: Origin) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"database: {{url: '{db}'}}\n"
        "service:\n  catch_up: false\n  heartbeat_seconds: 1\n"
        f"  git_cache_dir: '{tmp_path / ('cache-' + name)}'\n"
        "  broker:\n"
        f"    url: '{broker}'\n    url_env: ''\n    visibility_timeout_seconds: 6\n"
        "    lease_seconds: 4\n    busy_retry_seconds: 1\n    metrics_port: 0\n"
        f"targets:\n  - name: infra\n    git: {{url: '{origin.bare}', branch: main}}\n"
    )
    return path


def test_worker_killed_mid_audit_run_completes_once_elsewhere(tmp_path: Path, pg: str) -> None:
    origin = Origin(tmp_path)
    origin.commit(seed_files("before"))
    hold, reached = tmp_path / "hold", tmp_path / "reached"
    hold.touch()
    fake_git = barrier_git(tmp_path / "bin", hold, reached)
    with redis_server(tmp_path) as broker:
        config_a = _config(tmp_path, "a", pg, broker, origin)
        config_b = _config(tmp_path, "b", pg, broker, origin)
        settings = load_settings(config_a)
        store = build_store(settings)
        a = start_worker(config_a, "a", tmp_path / "a.log", fake_git)
        b = None
        try:
            ToBroker(celery_app(settings, {})).audit(
                AuditTask("infra", "audit:infra:2026-12-01T06:00:00Z", "2026-12-01T06:00:00Z", "schedule")
            )
            wait_for(reached.exists, 60, "worker a to reach the fetch barrier")
            with store.sessions() as session:
                [(run_id, owner, status)] = session.execute(select(Run.id, Run.owner, Run.status)).all()
            assert status == "running" and owner.endswith(f":{a.pid}")
            b = start_worker(config_b, "b", tmp_path / "b.log", fake_git)
            kill9(a)  # mid-audit: the message is unacknowledged, the run row says running
            hold.unlink()

            def finished() -> str | None:
                with store.sessions() as session:
                    row = session.get(Run, run_id)
                    session.expire_all()
                    return row.status if row is not None and row.status != "running" else None

            assert wait_for(finished, 90, "the run to be completed by worker b", 0.25) == "succeeded"
            with store.sessions() as session:
                runs = session.execute(select(Run.id, Run.task_key, Run.owner, Run.findings_count)).all()
                assert len(runs) == 1, runs
                [(rid, key, owner, count)] = runs
                assert (rid, key, count) == (run_id, "audit:infra:2026-12-01T06:00:00Z", 1)
                assert owner.endswith(f":{b.pid}")
                assert session.scalar(select(func.count()).select_from(Finding)) == 1
                assert (
                    session.scalar(
                        select(func.count()).select_from(Observation).where(Observation.run_id == run_id)
                    )
                    == 1
                )
            # The same task enqueued again (a duplicate delivery): recorded nothing more.
            ToBroker(celery_app(settings, {})).audit(
                AuditTask("infra", "audit:infra:2026-12-01T06:00:00Z", "2026-12-01T06:00:00Z", "schedule")
            )
            log_b = tmp_path / "b.log"
            wait_for(
                lambda: log_b.read_text().count("already succeeded") >= 1, 60, "the duplicate to be skipped"
            )
            with store.sessions() as session:
                assert session.scalar(select(func.count()).select_from(Run)) == 1
                assert session.scalar(select(func.count()).select_from(Observation)) == 1
        finally:
            stop(a)
            if b is not None:
                stop(b)
            store.engine.dispose()


class Recording:
    """A dispatcher that keeps what it was given (the schedule's output under test)."""

    def __init__(self) -> None:
        self.audits: list[str] = []

    def audit(self, task: AuditTask) -> None:
        self.audits.append(task.task_key)

    def digest(self) -> None:
        self.audits.append("digest")


def test_two_scheduler_replicas_never_both_fire(tmp_path: Path, pg: str) -> None:
    config = tmp_path / "auditor.yaml"
    config.write_text(
        f"database: {{url: '{pg}'}}\nservice: {{catch_up: false}}\n"
        f"targets:\n  - name: lab\n    directory: '{tmp_path}'\n    schedule: '*/5 * * * *'\n"
    )
    settings = load_settings(config)
    clock = Clock()
    replicas = []
    for _ in range(2):
        store = build_store(settings, clock=clock)  # each replica: its own engine and sessions
        runner = AuditRunner(settings, store, Tools(None, None))
        dispatch = Recording()
        replicas.append(
            (FleetScheduler(settings, runner, clock, Leadership(store.engine), dispatch), dispatch, store)
        )
    try:
        for _ in range(5):
            for scheduler, _, _ in replicas:
                scheduler.run_scheduled("lab")
            clock.advance(minutes=5)
        fired = [d.audits for _, d, _ in replicas]
        assert sorted(len(f) for f in fired) == [0, 5], fired
        leader = 0 if fired[0] else 1
        # The leader's session ends (its process died): the standby takes over, and the old
        # leader, whose lock is gone with its session, does not fire again.
        replicas[leader][0].leader._connection.invalidate()
        replicas[leader][0].leader._connection = None
        replicas[leader][2].engine.dispose()
        standby = replicas[1 - leader][0]
        # PostgreSQL releases the lock when the dead session's backend has exited: the standby
        # gets it on one of its next tries.
        wait_for(standby.leader.is_leader, 20, "the standby to take the lock")
        standby.run_scheduled("lab")
        assert len(replicas[1 - leader][1].audits) == 1
        replicas[leader][0].run_scheduled("lab")
        assert len(replicas[leader][1].audits) == 5
        assert len(set(replicas[0][1].audits + replicas[1][1].audits)) == 6  # one key per slot
    finally:
        for scheduler, _, store in replicas:
            scheduler.leader.resign()
            store.engine.dispose()
