"""`auditor explain`: one reachability question, answered with the deciding policies and rules.

Pure: takes an inventory and the question, returns an Explanation value; rendering is text or
JSON. A name is `NS/POD`, `NS/WORKLOAD` (one-role workloads) or `NS/WORKLOAD/ROLE`. The port is a
number, a container port name, a range `LO-HI`, or `ephemeral`: the range a data-plane edge to the
destination uses in `scan` (workloads/dataports.py). A range is answered as `scan` judges a
data-plane edge: denied only when every port of it is denied, `partial` when some are. A pod that is
an observation of its owner (read from a cluster, a snapshot or a `kubectl get pods` dump) is a
replica of the owner's role, in the zone of the node it is bound to.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from auditor.inventory import Inventory, policy_engine, role_endpoint
from auditor.model.objects import Role
from auditor.placement.coupling import RolePlacement
from auditor.placement.observed import observe
from auditor.placement.pods import representative_node
from auditor.reachability.endpoints import PodEndpoint
from auditor.reachability.engine import FlowVerdict
from auditor.reachability.policy import DirectionalVerdict, Segment
from auditor.reachability.ports import PortSet
from auditor.workloads.dataports import PortRange, data_port_range, parse_range, range_text
from auditor.workloads.edges import comm_edges


class ExplainError(ValueError):
    """The question cannot be asked of these manifests (unknown pod, role, port name...)."""


@dataclass(frozen=True, slots=True)
class Placement:
    source: PodEndpoint
    destination: PodEndpoint
    verdict: FlowVerdict
    egress: Segment  # each direction's piece at the first port it denies (else the first asked)
    ingress: Segment
    ports: PortSet = PortSet()  # the ports asked about
    denied: PortSet = PortSet()  # those that egress or ingress denies

    @property
    def allowed(self) -> bool:
        """Not blocked: the port, or for a range at least one port of it, is allowed."""
        return self.denied != self.ports if self.ports else self.egress.allowed and self.ingress.allowed

    @property
    def outcome(self) -> str:
        """allow | partial (a range with some ports denied) | deny."""
        return "deny" if not self.allowed else "partial" if self.denied else "allow"


@dataclass(frozen=True, slots=True)
class Explanation:
    protocol: str
    port: int  # the asked port; for a range, its first port
    placements: tuple[Placement, ...]
    network: str
    zone_note: str
    ports: PortRange | None = None  # the asked range, when the question is about one

    @property
    def allowed(self) -> bool:
        return all(p.allowed for p in self.placements)

    @property
    def outcome(self) -> str:
        outcomes = {p.outcome for p in self.placements}
        return next(o for o in ("deny", "partial", "allow") if o in outcomes)

    @property
    def decisive(self) -> Placement:
        """The placement reported at the top: the first that denies, else partly denies, else the first."""
        return next((p for p in self.placements if p.outcome == self.outcome), self.placements[0])

    @property
    def ports_text(self) -> str:
        return range_text(self.ports) if self.ports else str(self.port)


def find_role(inv: Inventory, name: str) -> Role:
    parts = name.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise ExplainError(f"{name!r}: expected NS/NAME or NS/WORKLOAD/ROLE")
    ns, wname = parts[0], parts[1]
    workloads = inv.workload(ns, wname)
    if not workloads:
        known = sorted(f"{w.ref.namespace}/{w.ref.name}" for w in inv.workloads)
        hint = f" (known: {', '.join(known[:20])}{' ...' if len(known) > 20 else ''})" if known else ""
        raise ExplainError(f"{name!r}: no pod or workload {ns}/{wname} in the manifests{hint}")
    roles = [r for w in workloads for r in w.roles]
    if len(parts) == 3:
        match = [r for r in roles if parts[2].lower() in (r.name.lower(), r.label.lower())]
        if not match:
            raise ExplainError(
                f"{name!r}: {ns}/{wname} has no role {parts[2]!r} (roles: {', '.join(r.name for r in roles)})"
            )
        return match[0]
    if len(roles) != 1:
        raise ExplainError(
            f"{name!r}: {ns}/{wname} has several roles; name one as "
            f"{ns}/{wname}/ROLE ({', '.join(r.name for r in roles)})"
        )
    return roles[0]


def observed_pod(inv: Inventory, name: str) -> tuple[Role, str | None] | None:
    """The owner's role of the observed pod `NS/POD`, and the zone of its node (None when unknown)."""
    ns, _, pod_name = name.partition("/")
    pods = [p for p in inv.live_pods if p.namespace == ns and p.name == pod_name and p.owner is not None]
    for role, seen in observe(inv.workloads, pods, inv.nodes, inv.settings.topology.zone_key).roles.items():
        return role, (seen.zones[0] if seen.zones else None)
    return None


