"""The HTTP API's JSON of the store's records (auditor/store/records.py), also what the CLI's
`findings --format json`, the digests and the compliance reports read: each record's fields in
their order, times ISO 8601 UTC with a `Z`, dates ISO, tuples as lists; an extra field (a
finding's detail and history, a run's load errors and costs) only when it was read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from datetime import UTC, date, datetime
from typing import Any

from auditor.store.records import Changes, Export, FindingRecord, Page, RunRecord, TargetRecord


def iso(value: datetime | None) -> str | None:
    """An aware time as ISO 8601 UTC (`...Z`); naive times are UTC (SQLite returns them)."""
    if value is None:
        return None
    value = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return value.isoformat().replace("+00:00", "Z")


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in fields(value):
            item = getattr(value, f.name)
            if item is not None or not f.metadata.get("extra"):
                out[f.name] = _plain(item)
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


def finding_json(finding: FindingRecord) -> dict[str, Any]:
    """A finding (GET /api/v1/findings/{id} with its detail and history)."""
    return dict(_plain(finding))


def run_json(run: RunRecord) -> dict[str, Any]:
    """A run (GET /api/v1/runs/{id} with its load errors and cost by rule)."""
    return dict(_plain(run))


def target_json(target: TargetRecord) -> dict[str, Any]:
    """A target as GET /api/v1/targets lists it."""
    return dict(_plain(target))


def page_json(page: Page[FindingRecord] | Page[RunRecord]) -> dict[str, Any]:
    """A page of findings or runs: `items` and `next_cursor`."""
    return dict(_plain(page))


def export_json(export: Export) -> dict[str, Any]:
    """The export compliance reports and digests read: targets, findings, waivers and runs."""
    return dict(_plain(export))


def changes_json(changes: Changes) -> dict[str, list[dict[str, Any]]]:
    """The digest's changes: findings new, reopened and resolved in the period."""
    return dict(_plain(changes))
