"""`auditor explain --placement NS/NAME`: where each role of a workload can land, and why (pure).

Takes an inventory and a name, returns a `PlacementExplanation`; `to_text` and `to_json` render it.
A name is `NS/WORKLOAD` (every role of it), `NS/WORKLOAD/ROLE` (one role), or `NS/POD` for an
observed pod (its owner's role). The roles are placed by the model `scan` uses
(`rules.model.place_inventory_roles`, over every role of the inventory: required podAffinity
followers depend on the others), and each role's story is told in order:

1. the start: every zone of the nodes, how many nodes each has, and what a provisioner (a Karpenter
   NodePool, a NodeClaim, an autoscaled node group) would make there;
2. what narrowed it: per scheduler plugin and reason, the nodes it rejected, the zones left with no
   node after it, and the objects that decided it (the workload's template, the Node, the
   ResourceClaim or its template, the Kueue flavors and ClusterQueue, the Volcano HyperNodes);
3. what widened it: zones reached only through nodes a provisioner would make;
4. the result: the zones, how many nodes, how many replicas fit, and whether the replicas keep to
   one zone or are forced apart; then the notes.

A location (file:line) is given only when the inventory holds it; never guessed.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from auditor.audit.explain import ExplainError, observed_pod
from auditor.inventory import Inventory
from auditor.model.objects import Node, Role
from auditor.model.source import SourceRef
from auditor.placement.coupling import RolePlacement
from auditor.placement.filters import FilterResult

SCHEMA = "placement-auditor/explain-placement/v1"

# The node filters in the order filter_node and place_roles apply them; later phases
# (InterPodAffinity for followers, NetworkTopology, DynamicResources) keep their computed order.
_STATIC_ORDER = (
    "NodeName",
    "NodeUnschedulable",
    "NodeAffinity",
    "TaintToleration",
    "NodeResourcesFit",
    "VolumeZone",
    "PodTopologySpread",
)
_TEMPLATE_PLUGINS = frozenset(
    {"NodeName", "NodeAffinity", "NodeResourcesFit", "PodTopologySpread", "InterPodAffinity"}
)
_NODE_PLUGINS = frozenset({"TaintToleration", "NodeUnschedulable"})
_SHOWN_NODES = 5
_SHOWN_ORIGINS = 4
_CLOSE_NAMES = 5
_KNOWN_NAMES = 20

# C0, DEL, C1 (escape sequences), line and paragraph separators, zero-width and bidi controls:
# manifest-controlled text is printed with them escaped, so the terminal shows what the file says.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


# --- the value ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Origin:
    """An object that decided a step, and where it was read ("" / 0 when unknown)."""

    kind: str
    name: str
    file: str = ""
    line: int = 0

    @property
    def label(self) -> str:
        return f"{self.kind} {self.name}"

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.file and self.line else self.file


@dataclass(frozen=True, slots=True)
class ZoneNodes:
    """One zone at the start: the nodes present, and what would make more there."""

    zone: str  # "" for nodes without the zone label
    present: int
    to_be_made: tuple[Origin, ...] = ()


@dataclass(frozen=True, slots=True)
class Step:
    """Nodes one plugin rejected for one reason, the zones left without a node after it, and the
    objects that decided it."""

    plugin: str
    reason: str
    nodes: tuple[str, ...]
    removed_zones: tuple[str, ...]
    decided_by: tuple[Origin, ...]
    detail: str = ""  # what of the template the nodes fail, when it can be said exactly


@dataclass(frozen=True, slots=True)
class Widening:
    """A zone the role reaches only through nodes a provisioner would make."""

    zone: str
    through: tuple[Origin, ...]


@dataclass(frozen=True, slots=True)
class RoleExplanation:
    role: str  # NS/WORKLOAD or NS/WORKLOAD/ROLE
    workload: Origin  # the workload, at its role's template
    replicas: int
    start: tuple[ZoneNodes, ...]
    narrowed: tuple[Step, ...]
    widened: tuple[Widening, ...]
    zones: tuple[str, ...]
    nodes: int  # feasible nodes present
    made_nodes: int  # feasible nodes a provisioner would make (one per pool and zone)
    max_replicas: int | None
    capacity_reason: str
    one_zone: str
    forced_spread: str
    admitted_by: tuple[Origin, ...] = ()  # Kueue ClusterQueue and flavors
    shared_claims: tuple[Origin, ...] = ()
    bound_to: str = ""  # spec.nodeName: the pod runs there, whatever the filters say
    made_by: tuple[Origin, ...] = ()  # what would make the feasible nodes that do not exist yet
    notes: tuple[str, ...] = ()

    @property
    def unschedulable(self) -> bool:
        return not self.bound_to and (self.nodes + self.made_nodes == 0 or self.max_replicas == 0)

    @property
    def partly_unschedulable(self) -> bool:
        return not self.bound_to and self.max_replicas is not None and 0 < self.max_replicas < self.replicas

    @property
    def outcome(self) -> str:
        """placeable | partly-unschedulable | unschedulable."""
        if self.unschedulable:
            return "unschedulable"
        return "partly-unschedulable" if self.partly_unschedulable else "placeable"


@dataclass(frozen=True, slots=True)
class PlacementExplanation:
    name: str
    zone_key: str
    roles: tuple[RoleExplanation, ...]

    @property
    def placeable(self) -> bool:
        """Every replica of every role asked about can be placed."""
        return all(r.outcome == "placeable" for r in self.roles)

    @property
    def outcome(self) -> str:
        outcomes = {r.outcome for r in self.roles}
        return next((o for o in ("unschedulable", "partly-unschedulable") if o in outcomes), "placeable")


# --- resolving the name --------------------------------------------------------------------------


def _close(word: str, known: Sequence[str]) -> str:
    """' (did you mean: a, b)' for close names, else ' (known: ...)' listing some, else ''."""
    close = difflib.get_close_matches(word, known, n=_CLOSE_NAMES, cutoff=0.6)
    if close:
        return f" (did you mean: {', '.join(close)})"
    if not known:
        return ""
    more = " ..." if len(known) > _KNOWN_NAMES else ""
    return f" (known: {', '.join(known[:_KNOWN_NAMES])}{more})"


def find_roles(inv: Inventory, name: str) -> tuple[Role, ...]:
    """The roles `name` stands for: every role of `NS/WORKLOAD`, the one of `NS/WORKLOAD/ROLE`, or
    the owner's role of an observed pod `NS/POD`."""
    parts = name.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise ExplainError(f"{name!r}: expected NS/NAME or NS/WORKLOAD/ROLE")
    ns, wname = parts[0], parts[1]
    workloads = inv.workload(ns, wname)
    if not workloads:
        if len(parts) == 2:
            pod = observed_pod(inv, name)
            if pod is not None:
                return (pod[0],)
        known = sorted({f"{w.ref.namespace}/{w.ref.name}" for w in inv.workloads})
        raise ExplainError(
            f"{name!r}: no pod or workload {ns}/{wname} in the manifests{_close(f'{ns}/{wname}', known)}"
        )
    roles = [r for w in workloads for r in w.roles]
    if len(parts) == 2:
        return tuple(roles)
    wanted = parts[2].lower()
    match = tuple(r for r in roles if wanted in (r.name.lower(), r.label.lower()))
    if not match:
        names = list(dict.fromkeys(r.name for r in roles))
        close = difflib.get_close_matches(parts[2], names, n=_CLOSE_NAMES, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ExplainError(
            f"{name!r}: {ns}/{wname} has no role {parts[2]!r} (roles: {', '.join(names)}){hint}"
        )
    return match


# --- building ----------------------------------------------------------------------------------


def _origin(kind: str, name: str, source: SourceRef | None) -> Origin:
    if source is None or not source.file:
        return Origin(kind, name)
    return Origin(kind, name, source.file, source.line)


def _provisioned_by(text: str, source: SourceRef | None) -> Origin:
    """A provisioner as Node.provisioner names it ("NodePool gpu", "NodeClaim x of NodePool y",
    "node group g (cluster-autoscaler)"), at `source`."""
    if text.startswith("node group "):
        return _origin("node group", text.removeprefix("node group "), source)
    kind, _, rest = text.partition(" ")
    return _origin(kind, rest, source) if rest else _origin("provisioner", text, source)


def provisioner_origin(node: Node) -> Origin:
    """What would make `node`, at the file and line of that object (the NodePool, the NodeClaim,
    the node group's template Node)."""
    return _provisioned_by(node.provisioner, node.source)


def node_origin(node: Node) -> Origin:
    return provisioner_origin(node) if node.provisioner else _origin("Node", node.name, node.source)


def template_origin(role: Role) -> Origin:
    ref = role.workload
    return _origin(ref.kind, f"{ref.namespace}/{ref.name}", role.source if role.source.file else ref.source)


def _unique(origins: Iterable[Origin]) -> tuple[Origin, ...]:
    return tuple(dict.fromkeys(origins))


def start_of(nodes: Sequence[Node], zone_key: str) -> tuple[ZoneNodes, ...]:
    """Every zone of the nodes (those without the zone label last), with its present nodes and
    the provisioners that would make nodes there."""
    present: Counter[str] = Counter()
    made: dict[str, list[Origin]] = {}
    for n in nodes:
        zone = n.label_map.get(zone_key, "")
        if n.provisioner:
            made.setdefault(zone, []).append(provisioner_origin(n))
        else:
            present[zone] += 1
    zones = sorted(set(present) | set(made), key=lambda z: (z == "", z))
    return tuple(ZoneNodes(z, present[z], _unique(made.get(z, ()))) for z in zones)


def kueue_origins(inv: Inventory, role: Role) -> tuple[Origin, ...]:
    """The ClusterQueue a Kueue-managed role is admitted through, and the flavors it may take
    (the queue's flavors when none is admissible)."""
    adm = inv.admissions.get((role.workload, role.name))
    if adm is None:
        return ()
    cq = inv.queues.cluster.get(adm.cluster_queue)
    out = [_origin("ClusterQueue", adm.cluster_queue, cq.source if cq is not None else None)]
    flavors = [f for combo in adm.combinations for f in combo]
    if not flavors and cq is not None:
        flavors = [inv.queues.flavors[n] for _, names in cq.groups for n in names if n in inv.queues.flavors]
    out.extend(_origin("ResourceFlavor", f.name, f.source) for f in flavors)
    return _unique(out)


def _tolerating_flavors(inv: Inventory, role: Role) -> list[Origin]:
    """The Kueue flavors whose tolerations the admitted role carries."""
    adm = inv.admissions.get((role.workload, role.name))
    if adm is None:
        return []
    flavors = (f for combo in adm.combinations for f in combo if f.tolerations)
    return [_origin("ResourceFlavor", f.name, f.source) for f in flavors]


def _names(reason: str, kind: str, name: str) -> bool:
    return re.search(rf"(?:^|[^\w]){kind} {re.escape(name)}(?![\w.-])", reason) is not None


def claim_origins(inv: Inventory, role: Role, reason: str) -> list[Origin]:
    """The ResourceClaims and ResourceClaimTemplates of the role the reason names (all of them when
    it names none), and the DeviceClasses their requests ask for."""
    ns = role.workload.namespace
    devices = inv.devices
    entries: list[tuple[Origin, list[str], bool]] = []  # (claim or template, its classes, named)
    for _, claim_name, template_name in role.template.resource_claims:
        if claim_name:
            claim = devices.claims.get((ns, claim_name))
            spec = claim.spec if claim is not None else None
            origin = _origin("ResourceClaim", f"{ns}/{claim_name}", claim.source if claim else None)
            named = _names(reason, "ResourceClaim", claim_name)
        else:
            tmpl = devices.templates.get((ns, template_name))
            spec = tmpl[0] if tmpl is not None else None
            origin = _origin("ResourceClaimTemplate", f"{ns}/{template_name}", tmpl[1] if tmpl else None)
            named = _names(reason, "ResourceClaimTemplate", template_name)
        classes = [a.device_class for r in spec.requests for a in r.alternatives] if spec else []
        entries.append((origin, classes, named))
    out: list[Origin] = []
    for origin, classes, _ in [e for e in entries if e[2]] or entries:
        out.append(origin)
        for cls in dict.fromkeys(classes):
            dc = devices.classes.get(cls)
            out.append(_origin("DeviceClass", cls, dc.source if dc is not None else None))
    return out


def claim_origin(inv: Inventory, namespace: str, name: str) -> Origin:
    claim = inv.devices.claims.get((namespace, name))
    return _origin("ResourceClaim", f"{namespace}/{name}", claim.source if claim is not None else None)


def hypernode_origins(inv: Inventory, role: Role) -> list[Origin]:
    """The HyperNodes a hard Volcano networkTopology allows the role's workload in."""
    domains = inv.volcano.get(role.workload)
    if domains is None:
        return []
    sources = {h.name: h.source for h in inv.hypernodes}
    return [_origin("HyperNode", h, sources.get(h)) for h, _ in domains.domains]


def volume_origins(role: Role, reason: str) -> list[Origin]:
    """The PersistentVolumeClaim a VolumeZone reason names (the inventory keeps no location for it)."""
    ns = role.workload.namespace
    return [
        Origin("PersistentVolumeClaim", f"{ns}/{c.name}")
        for c in role.template.claims
        if re.search(rf"claim {re.escape(c.name)}(?![\w.-])", reason)
    ]


def decided_by(
    inv: Inventory, role: Role, plugin: str, reason: str, nodes: Sequence[Node]
) -> tuple[Origin, ...]:
    """The objects that decided a step: see the module docstring."""
    out: list[Origin] = []
    if plugin in _NODE_PLUGINS:
        out.extend(node_origin(n) for n in nodes)
        if plugin == "TaintToleration":
            out.extend(_tolerating_flavors(inv, role))
    elif plugin == "DynamicResources":
        out.extend(claim_origins(inv, role, reason))
    elif plugin == "NetworkTopology":
        out.append(template_origin(role))
        out.extend(hypernode_origins(inv, role))
    elif plugin == "VolumeZone":
        out.extend(volume_origins(role, reason))
        out.append(template_origin(role))
    else:
        out.append(template_origin(role))
        if plugin == "NodeAffinity":
            out.extend(kueue_origins(inv, role))
    return _unique(out)


def affinity_detail(role: Role, node: Node, admitted: bool = False) -> str:
    """Which nodeSelector entries `node` fails, or that no required nodeAffinity term matches it
    ("" for a node to be made, whose labels are ranges). `admitted`: Kueue admits the role, whose
    template carries its flavors' nodeLabels."""
    if node.ranges or node.open_keys:
        return ""
    labels = node.label_map
    failing = [
        f"nodeSelector {k}={v}, node has " + (f"{k}={labels[k]}" if k in labels else f"no {k} label")
        for k, v in role.template.node_selector
        if labels.get(k) != v
    ]
    if failing:
        return "; ".join(failing)
    if role.template.scheduling.node_affinity.required is not None:
        if admitted:
            return (
                "no term of its required nodeAffinity, with the nodeLabels of a flavor Kueue may "
                "admit it under, matches the node's labels"
            )
        return "no term of its required nodeAffinity matches the node's labels"
    return ""


def _ordered(
    groups: Sequence[tuple[FilterResult, tuple[str, ...]]],
) -> list[tuple[FilterResult, tuple[str, ...]]]:
    """The node filters first, in the order they run; the later phases as computed."""
    rank = {p: i for i, p in enumerate(_STATIC_ORDER)}
    return sorted(groups, key=lambda g: rank.get(g[0].plugin, len(_STATIC_ORDER)))


def narrowing_steps(
    inv: Inventory, role: Role, placement: RolePlacement, by_name: Mapping[str, Node]
) -> tuple[Step, ...]:
    """One step per (plugin, reason, detail), in order, each with the zones it leaves empty."""
    zone_key = inv.settings.topology.zone_key
    admitted = (role.workload, role.name) in inv.admissions
    merged: dict[tuple[str, str, str], list[str]] = {}
    for result, names in _ordered(placement.rejected_groups):
        first = by_name.get(names[0])
        if result.plugin == "NodeAffinity" and first is not None:
            detail = affinity_detail(role, first, admitted)
        else:
            detail = ""
        merged.setdefault((result.plugin, result.reason, detail), []).extend(names)
    remaining: Counter[str] = Counter(n.label_map.get(zone_key, "") for n in by_name.values())
    seen: set[str] = set()
    steps = []
    for (plugin, reason, detail), rejected in merged.items():
        fresh = [n for n in dict.fromkeys(rejected) if n not in seen]
        seen.update(fresh)
        nodes = [by_name[n] for n in fresh if n in by_name]
        before = {z for z, c in remaining.items() if c > 0}
        remaining.subtract(n.label_map.get(zone_key, "") for n in nodes)
        removed = tuple(sorted(z for z in before if z and remaining[z] <= 0))
        origins = decided_by(inv, role, plugin, reason, nodes)
        steps.append(Step(plugin, reason, tuple(fresh), removed, origins, detail))
    return tuple(steps)


def widenings(placement: RolePlacement, nodes: Sequence[Node]) -> tuple[Widening, ...]:
    """The zones reached only through a provisioner, each with what would make the nodes there
    (at the first node it would make: reversed, so that the first one is kept)."""
    made = {n.provisioner: provisioner_origin(n) for n in reversed(nodes) if n.provisioner}
    return tuple(
        Widening(zone, tuple(made.get(p) or _provisioned_by(p, None) for p in through))
        for zone, through in placement.provisioned
    )


def nodes_by_name(nodes: Iterable[Node]) -> dict[str, Node]:
    """The nodes by name (the first of any two with one name)."""
    out: dict[str, Node] = {}
    for n in nodes:
        out.setdefault(n.name, n)
    return out


def explain_role(
    inv: Inventory,
    role: Role,
    placement: RolePlacement,
    by_name: Mapping[str, Node],
    start: tuple[ZoneNodes, ...],
) -> RoleExplanation:
    """One role's story, from its placement; `by_name` and `start` are the inventory's nodes by
    name and where every role starts (`nodes_by_name`, `start_of`)."""
    feasible = [by_name[n] for n in placement.nodes if n in by_name]
    made = sum(1 for n in feasible if n.provisioner)
    shared = tuple(claim_origin(inv, ns, name) for ns, name in placement.shared_claims)
    notes = list(placement.notes)
    bound = role.template.node_name or ""
    if bound:
        notes.append(f"bound to node {bound} (spec.nodeName): it runs there, whatever the filters say")
    return RoleExplanation(
        role=str(role),
        workload=template_origin(role),
        replicas=role.replicas,
        start=start,
        narrowed=narrowing_steps(inv, role, placement, by_name),
        widened=widenings(placement, inv.nodes),
        zones=placement.zones,
        nodes=len(feasible) - made,
        made_nodes=made,
        max_replicas=placement.max_replicas,
        capacity_reason=placement.capacity_reason,
        one_zone=placement.one_zone,
        forced_spread=placement.forced_spread,
        admitted_by=kueue_origins(inv, role),
        shared_claims=shared,
        bound_to=bound,
        made_by=_unique(provisioner_origin(n) for n in feasible if n.provisioner),
        notes=tuple(notes),
    )


def explain_placement(inv: Inventory, name: str) -> PlacementExplanation:
    """Where the roles `name` stands for can land, step by step."""
    roles = find_roles(inv, name)
    if not inv.nodes:
        raise ExplainError(
            "no Node objects among the manifests: give the cluster's nodes "
            "(--nodes FILE, from `kubectl get nodes -o yaml`) to explain a placement"
        )
    from auditor.rules.model import place_inventory_roles

    every = [r for w in inv.workloads for r in w.roles]
    placed = place_inventory_roles(inv, every + [r for r in roles if r not in set(every)])
    zone_key = inv.settings.topology.zone_key
    by_name, start = nodes_by_name(inv.nodes), start_of(inv.nodes, zone_key)
    return PlacementExplanation(
        name, zone_key, tuple(explain_role(inv, r, placed[r], by_name, start) for r in roles)
    )


# --- rendering ---------------------------------------------------------------------------------


def clean(text: str) -> str:
    """`text` with every control character escaped (`\\x1b`, `\\u202e`): safe on a terminal."""

    def escape(m: re.Match[str]) -> str:
        c = m.group()
        special = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
        return special.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")

    return _CONTROL.sub(escape, text)


def _origin_json(o: Origin) -> dict[str, object]:
    out: dict[str, object] = {"kind": o.kind, "name": o.name}
    if o.file:
        out["file"] = o.file
    if o.file and o.line:
        out["line"] = o.line
    return out


def _role_json(r: RoleExplanation) -> dict[str, object]:
    return {
        "role": r.role,
        "workload": _origin_json(r.workload),
        "replicas": r.replicas,
        "verdict": r.outcome,
        "start": [
            {
                "zone": z.zone or None,
                "nodes": z.present,
                "to_be_made_by": [_origin_json(o) for o in z.to_be_made],
            }
            for z in r.start
        ],
        "narrowed": [
            {
                "plugin": s.plugin,
                "reason": s.reason,
                **({"detail": s.detail} if s.detail else {}),
                "node_count": len(s.nodes),
                "nodes": list(s.nodes),
                "removed_zones": list(s.removed_zones),
                "decided_by": [_origin_json(o) for o in s.decided_by],
            }
            for s in r.narrowed
        ],
        "widened": [{"zone": w.zone, "through": [_origin_json(o) for o in w.through]} for w in r.widened],
        "result": {
            "zones": list(r.zones),
            "nodes": r.nodes,
            "to_be_made_nodes": r.made_nodes,
            "to_be_made_by": [_origin_json(o) for o in r.made_by],
            "max_replicas": r.max_replicas,
            "capacity_reason": r.capacity_reason,
            "one_zone": r.one_zone,
            "forced_spread": r.forced_spread,
            **({"bound_to": r.bound_to} if r.bound_to else {}),
        },
        "admitted_by": [_origin_json(o) for o in r.admitted_by],
        "shared_claims": [_origin_json(o) for o in r.shared_claims],
        "notes": list(r.notes),
    }


def to_json(exp: PlacementExplanation, errors: list[dict[str, object]]) -> dict[str, object]:
    return {
        "schema": SCHEMA,
        "name": exp.name,
        "verdict": exp.outcome,
        "zone_key": exp.zone_key,
        "roles": [_role_json(r) for r in exp.roles],
        "errors": errors,
    }


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _at(o: Origin) -> str:
    return f"{o.label} ({o.where})" if o.where else o.label


def _origins_text(origins: Sequence[Origin]) -> str:
    shown = [_at(o) for o in origins[:_SHOWN_ORIGINS]]
    if len(origins) > _SHOWN_ORIGINS:
        shown.append(f"and {len(origins) - _SHOWN_ORIGINS} more")
    return ", ".join(shown)


def _nodes_text(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_SHOWN_NODES])
    return shown + (f", +{len(names) - _SHOWN_NODES} more" if len(names) > _SHOWN_NODES else "")


