"""Leader election among service replicas: exactly one runs the schedule.

On PostgreSQL: a session-level advisory lock (`pg_try_advisory_lock`) taken on a dedicated
connection that stays open. The server holds the lock for as long as that session lives and
releases it when the connection ends — the process exits, is killed, or its network goes away —
so a replica that dies without a goodbye frees the lock as soon as PostgreSQL notices the session
is gone (TCP keepalives; `tcp_keepalives_idle` bounds it), and a standby takes it on its next try.
The database is the right place: every replica already needs it and shares it, whereas the broker
may be RabbitMQ (no lock primitive Celery exposes) and a lock in Redis would need its own
expiry-and-fencing protocol. Each check also runs a query on the session, so a leader whose
connection broke learns it lost the lock before it fires anything.

On SQLite there is one process by construction (a file on one machine, the embedded default), so
it is always the leader; two `serve` processes on one SQLite file still agree through the runs'
unique (target, slot), as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

from auditor.clock import Clock
from auditor.service.runner import AuditRunner
from auditor.service.scheduler import Scheduler, slot_of, slot_text
from auditor.service.tasks import AuditTask
from auditor.settings.config import Settings
from auditor.store.fleet import FleetStore

log = logging.getLogger("auditor.leader")

LOCK_NAME = "placement-auditor:scheduler"


class Leadership:
    def __init__(self, engine: Engine, name: str = LOCK_NAME) -> None:
        self.engine = engine
        # A stable signed 64-bit key for `pg_try_advisory_lock(bigint)`.
        self.key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
        self.postgres = engine.dialect.name == "postgresql"
        self._connection: Any = None
        self._lock = threading.Lock()

    def is_leader(self) -> bool:
        """Whether this process leads now (taking the lock if it is free)."""
        if not self.postgres:
            return True
        with self._lock:
            try:
                if self._connection is not None:
                    # Still our session? (a broken connection means the server let the lock go)
                    self._connection.execute(text("SELECT 1"))
                    return True
                connection = self.engine.connect()
                got = bool(
                    connection.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": self.key}).scalar()
                )
                connection.commit()
                if got:
                    self._connection = connection
                    log.info("this replica leads the schedule (advisory lock %s)", self.key)
                    return True
                connection.close()
                return False
            except SQLAlchemyError as exc:
                log.warning("leadership lost or not available: %s", exc)
                self._drop()
                return False

    def _drop(self) -> None:
        if self._connection is not None:
            with contextlib.suppress(SQLAlchemyError):
                self._connection.invalidate()
        self._connection = None

    def resign(self) -> None:
        with self._lock:
            if self._connection is not None:
                try:
                    self._connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": self.key})
                    self._connection.close()
                except SQLAlchemyError:
                    self._drop()
            self._connection = None


def sweep_slot(repository: str, now: datetime, period_seconds: int) -> datetime:
    """The start of the current sweep slot of `repository`: the last time at or before `now` that
    is its offset (a hash of its name, modulo the period) past a multiple of the period since the
    epoch. Pure; the same in every process."""
    import hashlib

    offset = int.from_bytes(hashlib.sha256(repository.encode()).digest()[:8], "big") % period_seconds
    at = int(now.timestamp())
    start = (at - offset) // period_seconds * period_seconds + offset
    return datetime.fromtimestamp(start, UTC)


class FleetScheduler(Scheduler):
    """The schedule in fleet mode: only the leader fires, and what it fires is enqueued.

    A slot's task key is `audit:<target>:<slot>`, so even a slot enqueued twice (a leader change
    at the very moment a job fires, a restart within the grace) is audited and recorded once.
    A slot whose job fired while the database or the broker was away is not lost: the replica
    remembers the last slot it enqueued per target (and the last digest slot), and every recover
    tick enqueues the current slot again if it is within the grace and was not enqueued yet.
    """

    def __init__(
        self, settings: Settings, runner: AuditRunner, clock: Clock, leader: Leadership, dispatch: Any
    ) -> None:
        super().__init__(settings, runner, clock)
        self.leader, self.dispatch = leader, dispatch
        self.fired: list[str] = []  # task keys this replica enqueued (metrics, tests)
        self.sent: dict[str, str] = {}  # job (target name, or "digest") → the last slot enqueued
        self.reconcile_trigger: Any = None
        self.fleet = FleetStore(runner.store.engine, clock)  # the App repositories the sweep reads

    def _once(self, job: str, trigger: Any, now: datetime | None, send: Callable[[str], None]) -> str | None:
        """Enqueue with `send(slot)` the current slot of `trigger` (inside the misfire grace) if this
        replica leads and has not enqueued that slot for `job` yet; the slot, or None. A broker
        that refuses is logged and the slot stays unsent, for the next recover tick."""
        slot = slot_of(trigger, now or self.clock(), self.settings.service.misfire_grace_seconds)
        if slot is None or self.sent.get(job) == slot_text(slot):
            return None
        if not self.leader.is_leader():
            log.debug("%s: not the leader; the leader fires it", job)
            return None
        try:
            send(slot_text(slot))
        except Exception as exc:  # the broker away: the next recover tick enqueues it again
            log.error("%s slot %s could not be enqueued: %s", job, slot_text(slot), exc)
            return None
        self.sent[job] = slot_text(slot)
        return slot_text(slot)

    def run_scheduled(self, target: str, now: datetime | None = None) -> None:
        def send(slot: str) -> None:
            self.dispatch.audit(AuditTask(target, f"audit:{target}:{slot}", slot, "schedule"))

        slot = self._once(target, self.triggers[target], now, send)
        if slot is not None:
            self.fired.append(f"audit:{target}:{slot}")

    def recover(self) -> None:
        super().recover()
        now = self.clock()
        for target in self.triggers:
            self.run_scheduled(target, now)
        self.send_digests(now)
        self.sweep_app_repositories(now)
        self.reconcile_app_repositories(now)

    def reconcile_app_repositories(self, now: datetime | None = None) -> str | None:
        """Enqueue the reconcile of the App's repositories once per slot of
        `github_app.reconcile_schedule` (the leader; the slot, or None)."""
        app = self.settings.service.github_app
        if app is None:
            return None
        if self.reconcile_trigger is None:
            from apscheduler.triggers.cron import CronTrigger

            self.reconcile_trigger = CronTrigger.from_crontab(
                app.reconcile_schedule, timezone=self.settings.service.timezone
            )
        return self._once("reconcile", self.reconcile_trigger, now, lambda _slot: self.dispatch.reconcile())

    def sweep_app_repositories(self, now: datetime | None = None) -> list[str]:
        """Enqueue the scheduled audit of every App repository whose slot has come: each repository
        is audited every `github_app.audit_every_hours`, at its own offset in the period (from a
        hash of its name: spread evenly, the same in every replica), within the misfire grace; the
        task key (`sweep:<repository>:<slot>`) makes a slot enqueued twice one audit. A repository
        added to an installation is swept from its first slot on, one removed no more. The keys
        enqueued (the leader only)."""
        app = self.settings.service.github_app
        if app is None or app.audit_every_hours <= 0 or not self.leader.is_leader():
            return []
        now = now or self.clock()
        try:
            repositories = self.fleet.app_repositories()
        except Exception as exc:  # the database away: the next tick tries again
            log.warning("App repositories could not be read: %s", exc)
            return []
        period = app.audit_every_hours * 3600
        grace = self.settings.service.misfire_grace_seconds
        sent: list[str] = []
        for name, installation in sorted(repositories.items()):
            slot = sweep_slot(name, now, period)
            if (now - slot).total_seconds() > grace or self.sent.get(f"sweep:{name}") == slot_text(slot):
                continue
            key = f"sweep:{name}:{slot_text(slot)}"
            try:
                self.dispatch.audit(AuditTask("", key, slot_text(slot), "sweep", name, installation))
            except Exception as exc:  # the broker away: the next tick enqueues it
                log.error("%s could not be enqueued: %s", key, exc)
                break
            self.sent[f"sweep:{name}"] = slot_text(slot)
            self.fired.append(key)
            sent.append(key)
        return sent

    def run_all_now(self) -> None:
        if not self.leader.is_leader():
            return
        stamp = slot_text(self.clock())
        for name in self.triggers:
            key = f"startup:{name}:{stamp}"
            self.dispatch.audit(AuditTask(name, key, None, "startup"))
            self.fired.append(key)

    def submit(self, run_id: int, target: str) -> None:
        """An API trigger: the run the API claimed is handed to a worker under the key `api:<id>`."""
        from auditor.store.schema import Run

        key = f"api:{run_id}"
        with self.runner.store.sessions.begin() as session:
            run = session.get_one(Run, run_id)
            run.task_key = key
        with self.runner._lock:
            self.runner._busy.discard(target)  # this process does not execute it
        self.dispatch.audit(AuditTask(target, key, None, "api"))

    def send_digests(self, now: datetime | None = None) -> None:
        """Enqueue the digest task of the current digest slot once (the outbox keeps one digest
        per team and day however often it runs)."""
        if self.digest_trigger is not None:
            self._once("digest", self.digest_trigger, now, lambda _slot: self.dispatch.digest())
