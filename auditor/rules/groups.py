"""What a scan understood: the workloads it recognised as groups of pods that must talk, with
their roles, feasible zones and communication edges, and the verdict of each edge. Computed once
from the audit model (pure); the JSON report lists it (docs/reports.md says which workloads are
listed and which only counted) and the table prints a one-line summary, so a user can tell
"understood and fine" from "not recognised".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import field

from auditor.model.findings import ObjectRef
from auditor.model.objects import Role, Workload, WorkloadRef
from auditor.model.pickling import by_fields
from auditor.model.values import value
from auditor.rules.model import AuditModel, EdgeAnalysis, workload_object
from auditor.workloads.edges import CommEdge, training_kind

GENERIC = "generic"


@by_fields
@value(frozen=True)
class GroupRole:
    name: str
    replicas: int
    feasible_zones: tuple[str, ...]
    unschedulable: bool


@by_fields
@value(frozen=True)
class GroupEdge:
    """One communication edge from a role of the group, with what the audit concluded about it."""

    source: str  # role name, in the group's workload
    destination: str  # role name
    destination_workload: ObjectRef | None  # None: a role of the same workload
    port: int | None  # None: the ephemeral range (`ports` says which)
    ports: str
    protocol: str
    origin: str
    reason: str
    # False when an end has no node to land on: no placement, no verdict (role-unschedulable says so).
    analysed: bool
    allowed: tuple[tuple[str, str], ...]  # (source zone, destination zone) placements allowed
    denied: tuple[tuple[str, str], ...]
    split: str | None  # certainty that the pair is split across zones; None: never split
    coupling: str  # the constraint that decided the zone pairs, in words


@value(frozen=True)
class Group:
    workload: ObjectRef
    recognised_as: str  # the training kind, or GENERIC
    roles: tuple[GroupRole, ...]
    edges: tuple[GroupEdge, ...]
    # Other workloads with an edge into this one, e.g. workers that reach this coordinator through
    # its Service: their edges are listed under them.
    reached_from: tuple[ObjectRef, ...]
    # The JSON report's text of its own members (json_report.group_head) where an incremental
    # scan's cache kept it, else "": how it is written, not what it is (never compared).
    head: str = field(default="", compare=False, repr=False)


@value(frozen=True)
class Groups:
    groups: tuple[Group, ...]
    # Every workload with roles but no edge in or out, listed or not.
    workloads_without_edges: int
    # Generic workloads without edges (not listed), counted by kind.
    unlisted_by_kind: tuple[tuple[str, int], ...]

    @property
    def edges(self) -> int:
        return sum(len(g.edges) for g in self.groups)

    @property
    def roles(self) -> int:
        return sum(len(g.roles) for g in self.groups)

    @property
    def training(self) -> int:
        return sum(1 for g in self.groups if g.recognised_as != GENERIC)


ZonePairs = tuple[tuple[str, str], ...]


def _edge(
    edge: CommEdge, analysis: EdgeAnalysis | None, own: Workload, shared: dict[ZonePairs, ZonePairs]
) -> GroupEdge:
    """`shared`: one object per distinct set of zone pairs among the edges of an audit (most
    edges allow the same few): a fragment of an incremental scan pickles each once, and reads it
    back once, instead of nine pairs per edge."""
    other = edge.destination.workload
    verdicts = analysis.verdicts if analysis is not None else ()
    allowed = tuple((v.source_zone, v.destination_zone) for v in verdicts if v.allowed)
    denied = tuple((v.source_zone, v.destination_zone) for v in verdicts if not v.allowed)
    return GroupEdge(
        source=edge.source.name,
        destination=edge.destination.name,
        destination_workload=None if other == own.ref else workload_object(other),
        port=edge.port,
        ports=edge.ports_text,
        protocol=edge.protocol,
        origin=edge.origin,
        reason=edge.reason,
        analysed=analysis is not None,
        allowed=shared.setdefault(allowed, allowed),
        denied=shared.setdefault(denied, denied),
        split=analysis.placement.split if analysis is not None else None,
        coupling=analysis.placement.coupling if analysis is not None else "",
    )


def _role(role: Role, model: AuditModel) -> GroupRole:
    placement = model.placements.get(role)
    zones = placement.zones if placement is not None else ()
    return GroupRole(role.name, role.replicas, zones, placement is None or placement.unschedulable)


@by_fields
@value(frozen=True)
class GroupEntry:
    """What the scan understood of one workload with roles, from its own side: its roles, its
    edges, and the other workloads they lead to (`reaches`). Whether it is listed, and who
    reaches it, takes every entry: see `summarise`."""

    workload: WorkloadRef
    kind: str | None  # the training kind, None for a generic workload
    roles: tuple[GroupRole, ...]
    edges: tuple[GroupEdge, ...]
    reaches: tuple[WorkloadRef, ...]


def group_entries(model: AuditModel) -> list[GroupEntry]:
    """One entry per workload with roles, in the model's workload order."""
    analyses = {a.edge: a for a in model.edges}
    outgoing: dict[WorkloadRef, list[CommEdge]] = {}
    for e in model.comm_edges:
        outgoing.setdefault(e.source.workload, []).append(e)
    shared: dict[ZonePairs, ZonePairs] = {}
    entries: list[GroupEntry] = []
    for w in model.workloads():
        if not w.roles:
            continue
        edges = outgoing.get(w.ref, [])
        entries.append(
            GroupEntry(
                w.ref,
                training_kind(w.ref),
                tuple(_role(r, model) for r in w.roles),
                tuple(_edge(e, analyses.get(e), w, shared) for e in edges),
                tuple(
                    dict.fromkeys(e.destination.workload for e in edges if e.destination.workload != w.ref)
                ),
            )
        )
    return entries


def listed_as(entry: GroupEntry) -> tuple[ObjectRef, str]:
    """The workload and the kind (`recognised_as`) the group of `entry` is listed under."""
    return workload_object(entry.workload), entry.kind or GENERIC


def summarise(entries: Sequence[GroupEntry], heads: Sequence[str] = ()) -> Groups:
    """The groups of these entries: a workload is listed when it is a training kind or has an
    edge in or out; listed ones sorted by file, line and identity. `heads`: the JSON report's
    text of each entry's group where it was kept ("" where not; none at all: empty)."""
    reached: dict[WorkloadRef, set[WorkloadRef]] = {}
    for entry in entries:
        for other in entry.reaches:
            reached.setdefault(other, set()).add(entry.workload)
    listed: list[Group] = []
    without_edges = 0
    unlisted: Counter[str] = Counter()
    for i, entry in enumerate(entries):
        into = reached.get(entry.workload, set())
        if not entry.edges and not into:
            without_edges += 1
            if entry.kind is None:
                unlisted[entry.workload.kind] += 1
                continue
        listed.append(
            Group(
                *listed_as(entry),
                entry.roles,
                entry.edges,
                tuple(sorted((workload_object(r) for r in into), key=lambda r: r.identity)),
                heads[i] if heads else "",
            )
        )
    listed.sort(key=lambda g: (g.workload.file, g.workload.line, g.workload.identity))
    return Groups(tuple(listed), without_edges, tuple(sorted(unlisted.items())))


def groups(model: AuditModel) -> Groups:
    return summarise(group_entries(model))