def _zone(zone: str) -> str:
    return zone or "(no zone label)"


def _start_lines(r: RoleExplanation) -> list[str]:
    present = sum(z.present for z in r.start)
    zones = [z for z in r.start if z.zone]
    lines = [f"  start: {_plural(present, 'node')} in {_plural(len(zones), 'zone')}"]
    for z in r.start:
        made = f"; to be made by {_origins_text(z.to_be_made)}" if z.to_be_made else ""
        lines.append(f"    {_zone(z.zone)}: {_plural(z.present, 'node')}{made}")
    return lines


def _step_lines(s: Step) -> list[str]:
    removes = f", removes {'zone' if len(s.removed_zones) == 1 else 'zones'} {', '.join(s.removed_zones)}"
    lines = [
        f"    - {s.plugin}: {_plural(len(s.nodes), 'node')} ({_nodes_text(s.nodes)})"
        + (removes if s.removed_zones else ""),
        f"      why: {s.reason} ({s.detail})" if s.detail else f"      why: {s.reason}",
    ]
    if s.decided_by:
        lines.append(f"      decided by {_origins_text(s.decided_by)}")
    return lines


def _replicas_text(r: RoleExplanation) -> str:
    if r.max_replicas is None:
        return "the replica can be placed" if r.replicas == 1 else f"all {r.replicas} replicas can be placed"
    if r.max_replicas == 0:
        return f"no replica can be placed: {r.capacity_reason}"
    return f"only {r.max_replicas} of {r.replicas} replicas can be placed: {r.capacity_reason}"


