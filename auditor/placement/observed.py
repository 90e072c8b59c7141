"""Where groups actually run: live pods (from a cluster or a snapshot of one) mapped to the roles
of their owner workloads, with the zones of the nodes they are bound to. Pure.

A pod belongs to the workload its ownerReferences lead to (inventory.py resolves the chain) and to
the role of that workload whose template labels it carries (the operator's replica-type labels
tell a PyTorchJob's Master from its Workers); a bare pod is its own workload.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from auditor.model.objects import LivePod, Node, Role, Workload
from auditor.placement.coupling import PairPlacement, RolePlacement


@dataclass(frozen=True, slots=True)
class ObservedRole:
    role: Role
    pods: tuple[tuple[LivePod, str], ...]  # scheduled pods with the zone of their node
    pending: tuple[LivePod, ...]  # not bound to a node

    @property
    def zones(self) -> tuple[str, ...]:
        return tuple(sorted({z for _, z in self.pods}))

    def placement(self) -> RolePlacement:
        return RolePlacement(self.role, self.zones, tuple(sorted({p.node or "" for p, _ in self.pods})))


@dataclass(frozen=True, slots=True)
class Observation:
    roles: dict[Role, ObservedRole]
    unmatched: tuple[LivePod, ...]  # pods whose owner or role we could not tell


def _role_of(pod: LivePod, roles: Sequence[Role]) -> Role | None:
    labels = pod.label_map
    holding = [r for r in roles if r.holds_pod(labels)]
    if holding:
        return max(holding, key=lambda r: len(r.template.labels))  # the most specific template
    return roles[0] if len(roles) == 1 else None


def observe(
    workloads: Iterable[Workload], pods: Iterable[LivePod], nodes: Sequence[Node], zone_key: str
) -> Observation:
    index: dict[tuple[str, str, str], Workload] = {}
    for w in workloads:
        index.setdefault((w.ref.kind, w.ref.namespace, w.ref.name), w)
    zone_of = {n.name: n.label_map.get(zone_key) for n in nodes}
    scheduled: dict[Role, list[tuple[LivePod, str]]] = {}
    pending: dict[Role, list[LivePod]] = {}
    unmatched: list[LivePod] = []
    for pod in pods:
        kind, name = pod.owner if pod.owner is not None else ("Pod", pod.name)
        workload = index.get((kind, pod.namespace, name))
        role = _role_of(pod, workload.roles) if workload is not None else None
        if role is None:
            unmatched.append(pod)
            continue
        if pod.node is None:
            if pod.phase in ("", "Pending"):
                pending.setdefault(role, []).append(pod)
            continue
        if pod.phase in ("Succeeded", "Failed"):
            continue  # finished: no longer talks to anyone
        zone = zone_of.get(pod.node)
        if zone:
            scheduled.setdefault(role, []).append((pod, zone))
    roles = {
        role: ObservedRole(role, tuple(scheduled.get(role, ())), tuple(pending.get(role, ())))
        for role in {*scheduled, *pending}
    }
    return Observation(roles, tuple(unmatched))


def observed_pair(a: ObservedRole, b: ObservedRole) -> PairPlacement:
    """The zone pairs actual pods of `a` and `b` form (distinct pods when a role talks to itself)."""
    if a.role == b.role:
        counts = Counter(z for _, z in a.pods)
        pairs = {(x, y) for x in counts for y in counts if x != y or counts[x] >= 2}
    else:
        pairs = {(x, y) for _, x in a.pods for _, y in b.pods}
    where = "; ".join(f"{o.role} in {', '.join(o.zones)}" for o in ((a,) if a.role == b.role else (a, b)))
    split = "observed" if any(x != y for x, y in pairs) else None
    return PairPlacement(tuple(sorted(pairs)), split, f"as the pods run now: {where}")
