"""A readable terminal table; colour only when asked (on a TTY).

Names, paths, messages and errors come from the audited manifests, so a workload named
`"x\x1b[2J"` could clear the reader's screen, retitle the terminal or hide a line behind `\r`:
every control character (C0, DEL, C1, which covers escape sequences) is shown escaped instead
(`\x1b`, `\r`), so what is printed is what the file says and nothing the terminal obeys. Our own
colour codes are added after that.
"""

from __future__ import annotations

import re
import textwrap

from auditor.audit.scan import ScanResult
from auditor.rules.groups import Groups

_COLOURS = {"critical": "\033[1;31m", "high": "\033[31m", "medium": "\033[33m", "low": "\033[36m"}
_RESET = "\033[0m"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return {"\t": "\\t", "\n": "\\n", "\r": "\\r"}.get(char, f"\\x{ord(char):02x}")


def clean(text: str) -> str:
    """`text` with every control character escaped: safe to print on a terminal."""
    return _CONTROL.sub(_escape, text)


def render(result: ScanResult, colour: bool = False) -> str:
    lines = []
    if not result.findings:
        lines.append("No findings.")
    for f in result.findings:
        sev = f.severity.upper()
        if colour:
            sev = f"{_COLOURS.get(f.severity, '')}{sev}{_RESET}"
        where = f"{f.workload.file}:{f.workload.line}" if f.workload.file else ""
        head = (
            f"{f.rule} ({f.certainty})  {f.workload.kind} {f.workload.namespace}/{f.workload.name}  {where}"
        )
        lines.append(f"{sev:<9} {clean(head)}")
        lines.extend(
            textwrap.wrap(
                clean(f.message),
                100,
                initial_indent="    ",
                subsequent_indent="    ",
                break_on_hyphens=False,
            )
        )
        lines.extend(
            clean(f"    - {p.kind} {p.namespace + '/' if p.namespace else ''}{p.name} ({p.file}:{p.line})")
            for p in f.policies
        )
        if f.estimated_monthly_cost_usd is not None:
            lines.append(
                f"    estimated ${f.estimated_monthly_cost_usd:,.2f}/month, "
                f"{f.estimated_slowdown_pct}% slower"
            )
        for label, texts in (("assumes", f.assumptions), ("measured", f.evidence)):
            for text in texts:
                indent = f"      {label}: "
                lines.extend(
                    textwrap.wrap(clean(text), 100, initial_indent=indent, subsequent_indent=" " * 8)
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
        lines.append(clean(understood(result.groups)))
    lines.extend(clean(f"error: {e}") for e in result.errors)
    lines.extend(clean(f"note: {n}") for n in result.notes)
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
