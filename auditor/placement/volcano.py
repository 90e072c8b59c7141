"""Volcano network-topology-aware scheduling: HyperNodes and a Job's `networkTopology` (pure).

A HyperNode (`topology.volcano.sh/v1alpha1`) is one domain of the network at a `tier` (1 the
closest, higher tiers nearer the root); its `members` are Nodes (by `exactMatch.name`,
`regexMatch.pattern` or `labelMatch` labels) or other HyperNodes (by exact name, or regex). A
pattern is matched as Volcano's Go `regexp.MatchString` does: RE2 syntax, unanchored, in time
linear in the name (google-re2, so no pattern written in a manifest can make matching hang). A
Volcano Job with `spec.networkTopology.mode: hard` must be placed inside one HyperNode whose tier is
at most `highestTierAllowed`: its pods land only on the nodes such a HyperNode holds, all of them in
the same one. When every such HyperNode's nodes lie in one zone, the job keeps to one zone; `soft`
only prefers it (a split stays `possible`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import re2  # type: ignore[import-untyped]  # google-re2 ships no stubs

from auditor.model.objects import Node, Workload, WorkloadRef
from auditor.model.source import SourceRef
from auditor.reachability import specs
from auditor.reachability.specs import PolicyError

KIND = "HyperNode"
VERSIONS = ("topology.volcano.sh/v1alpha1",)
MAX_PATTERN = 256

VolcanoError = PolicyError
"""The error of a HyperNode that cannot be read (`field`: the dotted path in it)."""


_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a bad pattern is a LoadError, not a line on stderr


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str) -> Any:
    return re2.compile(pattern, _OPTIONS)


@dataclass(frozen=True, slots=True)
class Member:
    kind: str  # Node | HyperNode
    exact: str = ""
    pattern: str = ""
    labels: tuple[tuple[str, str], ...] = ()

    def matches(self, name: str, labels: Mapping[str, str] | None) -> bool:
        if self.exact:
            return name == self.exact
        if self.pattern:
            return _compiled(self.pattern).search(name) is not None
        if self.labels:
            return labels is not None and all(labels.get(k) == v for k, v in self.labels)
        return False


@dataclass(frozen=True, slots=True)
class HyperNode:
    name: str
    tier: int
    members: tuple[Member, ...]
    source: SourceRef = SourceRef("")


def parse_hypernode(obj: Mapping[str, Any], source: SourceRef) -> HyperNode:
    name = str(specs.mapping(obj.get("metadata"), "metadata").get("name"))  # the loader requires it
    spec = specs.mapping(obj.get("spec"), "spec")
    tier = spec.get("tier")
    if isinstance(tier, bool) or not isinstance(tier, int) or tier < 0:
        raise VolcanoError("spec.tier", f"must be a non-negative integer, got {tier!r}")
    raw = spec.get("members")
    if raw is not None and not isinstance(raw, list):
        raise VolcanoError("spec.members", "must be a list")
    members = []
    for i, m in enumerate(raw or []):
        at = f"spec.members[{i}]"
        body = specs.mapping(m, at)
        kind = str(body.get("type") or "Node")
        if kind not in ("Node", "HyperNode"):
            raise VolcanoError(f"{at}.type", f"must be Node or HyperNode, got {kind!r}")
        sel = specs.mapping(body.get("selector"), f"{at}.selector")
        given = [k for k in ("exactMatch", "regexMatch", "labelMatch") if k in sel]
        if len(given) != 1:
            raise VolcanoError(
                f"{at}.selector", "must hold exactly one of exactMatch, regexMatch, labelMatch"
            )
        part = specs.mapping(sel[given[0]], f"{at}.selector.{given[0]}")
        if given[0] == "exactMatch":
            exact = part.get("name")
            if not isinstance(exact, str) or not exact:
                raise VolcanoError(f"{at}.selector.exactMatch.name", "is required")
            members.append(Member(kind, exact=exact))
        elif given[0] == "regexMatch":
            pattern = part.get("pattern")
            if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_PATTERN:
                raise VolcanoError(
                    f"{at}.selector.regexMatch.pattern", f"must be a regex of 1–{MAX_PATTERN} characters"
                )
            try:
                _compiled(pattern)
            except re2.error as exc:
                detail = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
                raise VolcanoError(
                    f"{at}.selector.regexMatch.pattern", f"is not an RE2 regular expression: {detail}"
                ) from None
            members.append(Member(kind, pattern=pattern))
        else:
            labels = specs.mapping(part.get("matchLabels"), f"{at}.selector.labelMatch.matchLabels")
            if kind != "Node":
                raise VolcanoError(f"{at}.selector.labelMatch", "selects Nodes only")
            members.append(Member(kind, labels=tuple(sorted((str(k), str(v)) for k, v in labels.items()))))
    return HyperNode(name, tier, tuple(members), source)


def leaf_nodes(hypernodes: Sequence[HyperNode], nodes: Sequence[Node]) -> dict[str, frozenset[str]]:
    """Each HyperNode's nodes, through its HyperNode members. Iterative, each HyperNode resolved
    once (a chain of thousands cannot exhaust the stack); a member that closes a cycle is cut
    (Volcano cannot schedule with one either)."""
    by_name = {h.name: h for h in hypernodes}
    direct: dict[str, set[str]] = {}
    children: dict[str, list[str]] = {}
    for h in by_name.values():
        direct[h.name] = {
            n.name for m in h.members if m.kind == "Node" for n in nodes if m.matches(n.name, n.label_map)
        }
        kids: list[str] = []
        for m in h.members:
            if m.kind != "HyperNode":
                continue
            if m.exact:
                kids.extend([m.exact] if m.exact in by_name else [])
            else:
                kids.extend(c for c in by_name if m.matches(c, None))
        children[h.name] = kids
    done: dict[str, frozenset[str]] = {}
    on_path: set[str] = set()
    for root in by_name:
        if root in done:
            continue
        stack = [(root, 0)]
        on_path.add(root)
        while stack:
            name, i = stack[-1]
            kids = children[name]
            if i < len(kids):
                stack[-1] = (name, i + 1)
                child = kids[i]
                if child not in done and child not in on_path:
                    on_path.add(child)
                    stack.append((child, 0))
                continue
            stack.pop()
            on_path.discard(name)
            out = set(direct[name])
            for child in kids:
                out |= done.get(child, frozenset())
            done[name] = frozenset(out)
    return done


@dataclass(frozen=True, slots=True)
class Domains:
    """Where a hard-mode Volcano Job may land: the HyperNodes of tier ≤ its highest allowed."""

    mode: str  # hard | soft
    tier: int
    domains: tuple[tuple[str, frozenset[str]], ...]  # (HyperNode, its nodes)

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset().union(*(n for _, n in self.domains))


def domains_for(
    mode: str, highest: int | None, hypernodes: Sequence[HyperNode], leaves: Mapping[str, frozenset[str]]
) -> Domains:
    tier = highest if highest is not None else max((h.tier for h in hypernodes), default=0)
    chosen = tuple((h.name, leaves.get(h.name, frozenset())) for h in hypernodes if h.tier <= tier)
    return Domains(mode, tier, chosen)


def zones_of(domains: Domains, nodes: Iterable[Node], zone_key: str) -> dict[str, set[str]]:
    by_name = {n.name: n.label_map.get(zone_key, "") for n in nodes}
    return {h: {by_name[n] for n in names if n in by_name} for h, names in domains.domains}


def job_domains(
    workloads: Sequence[Workload], hypernodes: Sequence[HyperNode], nodes: Sequence[Node]
) -> dict[WorkloadRef, Domains]:
    """The HyperNodes each Volcano Job with a networkTopology may be placed in (none without
    HyperNodes: nothing constrains them)."""
    if not hypernodes:
        return {}
    jobs = [w for w in workloads if w.options.network_topology[0]]
    if not jobs:
        return {}
    leaves = leaf_nodes(hypernodes, nodes)
    out = {}
    for w in jobs:
        mode, tier = w.options.network_topology
        out[w.ref] = domains_for(mode, tier if tier >= 0 else None, hypernodes, leaves)
    return out
