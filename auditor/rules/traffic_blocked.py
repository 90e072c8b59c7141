"""traffic-blocked — a policy denies the path between two roles even where they share a zone, so
co-locating them would not help; the policy itself must change.

Fails: a NetworkPolicy selects the coordinator and allows ingress only from `app: monitoring`.
Passes: the policy also allows the workers' labels on the rendezvous port.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from auditor.model.findings import Finding
from auditor.rules.base import RuleMeta
from auditor.rules.model import AuditModel, blocked_finding

META = RuleMeta("traffic-blocked", "Blocked by policy wherever the pods land", "critical", ("blocked",))


def evaluate(model: AuditModel, options: Mapping[str, Any]) -> Iterator[Finding]:
    for analysis in model.edges:
        if analysis.verdict.blocked == META.id:
            yield blocked_finding(
                META, analysis, "even where both share a zone, so moving pods will not help"
            )
