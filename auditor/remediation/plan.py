"""Fix plans: which pod templates to change, and how, to keep a training group in one zone whose
path is open. Pure: reads the audit model, returns candidates (best first) or the reason none exists.
The group, the candidate zones and what each strategy (`pin-zone`, `follow-coordinator`,
`kueue-topology`) adds per role: docs/remediation.md, step 1. Candidates are re-audited by the
caller; the first that verifies is proposed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from auditor.model.findings import Finding
from auditor.model.objects import Node, Role, Taint, Toleration
from auditor.placement.filters import filter_node
from auditor.rules.model import AuditModel, object_ref

STRATEGIES = ("pin-zone", "follow-coordinator", "kueue-topology")
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
# Taints a fix never tolerates: control planes and node conditions.
_NEVER_TOLERATE = ("node-role.kubernetes.io/", "node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")


@dataclass(frozen=True, slots=True)
class RolePatch:
    role: Role
    zone: str | None = None  # required nodeAffinity to this zone
    tolerations: tuple[Taint, ...] = ()  # to tolerate exactly
    labels: tuple[tuple[str, str], ...] = ()  # template label → new value
    coordinator_labels: tuple[tuple[str, str], ...] = ()  # required podAffinity to these labels
    kueue: bool = False

    def describe(self) -> str:
        parts = []
        if self.zone:
            parts.append(f"nodeAffinity {self.zone}")
        if self.coordinator_labels:
            parts.append("podAffinity to the coordinator on the zone key")
        if self.kueue:
            parts.append("Kueue podset-required-topology on the zone key")
        if self.tolerations:
            parts.append("tolerate " + ", ".join(f"{t.key}={t.value}:{t.effect}" for t in self.tolerations))
        if self.labels:
            parts.append(", ".join(f"label {k}={v}" for k, v in self.labels))
        return f"{self.role}: " + "; ".join(parts)

    @property
    def empty(self) -> bool:
        return not (self.zone or self.tolerations or self.labels or self.coordinator_labels or self.kueue)


@dataclass(frozen=True, slots=True)
class FixPlan:
    finding: Finding
    strategy: str
    zone: str
    patches: tuple[RolePatch, ...]

    def describe(self) -> str:
        return f"{self.strategy} to {self.zone}: " + " | ".join(p.describe() for p in self.patches)


@dataclass(frozen=True, slots=True)
class NoFix:
    finding: Finding
    reason: str


def _group(model: AuditModel, finding: Finding) -> tuple[list[Role], Role | None]:
    """The roles of the finding's workload plus the peer role of its edge; and the peer."""
    own = [r for r in model.placements if object_ref(r) == finding.workload] or [
        r for r in model.placements if object_ref(r).identity == finding.workload.identity
    ]
    analysis = model.edge_of(finding)
    peer = analysis.edge.destination if analysis is not None else None
    roles = list(own)
    if peer is not None and peer not in roles:
        roles.append(peer)
    return roles, peer


def _tolerable(taint: Taint) -> bool:
    return taint.effect in ("NoSchedule", "NoExecute") and not taint.key.startswith(_NEVER_TOLERATE)


def landing(
    role: Role, zone: str, nodes: Sequence[Node], zone_key: str, volumes: Mapping[str, frozenset[str]]
) -> tuple[Taint, ...] | str:
    """The fewest tolerations that let `role` land on some node of `zone`, or why it cannot."""
    best: tuple[Taint, ...] | None = None
    why = f"no node in {zone}"
    for node in nodes:
        if node.label_map.get(zone_key) != zone:
            continue
        tolerations = role.template.tolerations
        missing = tuple(t for t in node.taints if not any(tol.tolerates(t) for tol in tolerations))
        if any(not _tolerable(t) for t in missing):
            why = f"{node.name} has a taint a fix never tolerates"
            continue
        extra = tuple(Toleration(t.key, "Equal", t.value, t.effect) for t in missing)
        template = dataclasses.replace(role.template, tolerations=(*role.template.tolerations, *extra))
        result = filter_node(template, node, volumes)
        if not result.ok:
            why = f"{result.plugin}: {result.reason}"
            continue
        if best is None or len(missing) < len(best):
            best = missing
            if not missing:
                break
    return best if best is not None else f"{role} cannot land in {zone} ({why})"


