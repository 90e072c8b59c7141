"""Cron schedules for the targets (APScheduler 3.x).

Each target is one job on its cron trigger, with `coalesce` (runs missed while the scheduler was
busy collapse into one), `misfire_grace_time` (a run that fires late still runs within the grace)
and `max_instances=1`. A slot that fired while no service was up at all is caught up on start,
within the same grace (`catch_up`). Each run belongs to a *slot*: the scheduled time, computed from
the trigger, the same in every process; the store's unique (target, slot) means that two `serve`
processes on one database never run a slot twice. A second job marks the runs of dead processes
`interrupted`. With `run_on_start`, every target is also audited once when the service starts.

Time comes from the injected clock: catch-up and slots are worked out from it, never from the wall
clock, so a cron job that APScheduler fires on real time while the clock says otherwise finds no
slot and is skipped (tests pin the clock; nothing depends on the hour they run).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from auditor.clock import Clock
from auditor.service.runner import AuditRunner, TargetBusy
from auditor.settings.config import Settings

log = logging.getLogger("auditor.scheduler")


def slot_of(trigger: Any, now: datetime, grace_seconds: int) -> datetime | None:
    """The latest fire time of `trigger` at or before `now` (within the grace window)."""
    start = now - timedelta(seconds=grace_seconds)
    fire = trigger.get_next_fire_time(None, start)
    last: datetime | None = None
    while fire is not None and fire <= now:
        last = fire
        fire = trigger.get_next_fire_time(fire, fire + timedelta(microseconds=1))
    return last


def slot_text(slot: datetime) -> str:
    return slot.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Scheduler:
    def __init__(self, settings: Settings, runner: AuditRunner, clock: Clock) -> None:
        self.settings, self.runner, self.clock = settings, runner, clock
        service = settings.service
        self.scheduler = BackgroundScheduler(
            timezone=service.timezone,
            job_defaults={
                "coalesce": True,
                "max_instances": 1,
                "misfire_grace_time": service.misfire_grace_seconds,
            },
        )
        self.triggers: dict[str, CronTrigger] = {}
        self.crons: dict[str, str] = {}  # the crontab line in force per target
        for target in settings.targets:
            trigger = CronTrigger.from_crontab(target.schedule, timezone=service.timezone)
            self.triggers[target.name] = trigger
            self.crons[target.name] = target.schedule
            self.scheduler.add_job(
                self.run_scheduled,
                trigger,
                args=[target.name],
                id=f"target:{target.name}",
                name=f"audit {target.name}",
                coalesce=True,
                max_instances=1,
                misfire_grace_time=service.misfire_grace_seconds,
            )
        self.digest_trigger: CronTrigger | None = None
        if settings.digest is not None and settings.digest.teams:
            self.digest_trigger = CronTrigger.from_crontab(
                settings.digest.schedule, timezone=service.timezone
            )
            self.scheduler.add_job(
                self.send_digests,
                self.digest_trigger,
                id="digest",
                name="daily digest",
                coalesce=True,
                max_instances=1,
                misfire_grace_time=service.misfire_grace_seconds,
            )
        self.scheduler.add_job(
            self.recover,
            IntervalTrigger(seconds=max(30, service.heartbeat_seconds * 2)),
            id="recover",
            name="mark interrupted runs",
        )

    def start(self) -> None:
        self.refresh_schedules()
        self.recover()
        self.scheduler.start()
        service = self.settings.service
        if service.run_on_start:
            self.run_all_now()
        elif service.catch_up:
            self.catch_up()

    def run_all_now(self) -> None:
        """Audit every target once, now (`service.run_on_start`): each is claimed as a run of its own
        (trigger `startup`) and executed on the scheduler's pool."""
        for name in self.triggers:
            try:
                run_id = self.runner.start(name, None, "startup")
            except TargetBusy:
                continue  # already being audited here
            except Exception as exc:  # the database may be away: the schedule tries again
                log.error("target %s: the start-up run could not start: %s", name, exc)
                continue
            self.submit(run_id, name)

    def catch_up(self) -> None:
        """Run now the slots that fired while no service was up, if still within the grace.

        APScheduler's misfire handling needs a persistent job store, and its 3.x stores are not
        safe for two processes; the slot table is. A slot that some process already ran is
        skipped by the claim.
        """
        now = self.clock()
        for name, trigger in self.triggers.items():
            if slot_of(trigger, now, self.settings.service.misfire_grace_seconds) is not None:
                self.scheduler.add_job(
                    self.run_scheduled, args=[name, now], id=f"catch-up:{name}", name=f"catch up {name}"
                )

    def shutdown(self) -> None:
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)

    @property
    def running(self) -> bool:
        return bool(self.scheduler.running)

    def send_digests(self) -> None:
        from auditor.service import digests

        try:
            queued, sent, errors = digests.run(self.settings, self.runner.store, self.runner.environ)
            log.info("digest: %d queued, %d sent", queued, sent)
            for e in errors:
                log.error("digest: %s (kept in the outbox)", e)
        except Exception as exc:
            log.error("digest failed: %s: %s", type(exc).__name__, exc)

    def refresh_schedules(self) -> None:
        """Put in force the schedules set through the API (PUT /api/v1/targets/{name}/schedule),
        and the config's where none is set: read from the store at start, on every recover tick
        (so every replica follows a change made through another) and right after a change."""
        try:
            overrides = self.runner.store.schedule_overrides()
        except Exception as exc:  # the database may be away; the next tick reads them again
            log.warning("could not read the schedules set through the API: %s", exc)
            return
        zone = self.settings.service.timezone
        for target in self.settings.targets:
            cron = overrides.get(target.name, target.schedule)
            if self.crons.get(target.name) == cron:
                continue
            try:
                trigger = CronTrigger.from_crontab(cron, timezone=zone)
            except ValueError as exc:  # checked by the API; a row written otherwise is not trusted
                log.error(
                    "target %s: schedule %r is not a crontab line (%s); kept %r",
                    target.name,
                    cron,
                    exc,
                    self.crons.get(target.name),
                )
                continue
            self.triggers[target.name], self.crons[target.name] = trigger, cron
            job = self.scheduler.get_job(f"target:{target.name}")
            if job is not None:
                job.reschedule(trigger)
            log.info("target %s: schedule now %r", target.name, cron)

    def recover(self) -> None:
        self.refresh_schedules()
        try:
            ids = self.runner.recover()
            if ids:
                log.warning("marked runs %s interrupted (their process stopped)", ids)
        except Exception as exc:  # the database may be away; try again next time
            log.warning("could not check for interrupted runs: %s", exc)

    def run_scheduled(self, target: str, now: datetime | None = None) -> None:
        now = now or self.clock()
        slot = slot_of(self.triggers[target], now, self.settings.service.misfire_grace_seconds)
        if slot is None:
            log.warning("target %s fired outside any slot at %s; skipped", target, now)
            return
        try:
            result = self.runner.run(target, slot_text(slot), "schedule")
        except Exception as exc:  # claiming failed (database away): the next slot tries again
            log.error("target %s slot %s could not start: %s", target, slot_text(slot), exc)
            return
        if result is not None:
            log.info("target %s slot %s: run %s %s", target, slot_text(slot), result.run_id, result.status)

    def submit(self, run_id: int, target: str) -> None:
        """Execute an already claimed run (API trigger) on the scheduler's thread pool."""
        self.scheduler.add_job(
            self.runner.execute,
            args=[run_id, target],
            id=f"manual:{run_id}",
            name=f"audit {target} (run {run_id})",
            misfire_grace_time=None,
        )
