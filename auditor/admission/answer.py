"""From a verdict to the answer the API server gets (pure): the namespace's mode, the warning
lines kubectl prints, the denial message, the outcome recorded.

Modes (docs/admission.md): `warn` allows with warnings, `deny` refuses what this change would
break, `off` answers allowed without looking. A namespace's mode is its label (or annotation)
`placement-auditor.io/admission`; the label wins where both are set; a cluster-scoped policy and
a namespace without either take `admission.default_mode`. In deny mode only findings the change
makes deny: one it keeps (an UPDATE of a workload that had it already) warns; a costed
`cross-zone-traffic` denies only at or above `admission.deny_cost_usd` (0: never).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from auditor.admission.check import COSTED, Verdict
from auditor.admission.record import MODES
from auditor.model.findings import Finding
from auditor.settings.admission import MODE_LABEL, AdmissionSettings

PREFIX = "placement-auditor"


@dataclass(frozen=True, slots=True)
class Answer:
    allowed: bool
    outcome: str  # record.OUTCOMES
    warnings: tuple[str, ...] = ()
    message: str = ""  # the denial's status message
    reason: str = ""


def mode_of(namespace: Mapping[str, Any] | None, settings: AdmissionSettings) -> tuple[str, str]:
    """(mode, where it came from) for a namespace object (None: cluster-scoped or unknown)."""
    if namespace is not None:
        meta = namespace.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        for field in ("labels", "annotations"):
            values = meta.get(field)
            value = values.get(MODE_LABEL) if isinstance(values, Mapping) else None
            if isinstance(value, str) and value in MODES:
                return value, f"{field[:-1]} {MODE_LABEL}={value} on namespace {meta.get('name')}"
    return settings.default_mode, f"admission.default_mode={settings.default_mode}"


def _short_policy(f: Finding) -> str:
    if not f.policies:
        return ""
    first = f.policies[0]
    more = f" +{len(f.policies) - 1}" if len(f.policies) > 1 else ""
    return f" by {first.kind} {first.name}{more}"


def _edge(f: Finding) -> str:
    if f.edge is None:
        return ""
    port = f":{f.edge.port}" if f.edge.port is not None else ""
    return f" {f.edge.from_role}->{f.edge.to_role}{port}"


def warning_line(f: Finding, kept: bool = False) -> str:
    """One line (under 120 characters once cleaned): the rule, the group, the edge, the policy."""
    cost = ""
    if f.rule == COSTED and f.estimated_monthly_cost_usd is not None:
        cost = f" ~${f.estimated_monthly_cost_usd:,.0f}/mo"
    already = " (already before this change)" if kept else ""
    group = f"{f.workload.namespace}/{f.workload.name}"
    return f"{PREFIX}: {f.rule}{already} {group}{_edge(f)}{_short_policy(f)}{cost}"


def denies(f: Finding, settings: AdmissionSettings) -> bool:
    if f.rule != COSTED:
        return True
    cost = f.estimated_monthly_cost_usd
    return settings.deny_cost_usd > 0 and cost is not None and cost >= settings.deny_cost_usd


DENIAL_DETAILED = 5
"""Findings a denial spells out (policies, fix); the others are counted per rule (kubectl prints
the whole message; forty blocks of four lines hide the one line that says what to do)."""


def _denial(verdict: Verdict, refused: list[Finding], where: str, subject: str) -> str:
    lines = [f"{PREFIX} denied {subject} ({where}):"]
    shown, rest = refused[:DENIAL_DETAILED], refused[DENIAL_DETAILED:]
    for f in shown:
        lines.append(f"{f.rule} ({f.severity}, {f.certainty}): {f.message}")
        if f.policies:
            names = ", ".join(
                f"{p.kind} {p.namespace + '/' if p.namespace else ''}{p.name}" for p in f.policies
            )
            lines.append(f"  deciding policies: {names}")
        fix = verdict.fixes.get(f.fingerprint)
        if fix:
            lines.append(f"  fix: {fix}")
        lines.append(f"  or: auditor fix <manifests> --finding {f.fingerprint}")
    if rest:
        by_rule = Counter(f.rule for f in rest)
        more = ", ".join(f"{rule} ×{n}" for rule, n in sorted(by_rule.items()))
        lines.append(f"and {len(rest)} more ({more}): each is a warning above")
    if verdict.subject == "policy" and verdict.groups:
        running = [g for g in verdict.groups if g in verdict.running]
        cut = ", ".join(f"{g} (running)" if g in running else g for g in verdict.groups)
        lines.append(f"groups cut: {cut}")
    lines.append(f"to apply anyway: label the namespace {MODE_LABEL}=warn (or off)")
    return "\n".join(lines)


def answer(verdict: Verdict, mode: str, where: str, subject: str, settings: AdmissionSettings) -> Answer:
    """The answer to a verdict in a mode (`where`: what set the mode; `subject`: "Job ns/name")."""
    if verdict.subject == "ignored":
        return Answer(True, "ignored", reason=verdict.reason)
    if not verdict.findings and not verdict.kept:
        return Answer(True, "allowed")
    warnings = [warning_line(f) for f in verdict.findings] + [
        warning_line(f, kept=True) for f in verdict.kept
    ]
    if verdict.subject == "policy" and verdict.groups:
        warnings.append(f"{PREFIX}: this policy would cut {', '.join(verdict.groups)}")
    if mode == "deny":
        refused = [f for f in verdict.findings if denies(f, settings)]
        if refused:
            return Answer(False, "denied", tuple(warnings), _denial(verdict, refused, where, subject))
    return Answer(True, "warned", tuple(warnings))


def failed_open(reason: str) -> Answer:
    """Allowed, with a warning saying why nothing was checked (never a denial we cannot stand by)."""
    return Answer(True, "failed-open", (f"{PREFIX}: not checked ({reason}); allowed",), reason=reason)
