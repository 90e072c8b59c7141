"""The scan use case: inventory → model → rules → result (pure once the inventory is loaded)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from datetime import date

from auditor.inventory import Inventory
from auditor.model.findings import SEVERITY_RANK, Finding
from auditor.model.source import LoadError, NotAudited
from auditor.placement.observed import Observation, observe
from auditor.progress import Progress, silent
from auditor.rules import live, run_rules
from auditor.rules.groups import Groups, groups
from auditor.rules.model import AuditModel, build_model, object_ref, workload_object
from auditor.rules.packs import (
    ExpiredWaiver,
    PolicyPack,
    WaivedFinding,
    apply_pack,
    evaluate_custom_rules,
    load_packs,
)


@dataclass
class ScanResult:
    findings: list[Finding]
    errors: list[LoadError]
    notes: list[str] = field(default_factory=list)
    audited_objects: int = 0
    network: str = ""
    skipped_kinds: dict[str, int] = field(default_factory=dict)
    waived: list[WaivedFinding] = field(default_factory=list)
    expired_waivers: list[ExpiredWaiver] = field(default_factory=list)
    # Where the live pods run (a cluster or snapshot audit); None for manifests only.
    observation: Observation | None = None
    # metadata.labels of the workloads that have findings, by workload identity (digest routing).
    workload_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    # What the scan understood (training groups, roles, edges); None for results not from a scan.
    groups: Groups | None = None
    # What the audit did not see (a skipped or failed render, an unreadable file): when any,
    # the audit is partial (`auditor scan` exits 3) and a stored run resolves nothing.
    not_audited: list[NotAudited] = field(default_factory=list)
    # The model the findings came from (remediation plans fixes on it); None for stored results.
    model: AuditModel | None = field(default=None, repr=False, compare=False)
    # The policy packs the scan ran under (SARIF lists their custom rules and severity overrides).
    pack: PolicyPack | None = field(default=None, repr=False, compare=False)

    @property
    def complete(self) -> bool:
        return not self.not_audited

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
            "complete": self.complete,
            "not_audited": [n.to_json() for n in self.not_audited],
            "audited_objects": self.audited_objects,
            "waived": len(self.waived),
            "skipped_kinds": dict(sorted(self.skipped_kinds.items())),
            **(
                {
                    "groups": len(self.groups.groups),
                    "edges": self.groups.edges,
                    "workloads_without_edges": self.groups.workloads_without_edges,
                    "unlisted_workloads_by_kind": dict(self.groups.unlisted_by_kind),
                }
                if self.groups is not None
                else {}
            ),
        }


def scan(
    inv: Inventory, pack: PolicyPack | None = None, today: date | None = None, progress: Progress = silent
) -> ScanResult:
    """Findings for an inventory under a policy pack (the default pack when none is given).

    `today` decides which waivers are in force; the caller supplies it (the core reads no clock).
    Without it no waiver is in force: nothing is hidden on an unknown date.
    """
    model = build_model(inv, progress)
    pack = pack if pack is not None else load_packs([])
    raw = run_rules(model, pack.rule_options())
    notes: list[str] = []
    observation: Observation | None = None
    if inv.live_pods:
        observation = observe(inv.workloads, inv.live_pods, inv.nodes, inv.settings.topology.zone_key)
        now = build_model(inv, silent, observation.roles, model.engine)
        observed = [
            *live.observed_edge_findings(run_rules(now, pack.rule_options())),
            *live.pending_findings(observation, model.placements),
        ]
        running = {object_ref(r).identity for r, o in observation.roles.items() if o.pods}
        raw = live.join(raw, observed, running)
        if observation.unmatched:
            notes.append(
                f"{len(observation.unmatched)} running pod(s) matched no audited workload role "
                f"(e.g. {observation.unmatched[0].namespace}/{observation.unmatched[0].name})"
            )
    custom, custom_errors = evaluate_custom_rules(pack, model)
    applied = apply_pack([*raw, *custom], model, pack, today or date.max)
    findings = sorted(applied.findings)
    audited = len(inv.workloads) + len(inv.policies) + len(inv.nodes) + len(inv.services)
    with_findings = {f.workload.identity for f in findings} | {
        w.finding.workload.identity for w in applied.waived
    }
    labels = {}
    for w in inv.workloads:
        identity = workload_object(w.ref).identity
        if identity in with_findings and w.labels:
            labels[identity] = dict(w.labels)
    return ScanResult(
        findings,
        [*inv.errors, *custom_errors, *applied.errors],
        [*inv.notes, *model.notes, *notes, *applied.notes],
        audited,
        inv.network.describe(),
        dict(inv.skipped_kinds),
        list(applied.waived),
        list(applied.expired),
        observation,
        labels,
        groups(model),
        list(inv.not_audited),
        model,
        pack,
    )


def apply_baseline(result: ScanResult, known: set[str]) -> ScanResult:
    """Only the findings whose fingerprints the earlier report did not have."""
    fresh = [f for f in result.findings if f.fingerprint not in known]
    notes = [*result.notes, f"baseline: {len(result.findings) - len(fresh)} known finding(s) not reported"]
    return dataclasses.replace(result, findings=fresh, notes=notes)
