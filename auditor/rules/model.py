"""The joined model rules read: roles placed, edges between them, and the verdict of every edge
in every zone placement the constraints allow. Built once per scan; pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from auditor.inventory import Inventory, policy_engine, role_claim_zones, role_endpoint
from auditor.model.findings import EdgeRef, Finding, ObjectRef, PolicyMention
from auditor.model.objects import Node, Role, Workload, WorkloadRef
from auditor.model.values import value
from auditor.placement import routing
from auditor.placement.coupling import (
    PairContext,
    PairPlacement,
    PlacementOptions,
    RolePlacement,
    pair_placement,
    place_roles,
)
from auditor.placement.observed import ObservedRole, observed_pair
from auditor.progress import Progress, silent
from auditor.reachability.endpoints import PodEndpoint
from auditor.reachability.engine import FlowVerdict, PolicyEngine
from auditor.reachability.policy import Decider, Direction, DirectionalVerdict
from auditor.reachability.ports import PortSet
from auditor.rules.base import RuleMeta
from auditor.workloads.edges import CommEdge, comm_edges


@value(frozen=True)
class ZoneVerdict:
    """One zone placement of an edge. `allowed`: the edge's port, or for a data-plane edge at least
    one port of its range, is allowed (the kernel picks a port per connection, so a range edge is
    blocked only when every port of it is denied). `denied_ports`: the edge's ports denied here;
    `deciders`: the policies denying them."""

    source_zone: str
    destination_zone: str
    allowed: bool
    deciders: tuple[Decider, ...]
    denied_ports: PortSet = PortSet()

    @property
    def same_zone(self) -> bool:
        return self.source_zone == self.destination_zone

    @property
    def partly_denied(self) -> bool:
        """Allowed, but some ports of the edge's range are denied: connections fail at random."""
        return self.allowed and bool(self.denied_ports)


Blocked = Literal["traffic-blocked", "cross-zone-blocked"]


@value(frozen=True)
class EdgeClass:
    """What an edge's verdicts add up to, decided once per edge (rules filter on it).

    `blocked`: traffic-blocked when a same-zone placement is denied too (moving the pods would not
    help); cross-zone-blocked when only split placements are denied (the split is the cause); None
    when every allowed placement lets the traffic through. `certainty` is the blocked verdict's.
    `crosses_zones`: some allowed placement puts the two ends in different zones.
    """

    blocked: Blocked | None
    certainty: str
    crosses_zones: bool


def classify(placement: PairPlacement, verdicts: Sequence[ZoneVerdict]) -> EdgeClass:
    crosses = any(not v.same_zone for v in verdicts)
    denied = [v for v in verdicts if not v.allowed]
    if not denied:
        return EdgeClass(None, "", crosses)
    if any(v.same_zone for v in denied):
        return EdgeClass("traffic-blocked", "always" if len(denied) == len(verdicts) else "possible", crosses)
    if len(denied) == len(verdicts):
        return EdgeClass("cross-zone-blocked", "always", crosses)  # every placement is a denied split
    cross = [v for v in verdicts if not v.same_zone]
    if len(denied) == len(cross) and placement.split in ("always", "likely"):
        return EdgeClass("cross-zone-blocked", placement.split, crosses)
    return EdgeClass("cross-zone-blocked", "possible", crosses)


@value(frozen=True)
class EdgeAnalysis:
    edge: CommEdge
    placement: PairPlacement
    verdicts: tuple[ZoneVerdict, ...]
    verdict: EdgeClass

    @property
    def denied(self) -> list[ZoneVerdict]:
        return [v for v in self.verdicts if not v.allowed]

    @property
    def partly_denied(self) -> list[ZoneVerdict]:
        return [v for v in self.verdicts if v.partly_denied]


