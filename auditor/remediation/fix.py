"""The fix use case: scan, plan, edit a copy of the tree, audit the copy again, propose.

A fix is proposed only when the re-audit no longer reports its finding and reports nothing new.
With several findings, fixes build on each other (one copy of the tree); a finding that an earlier
fix already removed is reported as such.
"""

from __future__ import annotations

import difflib
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from auditor.audit.scan import ScanResult, scan
from auditor.inventory import Inventory, role_claim_zones
from auditor.model.findings import Finding
from auditor.remediation import apply as applier
from auditor.remediation.plan import STRATEGIES, FixPlan, NoFix, plan
from auditor.rules.packs import PolicyPack
from auditor.settings.config import Settings
from auditor.sources.manifests import Tools, load_inventory

FIXABLE = ("cross-zone-blocked", "cross-zone-traffic", "zone-label-mismatch")


@dataclass
class Proposal:
    finding: Finding
    plan: FixPlan | None = None
    files: dict[str, tuple[str, str]] = field(default_factory=dict)  # file → (before, after)
    reason: str = ""  # why there is no fix
    reaudit: str = ""  # what the re-audit said

    @property
    def fixed(self) -> bool:
        return self.plan is not None


def unified_diff(name: str, before: str, after: str) -> str:
    """The change of the file `name` as a unified diff (`a/NAME`, `b/NAME`)."""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{name}", f"b/{name}"
    )
    return "".join(lines)


def _read(path: Path) -> str:
    with path.open(encoding="utf-8", newline="") as handle:  # keep CRLF as it is
        return handle.read()


class Workspace:
    """A copy of the scanned paths in a temporary directory, to audit edited files."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="auditor-fix-"))
        self.map: dict[Path, Path] = {}
        for i, path in enumerate(paths):
            target = self.dir / str(i) / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            if path.is_dir():
                shutil.copytree(path, target, symlinks=True)
            elif path.exists():
                shutil.copy2(path, target)
            self.map[path] = target

    def where(self, file: str) -> Path:
        p = Path(file)
        for original, copy in self.map.items():
            if p == original:
                return copy
            if p.is_relative_to(original):
                return copy / p.relative_to(original)
        raise applier.FixError(f"{file} is not under the scanned paths")

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def _scan(
    paths: Sequence[Path], settings: Settings, pack: PolicyPack, today: date, tools: Tools
) -> tuple[Inventory, ScanResult]:
    inv = load_inventory(paths, settings, tools, manifests=True)
    return inv, scan(inv, pack, today)


def propose(
    paths: Sequence[Path],
    settings: Settings,
    pack: PolicyPack,
    today: date,
    fingerprints: set[str] | None = None,
    tools: Tools | None = None,
) -> tuple[ScanResult, list[Proposal]]:
    """Fixes for the selected findings (all fixable ones when `fingerprints` is None)."""
    tools = tools or Tools(None, None)
    inv, result = _scan(paths, settings, pack, today, tools)
    selected = [
        f
        for f in result.findings
        if (f.fingerprint in fingerprints if fingerprints is not None else f.rule in FIXABLE)
    ]
    work = Workspace(paths)
    current: dict[str, str] = {}  # file → edited text so far
    originals: dict[str, str] = {}
    proposals: list[Proposal] = []

    def reader(file: str) -> str:
        if file not in current:
            path = Path(file)
            originals[file] = current[file] = _read(path) if path.exists() else ""
        return current[file]

    try:
        model = result.model
        assert model is not None  # a fresh scan carries its model
        volumes = {r: role_claim_zones(inv, r) for r in model.placements}
        raw_of = {r: inv.manifests.get(w.ref) for w in inv.workloads for r in w.roles}
        known = {f.fingerprint for f in result.findings}
        remaining = set(known)
        for finding in selected:
            if finding.fingerprint not in remaining:
                proposals.append(Proposal(finding, reason="already fixed by an earlier fix in this run"))
                continue
            strategy = str(pack.rule_options().get(finding.rule, {}).get("fix", "pin-zone"))
            if strategy not in STRATEGIES:
                proposals.append(
                    Proposal(finding, reason=f"unknown fix strategy {strategy!r} in the policy pack")
                )
                continue
            candidates = plan(model, finding, strategy, volumes)
            if isinstance(candidates, NoFix):
                proposals.append(Proposal(finding, reason=candidates.reason))
                continue
            proposal = Proposal(finding)
            tried: list[str] = []
            for candidate in candidates:
                try:
                    edited = applier.apply(candidate, reader, raw_of, settings.topology.zone_key)
                except applier.FixError as exc:
                    tried.append(f"{candidate.zone}: {exc}")
                    continue
                except OSError as exc:
                    tried.append(f"{candidate.zone}: cannot read {exc.filename}: {exc.strerror}")
                    continue
                for f, text in edited.items():
                    target = work.where(f)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(text, encoding="utf-8", newline="")
                _, after = _scan(list(work.map.values()), settings, pack, today, tools)
                seen = {f.fingerprint for f in after.findings}
                new = seen - known
                if finding.fingerprint in seen or new:
                    what = "the finding remains" if finding.fingerprint in seen else f"{len(new)} new"
                    tried.append(f"{candidate.zone}: re-audit: {what}")
                    for f in edited:  # undo in the copy
                        if current.get(f):
                            work.where(f).write_text(current[f], encoding="utf-8", newline="")
                        else:
                            work.where(f).unlink(missing_ok=True)
                    continue
                also = len(remaining - seen) - 1
                current.update(edited)
                remaining = seen
                proposal.plan = candidate
                proposal.files = {f: (originals.get(f, ""), text) for f, text in edited.items()}
                more = f", {also} more fixed by this change" if also > 0 else ""
                proposal.reaudit = (
                    f"re-audit: the finding is gone, no new finding "
                    f"({len(after.findings)} finding(s) remain in the tree{more})"
                )
                break
            if proposal.plan is None:
                proposal.reason = "no candidate verified: " + "; ".join(tried or ["none"])
            proposals.append(proposal)
    finally:
        work.close()
    return result, proposals
