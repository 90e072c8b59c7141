"""Renderers of audit results: json (the stable contract), table, sarif, junit, csv, markdown.

The finding reports (sarif, junit, csv) render one small protocol, `Audited`, that a fresh scan
(`scan.ScanResult`) and a store's rows (`StoredResult`) both satisfy."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from auditor.model.findings import Finding
from auditor.model.source import LoadError, NotAudited

if TYPE_CHECKING:  # the protocol names the type; rendering never needs the packs module
    from auditor.rules.packs import PolicyPack

ACTIVE = ("new", "open", "reopened")
BLOCKED_RULES = ("cross-zone-blocked", "traffic-blocked")  # the edge is shut, not only slowed
# The columns a store row keeps of a finding, which win over its stored detail.
_ROW_COLUMNS = (
    "rule",
    "severity",
    "certainty",
    "message",
    "estimated_monthly_cost_usd",
    "estimated_slowdown_pct",
)


class Audited(Protocol):
    """What the finding reports read of an audit."""

    @property
    def findings(self) -> Sequence[Finding]: ...
    @property
    def errors(self) -> Sequence[LoadError]: ...
    @property
    def notes(self) -> Sequence[str]: ...
    @property
    def not_audited(self) -> Sequence[NotAudited]: ...
    @property
    def complete(self) -> bool: ...
    @property
    def audited_objects(self) -> int: ...
    @property
    def network(self) -> str: ...
    @property
    def pack(self) -> PolicyPack | None: ...


@dataclass(frozen=True, slots=True)
class StoredResult:
    """Stored findings as an audit: the active findings of the targets' last runs. Complete only
    when every target's last run succeeded; the others are listed as not audited."""

    findings: Sequence[Finding]
    not_audited: Sequence[NotAudited] = ()
    errors: Sequence[LoadError] = ()
    notes: Sequence[str] = ()
    audited_objects: int = 0
    network: str = ""
    pack: PolicyPack | None = None

    @property
    def complete(self) -> bool:
        return not self.not_audited

    @classmethod
    def of(cls, rows: Iterable[Mapping[str, Any]], targets: Iterable[Mapping[str, Any]]) -> StoredResult:
        """From an export's finding rows (each with the finding's JSON as `detail`) and targets."""
        findings = sorted(stored_finding(r) for r in rows if r["status"] in ACTIVE)
        missing = []
        audited = 0
        for t in targets:
            last = t.get("last_run") or {}
            if last.get("status") != "succeeded":
                state = f"its last run {last['status']}" if last else "it was never audited"
                missing.append(NotAudited(f"target {t['name']}", f"{state}: its findings may be incomplete"))
            audited += int(last.get("audited_objects") or 0)
        return cls(findings, tuple(missing), audited_objects=audited)


def stored_finding(row: Mapping[str, Any]) -> Finding:
    """A stored finding row as the Finding it was (the store keeps `to_json` as its detail; the
    row's own columns win where the store updated them)."""
    detail = dict(row.get("detail") or {})
    for key in _ROW_COLUMNS:
        if key in row:
            detail[key] = row[key]
    detail.setdefault("workload", {k: v for k, v in row.get("workload", {}).items() if k != "labels"})
    return Finding.from_json(detail)