def _zone_labels(zone: str, zones: set[str], written: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(
        (k, zone)
        for k, v in sorted(written.items())
        if k.lower().endswith("zone") and v != zone and (v in zones or not v)
    )


def plan(
    model: AuditModel,
    finding: Finding,
    strategy: str,
    volumes_of: Mapping[Role, Mapping[str, frozenset[str]]] | None = None,
) -> list[FixPlan] | NoFix:
    inv = model.inventory
    zone_key = inv.settings.topology.zone_key
    zones = sorted({z for n in inv.nodes if (z := n.label_map.get(zone_key))})
    volumes_of = volumes_of or {}
    if finding.rule == "zone-label-mismatch":
        roles = [r for r in model.placements if object_ref(r) == finding.workload]
        patches: list[RolePatch] = []
        for role in roles:
            placement = model.placements[role]
            if len(placement.zones) != 1:
                return NoFix(
                    finding,
                    f"{role} can land in {len(placement.zones)} zones: the right label is not decidable",
                )
            labels = _zone_labels(placement.zones[0], set(zones), dict(role.template.labels))
            if labels:
                patches.append(RolePatch(role, labels=labels))
        if not patches:
            return NoFix(finding, "no zone label written in the manifest to correct")
        return [FixPlan(finding, "zone-label", patches[0].labels[0][1], tuple(patches))]
    if finding.rule not in ("cross-zone-blocked", "cross-zone-traffic"):
        return NoFix(finding, f"{finding.rule} has no automatic fix")
    if len(zones) < 2:
        return NoFix(finding, "the nodes span fewer than two zones")
    roles, peer = _group(model, finding)
    if not roles:
        return NoFix(finding, "the workload of the finding was not found")
    if strategy == "kueue-topology" and not any(
        KUEUE_QUEUE in dict(r.template.labels) or KUEUE_QUEUE in dict(r.template.annotations) for r in roles
    ):
        strategy = "pin-zone"  # Kueue is not in use for this workload

    # Zones where the group is already confined first (a role that can only land there decides).
    def preference(zone: str) -> tuple[int, int, str]:
        pinned = sum(1 for r in roles if model.placements[r].zones == (zone,))
        nodes = sum(1 for n in inv.nodes if n.label_map.get(zone_key) == zone)
        return (-pinned, -nodes, zone)

    candidates: list[FixPlan] = []
    reasons: list[str] = []
    for zone in sorted(zones, key=preference):
        patches = []
        blocked = ""
        for role in roles:
            found = landing(role, zone, inv.nodes, zone_key, volumes_of.get(role, {}))
            if isinstance(found, str):
                blocked = found
                break
            pin = None if model.placements[role].zones == (zone,) else zone  # not when confined there
            labels = _zone_labels(zone, set(zones), dict(role.template.labels))
            if strategy == "follow-coordinator" and peer is not None and role != peer:
                coordinator = tuple((k, v) for k, v in peer.template.labels if not k.lower().endswith("zone"))
                patch = RolePatch(role, None, found, labels, coordinator_labels=coordinator)
            else:
                patch = RolePatch(role, pin, found, labels, kueue=strategy == "kueue-topology")
            if not patch.empty:
                patches.append(patch)
        if blocked:
            reasons.append(blocked)
            continue
        if patches:
            candidates.append(FixPlan(finding, strategy, zone, tuple(patches)))
    if not candidates:
        return NoFix(
            finding,
            "no zone where every role of the group can land: " + "; ".join(reasons or ["no candidate zone"]),
        )
    return candidates
