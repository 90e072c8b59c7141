"""The scan use case: inventory → model → rules → result (pure once the inventory is loaded)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from auditor.inventory import Inventory
from auditor.model.findings import SEVERITY_RANK, Finding
from auditor.model.source import LoadError
from auditor.progress import Progress, silent
from auditor.rules import run_rules
from auditor.rules.model import build_model


@dataclass
class ScanResult:
    findings: list[Finding]
    errors: list[LoadError]
    notes: list[str] = field(default_factory=list)
    audited_objects: int = 0
    network: str = ""
    skipped_kinds: dict[str, int] = field(default_factory=dict)

    def at_or_above(self, severity: str) -> list[Finding]:
        if severity == "none":
            return []
        limit = SEVERITY_RANK[severity]
        return [f for f in self.findings if SEVERITY_RANK[f.severity] <= limit]

    def summary(self) -> dict[str, object]:
        by_sev = Counter(f.severity for f in self.findings)
        costs = [
            f.estimated_monthly_cost_usd for f in self.findings if f.estimated_monthly_cost_usd is not None
        ]
        return {
            "findings": len(self.findings),
            "by_severity": {s: by_sev[s] for s in SEVERITY_RANK if by_sev[s]},
            "estimated_monthly_cost_usd": round(sum(costs), 2) if costs else None,
            "errors": len(self.errors),
            "audited_objects": self.audited_objects,
            "skipped_kinds": dict(sorted(self.skipped_kinds.items())),
        }


def scan(inv: Inventory, progress: Progress = silent) -> ScanResult:
    model = build_model(inv, progress)
    findings = run_rules(model)
    audited = len(inv.workloads) + len(inv.policies) + len(inv.nodes) + len(inv.services)
    return ScanResult(
        findings,
        list(inv.errors),
        [*inv.notes, *model.notes],
        audited,
        inv.network.describe(),
        dict(inv.skipped_kinds),
    )


def apply_baseline(result: ScanResult, known: set[str]) -> ScanResult:
    """Only the findings whose fingerprints the earlier report did not have."""
    fresh = [f for f in result.findings if f.fingerprint not in known]
    notes = [*result.notes, f"baseline: {len(result.findings) - len(fresh)} known finding(s) not reported"]
    return ScanResult(
        fresh, result.errors, notes, result.audited_objects, result.network, result.skipped_kinds
    )
