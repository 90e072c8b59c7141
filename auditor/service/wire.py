"""The HTTP API's JSON of the store's records (auditor/store/records.py), also what the CLI's
`findings --format json`, the digests and the compliance reports read: each record's fields in
their order, times ISO 8601 UTC with a `Z`, dates ISO, tuples as lists; an extra field (a
finding's detail and history, a run's load errors and costs) only when it was read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from datetime import UTC, date, datetime
from typing import Any

from auditor.store.records import (
    AdmissionDecisionRecord,
    AdmissionSummary,
    AuditRecord,
    Changes,
    Export,
    FindingRecord,
    Page,
    RunRecord,
    TargetRecord,
)


def iso(value: datetime | None) -> str | None:
    """An aware time as ISO 8601 UTC (`...Z`); naive times are UTC (SQLite returns them)."""
    if value is None:
        return None
    value = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return value.isoformat().replace("+00:00", "Z")


# Per record class, its fields in order and whether each is an extra (left out when None):
# read once, not per record (a page has up to 500 records of some 30 values each).
_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _plain(value: Any) -> Any:
    if type(value) in _SCALARS:
        return value
    spec = _FIELDS.get(type(value))
    if spec is None and is_dataclass(value) and not isinstance(value, type):
        spec = _FIELDS[type(value)] = tuple((f.name, bool(f.metadata.get("extra"))) for f in fields(value))
    if spec is not None:
        out = {}
        for name, extra in spec:
            item = getattr(value, name)
            if item is not None or not extra:
                out[name] = _plain(item)
        return out
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


Record = (
    FindingRecord
    | RunRecord
    | TargetRecord
    | Page[FindingRecord]
    | Page[RunRecord]
    | Export
    | Changes
    | AdmissionDecisionRecord
    | Page[AdmissionDecisionRecord]
    | AdmissionSummary
    | Page[AuditRecord]
)


def record_json(record: Record) -> dict[str, Any]:
    """A record as the API's JSON: a finding or a run (GET /api/v1/findings/{id} and
    /api/v1/runs/{id}, with the extras read), a target (GET /api/v1/targets), a page (`items` and
    `next_cursor`), the export compliance reports and digests read, a digest's changes, or the
    admission webhook's answers (GET /api/v1/admission) and their summary (digests), or a page of
    the audit log (GET /api/v1/audit-log)."""
    return dict(_plain(record))