def _subject(inv: Inventory, name: str) -> tuple[Role, str | None]:
    """The role a name stands for, and the zone it runs in when it names an observed pod."""
    parts = name.split("/")
    if len(parts) == 2 and all(parts) and not inv.workload(parts[0], parts[1]):
        pod = observed_pod(inv, name)
        if pod is not None:
            return pod
    return find_role(inv, name), None


def _placements(inv: Inventory, *wanted: Role) -> dict[Role, RolePlacement]:
    """Where the roles can land, by the model `scan` uses (all roles: affinity terms follow others)."""
    from auditor.rules.model import place_inventory_roles

    roles = [r for w in inv.workloads for r in w.roles]
    return place_inventory_roles(inv, roles + [r for r in wanted if r not in set(roles)])


def _zones(inv: Inventory, role: Role, wanted: str | None, placement: RolePlacement) -> list[str | None]:
    zone_key = inv.settings.topology.zone_key
    if wanted:
        return [wanted]
    if role.template.node_name:
        node = next((n for n in inv.nodes if n.name == role.template.node_name), None)
        return [node.label_map.get(zone_key) if node else None]
    return list(placement.zones) if placement.zones else [None]


def endpoint_for(
    inv: Inventory, role: Role, zone: str | None, placement: RolePlacement | None = None
) -> PodEndpoint:
    """A replica of `role` in `zone`, on a node its placement allows (the node filters' choice when
    no placement is given)."""
    feasible = placement.nodes if placement is not None else None
    node = representative_node(role, inv.nodes, zone, inv.settings.topology.zone_key, feasible)
    return role_endpoint(inv, role, zone, node)


def data_plane_range(inv: Inventory, source: Role, destination: Role) -> PortRange:
    """The range `scan` gives a data-plane edge source → destination (its own one when `scan` has
    such an edge, else the destination's kernel range)."""
    workloads = [w for w in inv.workloads if destination in w.roles]
    for edge in comm_edges(workloads, (), inv.settings.network.ephemeral_ports):
        if edge.port is None and edge.source == source and edge.destination == destination:
            return edge.ports
    return data_port_range(destination, inv.settings.network.ephemeral_ports)


def resolve_range(port: str, inv: Inventory, source: Role, destination: Role) -> PortRange | None:
    """`LO-HI` or `ephemeral` as a range; None for a single port or a port name."""
    if port == "ephemeral":
        return data_plane_range(inv, source, destination)
    if "-" in port:
        found = parse_range(port)
        if found is None:
            raise ExplainError(f"--port {port}: a range must be LO-HI with 1 <= LO <= HI <= 65535")
        return found
    return None


def _first_denied(side: DirectionalVerdict, protocol: str, ports: PortSet) -> Segment:
    for segment in side.segments:
        if not segment.allowed and segment.conns.ports(protocol) & ports:
            return side.at(protocol, (segment.conns.ports(protocol) & ports).intervals[0][0])
    return side.at(protocol, ports.intervals[0][0])


def resolve_port(port: str, destination: PodEndpoint, protocol: str) -> int:
    if port.isdigit():
        value = int(port)
        if not 1 <= value <= 65535:
            raise ExplainError(f"--port {port}: must be between 1 and 65535")
        return value
    found = destination.named_port(port, protocol)
    if not found:
        raise ExplainError(f"--port {port!r}: {destination} has no {protocol} container port named {port!r}")
    return found[0].port


