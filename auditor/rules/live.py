"""Findings from where pods actually run (certainty `observed`), joined with the predicted view.

For a workload with running pods, the edge rules are evaluated on the zones its pods are in now:
those findings are `observed`. The predicted findings (where the pods *could* land) stay, for what
would happen when the group is rescheduled, unless an observed finding already says the same
(same fingerprint). Pending pods that the scheduler could not place give `role-unschedulable`
findings with the scheduler's own message and the filter we predict fails. Pure.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping

from auditor.model.findings import Finding
from auditor.model.objects import Role
from auditor.placement.coupling import RolePlacement
from auditor.placement.observed import Observation
from auditor.rules import role_unschedulable
from auditor.rules.model import role_finding

EDGE_RULES = ("cross-zone-blocked", "traffic-blocked", "cross-zone-traffic", "data-ports-partly-denied")


def observed_edge_findings(findings: Iterable[Finding]) -> list[Finding]:
    return [
        dataclasses.replace(f, certainty="observed", message=f"now: {f.message}")
        for f in findings
        if f.rule in EDGE_RULES
    ]


def pending_findings(observation: Observation, predicted: Mapping[Role, RolePlacement]) -> Iterator[Finding]:
    for role, seen in sorted(observation.roles.items(), key=lambda item: str(item[0])):
        stuck = [p for p in seen.pending if p.unschedulable]
        if not stuck:
            continue
        placement = predicted.get(role)
        ours = ""
        if placement is not None and placement.unschedulable:
            reasons = Counter(f"{r.plugin}: {r.reason}" for r in placement.rejected)
            ours = "; predicted: " + "; ".join(f"{n} node(s) {why}" for why, n in reasons.most_common(3))
        yield role_finding(
            role_unschedulable.META,
            role,
            f"{len(stuck)} pod(s) of {role} are Pending (e.g. {stuck[0].name}); "
            f"the scheduler says: {stuck[0].unschedulable}{ours}",
            certainty="observed",
        )


def join(predicted: Iterable[Finding], observed: Iterable[Finding], running: set[str]) -> list[Finding]:
    """Observed findings, then predicted ones they do not repeat; a predicted edge finding of a
    workload that is running (identity in `running`) says it is about the next scheduling."""
    out = list(observed)
    have = {f.fingerprint for f in out}
    for f in predicted:
        if f.fingerprint in have:
            continue
        if f.rule in EDGE_RULES and f.workload.identity in running:
            f = dataclasses.replace(f, message=f"when rescheduled: {f.message}")
        out.append(f)
    return out
