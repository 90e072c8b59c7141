"""Schedules: slots from cron triggers, misfire and coalescing settings, and one run per slot
when two services share a PostgreSQL database."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from apscheduler.triggers.cron import CronTrigger
from dbsupport import Clock, engine_for
from seedrepo import seed_files
from sqlalchemy import create_engine

from auditor.service.runner import AuditRunner
from auditor.service.scheduler import Scheduler, slot_of, slot_text
from auditor.settings.config import load_settings
from auditor.sources.manifests import Tools
from auditor.store.repository import Store, TargetSpec


def test_slot_is_the_latest_fire_time_within_the_grace() -> None:
    daily = CronTrigger.from_crontab("0 6 * * *", timezone="UTC")
    assert slot_of(daily, datetime(2026, 12, 2, 6, 0, tzinfo=UTC), 3600) == datetime(
        2026, 12, 2, 6, 0, tzinfo=UTC
    )
    # Fired late (the service was restarting): still the 06:00 slot.
    assert slot_of(daily, datetime(2026, 12, 2, 6, 40, 12, tzinfo=UTC), 3600) == datetime(
        2026, 12, 2, 6, 0, tzinfo=UTC
    )
    assert slot_of(daily, datetime(2026, 12, 2, 8, 0, tzinfo=UTC), 3600) is None  # past the grace
    every5 = CronTrigger.from_crontab("*/5 * * * *", timezone="UTC")
    assert (
        slot_text(slot_of(every5, datetime(2026, 12, 2, 6, 7, 59, tzinfo=UTC), 3600))
        == "2026-12-02T06:05:00Z"
    )  # type: ignore[arg-type]
    berlin = CronTrigger.from_crontab("0 6 * * *", timezone="Europe/Berlin")
    assert (
        slot_text(slot_of(berlin, datetime(2026, 12, 2, 5, 30, tzinfo=UTC), 3600)) == "2026-12-02T05:00:00Z"
    )  # type: ignore[arg-type]


def _settings(tmp_path: Path) -> tuple[Path, object]:
    repo = tmp_path / "repo"
    for name, src in seed_files().items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(Path(src).read_bytes())
    config = tmp_path / "auditor.yaml"
    config.write_text(
        "service: {misfire_grace_seconds: 7200, timezone: UTC}\n"
        f"targets:\n  - name: lab\n    schedule: '30 5 * * 1-5'\n    directory: '{repo}'\n"
    )
    return repo, load_settings(config)


def test_jobs_coalesce_and_tolerate_misfires(tmp_path: Path) -> None:
    _, settings = _settings(tmp_path)
    with engine_for("sqlite", tmp_path) as engine:
        clock = Clock()
        runner = AuditRunner(settings, Store(engine, clock), Tools(None, None))  # type: ignore[arg-type]
        scheduler = Scheduler(settings, runner, clock)  # type: ignore[arg-type]
        job = scheduler.scheduler.get_job("target:lab")
        assert job.coalesce is True and job.max_instances == 1 and job.misfire_grace_time == 7200
        assert str(job.trigger) == "cron[month='*', day='*', day_of_week='1-5', hour='5', minute='30']"


def test_two_services_on_one_postgresql_run_a_slot_once(tmp_path: Path) -> None:
    _, settings = _settings(tmp_path)
    with engine_for("postgresql", tmp_path) as engine_a:
        engine_b = create_engine(engine_a.url)  # same database, another pool (another service)
        clock = Clock()
        stores = [Store(engine_a, clock), Store(engine_b, clock)]
        stores[0].sync_targets([TargetSpec("lab", "directory", "x")])
        services = [
            Scheduler(settings, AuditRunner(settings, s, Tools(None, None), owner=f"host-{i}:1"), clock)  # type: ignore[arg-type]
            for i, s in enumerate(stores)
        ]
        fire = datetime(2026, 12, 2, 5, 30, 3, tzinfo=UTC)
        barrier = threading.Barrier(2)

        def go(service: Scheduler) -> None:
            barrier.wait()
            service.run_scheduled("lab", fire)

        threads = [threading.Thread(target=go, args=(s,)) for s in services]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # And once more, late, from the first service: still the same slot.
        services[0].run_scheduled("lab", datetime(2026, 12, 2, 6, 10, tzinfo=UTC))
        runs = stores[0].runs("lab", 10).items
        assert [(r.slot, r.status) for r in runs] == [("2026-12-02T05:30:00Z", "succeeded")]
        engine_b.dispose()


def test_a_slot_missed_while_down_is_caught_up_once_on_start(tmp_path: Path) -> None:
    _, settings = _settings(tmp_path)  # weekdays 05:30, grace 2 h
    with engine_for("sqlite", tmp_path) as engine:
        restarted_at = datetime(2026, 12, 2, 6, 45, tzinfo=UTC)  # a Wednesday, 75 min late
        store = Store(engine, Clock(restarted_at))
        store.sync_targets([TargetSpec("lab", "directory", "x")])
        runner = AuditRunner(settings, store, Tools(None, None))  # type: ignore[arg-type]
        for _ in range(2):  # restarted twice: the slot still runs once
            scheduler = Scheduler(settings, runner, lambda: restarted_at)  # type: ignore[arg-type]
            scheduler.start()
            deadline = time.monotonic() + 30
            while (
                scheduler.scheduler.get_job("catch-up:lab") is not None
                or runner._busy
                or not [r for r in store.runs("lab", 10).items if r.status == "succeeded"]
            ):
                assert time.monotonic() < deadline
                time.sleep(0.05)
            time.sleep(0.2)  # a second (wrong) run would have been claimed by now
            scheduler.shutdown()
        assert [(r.slot, r.status) for r in store.runs("lab", 10).items] == [
            ("2026-12-02T05:30:00Z", "succeeded")
        ]
        # Past the grace nothing is caught up.
        late = Scheduler(settings, runner, lambda: datetime(2026, 12, 3, 8, 0, tzinfo=UTC))  # type: ignore[arg-type]
        late.start()
        assert late.scheduler.get_job("catch-up:lab") is None
        late.shutdown()


def _lab_with(tmp_path: Path, service: str) -> object:
    repo = tmp_path / "repo"
    for name, src in seed_files().items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(Path(src).read_bytes())
    config = tmp_path / "auditor.yaml"
    config.write_text(
        f"service: {service}\ntargets:\n  - name: lab\n    schedule: '30 5 * * 1-5'\n    directory: '{repo}'\n"
    )
    return load_settings(config)


def _settle(scheduler: Scheduler, runner: AuditRunner) -> None:
    deadline = time.monotonic() + 30
    while runner._busy or any(
        j.id.startswith(("catch-up:", "manual:")) for j in scheduler.scheduler.get_jobs()
    ):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_run_on_start_audits_every_target_once_at_any_hour(tmp_path: Path) -> None:
    settings = _lab_with(tmp_path, "{run_on_start: true, misfire_grace_seconds: 7200}")
    with engine_for("sqlite", tmp_path) as engine:
        # Within the grace of the 05:30 slot: the start-up run stands for it (no second, catch-up run).
        for now in (datetime(2026, 12, 2, 6, 0, tzinfo=UTC), datetime(2026, 12, 5, 23, 59, 59, tzinfo=UTC)):
            store = Store(engine, Clock(now))
            store.sync_targets([TargetSpec("lab", "directory", "x")])
            runner = AuditRunner(settings, store, Tools(None, None))  # type: ignore[arg-type]
            scheduler = Scheduler(settings, runner, store.clock)  # type: ignore[arg-type]
            scheduler.start()
            _settle(scheduler, runner)
            scheduler.shutdown()
        runs = store.runs("lab", 10).items
        assert [(r.trigger, r.slot, r.status) for r in runs] == [("startup", None, "succeeded")] * 2


def test_catch_up_can_be_turned_off(tmp_path: Path) -> None:
    settings = _lab_with(tmp_path, "{catch_up: false, misfire_grace_seconds: 7200}")
    with engine_for("sqlite", tmp_path) as engine:
        store = Store(engine, Clock(datetime(2026, 12, 2, 6, 45, tzinfo=UTC)))  # within the grace
        store.sync_targets([TargetSpec("lab", "directory", "x")])
        runner = AuditRunner(settings, store, Tools(None, None))  # type: ignore[arg-type]
        scheduler = Scheduler(settings, runner, store.clock)  # type: ignore[arg-type]
        scheduler.start()
        assert scheduler.scheduler.get_job("catch-up:lab") is None
        scheduler.shutdown()
        assert store.runs("lab", 10).items == []


def test_a_cron_job_fired_on_wall_time_outside_the_clocks_slot_is_skipped(tmp_path: Path) -> None:
    """APScheduler fires on the wall clock; the slot comes from the injected one. A test whose clock is
    pinned away from the slot never sees a run it did not ask for, whatever the real hour."""
    _, settings = _settings(tmp_path)  # weekdays 05:30, grace 2 h
    with engine_for("sqlite", tmp_path) as engine:
        store = Store(engine, Clock(datetime(2026, 12, 2, 12, 0, tzinfo=UTC)))
        store.sync_targets([TargetSpec("lab", "directory", "x")])
        runner = AuditRunner(settings, store, Tools(None, None))  # type: ignore[arg-type]
        Scheduler(settings, runner, store.clock).run_scheduled("lab")  # type: ignore[arg-type]
        assert store.runs("lab", 10).items == []
