"""cross-zone-blocked — a policy denies the path between two roles of a training group whenever they
land in different zones, and in no placement where they share a zone: the split is the cause.

Fails: workers can land only in zone-a (GPU nodes), their coordinator only in zone-b, and a
Cilium policy lets zone-a pods talk only to zone-a pods → the workers never reach the coordinator
(certainty `always`). Passes: the coordinator tolerates the GPU taint, is pinned to zone-a and
carries the zone-a label (seed-lab/after).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from auditor.model.findings import Finding
from auditor.rules.base import RuleMeta
from auditor.rules.model import AuditModel, blocked_finding

META = RuleMeta(
    "cross-zone-blocked",
    "Blocked when the group is split across zones",
    "critical",
    ("blocked",),
    # The fix `auditor fix` proposes: pin-zone | follow-coordinator | kueue-topology.
    {"fix": "pin-zone"},
)


def evaluate(model: AuditModel, options: Mapping[str, Any]) -> Iterator[Finding]:
    for analysis in model.edges:
        if analysis.verdict.blocked == META.id:
            yield blocked_finding(
                META, analysis, f"whenever they are split across zones ({analysis.placement.coupling})"
            )
