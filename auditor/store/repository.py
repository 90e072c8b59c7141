"""The findings store: one unit of work per run, and the queries the API and CLI need.

A run is claimed (a `running` row, committed at once so other processes see the slot is taken),
audited outside any transaction, then completed in one transaction that writes every finding,
observation, cost estimate and waiver together with the run's final status. A process killed in
between leaves only the `running` row, which `recover_interrupted` marks `interrupted`.
"""

from __future__ import annotations

import base64
import binascii
from collections import namedtuple
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Select,
    String,
    and_,
    false,
    func,
    insert,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from auditor import gcpause
from auditor.clock import Clock
from auditor.model.findings import Finding
from auditor.store import lifecycle, writes
from auditor.store.records import (
    AcknowledgementNote,
    AdmissionCount,
    AdmissionDecisionRecord,
    AdmissionSummary,
    AuditRecord,
    Changes,
    DigestRecord,
    Export,
    FindingRecord,
    HistoryEntry,
    MetricsSnapshot,
    Page,
    PullRequestRecord,
    RuleCost,
    RunRecord,
    Scope,
    SuppressionRecord,
    TargetEvidence,
    TargetRecord,
    WaiverNote,
    WaiverRecord,
    WorkloadRecord,
)
from auditor.store.schema import (
    ACTIVE_STATUSES,
    AdmissionDecision,
    AuditEntry,
    CostEstimate,
    Digest,
    Observation,
    PullRequest,
    Run,
    Suppression,
    Target,
    Waiver,
)
from auditor.store.schema import Finding as FindingRow

if TYPE_CHECKING:
    # Only its shape: the store reads the record's attributes and needs nothing else of the webhook.
    from auditor.admission.record import AdmissionRecord


@dataclass(frozen=True, slots=True)
class TargetSpec:
    """What the config says about a target (see config.TargetSettings)."""

    name: str
    kind: str
    location: str
    branch: str | None = None
    paths: tuple[str, ...] = ()
    node_files: tuple[str, ...] = ()
    schedule: str | None = None


@dataclass(frozen=True, slots=True)
class WaiverSeen:
    fingerprint: str
    source: str
    reason: str
    expires: date
    expired: bool


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What an audit found, to be stored: status `succeeded` or `partial`."""

    status: str
    revision: str | None
    findings: Sequence[Finding]
    waived: Sequence[tuple[Finding, WaiverSeen]] = ()
    expired_waivers: Sequence[WaiverSeen] = ()
    errors: Sequence[dict[str, Any]] = ()
    audited_objects: int = 0
    # metadata.labels of the audited workloads, by workload identity (ObjectRef.identity).
    labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunSummary:
    run_id: int
    status: str
    findings: int
    new: int
    reopened: int
    resolved: int
    waived: int
    estimated_monthly_cost_usd: float | None


class SlotTaken(Exception):
    """Another process already runs (or ran) this target's slot."""


class UnknownTarget(KeyError):
    pass


