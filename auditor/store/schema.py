"""The findings store's tables (SQLAlchemy 2.x declarative, typed `Mapped[...]`).

- `targets`: what is audited (a Git repository or a plain directory; clusters later) and when.
- `runs`: one audit of one target. `slot` is the scheduled time a run belongs to; the unique
  (target, slot) pair is how two `serve` processes on one database agree that only one of them runs
  a slot. A run is written as `running` when it starts and completed in one transaction at the end,
  so a killed process leaves a `running` row (later marked `interrupted`), never half a result.
- `findings`: one row per (target, fingerprint) with its lifecycle (lifecycle.py).
- `observations`: one row per finding per run that saw it: history and cost trends.
- `cost_estimates`: the estimated monthly inter-AZ cost of a run, per rule.
- `waivers`: waivers seen in force (or expired) by a run.
- Fleet (Celery workers, the GitHub App; 0007): `runs.task_key` makes a task idempotent (a
  redelivered task finds its run by key); `target_leases` lets one worker of the fleet audit a
  target at a time; `webhook_deliveries` remembers GitHub delivery ids until they expire;
  `check_runs` keeps the check run id per (repository, head SHA, kind), so it is updated, never
  created twice.
- 0008: findings (namespace, rule, id), for pages filtered on both.
- `admission_decisions` (0009): one row per answer of the admission webhook
  (auditor/admission/record.py), unique per (cluster, request uid) so a retried request is stored
  once; read newest first per cluster or per outcome (the web page, the API, the digest).
- `audit_log` (0010): every write to the service (who, what, on what, when, from where, done or
  refused), append-only: the database's triggers refuse an UPDATE, DELETE or TRUNCATE of it.
- 0011, the API's writes: `suppressions` (a finding hidden until a date, by whom and why; runs
  apply them as waivers), findings' acknowledgement (who, when, a note), a target's
  `schedule_override` (a schedule set through the API, in force instead of the config's).
- 0012, the App's scheduled audits: `app_repositories` keeps the default branch, its ETag and the
  head SHA last audited (an unchanged branch costs one conditional request); `targets.retired_at`
  marks a repository removed from the App (its findings kept, no longer audited).

Times are timezone-aware UTC. Migrations (migrations/) must match these models; a test compares them.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Stable constraint names, so migrations and models compare equal on every backend.
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

RUN_STATUSES = ("running", "succeeded", "failed", "partial", "interrupted")
FINDING_STATUSES = ("new", "open", "resolved", "reopened", "waived")
# Statuses under which a finding counts as present (metrics, digests).
ACTIVE_STATUSES = ("new", "open", "reopened")

# SQLite only auto-increments INTEGER PRIMARY KEY; PostgreSQL gets 64-bit ids.
Id = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Target(Base):
    __tablename__ = "targets"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    kind: Mapped[str] = mapped_column(String(20))  # git | directory | cluster
    location: Mapped[str] = mapped_column(Text)  # URL or path (credentials never stored)
    branch: Mapped[str | None] = mapped_column(String(255))
    paths: Mapped[list[str]] = mapped_column(JSON, default=list)
    node_files: Mapped[list[str]] = mapped_column(JSON, default=list)
    schedule: Mapped[str | None] = mapped_column(String(120))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # A schedule set through the API (0011), in force instead of the config's until it is cleared;
    # who set it, and when.
    schedule_override: Mapped[str | None] = mapped_column(String(120))
    schedule_changed_by: Mapped[str | None] = mapped_column(String(256))
    schedule_changed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # A GitHub App repository removed from its installation (or the App uninstalled), 0012: no longer
    # audited since then; its runs and findings are kept, marked by this.
    retired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        UniqueConstraint("target_id", "slot"),
        Index(None, "target_id", "started_at"),
        Index(None, "status"),
        Index(None, "task_key", unique=True),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id", ondelete="CASCADE"))
    # The task's idempotency key (Celery tasks: `audit:<target>:<slot or request id>`); NULL for
    # runs the embedded service and the CLI start. Unique: a redelivered task finds its run.
    task_key: Mapped[str | None] = mapped_column(String(200))
    slot: Mapped[str | None] = mapped_column(String(40))  # scheduled time (UTC ISO); NULL when manual
    trigger: Mapped[str] = mapped_column(String(20))  # schedule | api | cli | startup
    status: Mapped[str] = mapped_column(String(20))
    revision: Mapped[str | None] = mapped_column(String(64))  # commit SHA (or cluster version)
    owner: Mapped[str] = mapped_column(String(255))  # host:pid of the process running it
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    heartbeat_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    findings_count: Mapped[int] = mapped_column(Integer, default=0)
    new_count: Mapped[int] = mapped_column(Integer, default=0)
    reopened_count: Mapped[int] = mapped_column(Integer, default=0)
    resolved_count: Mapped[int] = mapped_column(Integer, default=0)
    waived_count: Mapped[int] = mapped_column(Integer, default=0)
    errors_count: Mapped[int] = mapped_column(Integer, default=0)
    audited_objects: Mapped[int] = mapped_column(Integer, default=0)
    estimated_monthly_cost_usd: Mapped[float | None] = mapped_column(Float)
    error: Mapped[str | None] = mapped_column(Text)
    errors: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)  # first load errors

    @classmethod
    def running(
        cls,
        target_id: int,
        slot: str | None,
        trigger: str,
        owner: str,
        now: datetime,
        task_key: str | None = None,
    ) -> Run:
        """A run just claimed: `running`, started and heartbeating now."""
        return cls(
            target_id=target_id,
            task_key=task_key,
            slot=slot,
            trigger=trigger,
            status="running",
            owner=owner,
            started_at=now,
            heartbeat_at=now,
            errors=[],
        )


class Finding(Base):
    __tablename__ = "findings"
    __table_args__ = (
        UniqueConstraint("target_id", "fingerprint"),
        Index(None, "target_id", "status", "id"),
        Index(None, "target_id", "id"),
        Index(None, "status", "id"),
        Index(None, "rule", "id"),
        Index(None, "severity", "id"),
        Index(None, "namespace", "id"),
        # rule + namespace pages (0008): an index walk that stops at the page, not two bitmaps and a sort.
        Index(None, "namespace", "rule", "id"),
        Index(None, "last_seen_at"),
        Index(None, "resolved_at"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id", ondelete="CASCADE"))
    fingerprint: Mapped[str] = mapped_column(String(64))
    rule: Mapped[str] = mapped_column(String(120))
    severity: Mapped[str] = mapped_column(String(20))
    certainty: Mapped[str] = mapped_column(String(20))
    namespace: Mapped[str] = mapped_column(String(253))
    kind: Mapped[str] = mapped_column(String(120))
    workload: Mapped[str] = mapped_column(String(253))
    file: Mapped[str] = mapped_column(Text)
    line: Mapped[int] = mapped_column(Integer)
    message: Mapped[str] = mapped_column(Text)
    detail: Mapped[dict[str, Any]] = mapped_column(JSON)  # the finding as in the JSON report
    # The workload's metadata.labels when last seen (digests route teams by label); None before 0005.
    labels: Mapped[dict[str, str] | None] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(20))
    first_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    resolved_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    first_run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    last_run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    estimated_monthly_cost_usd: Mapped[float | None] = mapped_column(Float)
    estimated_slowdown_pct: Mapped[float | None] = mapped_column(Float)
    waiver_reason: Mapped[str | None] = mapped_column(Text)
    waiver_expires: Mapped[date | None] = mapped_column(Date)
    # Someone is on it (0011): who acknowledged the finding through the API, when, and their note.
    # Runs keep it; it hides nothing.
    acknowledged_by: Mapped[str | None] = mapped_column(String(256))
    acknowledged_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    acknowledgement_note: Mapped[str | None] = mapped_column(Text)


class Observation(Base):
    __tablename__ = "observations"
    __table_args__ = (UniqueConstraint("finding_id", "run_id"), Index(None, "run_id"))

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    finding_id: Mapped[int] = mapped_column(ForeignKey("findings.id", ondelete="CASCADE"))
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(String(20))  # the finding's status after this run
    severity: Mapped[str] = mapped_column(String(20))
    certainty: Mapped[str] = mapped_column(String(20))
    estimated_monthly_cost_usd: Mapped[float | None] = mapped_column(Float)
    estimated_slowdown_pct: Mapped[float | None] = mapped_column(Float)


class CostEstimate(Base):
    __tablename__ = "cost_estimates"
    __table_args__ = (UniqueConstraint("run_id", "rule"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id", ondelete="CASCADE"))
    rule: Mapped[str] = mapped_column(String(120))
    findings: Mapped[int] = mapped_column(Integer)
    monthly_usd: Mapped[float] = mapped_column(Float)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Waiver(Base):
    __tablename__ = "waivers"
    __table_args__ = (UniqueConstraint("target_id", "fingerprint", "source"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id", ondelete="CASCADE"))
    fingerprint: Mapped[str] = mapped_column(String(64))  # the finding it hides (or hid)
    source: Mapped[str] = mapped_column(String(255))  # annotation or pack file + name
    reason: Mapped[str] = mapped_column(Text)
    expires: Mapped[date] = mapped_column(Date)
    expired: Mapped[bool] = mapped_column(default=False)
    last_run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))


class Suppression(Base):
    """A finding suppressed through the API (0011): a waiver kept in the store, applied by every
    run of its target as the policy packs' waivers are (origin `api`), until `expires`."""

    __tablename__ = "suppressions"
    __table_args__ = (UniqueConstraint("target_id", "fingerprint"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id", ondelete="CASCADE"))
    fingerprint: Mapped[str] = mapped_column(String(64))
    rule: Mapped[str] = mapped_column(String(120))
    reason: Mapped[str] = mapped_column(Text)
    expires: Mapped[date] = mapped_column(Date)
    created_by: Mapped[str] = mapped_column(String(256))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class PullRequest(Base):
    """A fix pull request this tool opened (or found) for one workload of one target."""

    __tablename__ = "pull_requests"
    __table_args__ = (
        UniqueConstraint("target_id", "branch", "number"),
        Index(None, "target_id", "created_at"),
        Index(None, "target_id", "fix_id"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id", ondelete="CASCADE"))
    workload: Mapped[str] = mapped_column(String(600))  # group/kind/namespace/name
    branch: Mapped[str] = mapped_column(String(255))
    number: Mapped[int] = mapped_column(Integer)
    url: Mapped[str] = mapped_column(Text)
    # open | closed | merged | superseded (closed by the tool when the workload's fix changed)
    state: Mapped[str] = mapped_column(String(20))
    # The fix's identity (gitops/pulls.py fix_intent: workload, rule, finding, zone, patches), hashed.
    fix_id: Mapped[str] = mapped_column(String(64))
    closed_by_human: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Digest(Base):
    """The digest outbox: one e-mail per team per UTC day; retried after temporary failures until
    sent, marked failed (with the reason) after a permanent one."""

    __tablename__ = "digests"
    __table_args__ = (UniqueConstraint("team", "period_end"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    team: Mapped[str] = mapped_column(String(200))
    period_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    period_end: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    recipients: Mapped[list[str]] = mapped_column(JSON)
    subject: Mapped[str] = mapped_column(Text)
    text: Mapped[str] = mapped_column(Text)
    html: Mapped[str] = mapped_column(Text)
    # pending (queued; a temporary failure keeps it so) | sent | failed (permanently, see last_error)
    status: Mapped[str] = mapped_column(String(20))
    # The same on every attempt, so a receiver drops a resend after a lost acknowledgement.
    # None for rows queued before 0006 (the mailer derives the same one from team and day).
    message_id: Mapped[str | None] = mapped_column(String(255))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class TargetLease(Base):
    """One run per target across the fleet: the worker holding an unexpired lease audits it."""

    __tablename__ = "target_leases"

    target: Mapped[str] = mapped_column(String(200), primary_key=True)
    owner: Mapped[str] = mapped_column(String(255))  # host:pid of the worker
    task_key: Mapped[str | None] = mapped_column(String(200))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class WebhookDelivery(Base):
    """A GitHub webhook delivery seen (X-GitHub-Delivery), kept until `expires_at`."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (Index(None, "expires_at"),)

    delivery_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    event: Mapped[str] = mapped_column(String(60))
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class CheckRunRow(Base):
    """The check run published for one (repository, head SHA, kind)."""

    __tablename__ = "check_runs"
    __table_args__ = (UniqueConstraint("repository", "head_sha", "kind"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    repository: Mapped[str] = mapped_column(String(255))  # owner/name
    head_sha: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(60))  # e.g. placement-audit
    check_run_id: Mapped[int | None] = mapped_column(BigInteger)  # GitHub's id, once created
    status: Mapped[str] = mapped_column(String(20))  # queued | in_progress | completed
    conclusion: Mapped[str | None] = mapped_column(String(30))
    # Annotations already sent (GitHub appends them on every update and has no way to remove
    # them): a task resuming after a crash sends only the rest.
    annotations_sent: Mapped[int] = mapped_column(Integer, default=0)
    task_key: Mapped[str | None] = mapped_column(String(200))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class AppRepository(Base):
    """A repository the GitHub App is installed on: an audit target while `active`."""

    __tablename__ = "app_repositories"

    full_name: Mapped[str] = mapped_column(String(255), primary_key=True)  # owner/name
    installation_id: Mapped[int] = mapped_column(BigInteger)
    active: Mapped[bool] = mapped_column(default=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # The scheduled audit's conditional request (0012): the default branch, the ETag GitHub gave for
    # it, the head SHA last audited with success, and when GitHub was last asked.
    default_branch: Mapped[str | None] = mapped_column(String(255))
    branch_etag: Mapped[str | None] = mapped_column(String(200))
    audited_sha: Mapped[str | None] = mapped_column(String(64))
    checked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class AdmissionDecision(Base):
    """One answer of the admission webhook: what was asked (operation, object, requester) and what
    it answered. `user` is the requester's username only: its groups and extra are never stored (a
    token can sit in them). Lists are JSON lists, as everywhere in this schema."""

    __tablename__ = "admission_decisions"
    __table_args__ = (
        UniqueConstraint("cluster", "uid"),
        Index(None, "cluster", "at"),
        Index(None, "outcome", "at"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    cluster: Mapped[str] = mapped_column(String(200))
    uid: Mapped[str] = mapped_column(String(128))  # the AdmissionReview request uid (a UUID)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    operation: Mapped[str] = mapped_column(String(20))  # CREATE | UPDATE | DELETE | CONNECT
    api_version: Mapped[str] = mapped_column(String(320))  # group/version of the object
    kind: Mapped[str] = mapped_column(String(120))
    namespace: Mapped[str] = mapped_column(String(253))  # "" for a cluster-scoped object
    name: Mapped[str] = mapped_column(String(253))
    user: Mapped[str] = mapped_column(String(256))  # userInfo.username, cut at 256 characters
    mode: Mapped[str] = mapped_column(String(10))  # warn | deny | off
    outcome: Mapped[str] = mapped_column(String(20))  # allowed | warned | denied | failed-open | ignored
    dry_run: Mapped[bool] = mapped_column(Boolean)
    latency_ms: Mapped[float] = mapped_column(Float)
    rules: Mapped[list[str]] = mapped_column(JSON)
    groups: Mapped[list[str]] = mapped_column(JSON)  # namespace/name of the workloads with findings
    messages: Mapped[list[str]] = mapped_column(JSON)  # the warnings, or the denial, as sent
    reason: Mapped[str] = mapped_column(Text)  # why it failed open or was ignored; "" otherwise
    fingerprints: Mapped[list[str]] = mapped_column(JSON)


class AuditEntry(Base):
    """One write to the service, appended and never changed: who (`actor`: `cli:user@host`,
    `token:<first 12 hex digits of the token's SHA-256>`, `github:<login>`, or `anonymous` for a
    refused request), what (`action`, e.g. `run.start`), on what (`subject`: a target, a finding,
    a repository), when, from where (`address`: the client's IP, or the CLI's host), whether it
    was done or refused, and `detail` (a run id, a reason). The migration adds triggers that make
    the database itself refuse an UPDATE or DELETE of a row."""

    __tablename__ = "audit_log"
    __table_args__ = (Index(None, "at"), Index(None, "actor", "at"))

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    actor: Mapped[str] = mapped_column(String(256))
    action: Mapped[str] = mapped_column(String(64))
    subject: Mapped[str] = mapped_column(String(512))
    address: Mapped[str] = mapped_column(String(64))
    outcome: Mapped[str] = mapped_column(String(16))  # done | refused | failed
    detail: Mapped[str] = mapped_column(Text)
