"""An audit in parts: what each *unit* of a tree contributes to it, and the audit put back
together from such parts (pure).

An incremental audit (auditor/sources/incremental.py) re-audits only the units whose inputs
changed, and keeps the parts of the others from its last run. `partition` cuts an `Audited`
into one `Fragment` per unit, by the file each finding, group, error, note and count concerns;
`assemble` joins fragments (from one run or several) into an `Audited` that `finish` turns into
the same ScanResult as the audit they came from. `finish` orders everything it reports (findings,
groups, errors and notes by file), so the order fragments are joined in does not show.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from auditor.audit.scan import Audited
from auditor.model.findings import Finding
from auditor.model.source import LoadError
from auditor.rules.groups import GroupEntry
from auditor.rules.packs import PackSubjects, Waiver


@dataclass
class Fragment:
    """What one unit contributes to an audit: every part of an `Audited` that concerns one of its
    files (see Audited for what each is)."""

    candidates: list[Finding] = field(default_factory=list)
    labels: dict[str, Mapping[str, str]] = field(default_factory=dict)
    waivers: list[Waiver] = field(default_factory=list)
    waiver_errors: list[LoadError] = field(default_factory=list)
    errors: list[LoadError] = field(default_factory=list)
    file_notes: list[tuple[str, str]] = field(default_factory=list)
    audited: dict[str, int] = field(default_factory=dict)
    skipped: dict[tuple[str, str], int] = field(default_factory=dict)
    group_entries: list[GroupEntry] = field(default_factory=list)
    # The JSON report's text of each group entry's own members, in their order (Audited.group_heads),
    # when recorded (a list, not keyed by workload: reading 5,000 keys back was a fifth of this).
    group_heads: list[str] = field(default_factory=list)
    # The JSON report's text of each of its candidates, in their order (Audited.finding_json).
    finding_json: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Whole:
    """The parts of an audit that concern the tree as a whole, not one unit."""

    notes: tuple[str, ...]
    model_notes: tuple[str, ...]
    network: str


class Unattributable(Exception):
    """Something of the audit concerns no unit (a file outside the map, a live observation, a
    partial audit, one workload declared in two units): it cannot be cut into fragments."""


def partition(audited: Audited, unit_of: Mapping[str, str]) -> tuple[dict[str, Fragment], Whole]:
    """One fragment per unit of `unit_of` (file → unit) that anything concerns, and the rest."""
    if audited.observation is not None:
        raise Unattributable("a live observation")
    if audited.not_audited:
        raise Unattributable(f"a partial audit ({audited.not_audited[0]})")
    parts: dict[str, Fragment] = {}

    def part(file: str) -> Fragment:
        unit = unit_of.get(file)
        if unit is None:
            raise Unattributable(f"{file!r} is not a file of the tree")
        found = parts.get(unit)
        if found is None:
            found = parts[unit] = Fragment()
        return found

    for identity, files in audited.subjects.files.items():
        if len({unit_of.get(f) for f in files}) > 1:
            raise Unattributable(f"workload {identity} is declared in more than one unit")
    for entry in audited.group_entries:
        part(entry.workload.source.file).group_entries.append(entry)
    for finding in audited.candidates:
        fragment = part(finding.workload.file)
        fragment.candidates.append(finding)
        labels = audited.subjects.labels.get(finding.workload.identity)
        if labels is not None:
            fragment.labels[finding.workload.identity] = labels
    for waiver in audited.subjects.waivers:
        part(waiver.source.file).waivers.append(waiver)
    for error in audited.subjects.errors:
        part(error.file).waiver_errors.append(error)
    for error in audited.errors:
        part(error.file).errors.append(error)
    for file, note in audited.file_notes:
        part(file).file_notes.append((file, note))
    for file, count in audited.audited.items():
        part(file).audited[file] = count
    for (file, kind), count in audited.skipped.items():
        part(file).skipped[file, kind] = count
    return parts, Whole(tuple(audited.notes), tuple(audited.model_notes), audited.network)


def assemble(fragments: Iterable[Fragment], whole: Whole, file_order: Mapping[str, int]) -> Audited:
    """The audit these fragments are the parts of (with the tree's `whole` parts and file order)."""
    fragments = list(fragments)  # read twice
    out = Audited(
        [],
        PackSubjects({}),
        [],
        list(whole.notes),
        [],
        list(whole.model_notes),
        {},
        {},
        [],
        whole.network,
        [],
        dict(file_order),
    )
    labels: dict[str, Mapping[str, str]] = {}
    waivers: list[Waiver] = []
    waiver_errors: list[LoadError] = []
    for f in fragments:
        out.candidates.extend(f.candidates)
        labels.update(f.labels)
        waivers.extend(f.waivers)
        waiver_errors.extend(f.waiver_errors)
        out.errors.extend(f.errors)
        out.file_notes.extend(f.file_notes)
        out.audited.update(f.audited)
        out.skipped.update(f.skipped)
        out.group_entries.extend(f.group_entries)
    out.group_heads, out.finding_json = kept_json(fragments)
    out.subjects = PackSubjects(labels, tuple(waivers), tuple(waiver_errors))
    return out


def kept_json(fragments: Iterable[Fragment]) -> tuple[list[str], dict[int, tuple[Finding, str]]]:
    """The JSON report's texts the fragments keep, as Audited.group_heads (for their group
    entries joined in the same order; empty when none kept any) and finding_json (a fragment
    recorded without its texts contributes none)."""
    heads: list[str] = []
    findings: dict[int, tuple[Finding, str]] = {}
    for f in fragments:
        kept = len(f.group_heads) == len(f.group_entries)
        heads.extend(f.group_heads if kept else [""] * len(f.group_entries))
        if len(f.finding_json) == len(f.candidates):
            findings.update((id(c), (c, t)) for c, t in zip(f.candidates, f.finding_json, strict=True))
    return (heads if any(heads) else []), findings
