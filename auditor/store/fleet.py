"""The store's part for a fleet of workers: leases, idempotent runs, webhook deliveries, check runs.

Every decision that must hold across processes is a row with a unique key, so it holds on SQLite
(one process) and PostgreSQL (many) alike, without a lock server:

- a *lease* (`target_leases`) is one row per name (a target, or a check run's head SHA); a worker
  takes it by inserting the row, or by updating it when it has expired; it renews it while it
  works and deletes it when done. A killed worker's lease runs out after `seconds`.
- a *keyed run* (`runs.task_key`, unique): a task claims its run by key; a redelivered task finds
  the same run — finished (nothing to do) or still `running`/`interrupted` (its worker died: the
  run is taken over and finished once, under the same id).
- a *delivery* (`webhook_deliveries`): the GitHub delivery id, inserted once; a second insert of
  the same id is a replay.
- a *check run* (`check_runs`, unique (repository, head SHA, kind)): the id GitHub gave it, so a
  task updates the check run instead of creating a second one.

Times come from the injected clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine, Select, delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from auditor.clock import Clock
from auditor.store.repository import record, target_id_of
from auditor.store.schema import AppRepository, CheckRunRow, Run, Target, TargetLease, WebhookDelivery

FINISHED = ("succeeded", "partial", "failed")


@dataclass(frozen=True, slots=True)
class KeyedRun:
    run_id: int
    state: str  # new | resume (a dead worker's run, taken over) | done (already finished)
    status: str


@dataclass(frozen=True, slots=True)
class CheckRunRecord:
    repository: str
    head_sha: str
    kind: str
    check_run_id: int | None
    status: str
    conclusion: str | None
    annotations_sent: int = 0


def _check_row(repository: str, head_sha: str, kind: str) -> Select[CheckRunRow]:
    return select(CheckRunRow).where(
        CheckRunRow.repository == repository, CheckRunRow.head_sha == head_sha, CheckRunRow.kind == kind
    )


class FleetStore:
    def __init__(self, engine: Engine, clock: Clock) -> None:
        self.engine = engine
        self.clock = clock
        self.sessions = sessionmaker(engine, expire_on_commit=False)

    # -- leases -------------------------------------------------------------------------------

    def acquire_lease(self, name: str, owner: str, seconds: float, task_key: str | None = None) -> bool:
        """Take the lease `name` for `seconds` (True), unless another owner holds it unexpired."""
        now = self.clock()
        until = now + timedelta(seconds=seconds)
        try:
            with self.sessions.begin() as session:
                session.add(TargetLease(target=name, owner=owner, task_key=task_key, expires_at=until))
            return True
        except IntegrityError:
            pass
        with self.sessions.begin() as session:
            taken = session.execute(
                update(TargetLease)
                .where(
                    TargetLease.target == name,
                    (TargetLease.expires_at < now) | (TargetLease.owner == owner),
                )
                .values(owner=owner, task_key=task_key, expires_at=until)
                .execution_options(synchronize_session=False)
            )
            return bool(taken.rowcount)  # type: ignore[attr-defined]

    def renew_lease(self, name: str, owner: str, seconds: float) -> bool:
        """Extend a lease this owner holds; False when it was lost (expired and taken)."""
        with self.sessions.begin() as session:
            done = session.execute(
                update(TargetLease)
                .where(TargetLease.target == name, TargetLease.owner == owner)
                .values(expires_at=self.clock() + timedelta(seconds=seconds))
                .execution_options(synchronize_session=False)
            )
            return bool(done.rowcount)  # type: ignore[attr-defined]

    def release_lease(self, name: str, owner: str) -> None:
        with self.sessions.begin() as session:
            session.execute(delete(TargetLease).where(TargetLease.target == name, TargetLease.owner == owner))

    # -- keyed runs ---------------------------------------------------------------------------

    def claim_keyed_run(
        self, target: str, task_key: str, slot: str | None, trigger: str, owner: str
    ) -> KeyedRun:
        """The run of `task_key`: a new `running` row, or the existing one (taken over when it
        did not finish: the caller holds the target's lease, so its old worker is gone)."""
        now = self.clock()
        with self.sessions.begin() as session:
            found = session.scalar(select(Run).where(Run.task_key == task_key).with_for_update())
            if found is not None:
                if found.status in FINISHED:
                    return KeyedRun(found.id, "done", found.status)
                found.status, found.owner, found.heartbeat_at = "running", owner, now
                found.finished_at, found.error = None, None
                return KeyedRun(found.id, "resume", "running")
        with self.sessions() as session:
            target_id = target_id_of(session, target)
        try:
            with self.sessions.begin() as session:
                run = Run.running(target_id, slot, trigger, owner, now, task_key)
                session.add(run)
                session.flush()
                return KeyedRun(run.id, "new", "running")
        except IntegrityError:
            # The same key inserted meanwhile (cannot happen under the lease) or the slot taken
            # by a run of another key (an embedded `serve` on the same database ran it).
            with self.sessions() as session:
                other = session.scalar(
                    select(Run).where(
                        (Run.task_key == task_key) | ((Run.target_id == target_id) & (Run.slot == slot))
                    )
                )
                if other is None:
                    raise
                return KeyedRun(other.id, "done", other.status)

    # -- webhook deliveries -------------------------------------------------------------------

    def delivery_seen(self, delivery_id: str) -> bool:
        """Whether `delivery_id` was received before and has not expired (a replay)."""
        with self.sessions() as session:
            found = session.scalar(
                select(WebhookDelivery.delivery_id).where(
                    WebhookDelivery.delivery_id == delivery_id, WebhookDelivery.expires_at >= self.clock()
                )
            )
        return found is not None

    def remember_delivery(self, delivery_id: str, event: str, keep_seconds: float) -> bool:
        """Record a delivery id; False when it was seen before and has not expired (a replay).
        Expired ids are deleted first, so the table holds at most `keep_seconds` of traffic."""
        now = self.clock()
        with self.sessions.begin() as session:
            session.execute(delete(WebhookDelivery).where(WebhookDelivery.expires_at < now))
        try:
            with self.sessions.begin() as session:
                session.add(
                    WebhookDelivery(
                        delivery_id=delivery_id,
                        event=event[:60],
                        received_at=now,
                        expires_at=now + timedelta(seconds=keep_seconds),
                    )
                )
            return True
        except IntegrityError:
            return False

    # -- check runs ---------------------------------------------------------------------------

    def check_run(self, repository: str, head_sha: str, kind: str) -> CheckRunRecord | None:
        with self.sessions() as session:
            row = session.scalar(_check_row(repository, head_sha, kind))
            return record(CheckRunRecord, row) if row is not None else None

    def record_check_run(
        self,
        repository: str,
        head_sha: str,
        kind: str,
        *,
        check_run_id: int | None,
        status: str,
        conclusion: str | None = None,
        task_key: str | None = None,
        annotations_sent: int | None = None,
    ) -> None:
        """Insert or update the row of (repository, head SHA, kind)."""
        now = self.clock()
        with self.sessions.begin() as session:
            row = session.scalar(_check_row(repository, head_sha, kind).with_for_update())
            if row is None:
                session.add(
                    CheckRunRow(
                        repository=repository,
                        head_sha=head_sha,
                        kind=kind,
                        check_run_id=check_run_id,
                        status=status,
                        conclusion=conclusion,
                        annotations_sent=annotations_sent or 0,
                        task_key=task_key,
                        updated_at=now,
                    )
                )
                return
            if check_run_id is not None:
                row.check_run_id = check_run_id
            row.status, row.conclusion, row.updated_at = status, conclusion, now
            if annotations_sent is not None:
                row.annotations_sent = annotations_sent
            if task_key is not None:
                row.task_key = task_key

    # -- repositories of the GitHub App -------------------------------------------------------

    def set_app_repositories(self, installation_id: int, added: list[str], removed: list[str]) -> None:
        """`installation` / `installation_repositories` events: repositories appear (active) and
        disappear (inactive, their history kept)."""
        now = self.clock()
        with self.sessions.begin() as session:
            rows = {
                r.full_name: r
                for r in session.scalars(
                    select(AppRepository).where(AppRepository.full_name.in_([*added, *removed]))
                )
            }
            _apply_repositories(session, rows, dict.fromkeys(added, installation_id), removed, now)

    def reconcile_app_repositories(self, seen: dict[str, int]) -> tuple[list[str], list[str]]:
        """Make the active App repositories exactly `seen` (what GitHub lists now, by installation):
        the ones missing appear, the ones gone become inactive. The (added, removed) names."""
        now = self.clock()
        with self.sessions.begin() as session:
            rows = {r.full_name: r for r in session.scalars(select(AppRepository))}
            added = sorted(n for n in seen if n not in rows or not rows[n].active)
            removed = sorted(n for n, r in rows.items() if r.active and n not in seen)
            _apply_repositories(session, rows, {n: seen[n] for n in added}, removed, now)
        return added, removed

    def drop_installation(self, installation_id: int) -> None:
        with self.sessions.begin() as session:
            session.execute(
                update(AppRepository)
                .where(AppRepository.installation_id == installation_id)
                .values(active=False, updated_at=self.clock())
            )

    def app_repositories(self) -> dict[str, int]:
        """Active repositories → their installation id."""
        with self.sessions() as session:
            return {
                r.full_name: r.installation_id
                for r in session.scalars(select(AppRepository).where(AppRepository.active.is_(True)))
            }

    def retire_targets(self, names: list[str], retired: bool) -> None:
        """Mark the targets of App repositories removed from the App (`retired`: since now), or
        audited again (re-added). Their runs and findings stay."""
        if not names:
            return
        with self.sessions.begin() as session:
            session.execute(
                update(Target)
                .where(Target.name.in_(names))
                .values(retired_at=self.clock() if retired else None)
            )

    def installation_repositories(self, installation_id: int) -> list[str]:
        """Every repository of an installation, active or not."""
        with self.sessions() as session:
            query = select(AppRepository.full_name).where(AppRepository.installation_id == installation_id)
            return list(session.scalars(query))

    def branch_state(self, full_name: str) -> BranchState | None:
        """What the last scheduled audit learnt of an App repository's default branch."""
        with self.sessions() as session:
            row = session.get(AppRepository, full_name)
            if row is None or not row.active:
                return None
            return BranchState(row.default_branch, row.branch_etag, row.audited_sha, row.checked_at)

    def record_branch(self, full_name: str, **values: object) -> None:
        """Keep `default_branch`, `branch_etag`, `audited_sha` (and the time GitHub was asked)."""
        allowed = {"default_branch", "branch_etag", "audited_sha"}
        unknown = set(values) - allowed
        if unknown:
            raise ValueError(f"not branch state: {sorted(unknown)}")
        with self.sessions.begin() as session:
            session.execute(
                update(AppRepository)
                .where(AppRepository.full_name == full_name)
                .values(checked_at=self.clock(), **values)
            )


def _apply_repositories(
    session: Session,
    rows: dict[str, AppRepository],
    added: dict[str, int],
    removed: Sequence[str],
    now: datetime,
) -> None:
    """App repositories appear (active, under their installation) and disappear (inactive, their
    history kept); `rows`: the ones stored, by name."""
    for name, installation_id in added.items():
        row = rows.get(name)
        if row is None:
            session.add(AppRepository(full_name=name, installation_id=installation_id, updated_at=now))
        else:
            row.installation_id, row.active, row.updated_at = installation_id, True, now
    for name in removed:
        row = rows.get(name)
        if row is not None:
            row.active, row.updated_at = False, now


@dataclass(frozen=True, slots=True)
class BranchState:
    default_branch: str | None
    etag: str | None
    audited_sha: str | None
    checked_at: datetime | None