class BadCursor(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class FindingFilter:
    target: str | None = None
    rule: str | None = None
    severity: str | None = None
    status: str | None = None
    namespace: str | None = None
    since: datetime | None = None


def encode_cursor(last_id: int) -> str:
    return base64.urlsafe_b64encode(f"v1:{last_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise BadCursor("cursor is not one this API returned") from None
    version, _, number = raw.partition(":")
    if version != "v1" or not number.isdigit() or len(number) > 18:
        raise BadCursor("cursor is not one this API returned")
    return int(number)


def encode_admission_cursor(at: datetime, last_id: int) -> str:
    """The cursor after an answer: its time (microseconds since the epoch) and id."""
    micros = round((at - _EPOCH) / timedelta(microseconds=1))
    return base64.urlsafe_b64encode(f"a1:{micros}:{last_id}".encode()).decode().rstrip("=")


def decode_admission_cursor(cursor: str) -> tuple[datetime, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise BadCursor("cursor is not one this API returned") from None
    parts = raw.split(":")
    if len(parts) != 3 or parts[0] != "a1" or not all(p.isdigit() and len(p) <= 18 for p in parts[1:]):
        raise BadCursor("cursor is not one this API returned")
    micros, number = parts[1:]
    try:
        return _EPOCH + timedelta(microseconds=int(micros)), int(number)
    except OverflowError:
        raise BadCursor("cursor is not one this API returned") from None


def _as_utc(value: datetime | None) -> datetime | None:
    """SQLite returns naive datetimes for timezone-aware columns; they were stored as UTC."""
    if value is None:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _utc(value: datetime) -> datetime:
    """An aware time in UTC (naive: taken as UTC). SQLite stores a time's wall clock without its
    offset, so every time is written and compared in UTC."""
    return value.astimezone(UTC) if value.tzinfo is not None else value.replace(tzinfo=UTC)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
R = TypeVar("R")


def record(cls: type[R], row: object, **given: Any) -> R:
    """A record of an ORM row: each field the row's attribute of that name (times as UTC, lists
    as tuples) unless `given`; an extra field (records.extra) only when given."""
    values = dict(given)
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name not in given and not f.metadata.get("extra"):
            value = getattr(row, f.name)
            values[f.name] = (
                _as_utc(value)
                if isinstance(value, datetime)
                else tuple(value)
                if isinstance(value, list)
                else value
            )
    return cls(**values)


def target_id_of(session: Session | Connection, name: str) -> int:
    found = session.scalar(select(Target.id).where(Target.name == name))
    if found is None:
        raise UnknownTarget(name)
    return found


AUDIT_OUTCOMES = ("done", "refused", "failed")


class Store:
    def __init__(self, engine: Engine, clock: Clock) -> None:
        self.engine = engine
        self.clock = clock
        self.sessions = sessionmaker(engine, expire_on_commit=False)
        # A page of findings is one or two SELECTs (the API's hot path): run outside a transaction,
        # without the BEGIN and ROLLBACK round trips.
        self._reads = engine.execution_options(isolation_level="AUTOCOMMIT")

    # -- targets ------------------------------------------------------------------------------

    def sync_targets(self, specs: Iterable[TargetSpec]) -> None:
        """Insert or update the configured targets (targets removed from the config stay, with
        their history)."""
        now = self.clock()
        with self.sessions.begin() as session:
            existing = {t.name: t for t in session.scalars(select(Target))}
            for spec in specs:
                row = existing.get(spec.name)
                # The columns of the spec's fields (lists where the spec holds tuples), but its name.
                values = {
                    k: list(v) if isinstance(v, tuple) else v for k, v in asdict(spec).items() if k != "name"
                }
                if row is None:
                    session.add(Target(name=spec.name, created_at=now, updated_at=now, **values))
                elif any(getattr(row, k) != v for k, v in values.items()):
                    for k, v in values.items():
                        setattr(row, k, v)
                    row.updated_at = now

    def targets(self) -> list[TargetRecord]:
        with self.sessions() as session:
            last_ok = _last_success(session)
            return [
                record(
                    TargetRecord,
                    t,
                    schedule=t.schedule_override or t.schedule,
                    configured_schedule=t.schedule,
                    last_successful_run_at=last_ok.get(t.id),
                )
                for t in session.scalars(select(Target).order_by(Target.name))
            ]

    # -- the API's writes (0011): acknowledgements, suppressions, schedules ---------------------

    def acknowledge(self, finding_id: int, by: str, note: str) -> bool:
        """Say that `by` is on the finding (replacing an earlier acknowledgement); False when there
        is no such finding. Runs keep it; it hides nothing."""
        with self.sessions.begin() as session:
            done = session.execute(
                update(FindingRow)
                .where(FindingRow.id == finding_id)
                .values(acknowledged_by=by[:256], acknowledged_at=self.clock(), acknowledgement_note=note)
            )
            return bool(done.rowcount)  # type: ignore[attr-defined]

    def unacknowledge(self, finding_id: int) -> bool:
        """Take the acknowledgement back; False when the finding had none (or does not exist)."""
        with self.sessions.begin() as session:
            done = session.execute(
                update(FindingRow)
                .where(FindingRow.id == finding_id, FindingRow.acknowledged_by.is_not(None))
                .values(acknowledged_by=None, acknowledged_at=None, acknowledgement_note=None)
            )
            return bool(done.rowcount)  # type: ignore[attr-defined]

    def suppress(self, finding_id: int, by: str, reason: str, expires: date) -> SuppressionRecord | None:
        """Suppress a finding through `expires` (replacing an earlier suppression of it): kept as a
        waiver every later run of its target applies; a finding present now is `waived` at once.
        None when there is no such finding."""
        now = self.clock()
        with self.sessions.begin() as session:
            row = session.execute(
                select(FindingRow, Target.name)
                .join(Target, FindingRow.target_id == Target.id)
                .where(FindingRow.id == finding_id)
                .with_for_update(of=FindingRow)
            ).first()
            if row is None:
                return None
            finding, target = row
            kept = session.scalar(
                select(Suppression).where(
                    Suppression.target_id == finding.target_id,
                    Suppression.fingerprint == finding.fingerprint,
                )
            )
            if kept is None:
                kept = Suppression(target_id=finding.target_id, fingerprint=finding.fingerprint)
                session.add(kept)
            kept.rule, kept.reason, kept.expires = finding.rule, reason, expires
            kept.created_by, kept.created_at = by[:256], now
            if finding.status in ACTIVE_STATUSES or finding.status == "waived":
                finding.status = "waived"
                finding.waiver_reason, finding.waiver_expires = reason, expires
            return SuppressionRecord(target, finding.fingerprint, finding.rule, reason, expires, by, now)

    def unsuppress(self, finding_id: int) -> bool:
        """Lift the finding's suppression (False when it had none). A finding it hid shows as
        `open` again at once (the next run decides, as for any waiver)."""
        with self.sessions.begin() as session:
            finding = session.get(FindingRow, finding_id, with_for_update=True)
            if finding is None:
                return False
            kept = session.scalar(
                select(Suppression).where(
                    Suppression.target_id == finding.target_id,
                    Suppression.fingerprint == finding.fingerprint,
                )
            )
            if kept is None:
                return False
            hidden_by_it = (finding.waiver_reason, finding.waiver_expires) == (kept.reason, kept.expires)
            if finding.status == "waived" and hidden_by_it:
                finding.status = "open"
                finding.waiver_reason = finding.waiver_expires = None
            session.delete(kept)
            return True

    def suppressions(self, target: str) -> list[SuppressionRecord]:
        """The suppressions of one target (expired ones too: a run reports them as expired)."""
        with self.sessions() as session:
            rows = session.scalars(
                select(Suppression)
                .join(Target, Suppression.target_id == Target.id)
                .where(Target.name == target)
                .order_by(Suppression.id)
            )
            return [
                SuppressionRecord(
                    target, s.fingerprint, s.rule, s.reason, s.expires, s.created_by, _as_utc(s.created_at)
                )
                for s in rows
            ]

    def set_schedule(self, target: str, schedule: str | None, by: str) -> TargetRecord:
        """Put `schedule` (a crontab line) in force for `target` instead of the config's, or, with
        None, the config's again. Raises UnknownTarget."""
        now = self.clock()
        with self.sessions.begin() as session:
            row = session.scalar(select(Target).where(Target.name == target).with_for_update())
            if row is None:
                raise UnknownTarget(target)
            row.schedule_override = schedule
            row.schedule_changed_by = by[:256] if schedule is not None else None
            row.schedule_changed_at = now if schedule is not None else None
        return next(t for t in self.targets() if t.name == target)

    def schedule_overrides(self) -> dict[str, str]:
        """The schedules set through the API, by target."""
        with self.sessions() as session:
            query = select(Target.name, Target.schedule_override).where(Target.schedule_override.is_not(None))
            return {name: cron for name, cron in session.execute(query) if cron is not None}

    # -- runs ---------------------------------------------------------------------------------

    def claim_run(self, target: str, slot: str | None, trigger: str, owner: str) -> int:
        """Start a run: a committed `running` row. Raises SlotTaken when (target, slot) exists."""
        now = self.clock()
        try:
            with self.sessions.begin() as session:
                run = Run.running(target_id_of(session, target), slot, trigger, owner, now)
                session.add(run)
                session.flush()
                return run.id
        except IntegrityError:
            raise SlotTaken(f"{target} slot {slot}") from None

    def heartbeat(self, run_id: int) -> None:
        with self.sessions.begin() as session:
            session.execute(
                update(Run).where(Run.id == run_id, Run.status == "running").values(heartbeat_at=self.clock())
            )

    def fail_run(
        self,
        run_id: int,
        error: str,
        status: str = "failed",
        revision: str | None = None,
        over_interrupted: bool = False,
    ) -> None:
        """End a run without results: nothing about its findings changes. With
        `over_interrupted`, a run another process marked `interrupted` (its heartbeat stopped
        while the database was away) gets the failure its own process knows."""
        ended = ("running", "interrupted") if over_interrupted else ("running",)
        with self.sessions.begin() as session:
            session.execute(
                update(Run)
                .where(Run.id == run_id, Run.status.in_(ended))
                .values(status=status, error=error[:4000], finished_at=self.clock(), revision=revision)
            )

    def recover_interrupted(self, is_dead: Callable[[str], bool], stale_before: datetime) -> list[int]:
        """Mark `running` runs whose process is gone (same host, pid dead) or whose heartbeat
        stopped before `stale_before` as `interrupted`."""
        with self.sessions.begin() as session:
            rows = session.execute(select(Run.id, Run.owner, Run.heartbeat_at).where(Run.status == "running"))
            dead = [
                run_id
                for run_id, owner, beat in rows
                if is_dead(owner) or (_as_utc(beat) or stale_before) < stale_before
            ]
            if dead:
                session.execute(
                    update(Run)
                    .where(Run.id.in_(dead), Run.status == "running")
                    .values(
                        status="interrupted",
                        finished_at=self.clock(),
                        error="the process running this audit stopped before it finished",
                    )
                )
            return dead

    def complete_run(self, run_id: int, outcome: RunOutcome) -> RunSummary:
        """Store a run's results and apply the lifecycle, all in one transaction: what changes is
        decided first (`lifecycle.plan_run`, pure), then written."""
        if outcome.status not in ("succeeded", "partial"):
            raise ValueError(f"complete_run takes succeeded or partial, not {outcome.status}")
        now = self.clock()
        # The collector's passes would walk the run's findings again and again while the rows are
        # built (they make no cycles): a third of the time of 50,000 findings.
        with gcpause.paused(), self.sessions.begin() as session:
            run = session.get_one(Run, run_id, with_for_update=True)
            if run.status != "running":
                raise SlotTaken(f"run {run_id} is {run.status}, not running")
            previous = {
                fp: lifecycle.Stored(fid, st, sev, cert)
                for fid, fp, st, sev, cert in session.execute(
                    select(
                        FindingRow.id,
                        FindingRow.fingerprint,
                        FindingRow.status,
                        FindingRow.severity,
                        FindingRow.certainty,
                    ).where(FindingRow.target_id == run.target_id)
                )
            }
            plan = lifecycle.plan_run(previous, outcome.findings, outcome.waived, outcome.status)
            writes.write_plan(
                session, run, plan, lambda f: dict(outcome.labels.get(f.workload.identity, {})), now
            )
            self._store_waivers(session, run.target_id, run_id, outcome)
            run.status = outcome.status
            run.revision = outcome.revision
            run.finished_at = now
            run.heartbeat_at = now
            run.findings_count = plan.reported
            run.new_count = plan.new
            run.reopened_count = plan.reopened
            run.resolved_count = len(plan.resolved)
            run.waived_count = plan.waived
            run.errors_count = len(outcome.errors)
            run.errors = list(outcome.errors)[:100]
            run.audited_objects = outcome.audited_objects
            run.estimated_monthly_cost_usd = plan.total_cost
            if outcome.status == "partial":
                run.error = (
                    f"{len(outcome.errors)} file(s) or object(s) could not be read; nothing was resolved"
                )
        return RunSummary(
            run_id,
            outcome.status,
            plan.reported,
            plan.new,
            plan.reopened,
            len(plan.resolved),
            plan.waived,
            plan.total_cost,
        )

    def _store_waivers(self, session: Session, target_id: int, run_id: int, outcome: RunOutcome) -> None:
        waivers = [w for _, w in outcome.waived] + list(outcome.expired_waivers)
        if not waivers:
            return
        existing = {
            (w.fingerprint, w.source): w
            for w in session.scalars(select(Waiver).where(Waiver.target_id == target_id))
        }
        for w in waivers:
            row = existing.get((w.fingerprint, w.source))
            if row is None:
                row = Waiver(target_id=target_id, fingerprint=w.fingerprint, source=w.source)
                session.add(row)
                existing[(w.fingerprint, w.source)] = row
            row.reason, row.expires, row.expired, row.last_run_id = w.reason, w.expires, w.expired, run_id

    def runs(
        self,
        target: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        scope: Scope | None = None,
    ) -> Page[RunRecord]:
        query = select(Run, Target.name).join(Target, Run.target_id == Target.id)
        if target is not None:
            query = query.where(Target.name == target)
        if scope is not None and scope.targets is not None:
            query = query.where(Target.name.in_(sorted(scope.targets)) if scope.targets else false())
        if cursor is not None:
            query = query.where(Run.id < decode_cursor(cursor))
        query = query.order_by(Run.id.desc()).limit(limit + 1)
        with self.sessions() as session:
            rows = session.execute(query).all()
        return _page([_run_record(run, name) for run, name in rows], limit)

    def run(self, run_id: int) -> RunRecord | None:
        with self.sessions() as session:
            row = session.execute(
                select(Run, Target.name).join(Target, Run.target_id == Target.id).where(Run.id == run_id)
            ).first()
            if row is None:
                return None
            costs = session.scalars(select(CostEstimate).where(CostEstimate.run_id == run_id))
            return _run_record(
                row[0],
                row[1],
                load_errors=tuple(row[0].errors),
                cost_by_rule={c.rule: RuleCost(c.findings, c.monthly_usd) for c in costs},
            )

    # -- findings -----------------------------------------------------------------------------

    def _finding_query(self, flt: FindingFilter, target_id: int | None = None) -> Select[Any]:
        # Columns, not ORM objects: a page is read into records once (lists never return detail).
        query = select(*_LISTED).join(Target, FindingRow.target_id == Target.id)
        if flt.target is not None:
            # The id as a value (looked up first), not a subquery: the planner then knows how many
            # rows the target has and walks the (target_id, id) index instead of the whole table.
            query = query.where(FindingRow.target_id == target_id)
        if flt.rule is not None:
            query = query.where(FindingRow.rule == flt.rule)
        if flt.severity is not None:
            query = query.where(FindingRow.severity == flt.severity)
        if flt.status is not None:
            query = query.where(FindingRow.status == flt.status)
        if flt.namespace is not None:
            query = query.where(FindingRow.namespace == flt.namespace)
        if flt.since is not None:
            # Seen or resolved since: a resolved finding was resolved after it was last seen, and
            # only resolved findings have resolved_at; with a status filter one index suffices.
            if flt.status == "resolved":
                query = query.where(FindingRow.resolved_at >= flt.since)
            elif flt.status is not None:
                query = query.where(FindingRow.last_seen_at >= flt.since)
            else:
                query = query.where(
                    (FindingRow.last_seen_at >= flt.since) | (FindingRow.resolved_at >= flt.since)
                )
        return query

    def findings(
        self, flt: FindingFilter, limit: int = 50, cursor: str | None = None, scope: Scope | None = None
    ) -> Page[FindingRecord]:
        """A page of findings, newest first (keyset pagination on the id); `scope`: only those of
        its targets or namespaces (a caller's teams)."""
        before = decode_cursor(cursor) if cursor is not None else None
        with self._reads.connect() as connection:
            try:
                target_id = target_id_of(connection, flt.target) if flt.target is not None else None
            except UnknownTarget:
                return Page([], None)
            query = self._finding_query(flt, target_id)
            if scope is not None and not scope.everything:
                query = query.where(_in_scope(scope, Target.name, FindingRow.namespace))
            if before is not None:
                query = query.where(FindingRow.id < before)
            query = query.order_by(FindingRow.id.desc()).limit(limit + 1)
            rows = connection.execute(query).all()
        return _page([_finding_record(r, r.target_name) for r in map(_ListedRow._make, rows)], limit)

    def finding(self, finding_id: int) -> FindingRecord | None:
        """A finding with its history: one entry per run that saw or resolved it."""
        with self.sessions() as session:
            row = session.execute(
                select(FindingRow, Target.name)
                .join(Target, FindingRow.target_id == Target.id)
                .where(FindingRow.id == finding_id)
            ).first()
            if row is None:
                return None
            history = session.execute(
                select(Observation, Run)
                .join(Run, Observation.run_id == Run.id)
                .where(Observation.finding_id == finding_id)
                .order_by(Run.started_at, Run.id)
            ).all()
            return _finding_record(
                row[0],
                row[1],
                detail=row[0].detail,
                history=tuple(
                    record(
                        HistoryEntry,
                        obs,
                        run_id=run.id,
                        at=_as_utc(run.finished_at or run.started_at),
                        revision=run.revision,
                    )
                    for obs, run in history
                ),
            )

    # -- exports (reports, digests, web pages) ------------------------------------------------

    def export(self, target: str | None = None, since: datetime | None = None) -> Export:
        """What a compliance report or a digest needs: targets with their last runs (evidence),
        findings (active and waived; resolved ones since `since`), waivers, and the runs of the
        period."""
        with self.sessions() as session:
            tq = select(Target).order_by(Target.name)
            if target is not None:
                tq = tq.where(Target.name == target)
            targets = list(session.scalars(tq))
            ids = [t.id for t in targets]
            names = {t.id: t.name for t in targets}

            def last(t: Target, status: Any) -> RunRecord | None:
                run = session.scalars(
                    select(Run).where(Run.target_id == t.id, status).order_by(Run.id.desc()).limit(1)
                ).first()
                return _run_record(run, t.name) if run else None

            evidence = tuple(
                record(
                    TargetEvidence,
                    t,
                    last_run=last(t, Run.status != "running"),
                    last_successful_run=last(t, Run.status == "succeeded"),
                )
                for t in targets
            )
            shown: ColumnElement[bool] = FindingRow.status.in_((*ACTIVE_STATUSES, "waived"))
            if since is not None:
                shown = shown | (FindingRow.resolved_at >= since)
            fq = select(FindingRow).where(FindingRow.target_id.in_(ids), shown).order_by(FindingRow.id)
            findings = tuple(
                _finding_record(f, names[f.target_id], detail=f.detail) for f in session.scalars(fq)
            )
            wq = select(Waiver).where(Waiver.target_id.in_(ids)).order_by(Waiver.id)
            waivers = tuple(record(WaiverRecord, w, target=names[w.target_id]) for w in session.scalars(wq))
            rq = select(Run).where(Run.target_id.in_(ids), Run.status != "running")
            if since is not None:
                rq = rq.where(Run.started_at >= since)
            runs = tuple(
                _run_record(r, names[r.target_id])
                for r in session.scalars(rq.order_by(Run.id.desc()).limit(500))
            )
        return Export(evidence, findings, waivers, runs)

    def trend(self, target: str, limit: int = 90) -> list[RunRecord]:
        """Per successful or partial run of a target: when, findings and estimated cost (oldest first)."""
        with self.sessions() as session:
            rows = session.execute(
                select(Run)
                .join(Target, Run.target_id == Target.id)
                .where(Target.name == target, Run.status.in_(("succeeded", "partial")))
                .order_by(Run.id.desc())
                .limit(limit)
            ).scalars()
            return [_run_record(r, target) for r in reversed(list(rows))]

    def changes_since(self, since: datetime) -> Changes:
        """Findings that became new, reopened or resolved at or after `since` (for digests)."""
        with self.sessions() as session:
            names = dict(session.execute(select(Target.id, Target.name)).all())
            out: dict[str, list[FindingRecord]] = {"new": [], "reopened": [], "resolved": []}
            rows = session.execute(
                select(FindingRow, Observation.status)
                .join(Observation, Observation.finding_id == FindingRow.id)
                .join(Run, Observation.run_id == Run.id)
                .where(Run.finished_at >= since, Observation.status.in_(("new", "reopened", "resolved")))
                .order_by(FindingRow.id)
            ).all()
            seen: set[tuple[int, str]] = set()
            for f, status in rows:
                if (f.id, status) not in seen:
                    seen.add((f.id, status))
                    out[status].append(_finding_record(f, names[f.target_id], detail=f.detail))
            return Changes(*(tuple(out[k]) for k in ("new", "reopened", "resolved")))

    # -- the digest outbox --------------------------------------------------------------------

    def last_digest_end(self, team: str) -> datetime | None:
        with self.sessions() as session:
            return _as_utc(session.scalar(select(func.max(Digest.period_end)).where(Digest.team == team)))

    def enqueue_digest(
        self,
        team: str,
        start: datetime,
        end: datetime,
        recipients: Sequence[str],
        subject: str,
        text: str,
        html: str,
        message_id: str | None = None,
    ) -> int | None:
        """Queue one digest; None when the team already has one for that UTC day."""
        day_start = end.replace(hour=0, minute=0, second=0, microsecond=0)
        with self.sessions.begin() as session:
            if session.scalar(select(Digest.id).where(Digest.team == team, Digest.period_end >= day_start)):
                return None
            row = Digest(
                team=team,
                period_start=start,
                period_end=end,
                recipients=list(recipients),
                subject=subject,
                text=text,
                html=html,
                status="pending",
                message_id=message_id,
                attempts=0,
                created_at=self.clock(),
            )
            session.add(row)
            session.flush()
            return row.id

    def pending_digests(self) -> list[DigestRecord]:
        with self.sessions() as session:
            query = select(Digest).where(Digest.status == "pending").order_by(Digest.id)
            return [record(DigestRecord, d) for d in session.scalars(query)]

    def digest_attempt(
        self, digest_id: int, error: str | None, *, permanent: bool = False, note: str | None = None
    ) -> None:
        """Record a send attempt: sent (error None; `note` says what the server refused of it),
        still pending with the error (temporary), or failed with the error (`permanent`)."""
        with self.sessions.begin() as session:
            row = session.get_one(Digest, digest_id, with_for_update=True)
            row.attempts += 1
            if error is None:
                row.status, row.sent_at, row.last_error = "sent", self.clock(), note and note[:2000]
            else:
                row.last_error = error[:2000]
                if permanent:
                    row.status = "failed"

    def digests(self) -> list[DigestRecord]:
        with self.sessions() as session:
            return [record(DigestRecord, d) for d in session.scalars(select(Digest).order_by(Digest.id))]

    # -- pull requests ------------------------------------------------------------------------

    def record_pull_request(
        self,
        target: str,
        workload: str,
        branch: str,
        number: int,
        url: str,
        state: str,
        fix_id: str,
        closed_by_human: bool = False,
    ) -> None:
        now = self.clock()
        with self.sessions.begin() as session:
            target_id = target_id_of(session, target)
            row = session.scalar(
                select(PullRequest).where(
                    PullRequest.target_id == target_id,
                    PullRequest.branch == branch,
                    PullRequest.number == number,
                )
            )
            if row is None:
                row = PullRequest(
                    target_id=target_id, workload=workload, branch=branch, number=number, created_at=now
                )
                session.add(row)
            if row.state != state:
                # The service wrote to the repository (opened, superseded or closed a fix pull
                # request): in the audit log, in the same transaction as the record of it.
                session.add(
                    AuditEntry(
                        at=now,
                        actor="service",
                        action=f"pull-request.{state}"[:64],
                        subject=f"{target} {workload}"[:512],
                        address="",
                        outcome="done",
                        detail=f"#{number} {url} (branch {branch}, fix {fix_id})"[:2000],
                    )
                )
            row.url, row.state, row.fix_id, row.updated_at = url, state, fix_id, now
            row.closed_by_human = row.closed_by_human or closed_by_human

    def pull_requests_since(self, target: str, since: datetime) -> int:
        with self.sessions() as session:
            return int(
                session.scalar(
                    select(func.count())
                    .select_from(PullRequest)
                    .join(Target, PullRequest.target_id == Target.id)
                    .where(Target.name == target, PullRequest.created_at >= since)
                )
                or 0
            )

    def pull_requests(
        self, target: str, *, workload: str | None = None, fix_id: str | None = None
    ) -> list[PullRequestRecord]:
        """The fix pull requests recorded for a target (of one workload, or of one fix)."""
        query = (
            select(PullRequest)
            .join(Target, PullRequest.target_id == Target.id)
            .where(Target.name == target)
            .order_by(PullRequest.id)
        )
        if workload is not None:
            query = query.where(PullRequest.workload == workload)
        if fix_id is not None:
            query = query.where(PullRequest.fix_id == fix_id)
        with self.sessions() as session:
            return [record(PullRequestRecord, r) for r in session.scalars(query)]

    # -- admission decisions ------------------------------------------------------------------

    def record_admission(self, decision: AdmissionRecord) -> bool:
        """Store one answer of the admission webhook: True, or False when its (cluster, uid) is
        stored already (the API server retried the request, or another replica answered it).
        A duplicate never raises, also when two replicas insert it at the same moment."""
        values = _admission_values(decision)
        table, key, dialect = AdmissionDecision, ["cluster", "uid"], self.engine.dialect.name
        if dialect == "postgresql":
            statement: Any = postgresql.insert(table).on_conflict_do_nothing(index_elements=key)
        elif dialect == "sqlite":
            statement = sqlite.insert(table).on_conflict_do_nothing(index_elements=key)
        else:
            try:
                with self.engine.begin() as connection:
                    connection.execute(insert(table), values)
                return True
            except IntegrityError:
                return False
        # RETURNING rather than rowcount, which some drivers leave at -1: a skipped row returns none.
        with self.engine.begin() as connection:
            return connection.execute(statement.returning(table.id), values).first() is not None

    def admission_decisions(
        self,
        *,
        cluster: str | None = None,
        outcome: str | None = None,
        since: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
        scope: Scope | None = None,
    ) -> Page[AdmissionDecisionRecord]:
        """A page of the webhook's answers, newest first (keyset pagination on time, then id),
        of one cluster, of one outcome, at or after `since`; `scope`: of its clusters (targets)
        or namespaces."""
        query = select(*_ADMISSION_COLUMNS)
        if scope is not None and not scope.everything:
            query = query.where(_in_scope(scope, AdmissionDecision.cluster, AdmissionDecision.namespace))
        if cluster is not None:
            query = query.where(AdmissionDecision.cluster == cluster)
        if outcome is not None:
            query = query.where(AdmissionDecision.outcome == outcome)
        if since is not None:
            query = query.where(AdmissionDecision.at >= _utc(since))
        if cursor is not None:
            at, last_id = decode_admission_cursor(cursor)
            query = query.where(
                or_(
                    AdmissionDecision.at < at,
                    and_(AdmissionDecision.at == at, AdmissionDecision.id < last_id),
                )
            )
        query = query.order_by(AdmissionDecision.at.desc(), AdmissionDecision.id.desc()).limit(limit + 1)
        with self._reads.connect() as connection:
            items = [record(AdmissionDecisionRecord, row) for row in connection.execute(query)]
        more = len(items) > limit
        last = items[limit - 1] if more else None
        return Page(items[:limit], encode_admission_cursor(last.at, last.id) if last else None)

    # -- audit log ------------------------------------------------------------------------------

    def append_audit(
        self,
        actor: str,
        action: str,
        subject: str,
        *,
        address: str = "",
        outcome: str = "done",
        detail: str = "",
    ) -> int:
        """Append one entry to the audit log (its time from the store's clock) and return its id.
        Each field is cut to its column; the log is never updated or deleted through the store."""
        if outcome not in AUDIT_OUTCOMES:
            raise ValueError(f"audit outcome must be one of {', '.join(AUDIT_OUTCOMES)}, got {outcome!r}")
        row = AuditEntry(
            at=self.clock(),
            actor=actor[:256],
            action=action[:64],
            subject=subject[:512],
            address=address[:64],
            outcome=outcome,
            detail=detail[:2000],
        )
        with self.sessions.begin() as session:
            session.add(row)
            session.flush()
            return row.id

    def audit_log(
        self,
        *,
        actor: str | None = None,
        action: str | None = None,
        since: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[AuditRecord]:
        """A page of the audit log, newest first (by id: the order appended), of one actor or
        action, at or after `since`."""
        query = select(AuditEntry)
        if actor is not None:
            query = query.where(AuditEntry.actor == actor)
        if action is not None:
            query = query.where(AuditEntry.action == action)
        if since is not None:
            query = query.where(AuditEntry.at >= _utc(since))
        if cursor is not None:
            query = query.where(AuditEntry.id < decode_cursor(cursor))
        query = query.order_by(AuditEntry.id.desc()).limit(limit + 1)
        with self.sessions() as session:
            items = [record(AuditRecord, row) for row in session.scalars(query)]
        return _page(items, limit)

    def admission_summary(
        self, since: datetime, cluster: str | None = None, denied_limit: int = 100
    ) -> AdmissionSummary:
        """The answers at or after `since` (of one cluster): counts per outcome and per (outcome,
        rule), dry runs apart, counts per namespace, and the `denied_limit` latest denials."""
        since = _utc(since)
        where: list[ColumnElement[bool]] = [AdmissionDecision.at >= since]
        if cluster is not None:
            where.append(AdmissionDecision.cluster == cluster)
        d = AdmissionDecision
        with self._reads.connect() as connection:
            counts = [
                AdmissionCount(str(c), str(ns), str(o), bool(dry), int(n))
                for c, ns, o, dry, n in connection.execute(
                    select(d.cluster, d.namespace, d.outcome, d.dry_run, func.count())
                    .where(*where)
                    .group_by(d.cluster, d.namespace, d.outcome, d.dry_run)
                    .order_by(d.cluster, d.namespace, d.outcome, d.dry_run)
                )
            ]
            # Rules are a JSON list: counted here, the same way on every backend.
            by_rule: dict[tuple[bool, str, str], int] = {}
            for o, dry, rules in connection.execute(
                select(d.outcome, d.dry_run, d.rules).where(*where, d.outcome.in_(("warned", "denied")))
            ):
                for rule in rules or ():
                    key = (bool(dry), str(o), str(rule))
                    by_rule[key] = by_rule.get(key, 0) + 1
            denied = tuple(
                record(AdmissionDecisionRecord, row)
                for row in connection.execute(
                    select(*_ADMISSION_COLUMNS)
                    .where(*where, d.outcome == "denied", d.dry_run == false())
                    .order_by(d.at.desc(), d.id.desc())
                    .limit(denied_limit)
                )
            )

        def per_outcome(dry: bool) -> dict[str, int]:
            out: dict[str, int] = {}
            for c in counts:
                if c.dry_run is dry:
                    out[c.outcome] = out.get(c.outcome, 0) + c.answers
            return dict(sorted(out.items()))

        def rules_of(dry: bool) -> tuple[tuple[str, str, int], ...]:
            found = [(o, rule, n) for (was_dry, o, rule), n in by_rule.items() if was_dry is dry]
            return tuple(sorted(found, key=lambda t: (t[0], -t[2], t[1])))

        return AdmissionSummary(
            since,
            per_outcome(False),
            per_outcome(True),
            rules_of(False),
            rules_of(True),
            tuple(counts),
            denied,
        )

    # -- aggregates for metrics ---------------------------------------------------------------

    def active_by_severity(self, target: str) -> dict[str, int]:
        """How many of the target's findings are active (new, open, reopened), per severity."""
        with self.sessions() as session:
            target_id = target_id_of(session, target)
            rows = session.execute(
                select(FindingRow.severity, func.count())
                .where(FindingRow.target_id == target_id, FindingRow.status.in_(ACTIVE_STATUSES))
                .group_by(FindingRow.severity)
            ).all()
        return {str(severity): int(n) for severity, n in rows}

    def metrics_snapshot(self) -> MetricsSnapshot:
        active = FindingRow.status.in_(ACTIVE_STATUSES)
        with self.sessions() as session:
            names = dict(session.execute(select(Target.id, Target.name)).all())

            def per_target(value: Any, *where: Any) -> dict[str, Any]:
                query = select(FindingRow.target_id, value).where(*where).group_by(FindingRow.target_id)
                return {names[t]: v for t, v in session.execute(query)}

            runs = tuple(
                (names[t], s, n)
                for t, s, n in session.execute(
                    select(Run.target_id, Run.status, func.count()).group_by(Run.target_id, Run.status)
                )
            )
            last_ok = {names[t]: at for t, at in _last_success(session).items()}
            open_findings = tuple(
                (str(severity), str(rule), int(n))
                for severity, rule, n in session.execute(
                    select(FindingRow.severity, FindingRow.rule, func.count())
                    .where(active)
                    .group_by(FindingRow.severity, FindingRow.rule)
                )
            )
            cost = {
                t: c or 0.0
                for t, c in per_target(func.sum(FindingRow.estimated_monthly_cost_usd), active).items()
            }
            blocked = per_target(
                func.count(), active, FindingRow.rule.in_(("cross-zone-blocked", "traffic-blocked"))
            )
        return MetricsSnapshot(tuple(sorted(names.values())), runs, last_ok, open_findings, cost, blocked)


def _last_success(session: Session) -> dict[int, datetime | None]:
    """When each target's last successful run finished, by target id."""
    query = select(Run.target_id, func.max(Run.finished_at)).where(Run.status == "succeeded")
    return {t: _as_utc(at) for t, at in session.execute(query.group_by(Run.target_id))}


# What a list of findings reads of a row: every column but the detail, and the target's name;
# as a named tuple (a Row looks its attributes up by name, five times slower).
_ListedRow = namedtuple(
    "_ListedRow",
    (
        "id",
        "target_id",
        "fingerprint",
        "rule",
        "severity",
        "certainty",
        "namespace",
        "kind",
        "workload",
        "file",
        "line",
        "message",
        "labels",
        "status",
        "first_seen_at",
        "last_seen_at",
        "resolved_at",
        "first_run_id",
        "last_run_id",
        "estimated_monthly_cost_usd",
        "estimated_slowdown_pct",
        "waiver_reason",
        "waiver_expires",
        "acknowledged_by",
        "acknowledged_at",
        "acknowledgement_note",
        "target_name",
    ),
)
_LISTED = (*(getattr(FindingRow, name) for name in _ListedRow._fields[:-1]), Target.name)


_ADMISSION_COLUMNS = tuple(AdmissionDecision.__table__.columns)
# The length of each bounded text column: a longer value is cut to it (PostgreSQL would refuse it).
_ADMISSION_LENGTHS = {
    c.name: c.type.length for c in _ADMISSION_COLUMNS if isinstance(c.type, String) and c.type.length
}


def _admission_values(decision: AdmissionRecord) -> dict[str, Any]:
    """The row of an answer: its fields, times in UTC, tuples as lists, texts cut to their column
    (`user` to 256 characters)."""
    values: dict[str, Any] = {}
    for c in _ADMISSION_COLUMNS:
        if c.name == "id":
            continue
        value = getattr(decision, c.name)
        if isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, datetime):
            value = _utc(value)
        elif isinstance(value, str) and c.name in _ADMISSION_LENGTHS:
            value = value[: _ADMISSION_LENGTHS[c.name]]
        values[c.name] = value
    return values


def _finding_record(
    f: Any,
    target: str,
    detail: dict[str, Any] | None = None,
    history: tuple[HistoryEntry, ...] | None = None,
) -> FindingRecord:
    """The record of a finding row (an ORM row or a row of the _LISTED columns), field by field:
    a page builds up to 500 of them per request."""
    return FindingRecord(
        id=f.id,
        target=target,
        fingerprint=f.fingerprint,
        rule=f.rule,
        severity=f.severity,
        certainty=f.certainty,
        status=f.status,
        workload=WorkloadRecord(f.kind, f.namespace, f.workload, f.file, f.line, dict(f.labels or {})),
        message=f.message,
        estimated_monthly_cost_usd=f.estimated_monthly_cost_usd,
        estimated_slowdown_pct=f.estimated_slowdown_pct,
        first_seen_at=_as_utc(f.first_seen_at),
        last_seen_at=_as_utc(f.last_seen_at),
        resolved_at=_as_utc(f.resolved_at),
        waiver=WaiverNote(f.waiver_reason, f.waiver_expires) if f.status == "waived" else None,
        acknowledgement=(
            AcknowledgementNote(f.acknowledged_by, _as_utc(f.acknowledged_at), f.acknowledgement_note or "")
            if f.acknowledged_by
            else None
        ),
        detail=detail,
        history=history,
    )


def _run_record(r: Run, target: str, **extras: Any) -> RunRecord:
    return record(
        RunRecord,
        r,
        target=target,
        findings=r.findings_count,
        new=r.new_count,
        reopened=r.reopened_count,
        resolved=r.resolved_count,
        waived=r.waived_count,
        errors=r.errors_count,
        **extras,
    )


Keyed = TypeVar("Keyed", FindingRecord, RunRecord, AuditRecord)


def _like(pattern: str) -> str:
    """A shell pattern (`*`, `?`) as a LIKE pattern, `%`, `_` and the escape itself escaped."""
    out = []
    for ch in pattern:
        if ch in "\\%_":
            out.append("\\" + ch)
        elif ch == "*":
            out.append("%")
        elif ch == "?":
            out.append("_")
        else:
            out.append(ch)
    return "".join(out)


def _in_scope(scope: Scope, target: Any, namespace: Any) -> ColumnElement[bool]:
    """Rows of the scope's targets or of a namespace matching one of its patterns."""
    terms: list[ColumnElement[bool]] = []
    if scope.targets is None:
        return true()
    if scope.targets:
        terms.append(target.in_(sorted(scope.targets)))
    if scope.namespaces is None:
        return true()
    terms.extend(namespace.like(_like(p), escape="\\") for p in scope.namespaces if "[" not in p)
    return or_(*terms) if terms else false()


def _page(items: list[Keyed], limit: int) -> Page[Keyed]:
    """The first `limit` of `items` (read one over the limit) and the cursor to the rest."""
    more = len(items) > limit
    return Page(items[:limit], encode_cursor(items[limit - 1].id) if more else None)
