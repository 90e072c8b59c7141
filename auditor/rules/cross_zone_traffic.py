"""cross-zone-traffic — the group's traffic is allowed but its pods can land in different zones:
all-reduce crosses zones (30–60 % slower) and is billed as inter-AZ transfer. High when the split
is `always`, medium otherwise. With `placement-auditor.io/gradient-bytes` and
`placement-auditor.io/steps-per-second` (or config defaults) the finding carries the monthly cost
and the slowdown, with the assumptions used.

Fails: a PyTorchJob with no placement constraints on a cluster with nodes in two zones (`likely`).
Passes: the same job with a required podAffinity on topology.kubernetes.io/zone, Kueue
`podset-required-topology`, or nodes in one zone only.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from auditor.model import cost
from auditor.model.findings import EdgeRef, Finding
from auditor.rules.base import RuleMeta
from auditor.rules.model import AuditModel, EdgeAnalysis, annotation, object_ref

META = RuleMeta(
    "cross-zone-traffic",
    "Traffic crosses zones: slowdown and inter-AZ cost",
    "high",
    ("slowdown", "cost"),
    {"fix": "pin-zone"},  # as for cross-zone-blocked
)
GRADIENT = "placement-auditor.io/gradient-bytes"
STEPS = "placement-auditor.io/steps-per-second"
RANK = {"observed": -1, "always": 0, "likely": 1, "possible": 2}


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value > 0 else None


def evaluate(model: AuditModel, options: Mapping[str, Any]) -> Iterator[Finding]:
    by_workload: dict[object, list[EdgeAnalysis]] = {}
    for analysis in model.edges:
        verdict = analysis.verdict
        if analysis.placement.split is None or verdict.blocked is not None or not verdict.crosses_zones:
            continue
        by_workload.setdefault(analysis.edge.source.workload, []).append(analysis)
    settings = model.inventory.settings.cost
    for analyses in by_workload.values():
        # One finding per workload: its most certain split, preferring the all-reduce ring.
        analyses.sort(key=lambda a: (RANK[a.placement.split or "possible"], a.edge.port is not None))
        top = analyses[0]
        edge, split = top.edge, top.placement.split or "possible"
        ref = edge.source.workload
        workload = next(w for w in model.inventory.workload(ref.namespace, ref.name) if w.ref == ref)
        ring = [a.edge for a in analyses if a.edge.port is None]
        ring_roles = {e.source for e in ring} | {e.destination for e in ring}
        ranks = sum(r.replicas for r in (ring_roles or set(workload.roles)))
        gradient = _number(annotation(workload, GRADIENT)) or settings.default_gradient_bytes
        steps = _number(annotation(workload, STEPS)) or settings.default_steps_per_second
        monthly = slowdown = None
        if gradient and steps:
            pattern = "parameter-server" if any(r.name.lower() == "ps" for r in workload.roles) else "ring"
            est = cost.estimate(pattern, ranks, gradient, steps, settings.price(), settings.network())
            monthly, slowdown, assumptions = est.monthly_cost_usd, est.slowdown_pct, est.assumptions
        else:
            assumptions = (f"no {GRADIENT} / {STEPS} annotations and no config defaults: cost not estimated",)
        zones_a = tuple(sorted({v.source_zone for v in top.verdicts if not v.same_zone}))
        zones_b = tuple(sorted({v.destination_zone for v in top.verdicts if not v.same_zone}))
        cost_text = (
            f"; estimated ${monthly:,.2f}/month inter-AZ, {slowdown}% slower" if monthly is not None else ""
        )
        yield Finding(
            rule=META.id,
            severity="high" if split in ("always", "observed") else "medium",
            certainty=split,
            symptoms=META.symptoms,
            workload=object_ref(edge.source),
            message=(
                f"{edge.source} → {edge.destination} ({edge.reason}) is allowed but crosses zones "
                f"({top.placement.coupling}){top.placement.through(zones_a, zones_b)}{cost_text}"
            ),
            edge=EdgeRef(
                edge.source.label, zones_a, edge.destination.label, zones_b, edge.port, edge.protocol
            ),
            estimated_monthly_cost_usd=monthly,
            estimated_slowdown_pct=slowdown,
            assumptions=assumptions,
            role=edge.source.label,
        )
