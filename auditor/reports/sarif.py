"""SARIF 2.1.0 for GitHub code scanning (and any SARIF viewer): root-relative locations, every rule
that can fire, the effective severity, partial-audit flag and fingerprints as docs/ci.md, "SARIF for
code scanning", describes. GitHub places a result on a file only through a path relative to the
repository root under ``%SRCROOT%`` (SARIF §3.4.4, validator rule SARIF1004)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from auditor import TOOL_NAME, __version__
from auditor.model.findings import Finding
from auditor.reports import Audited
from auditor.rules import RULES
from auditor.rules.packs import PolicyPack

# The id of the final SARIF 2.1.0 schema (OASIS errata 01), the one `$schema` should name
# (validator rule SARIF1011); tests/data/sarif/ holds a copy.
SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SRCROOT = "%SRCROOT%"
# Where the documentation lives once published; helpUri and informationUri point here.
PROJECT_URL = "https://github.com/placement-auditor/placement-auditor"
DOCS_URL = f"{PROJECT_URL}/blob/main/"
_LEVEL = {"critical": "error", "high": "error", "medium": "warning", "low": "note"}
_PROBLEM_SEVERITY = {"critical": "error", "high": "error", "medium": "warning"}  # else recommendation
# GitHub's security-severity: critical > 9.0, high 7.0–8.9, medium 4.0–6.9, low 0.1–3.9.
SECURITY_SEVERITY = {"critical": "9.5", "high": "8.0", "medium": "5.5", "low": "2.0"}


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation other than '-' and
    '_' dropped, each space a '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@dataclass(frozen=True, slots=True)
class RuleDescriptor:
    """One entry of tool.driver.rules: what a rule is, where its help is, how severe it is here."""

    id: str
    title: str
    help_markdown: str
    help_uri: str
    severity: str  # the effective default: a pack's override, else the rule's own
    tags: tuple[str, ...]
    origin: str  # built-in | custom | unknown

    def to_json(self) -> dict[str, Any]:
        plain = " ".join(self.help_markdown.replace("`", "").split())
        first = self.help_markdown.split("\n\n")[0]
        return {
            "id": self.id,
            "name": "".join(p.capitalize() for p in re.split(r"[-_.]", self.id) if p),
            "shortDescription": {"text": _sentence(self.title)},
            "fullDescription": {"text": _sentence(" ".join(first.split()))},
            "help": {"text": plain, "markdown": self.help_markdown},
            "helpUri": self.help_uri,
            "defaultConfiguration": {"level": _LEVEL[self.severity]},
            "properties": {
                "security-severity": SECURITY_SEVERITY[self.severity],
                "problem.severity": _PROBLEM_SEVERITY.get(self.severity, "recommendation"),
                "tags": [*self.tags, "placement", self.origin],
                "precision": "high",
            },
        }


def _sentence(text: str) -> str:
    """Messages end with a full stop (validator rule SARIF2001)."""
    text = text.strip()
    return text if text[-1:] in ".!?" else f"{text}."


def rule_descriptors(pack: PolicyPack | None, extra_ids: Iterable[str] = ()) -> list[RuleDescriptor]:
    """Every rule that can fire under `pack` (None: built-in rules at their own severity),
    then any other id in `extra_ids` (stored findings of a rule no pack in hand defines)."""
    out: list[RuleDescriptor] = []
    for rule in RULES:
        meta = rule.META
        override = pack.settings(meta.id).severity if pack is not None else None
        heading = f"`{meta.id}` — {meta.title}"
        out.append(
            RuleDescriptor(
                meta.id,
                meta.title,
                (rule.__doc__ or meta.title).strip(),
                f"{DOCS_URL}docs/rules.md#{github_anchor(heading)}",
                override or meta.severity,
                meta.symptoms,
                "built-in",
            )
        )
    for custom in pack.custom_rules if pack is not None else ():
        override = pack.settings(custom.id).severity if pack is not None else None
        title = custom.title or custom.id
        where = f"{custom.source.file}:{custom.source.line}" if custom.source.line else custom.source.file
        body = custom.description or custom.message
        out.append(
            RuleDescriptor(
                custom.id,
                title,
                f"{body}\n\nA custom rule of a policy pack ({where}, `{custom.key}`): a CEL condition, "
                f"reported when true:\n\n```\n{custom.condition.source}\n```",
                f"{DOCS_URL}policies/README.md#a-pack",
                override or custom.severity,
                custom.symptoms,
                "custom",
            )
        )
    out.extend(
        RuleDescriptor(
            rid,
            f"Custom rule {rid}",
            f"`{rid}` is not a built-in rule: a custom rule of a policy pack that is not loaded here.",
            f"{DOCS_URL}policies/README.md#a-pack",
            "medium",
            (),
            "unknown",
        )
        for rid in sorted(set(extra_ids) - {d.id for d in out})
    )
    return out


@dataclass(frozen=True, slots=True)
class SourceRoot:
    """How file names in a result become URIs.

    `root`: the repository root (``%SRCROOT%``); None when unknown, then relative names are
    taken as root-relative already. `cwd`: what relative names are relative to (the scan's
    working directory); None when they are relative to `root` (stored findings, made relative
    to the target's checkout)."""

    root: Path | None = None
    cwd: Path | None = None

    def path(self, name: str) -> tuple[str, bool] | None:
        """(path, relative to the root) for a file name: a root-relative POSIX path, else an
        absolute one; None when it names no file."""
        name = name.removesuffix(" (rendered)")
        if not name or name.startswith(("<", "cluster:", "helm:")):
            return None
        path = Path(name)
        if not path.is_absolute() and self.cwd is not None:
            path = self.cwd / path
        if path.is_absolute():
            root = self.root.resolve() if self.root is not None else None
            resolved = Path(_normalise(path))
            if root is not None and resolved.is_relative_to(root):
                return resolved.relative_to(root).as_posix(), True
            return resolved.as_posix(), False
        return PurePosixPath(_normalise(path)).as_posix().removeprefix("./"), True

    def uri(self, name: str) -> tuple[str, str | None] | None:
        """(uri, uriBaseId) for a file name, or None when it names no file."""
        found = self.path(name)
        if found is None:
            return None
        path, relative = found
        return (quote(path, safe="/-._~"), SRCROOT) if relative else (Path(path).as_uri(), None)

    def base_ids(self) -> dict[str, Any]:
        description = {"text": "The root of the audited repository: result paths are relative to it."}
        if self.root is None:
            return {SRCROOT: {"description": description}}
        uri = self.root.resolve().as_uri().rstrip("/") + "/"  # a base URI ends with '/' (SARIF1004)
        return {SRCROOT: {"uri": uri, "description": description}}


def _normalise(path: Path) -> str:
    """`a/./b/../c` as `a/c` without touching the disk (symlinks are the caller's business)."""
    parts: list[str] = []
    for part in path.parts:
        if part == "..":
            if parts and parts[-1] not in ("..", path.anchor):
                parts.pop()
                continue
        elif part == ".":
            continue
        parts.append(part)
    if not parts:
        return "."
    head, *rest = parts
    return str(Path(head, *rest))


def _location(root: SourceRoot, file: str, line: int, message: str | None = None) -> dict[str, Any] | None:
    where = root.uri(file)
    if where is None:
        return None
    uri, base = where
    artifact: dict[str, Any] = {"uri": uri}
    if base is not None:
        artifact["uriBaseId"] = base
    out: dict[str, Any] = {
        "physicalLocation": {"artifactLocation": artifact, "region": {"startLine": max(1, line)}}
    }
    if message is not None:
        out["message"] = {"text": message}
    return out


def _logical(f: Finding) -> dict[str, Any]:
    w = f.workload
    qualified = "/".join(p for p in (w.namespace, w.kind, w.name) if p)
    return {"logicalLocations": [{"fullyQualifiedName": qualified, "name": w.name, "kind": "object"}]}


def _result(f: Finding, index: Mapping[str, int], root: SourceRoot) -> dict[str, Any]:
    location = _location(root, f.workload.file, f.workload.line) or _logical(f)
    related: list[dict[str, Any]] = []
    for p in f.policies:
        text = f"{p.kind} {p.namespace + '/' if p.namespace else ''}{p.name}"
        loc = _location(root, p.file, p.line, _sentence(f"Deciding policy: {text}"))
        if loc is not None:
            related.append({"id": len(related), **loc})
    out: dict[str, Any] = {
        "ruleId": f.rule,
        "ruleIndex": index[f.rule],
        "level": _LEVEL[f.severity],
        "message": {"text": _sentence(f.message)},
        "locations": [location],
        "partialFingerprints": {"placementAuditor/v1": f.fingerprint},
        "properties": {
            "certainty": f.certainty,
            "severity": f.severity,
            "security-severity": SECURITY_SEVERITY[f.severity],
            "symptoms": list(f.symptoms),
            "estimated_monthly_cost_usd": f.estimated_monthly_cost_usd,
            "estimated_slowdown_pct": f.estimated_slowdown_pct,
        },
    }
    if related:
        out["relatedLocations"] = related
    return out


def to_document(result: Audited, root: SourceRoot | None = None) -> dict[str, Any]:
    root = root or SourceRoot()
    descriptors = rule_descriptors(result.pack, (f.rule for f in result.findings))
    index = {d.id: i for i, d in enumerate(descriptors)}
    results = [_result(f, index, root) for f in result.findings]
    unread = {n.path for n in result.not_audited}
    notifications = []
    for e in result.errors:
        note: dict[str, Any] = {
            "level": "error" if e.file in unread else "warning",
            "message": {"text": _sentence(str(e.message))},
        }
        loc = _location(root, e.file, e.line)
        if loc is not None:
            note["locations"] = [loc]
        notifications.append(note)
    complete = result.complete and not (result.audited_objects == 0 and result.errors)
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": TOOL_NAME,
                        "version": __version__,
                        "semanticVersion": __version__,
                        "informationUri": PROJECT_URL,
                        "rules": [d.to_json() for d in descriptors],
                    }
                },
                "originalUriBaseIds": root.base_ids(),
                "results": results,
                "invocations": [
                    {"executionSuccessful": complete, "toolExecutionNotifications": notifications}
                ],
                "properties": {"network": result.network, "notes": list(result.notes)},
            }
        ],
    }


def render(result: Audited, root: SourceRoot | None = None) -> str:
    return json.dumps(to_document(result, root), indent=2) + "\n"