def _spread_text(r: RoleExplanation) -> str:
    if r.forced_spread:
        return f"forced across zones: {r.forced_spread}"
    if r.one_zone:
        return f"one zone: {r.one_zone}"
    if r.replicas <= 1:
        return "one replica, so one zone"
    if len(r.zones) > 1:
        return f"the replicas may spread over {', '.join(r.zones)}"
    return "every replica in that zone"


def _result_lines(r: RoleExplanation) -> list[str]:
    if r.bound_to:
        return [f"  result: bound to node {r.bound_to} (spec.nodeName)"]
    if r.nodes + r.made_nodes == 0:
        return ["  result: UNSCHEDULABLE: no node passes the filters"]
    head = (
        "UNSCHEDULABLE"
        if r.unschedulable
        else "PARTLY UNSCHEDULABLE"
        if r.partly_unschedulable
        else "placeable"
    )
    zones = ", ".join(r.zones) or "(no zone label)"
    made = f", plus nodes {_origins_text(r.made_by)} would make" if r.made_by else ""
    return [
        f"  result: {head}: zones {zones}; {_plural(r.nodes, 'node')}{made}",
        f"    {_replicas_text(r)}",
        f"    {_spread_text(r)}",
    ]


def _role_text(r: RoleExplanation) -> list[str]:
    head = f"{r.role}: {_plural(r.replicas, 'replica')} of {_at(r.workload)}"
    lines = [head, *_start_lines(r)]
    if r.admitted_by:
        lines.append(f"  admitted by Kueue: {_origins_text(r.admitted_by)}")
    lines.append("  narrowed:" if r.narrowed else "  narrowed: nothing (every node passes)")
    for s in r.narrowed:
        lines.extend(_step_lines(s))
    if r.widened:
        lines.append("  widened:")
        lines.extend(f"    + {w.zone} only through {_origins_text(w.through)}" for w in r.widened)
    lines.extend(_result_lines(r))
    if r.shared_claims:
        lines.append(f"  shares {_origins_text(r.shared_claims)}")
    lines.extend(f"  note: {n}" for n in r.notes)
    return lines


def to_text(exp: PlacementExplanation) -> str:
    lines: list[str] = []
    for r in exp.roles:
        lines.extend(_role_text(r))
        lines.append("")
    lines.append(f"zone key: {exp.zone_key}")
    return "\n".join(clean(line) for line in lines)