@dataclass
class AuditModel:
    inventory: Inventory
    engine: PolicyEngine
    placements: dict[Role, RolePlacement]
    edges: list[EdgeAnalysis]
    notes: list[str] = field(default_factory=list)
    # Every communication edge found, analysed or not (an unschedulable end has no placement to
    # analyse): what the scan understood, for the groups reports list.
    comm_edges: list[CommEdge] = field(default_factory=list)

    @cached_property
    def _roles(self) -> dict[tuple[str, str], Role]:
        return {(object_ref(r).identity, r.label): r for r in self.placements}

    @cached_property
    def _edges(self) -> dict[tuple[str, str, str], EdgeAnalysis]:
        found: dict[tuple[str, str, str], EdgeAnalysis] = {}
        for a in self.edges:
            key = (object_ref(a.edge.source).identity, a.edge.source.label, a.edge.destination.label)
            found.setdefault(key, a)
        return found

    def role(self, key: tuple[str, str]) -> Role | None:
        """The role a finding's `role_key` names."""
        return self._roles.get(key)

    def edge_of(self, finding: Finding) -> EdgeAnalysis | None:
        """The analysed edge an edge finding is about (the first, as the rules report it)."""
        if finding.edge is None:
            return None
        return self._edges.get((finding.workload.identity, finding.edge.from_role, finding.edge.to_role))

    def workloads(self) -> Sequence[Workload]:
        return self.inventory.workloads


def workload_object(ref: WorkloadRef) -> ObjectRef:
    """A workload as findings and reports name it."""
    return ObjectRef(ref.api_version, ref.kind, ref.namespace, ref.name, ref.source.file, ref.source.line)


def object_ref(role: Role) -> ObjectRef:
    return workload_object(role.workload)


def role_finding(
    meta: RuleMeta,
    role: Role,
    message: str,
    certainty: str = "always",
    edge: EdgeRef | None = None,
    policies: tuple[PolicyMention, ...] = (),
) -> Finding:
    """A finding of `meta`'s rule about one role of a workload (an edge finding: its source role)."""
    return Finding(
        rule=meta.id,
        severity=meta.severity,
        certainty=certainty,
        symptoms=meta.symptoms,
        workload=object_ref(role),
        message=message,
        edge=edge,
        policies=policies,
        role=role.label,
    )


def mentions(deciders: Sequence[Decider]) -> tuple[PolicyMention, ...]:
    seen: dict[tuple[str, str, str], PolicyMention] = {}
    for d in deciders:
        p = d.policy
        if (p.kind, p.namespace, p.name) not in seen:
            seen[p.kind, p.namespace, p.name] = PolicyMention(
                p.kind, p.namespace, p.name, p.source.file, p.source.line
            )
    return tuple(seen.values())


class RoleEndpoints:
    """One endpoint per (role, zone): a replica on the first feasible node of that zone (placement
    already filtered them), whose labels are the ones copied onto the pod at binding."""

    def __init__(self, inv: Inventory) -> None:
        self.inv = inv
        topology = inv.settings.topology
        self.zone_key = topology.zone_key
        self.nodes = {n.name: n for n in inv.nodes}
        self._zones = {n.name: n.label_map.get(self.zone_key) for n in inv.nodes}
        self._endpoints: dict[tuple[Role, str], PodEndpoint] = {}
        self._first_nodes: dict[Role, dict[str | None, Node]] = {}
        # What role_endpoint would work out again for every endpoint, once.
        self._pod_zone_labels = topology.effective_pod_zone_labels(inv.settings.kubernetes)
        self._namespace_labels: dict[str, tuple[tuple[str, str], ...]] = {}

    def get(self, role: Role, zone: str, placement: RolePlacement) -> PodEndpoint:
        found = self._endpoints.get((role, zone))
        if found is None:
            firsts = self._first_nodes.get(role)
            if firsts is None:
                firsts = self._first_nodes[role] = {}
                wanted = set(placement.zones)
                zones = self._zones
                for name in placement.nodes:
                    node_zone = zones[name]
                    if node_zone not in firsts:
                        firsts[node_zone] = self.nodes[name]
                        wanted.discard(node_zone)
                        if not wanted:
                            break
            namespace = role.workload.namespace
            ns_labels = self._namespace_labels.get(namespace)
            if ns_labels is None:
                ns_labels = self._namespace_labels[namespace] = self.inv.namespace_labels(namespace)
            found = self._endpoints[role, zone] = role_endpoint(
                self.inv,
                role,
                zone,
                firsts.get(zone),
                namespace_labels=ns_labels,
                pod_zone_labels=self._pod_zone_labels,
            )
        return found


