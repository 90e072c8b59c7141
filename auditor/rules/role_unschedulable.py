"""role-unschedulable — a role has no node it can land on (node affinity, taints, cordoned nodes),
so the group never starts. Needs Node objects.

A pod bound to a node (`spec.nodeName`: a pod a cluster reported, or one in a `kubectl get pods`
dump) is never unschedulable: it is already where it runs, whatever the Node objects given say
and whether or not its spec would fit now. Pods the scheduler left Pending are reported from the
cluster's own verdict (rules/live.py).

Fails: a worker with nodeSelector `gpu: "true"` and no toleration for the GPU nodes' taint.
Passes: the worker tolerates `gpu=present:NoSchedule`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from auditor.model.findings import Finding
from auditor.rules.base import RuleMeta
from auditor.rules.model import AuditModel, object_ref

META = RuleMeta("role-unschedulable", "A role has no node it can land on", "high", ("blocked",))


def evaluate(model: AuditModel, options: Mapping[str, Any]) -> Iterator[Finding]:
    if not model.inventory.nodes:
        return
    for role, placement in model.placements.items():
        if not placement.unschedulable or role.template.node_name:
            continue
        reasons = Counter(f"{r.plugin}: {r.reason}" for r in placement.rejected)
        text = "; ".join(f"{n} node(s) {reason}" for reason, n in reasons.most_common())
        yield Finding(
            rule=META.id,
            severity=META.severity,
            certainty="always",
            symptoms=META.symptoms,
            workload=object_ref(role),
            message=f"{role} fits no node: {text}",
        )
