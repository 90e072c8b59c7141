"""The scan use case: inventory → model → rules → result (pure once the inventory is loaded)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date

from auditor.inventory import Inventory, kinds_skipped
from auditor.model.findings import SEVERITY_RANK, Finding
from auditor.model.source import LoadError, NotAudited
from auditor.placement.observed import Observation, observe
from auditor.progress import Progress, silent
from auditor.rules import live, run_rules
from auditor.rules.groups import GroupEntry, Groups, group_entries, summarise
from auditor.rules.model import AuditModel, build_model, object_ref
from auditor.rules.packs import (
    ExpiredWaiver,
    PackSubjects,
    PolicyPack,
    WaivedFinding,
    apply_pack_to,
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
    # The JSON report's text of findings (json_report.finding_text), by the id of the finding
    # object it was written for (kept with it, so the id cannot be another's), where an
    # incremental scan's cache kept it: the report uses it instead of writing it again.
    finding_json: Mapping[int, tuple[Finding, str]] = field(default_factory=dict, repr=False, compare=False)

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


@dataclass
class Audited:
    """An audit before its policy pack is applied and its report put in order: what `finish`
    turns into a ScanResult. What concerns one file says which, so an incremental audit can put
    one together from the parts of several (auditor/audit/fragments.py)."""

    # Built-in and custom findings, before the pack's scopes, severities and waivers.
    candidates: list[Finding]
    # What the pack reads of the workloads (labels, annotation waivers).
    subjects: PackSubjects
    errors: list[LoadError]
    # Notes on the whole inventory (first), per file (then, by file), and on the model (last).
    notes: list[str]
    file_notes: list[tuple[str, str]]
    model_notes: list[str]
    # Audited objects (workloads, policies, nodes, Services) per file; skipped kinds per file.
    audited: dict[str, int]
    skipped: dict[tuple[str, str], int]
    group_entries: list[GroupEntry]
    network: str
    not_audited: list[NotAudited]
    # How reports order what concerns files: see Inventory.file_order.
    file_order: dict[str, int]
    observation: Observation | None = None
    model: AuditModel | None = field(default=None, repr=False, compare=False)
    # The JSON report's text of each group entry's own members (json_report.group_head), in the
    # entries' order, where an incremental scan's cache kept it ("" where not; empty: none).
    # `finish` puts them in Group.head: the report uses them instead of writing those again.
    group_heads: list[str] = field(default_factory=list, repr=False, compare=False)
    # See ScanResult.finding_json (only an audit put together from fragments has any).
    finding_json: dict[int, tuple[Finding, str]] = field(default_factory=dict, repr=False, compare=False)


def audit(
    inv: Inventory, pack: PolicyPack | None = None, progress: Progress = silent, like: Audited | None = None
) -> Audited:
    """Every finding the rules and the pack's custom rules make on an inventory (pure).

    `like`: an audit of an inventory that differs from this one in its policies only (same
    workloads, Services, nodes, namespaces, claims and pods; the admission webhook's before and
    after a policy change): its placements, edges and observed placement are reused."""
    known = like.model if like is not None else None
    model = build_model(
        inv,
        progress,
        known_edges=known.comm_edges if known is not None else None,
        known_placements=known.placements if known is not None else None,
    )
    pack = pack if pack is not None else load_packs([])
    raw = run_rules(model, pack.rule_options())
    notes: list[str] = []
    observation: Observation | None = None
    if inv.live_pods:
        if like is not None and like.observation is not None:
            observation = like.observation
        else:
            observation = observe(inv.workloads, inv.live_pods, inv.nodes, inv.settings.topology.zone_key)
        now = build_model(inv, silent, observation.roles, model.engine, known_edges=model.comm_edges)
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
    audited: Counter[str] = Counter()
    audited.update(w.ref.source.file for w in inv.workloads)
    audited.update(p.ref.source.file for p in inv.policies)
    for sourced in (inv.nodes, inv.services):
        audited.update(o.source.file for o in sourced)
    return Audited(
        [*raw, *custom],
        PackSubjects.of(inv.workloads, pack),
        [*inv.errors, *custom_errors],
        list(inv.notes),
        list(inv.file_notes),
        [*model.notes, *notes],
        dict(audited),
        dict(inv.skipped),
        group_entries(model),
        inv.network.describe(),
        list(inv.not_audited),
        dict(inv.file_order),
        observation,
        model,
    )


def finish(audited: Audited, pack: PolicyPack | None = None, today: date | None = None) -> ScanResult:
    """The result of an audit under its pack: filtered, re-rated and waived as the pack says on
    `today` (none in force on an unknown date: nothing is hidden then), errors and notes in file
    order (Inventory.file_order; within a file as found)."""
    pack = pack if pack is not None else load_packs([])
    applied = apply_pack_to(audited.candidates, audited.subjects, pack, today or date.max)
    findings = list(applied.findings)
    rank = audited.file_order
    last = len(rank)
    errors = sorted([*audited.errors, *applied.errors], key=lambda e: rank.get(e.file, last))
    file_notes = sorted(audited.file_notes, key=lambda n: rank.get(n[0], last))
    with_findings = {f.workload.identity for f in findings} | {
        w.finding.workload.identity for w in applied.waived
    }
    labels = {
        i: dict(audited.subjects.labels[i]) for i in sorted(with_findings) if audited.subjects.labels.get(i)
    }
    return ScanResult(
        findings,
        errors,
        [*audited.notes, *(n for _, n in file_notes), *audited.model_notes, *applied.notes],
        sum(audited.audited.values()),
        audited.network,
        kinds_skipped(audited.skipped),
        list(applied.waived),
        list(applied.expired),
        audited.observation,
        labels,
        summarise(audited.group_entries, audited.group_heads),
        sorted(set(audited.not_audited)),
        audited.model,
        pack,
        audited.finding_json,
    )


def scan(
    inv: Inventory, pack: PolicyPack | None = None, today: date | None = None, progress: Progress = silent
) -> ScanResult:
    """Findings for an inventory under a policy pack (the default pack when none is given).

    `today` decides which waivers are in force; the caller supplies it (the core reads no clock).
    Without it no waiver is in force: nothing is hidden on an unknown date.
    """
    pack = pack if pack is not None else load_packs([])
    return finish(audit(inv, pack, progress), pack, today)


def apply_baseline(result: ScanResult, known: set[str]) -> ScanResult:
    """Only the findings whose fingerprints the earlier report did not have."""
    fresh = [f for f in result.findings if f.fingerprint not in known]
    notes = [*result.notes, f"baseline: {len(result.findings) - len(fresh)} known finding(s) not reported"]
    return dataclasses.replace(result, findings=fresh, notes=notes)
