"""ineffective-policy-selector — a policy selects on a label the CNI does not use for policy, so
that selector matches nothing. Cilium keeps only identity-relevant labels; its current default drops
`topology.kubernetes.io/*`, `pod-template-hash`, `statefulset.kubernetes.io/pod-name`, ...

Fails: a CiliumNetworkPolicy with `endpointSelector: {matchLabels: {topology.kubernetes.io/zone: a}}`
under the default label filter. Passes: the same policy with the `labels` setting keeping
`topology.kubernetes.io/zone`, or a selector on a kept label.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from auditor.model.findings import Finding, ObjectRef
from auditor.reachability.identity import label_keys_of
from auditor.rules.base import RuleMeta
from auditor.rules.model import AuditModel

META = RuleMeta(
    "ineffective-policy-selector", "A policy selects on a label the CNI ignores", "high", ("blocked",)
)


def evaluate(model: AuditModel, options: Mapping[str, Any]) -> Iterator[Finding]:
    network = model.inventory.network
    if network.cni != "cilium":
        return
    keeps = network.cilium.label_filter.keeps
    seen: set[tuple[str, str, str]] = set()
    for policy in model.engine.policies:
        dropped = sorted(k for k in label_keys_of(policy) if not keeps(k))
        ref = policy.ref
        key = (ref.kind, ref.namespace, ref.name)
        if not dropped or key in seen:
            continue
        seen.add(key)
        yield Finding(
            rule=META.id,
            severity=META.severity,
            certainty="always",
            symptoms=META.symptoms,
            workload=ObjectRef("", ref.kind, ref.namespace, ref.name, ref.source.file, ref.source.line),
            message=(
                f"{ref} selects on {', '.join(dropped)}, which Cilium drops from identities "
                f"({network.cilium.label_filter.description}); those selectors match nothing"
            ),
        )
