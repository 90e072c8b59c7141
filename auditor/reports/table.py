"""A readable terminal table; colour only when asked (on a TTY)."""

from __future__ import annotations

import textwrap

from auditor.rules.groups import Groups
from auditor.scan import ScanResult

_COLOURS = {"critical": "\033[1;31m", "high": "\033[31m", "medium": "\033[33m", "low": "\033[36m"}
_RESET = "\033[0m"


def render(result: ScanResult, colour: bool = False) -> str:
    lines = []
    if not result.findings:
        lines.append("No findings.")
    for f in result.findings:
        sev = f.severity.upper()
        if colour:
            sev = f"{_COLOURS.get(f.severity, '')}{sev}{_RESET}"
        where = f"{f.workload.file}:{f.workload.line}" if f.workload.file else ""
        lines.append(
            f"{sev:<9} {f.rule} ({f.certainty})  {f.workload.kind} {f.workload.namespace}/"
            f"{f.workload.name}  {where}"
        )
        lines.extend(
            textwrap.wrap(
                f.message, 100, initial_indent="    ", subsequent_indent="    ", break_on_hyphens=False
            )
        )
        for p in f.policies:
            lines.append(
                f"    - {p.kind} {p.namespace + '/' if p.namespace else ''}{p.name} ({p.file}:{p.line})"
            )
        if f.estimated_monthly_cost_usd is not None:
            lines.append(
                f"    estimated ${f.estimated_monthly_cost_usd:,.2f}/month, "
                f"{f.estimated_slowdown_pct}% slower"
            )
        for a in f.assumptions:
            lines.extend(
                textwrap.wrap(a, 100, initial_indent="      assumes: ", subsequent_indent="        ")
            )
        for measured in f.evidence:
            lines.extend(
                textwrap.wrap(measured, 100, initial_indent="      measured: ", subsequent_indent="        ")
            )
        lines.append(f"    fingerprint {f.fingerprint}")
    s = result.summary()
    by = ", ".join(f"{n} {k}" for k, n in s["by_severity"].items()) if s["by_severity"] else "none"  # type: ignore[attr-defined]
    lines.append("")
    lines.append(
        f"{s['findings']} finding(s) ({by}); {len(result.errors)} error(s); "
        f"{result.audited_objects} objects audited"
    )
    if result.groups is not None:
        lines.append(understood(result.groups))
    for e in result.errors:
        lines.append(f"error: {e}")
    for n in result.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines) + "\n"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def understood(groups: Groups) -> str:
    """One line: what the scan recognised, so "no findings" can be told from "nothing recognised"."""
    other = len(groups.groups) - groups.training
    unlisted = ", ".join(f"{n} {kind}" for kind, n in groups.unlisted_by_kind)
    return (
        f"understood: {_count(groups.training, 'training group')} and "
        f"{_count(other, 'other workload')} with edges ({_count(groups.roles, 'role')}, "
        f"{_count(groups.edges, 'edge')}); "
        f"{_count(groups.workloads_without_edges, 'workload')} with no communication edges"
        + (f" (not listed: {unlisted})" if unlisted else "")
    )