def placement_options(inv: Inventory) -> PlacementOptions:
    """The settings placement reads, from the inventory's."""
    return PlacementOptions(
        inv.settings.topology.zone_key,
        inv.settings.kubernetes.extended_resource_toleration,
        {ns: dict(labels) for ns, labels in inv.namespaces.items()},
        inv.admissions,
        inv.queues.topologies,
        inv.volcano,
        inv.devices if inv.devices else None,
    )


def place_inventory_roles(inv: Inventory, roles: Sequence[Role]) -> dict[Role, RolePlacement]:
    """Where `roles` can land on the inventory's nodes, with its settings and volume claims."""
    options = placement_options(inv)
    claims = {r: role_claim_zones(inv, r) for r in roles}
    return place_roles(roles, inv.nodes, options.zone_key, claims, options)


def denying(flow: FlowVerdict, protocol: str, ports: PortSet) -> tuple[Decider, ...]:
    """The deciders of every denied piece of either direction that overlaps `ports`."""
    found: dict[Decider, None] = {}
    for side in (flow.egress, flow.ingress):
        for segment in side.segments:
            if not segment.allowed and segment.conns.ports(protocol) & ports:
                found.update(dict.fromkeys(segment.deciders))
    return tuple(found)


def zone_verdict(edge: CommEdge, flow: FlowVerdict, source_zone: str, destination_zone: str) -> ZoneVerdict:
    wanted = PortSet.of(edge.ports)
    denied = wanted - flow.allowed_conns().ports(edge.protocol)
    deciders = denying(flow, edge.protocol, denied) if denied else ()
    return ZoneVerdict(source_zone, destination_zone, denied != wanted, deciders, denied)


def build_model(
    inv: Inventory,
    progress: Progress = silent,
    observed: Mapping[Role, ObservedRole] | None = None,
    engine: PolicyEngine | None = None,
    *,
    known_edges: Sequence[CommEdge] | None = None,
    known_placements: Mapping[Role, RolePlacement] | None = None,
) -> AuditModel:
    """The model rules read. With `observed`, placements are where the pods actually run (only
    edges between roles with running pods are analysed), instead of where they could land.
    `known_edges` / `known_placements`: the communication edges and the placements of a model of
    an inventory with the same workloads, Services, nodes, namespaces and claims (policies do not
    change them), not worked out again."""
    engine = engine or policy_engine(inv)
    pair_context = PairContext(inv.nodes, placement_options(inv))
    if known_edges is not None:
        edges = list(known_edges)
    else:
        edges = comm_edges(inv.workloads, inv.services, inv.settings.network.ephemeral_ports)
    if observed is None:
        if known_placements is not None:
            placements = dict(known_placements)
        else:
            placements = place_inventory_roles(inv, [r for w in inv.workloads for r in w.roles])
    else:
        placements = {r: o.placement() for r, o in observed.items() if o.pods}
        edges = [e for e in edges if e.source in placements and e.destination in placements]
    endpoints = RoleEndpoints(inv)
    classes: dict[tuple[Role, str], object] = {}

    def alike(role: Role, placement: RolePlacement, zones: Iterable[str]) -> bool:
        # Whether the role's replicas in all of `zones` meet the same verdicts, as subjects and as
        # peers (PolicyEngine.verdict_class).
        first: object = None
        for zone in zones:
            found = classes.get((role, zone), classes)
            if found is classes:
                found = classes[role, zone] = engine.verdict_class(endpoints.get(role, zone, placement))
            if found is None or (first is not None and found != first):
                return False
            first = found
        return True

    analyses = []
    notes = []
    if not inv.nodes:
        notes.append("no Node objects: zones are unknown, so cross-zone rules could not run (add --nodes)")
    # Replicas in different zones, and edges alike in ports, mostly meet the same cached verdicts:
    # the port arithmetic is done once per (ports, protocol, egress verdict, ingress verdict). The
    # engine keeps every verdict it returns alive, so their ids are stable while this runs.
    judged: dict[tuple[object, ...], ZoneVerdict] = {}
    for n, edge in enumerate(edges, 1):
        progress("evaluating paths", n, len(edges))
        a, b = placements[edge.source], placements[edge.destination]
        if a.unschedulable or b.unschedulable:
            continue
        if observed is None:
            pp = pair_placement(a, b, pair_context)
        else:
            pp = observed_pair(observed[edge.source], observed[edge.destination])
        if edge.via is not None:
            seen = observed[edge.destination] if observed is not None else None
            pp = routed_placement(pp, edge, b, frozenset(seen.zones) if seen is not None else None)
        verdicts = []
        # When each end's replicas meet the same verdicts in every zone of the pairs (the common
        # case: nothing a policy reads differs by zone), the first pair's are every pair's.
        same = alike(edge.source, a, {p[0]: None for p in pp.pairs}) and alike(
            edge.destination, b, {p[1]: None for p in pp.pairs}
        )
        shared: tuple[DirectionalVerdict, DirectionalVerdict] | None = None
        for za, zb in pp.pairs:
            if shared is None:
                src = endpoints.get(edge.source, za, a)
                dst = endpoints.get(edge.destination, zb, b)
                egress = engine.directional(src, Direction.EGRESS, dst)
                ingress = engine.directional(dst, Direction.INGRESS, src)
                if same:
                    shared = egress, ingress
            else:
                egress, ingress = shared
            key = (edge.ports, edge.protocol, id(egress), id(ingress))
            known = judged.get(key)
            if known is None:
                flow = FlowVerdict(str(src), str(dst), egress, ingress)
                known = judged[key] = zone_verdict(edge, flow, za, zb)
            elif known.source_zone != za or known.destination_zone != zb:
                known = ZoneVerdict(za, zb, known.allowed, known.deciders, known.denied_ports)
            verdicts.append(known)
        analyses.append(EdgeAnalysis(edge, pp, tuple(verdicts), classify(pp, verdicts)))
    return AuditModel(inv, engine, placements, analyses, notes, list(edges))


