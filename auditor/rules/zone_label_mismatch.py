"""zone-label-mismatch — a pod label naming a zone (key ending in `zone`) disagrees with every zone
the pod can land in. Policies that draw zone boundaries on such a label then treat the pod as being
where it is not.

Fails: template label `zone: zone-b` on a role that can land only in zone-a.
Passes: the label matches the zone the role is pinned to, or is copied from the node at binding.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from auditor.model.findings import Finding
from auditor.rules.base import RuleMeta
from auditor.rules.model import AuditModel, role_finding

META = RuleMeta(
    "zone-label-mismatch", "A zone label disagrees with where the pod can land", "high", ("blocked",)
)


def evaluate(model: AuditModel, options: Mapping[str, Any]) -> Iterator[Finding]:
    settings = model.inventory.settings
    copied = {pod_key for pod_key, _ in settings.topology.effective_pod_zone_labels(settings.kubernetes)}
    for role, placement in model.placements.items():
        if not placement.zones:
            continue
        for key, value in role.template.labels:
            if not key.lower().endswith("zone") or key in copied:
                continue
            if value not in placement.zones:
                yield role_finding(
                    META,
                    role,
                    f"{role} carries label {key}={value} but can land only in {', '.join(placement.zones)}",
                )
