"""What the store's read methods return: frozen records of stored rows, times aware UTC.

A record's fields are named and ordered as its JSON (auditor/service/wire.py turns records into
the API's JSON); a field made by `extra()` is read only by some methods (a finding's detail and
history, a run's load errors and costs) and left out of the JSON when it was not read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def extra() -> Any:
    """A field only some reads fill (None otherwise, and then absent from the JSON)."""
    return field(default=None, metadata={"extra": True})


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class WorkloadRecord:
    kind: str
    namespace: str
    name: str
    file: str
    line: int
    labels: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class WaiverNote:
    """The waiver that hides a waived finding."""

    reason: str | None
    expires: date | None


@dataclass(frozen=True, slots=True)
class AcknowledgementNote:
    """Who said, through the API, that they are on a finding (it hides nothing)."""

    by: str
    at: datetime | None
    note: str


@dataclass(frozen=True, slots=True)
class SuppressionRecord:
    """A finding suppressed through the API: a waiver the store keeps (origin `api`)."""

    target: str
    fingerprint: str
    rule: str
    reason: str
    expires: date
    created_by: str
    created_at: datetime | None


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """A finding as one run saw (or resolved) it."""

    run_id: int
    at: datetime | None
    revision: str | None
    status: str
    severity: str
    certainty: str
    estimated_monthly_cost_usd: float | None
    estimated_slowdown_pct: float | None


@dataclass(frozen=True, slots=True)
class FindingRecord:
    id: int
    target: str
    fingerprint: str
    rule: str
    severity: str
    certainty: str
    status: str
    workload: WorkloadRecord
    message: str
    estimated_monthly_cost_usd: float | None
    estimated_slowdown_pct: float | None
    first_seen_at: datetime | None
    last_seen_at: datetime | None
    resolved_at: datetime | None
    waiver: WaiverNote | None
    acknowledgement: AcknowledgementNote | None
    detail: dict[str, Any] | None = extra()  # the finding as in the JSON report
    history: tuple[HistoryEntry, ...] | None = extra()


@dataclass(frozen=True, slots=True)
class RuleCost:
    findings: int
    monthly_usd: float


@dataclass(frozen=True, slots=True)
class RunRecord:
    id: int
    target: str
    slot: str | None
    trigger: str
    status: str
    revision: str | None
    started_at: datetime | None
    finished_at: datetime | None
    findings: int
    new: int
    reopened: int
    resolved: int
    waived: int
    errors: int
    audited_objects: int
    estimated_monthly_cost_usd: float | None
    error: str | None
    load_errors: tuple[dict[str, Any], ...] | None = extra()  # the first files that could not be read
    cost_by_rule: Mapping[str, RuleCost] | None = extra()


@dataclass(frozen=True, slots=True)
class TargetRecord:
    name: str
    kind: str
    location: str
    branch: str | None
    paths: tuple[str, ...]
    node_files: tuple[str, ...]
    schedule: str | None  # the one in force: set through the API, else the config's
    last_successful_run_at: datetime | None
    configured_schedule: str | None  # the config's
    schedule_changed_by: str | None  # who set the schedule through the API (None: the config's)
    schedule_changed_at: datetime | None
    retired_at: datetime | None  # an App repository removed from the App: no longer audited since


@dataclass(frozen=True, slots=True)
class TargetEvidence:
    """A target with its last finished run and its last successful one (reports, digests)."""

    name: str
    kind: str
    location: str
    last_run: RunRecord | None
    last_successful_run: RunRecord | None
    retired_at: datetime | None = None  # removed from the GitHub App: no longer audited since


@dataclass(frozen=True, slots=True)
class WaiverRecord:
    target: str
    fingerprint: str
    source: str
    reason: str
    expires: date
    expired: bool


@dataclass(frozen=True, slots=True)
class Export:
    """What a compliance report or a digest reads (Store.export)."""

    targets: tuple[TargetEvidence, ...]
    findings: tuple[FindingRecord, ...]
    waivers: tuple[WaiverRecord, ...]
    runs: tuple[RunRecord, ...]


@dataclass(frozen=True, slots=True)
class Changes:
    """Findings that became new, reopened or resolved in a period, with their detail."""

    new: tuple[FindingRecord, ...]
    reopened: tuple[FindingRecord, ...]
    resolved: tuple[FindingRecord, ...]


@dataclass(frozen=True, slots=True)
class DigestRecord:
    """A digest in the outbox."""

    id: int
    team: str
    status: str  # pending | sent | failed
    attempts: int
    last_error: str | None
    message_id: str | None
    recipients: tuple[str, ...]
    subject: str
    text: str
    html: str
    period_end: datetime


@dataclass(frozen=True, slots=True)
class PullRequestRecord:
    workload: str
    branch: str
    number: int
    url: str
    state: str
    fix_id: str
    closed_by_human: bool


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """The aggregates one Prometheus scrape reports."""

    targets: tuple[str, ...]
    runs: tuple[tuple[str, str, int], ...]  # (target, status, count)
    last_success: Mapping[str, datetime | None]
    open_findings: tuple[tuple[str, str, int], ...]  # (severity, rule, count)
    cost: Mapping[str, float]
    blocked: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class AdmissionDecisionRecord:
    """One stored answer of the admission webhook (auditor/admission/record.py says each field)."""

    id: int
    cluster: str
    uid: str
    at: datetime
    operation: str
    api_version: str
    kind: str
    namespace: str
    name: str
    user: str
    mode: str
    outcome: str
    dry_run: bool
    latency_ms: float
    rules: tuple[str, ...]
    groups: tuple[str, ...]
    messages: tuple[str, ...]
    reason: str
    fingerprints: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AdmissionCount:
    """How many answers of one outcome the webhook gave in one namespace of one cluster."""

    cluster: str
    namespace: str
    outcome: str
    dry_run: bool
    answers: int


@dataclass(frozen=True, slots=True)
class AdmissionSummary:
    """The admission webhook's answers since a time (the web page's counts, the digest).

    A dry run (`kubectl apply --dry-run=server`) changes nothing, so its answers are counted apart:
    a dry-run `denied` is a request that *would have been* denied, never a denial."""

    since: datetime
    outcomes: Mapping[str, int]  # answers that took effect, per outcome
    dry_run: Mapping[str, int]  # dry-run answers, per outcome
    by_rule: tuple[tuple[str, str, int], ...]  # (outcome, rule, answers) of those that took effect
    dry_run_by_rule: tuple[tuple[str, str, int], ...]  # the same of the dry runs
    by_namespace: tuple[AdmissionCount, ...]  # every count, per cluster and namespace (digest routing)
    denied: tuple[AdmissionDecisionRecord, ...]  # denials (no dry run), newest first, capped


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One entry of the audit log (store/schema.py AuditEntry says each field)."""

    id: int
    at: datetime
    actor: str
    action: str
    subject: str
    address: str
    outcome: str
    detail: str


@dataclass(frozen=True, slots=True)
class Scope:
    """What a caller may read (service/access.py): the findings, runs and admission answers of
    these targets, or of namespaces matching these shell patterns (`ml-*`); None: every one."""

    targets: frozenset[str] | None
    namespaces: tuple[str, ...] | None

    @property
    def everything(self) -> bool:
        return self.targets is None and self.namespaces is None

    def sees_target(self, target: str) -> bool:
        return self.targets is None or target in self.targets

    def sees(self, target: str, namespace: str) -> bool:
        import fnmatch

        if self.sees_target(target):
            return True
        return self.namespaces is None or any(fnmatch.fnmatchcase(namespace, p) for p in self.namespaces)