def routed_placement(
    pp: PairPlacement, edge: CommEdge, destination: RolePlacement, seen: frozenset[str] | None
) -> PairPlacement:
    """The zone pairs of a path through a ClusterIP Service, as its routing sends the traffic
    (placement/routing.py); `seen`: the zones the destination's pods run in, when observed."""
    kind, why = routing.routing(edge.via) if edge.via is not None else ("", "")
    if not kind:
        return pp
    pairs = routing.routed_pairs(pp.pairs, kind, seen)
    crosses = any(x != y for x, y in pairs)
    if seen is not None:
        split = pp.split if crosses else None
    else:
        split = routing.routed_split(
            pp.split if crosses else None, kind, destination.role.replicas, destination.single_zone
        )
    if pairs == pp.pairs and split == pp.split:
        return pp
    return PairPlacement(pairs, split, f"{why}; {pp.coupling}", pp.provisioned)


def annotation(workload: Workload, key: str) -> str | None:
    """A workload annotation, or the first pod-template annotation of that key."""
    if key in workload.annotations:
        return str(workload.annotations.get(key))  # an empty value reads as "None", as it always has
    for r in workload.roles:
        value = dict(r.template.annotations).get(key)
        if value is not None:
            return value
    return None


def blocked_finding(meta: RuleMeta, analysis: EdgeAnalysis, cause: str) -> Finding:
    """The finding of a blocked edge: its denied placements and deciding policies; `cause` is the
    rule's own words for why moving the pods would or would not help."""
    edge = analysis.edge
    denied = analysis.denied
    deciders = [d for v in denied for d in v.deciders]
    src_zones = tuple(sorted({v.source_zone for v in denied}))
    dst_zones = tuple(sorted({v.destination_zone for v in denied}))
    where = ", ".join(f"{v.source_zone}→{v.destination_zone}" for v in denied)
    policies = mentions(deciders)
    names = ", ".join(f"{p.kind} {p.namespace + '/' if p.namespace else ''}{p.name}" for p in policies)
    message = (
        f"{edge.source} → {edge.destination} on {edge.protocol}/{edge.ports_text} ({edge.reason}) "
        f"is denied {cause}; denied placements: {where}; deciding policies: {names or 'none'}"
        f"{analysis.placement.through(src_zones, dst_zones)}"
    )
    ref = EdgeRef(edge.source.label, src_zones, edge.destination.label, dst_zones, edge.port, edge.protocol)
    return role_finding(meta, edge.source, message, analysis.verdict.certainty, ref, policies)
