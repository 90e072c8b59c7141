"""role-unschedulable — a role has no node it can land on (node affinity, taints, cordoned nodes, a
topology spread key its nodes lack, a required podAffinity no scanned workload's pods satisfy), or
only some of its replicas can be placed (a DoNotSchedule spread whose counted domains include one the
pods cannot reach caps every domain at maxSkew; one pod per domain under podAntiAffinity to its own
pods; more pods than the feasible nodes' allocatable holds, counted as if the nodes were empty), so
the group never starts whole. Needs Node objects.

Fails: a worker with nodeSelector `gpu: "true"` and no toleration for the GPU nodes' taint; eight
workers spread with `maxSkew: 1` over the zones where only zone-a's nodes accept them (the other
zones are counted but stay empty, so zone-a takes one).
Also fails: eight workers each requesting `nvidia.com/gpu: 8` where six nodes have
`allocatable: {nvidia.com/gpu: "8"}` (six of them can be placed; the message names the resource).
Passes: the worker tolerates `gpu=present:NoSchedule`; the spread says `nodeTaintsPolicy: Honor`
(the untolerated zones are not counted) or the workers' node affinity names zone-a; six workers (or
twelve requesting 4 GPUs each) for those six nodes.

When the ExtendedResourceToleration admission plugin would change the verdict (a pod requesting
`nvidia.com/gpu` and a node tainted with that key), the message says so: the plugin is off upstream,
and `kubernetes.extended_resource_toleration: true` says the cluster runs it (GKE does the same).

A pod bound to a node (`spec.nodeName`: a pod a cluster reported, or one in a `kubectl get pods`
dump) is never unschedulable: it is already where it runs, whatever the Node objects given say
and whether or not its spec would fit now. Pods the scheduler left Pending are reported from the
cluster's own verdict (rules/live.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from auditor.model.findings import Finding
from auditor.rules.base import RuleMeta
from auditor.rules.model import AuditModel, role_finding

META = RuleMeta("role-unschedulable", "A role has no node it can land on", "high", ("blocked",))


def evaluate(model: AuditModel, options: Mapping[str, Any]) -> Iterator[Finding]:
    if not model.inventory.nodes:
        return
    for role, placement in model.placements.items():
        if role.template.node_name:
            continue  # bound: it runs where it is
        notes = "".join(f"; note: {n}" for n in placement.notes)
        if placement.unschedulable and not placement.nodes:
            reasons = Counter(f"{r.plugin}: {r.reason}" for r in placement.rejected)
            text = "; ".join(f"{n} node(s) {reason}" for reason, n in reasons.most_common())
            message = f"{role} fits no node: {text}{notes}"
        elif placement.unschedulable or placement.partly_unschedulable:
            placed = placement.max_replicas or 0
            message = (
                f"only {placed} of the {role.replicas} replicas of {role} can be placed: "
                f"{placement.capacity_reason} leaves room for no more on the nodes it can use "
                f"({', '.join(placement.zones)}); the rest stay Pending{notes}"
            )
        else:
            continue
        yield role_finding(META, role, message)