def explain(
    inv: Inventory,
    source: str,
    destination: str,
    port: str,
    protocol: str = "TCP",
    source_zone: str | None = None,
    destination_zone: str | None = None,
) -> Explanation:
    protocol = protocol.upper()
    if protocol not in ("TCP", "UDP", "SCTP"):
        raise ExplainError(f"--protocol {protocol}: must be TCP, UDP or SCTP")
    (src_role, src_seen), (dst_role, dst_seen) = _subject(inv, source), _subject(inv, destination)
    engine = policy_engine(inv)
    placements = []
    placed = _placements(inv, src_role, dst_role) if inv.nodes else {}
    none = RolePlacement(src_role, (), ())
    src_zones = _zones(inv, src_role, source_zone or src_seen, placed.get(src_role, none))
    dst_zones = _zones(inv, dst_role, destination_zone or dst_seen, placed.get(dst_role, none))
    asked = resolve_range(port, inv, src_role, dst_role)
    for sz, dz in itertools.product(src_zones, dst_zones):
        src = endpoint_for(inv, src_role, sz, placed.get(src_role))
        dst = endpoint_for(inv, dst_role, dz, placed.get(dst_role))
        verdict = engine.flow(src, dst)
        if asked is not None:
            number, ports = asked[0], PortSet.of(asked)
            denied = ports - verdict.allowed_conns().ports(protocol)
            egress = _first_denied(verdict.egress, protocol, ports)
            ingress = _first_denied(verdict.ingress, protocol, ports)
        else:
            number, ports, denied = resolve_port(port, dst, protocol), PortSet(), PortSet()
            egress, ingress = verdict.egress.at(protocol, number), verdict.ingress.at(protocol, number)
        placements.append(Placement(src, dst, verdict, egress, ingress, ports, denied))
    note = ""
    if len(placements) > 1:
        note = (
            f"{len(placements)} zone placements are possible ({', '.join(map(str, src_zones))} → "
            f"{', '.join(map(str, dst_zones))}); each is shown"
        )
    return Explanation(protocol, number, tuple(placements), inv.network.describe(), note, asked)


def _side_json(seg: Segment, side: DirectionalVerdict) -> dict[str, object]:
    return {
        "verdict": "allow" if seg.allowed else "deny",
        "reason": seg.reason,
        "decided_by": [d.to_json() for d in seg.deciders],
        "allowed_connections": str(side.allowed_conns()),
    }


def to_json(exp: Explanation, errors: list[dict[str, object]]) -> dict[str, object]:
    def placement(p: Placement) -> dict[str, object]:
        return {
            "from": {"pod": p.source.name, "zone": p.source.zone, "node": p.source.node},
            "to": {"pod": p.destination.name, "zone": p.destination.zone, "node": p.destination.node},
            "verdict": p.outcome,
            "egress": _side_json(p.egress, p.verdict.egress),
            "ingress": _side_json(p.ingress, p.verdict.ingress),
            **({"denied_ports": str(p.denied)} if p.ports else {}),
        }

    top = placement(exp.decisive)
    return {
        "schema": "placement-auditor/explain/v1",
        "verdict": exp.outcome,
        "protocol": exp.protocol,
        "port": exp.port if exp.ports is None else None,
        **({"ports": exp.ports_text} if exp.ports is not None else {}),
        "from": top["from"],
        "to": top["to"],
        "egress": top["egress"],
        "ingress": top["ingress"],
        "placements": [placement(p) for p in exp.placements],
        "network": exp.network,
        "errors": errors,
    }


def to_text(exp: Explanation) -> str:
    lines = []
    for p in exp.placements:
        lines.append(
            f"{p.source.name} ({p.source.zone or 'zone unknown'}) → {p.destination.name} "
            f"({p.destination.zone or 'zone unknown'}) {exp.protocol}/{exp.ports_text}: "
            f"{ {'allow': 'ALLOWED', 'deny': 'DENIED', 'partial': 'PARTLY DENIED'}[p.outcome] }"
        )
        if p.outcome == "partial":
            lines.append(
                f"  ports {p.denied} are denied: the kernel picks a random port of the range per "
                "connection, so connections that land on them fail or hang (intermittent failures)"
            )
        elif p.ports and p.outcome == "deny":
            lines.append("  every port of the range is denied")
        for label, seg, side in (
            ("egress of " + p.source.name, p.egress, p.verdict.egress),
            ("ingress of " + p.destination.name, p.ingress, p.verdict.ingress),
        ):
            lines.append(f"  {label}: {'allow' if seg.allowed else 'deny'} — {seg.reason}")
            lines.extend(f"    - {d.describe()}" for d in seg.deciders)
            lines.append(f"    allowed in this direction: {side.allowed_conns()}")
        lines.append("")
    if exp.zone_note:
        lines.append(exp.zone_note)
    lines.append(f"network: {exp.network}")
    return "\n".join(lines)
