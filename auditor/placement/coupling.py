"""Where the roles of a training group can land relative to each other (pure).

Per role: the feasible zones (scheduler filters). Per pair of roles: the zone pairs the group
constraints allow, and how certain a split across zones is:

* co-located: required podAffinity on the zone key towards the other role's pods (a follower waits
  for the pods it follows and shares their zone), Kueue `podset-required-topology` on a key at or
  below the zone within one pod set, a shared Kueue `podset-group-name`, or a single common zone;
* separated: required podAntiAffinity on the zone key;
* split `always` when the roles have no feasible zone in common, or hard topology spread on the
  zone key forces a role's replicas apart;
* otherwise `likely` (the default spreading nudges pods of one workload apart) or `possible`
  (a preferred affinity pulls them together but nothing forces it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from auditor.model.labels import LabelSelector, SelectorError, parse_label_selector
from auditor.model.objects import REGION_KEY, Node, Role
from auditor.placement.filters import TOPOLOGY_KEYS, FilterResult, filter_node, node_label_keys
from auditor.workloads.operators import EXCLUSIVE, RJOB_REPLICAS

KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_GROUP = "kueue.x-k8s.io/podset-group-name"
HOSTNAME_KEY = "kubernetes.io/hostname"


@dataclass(frozen=True, slots=True, eq=False)
class RolePlacement:
    role: Role
    zones: tuple[str, ...]
    nodes: tuple[str, ...]
    # Why the other nodes were filtered out, per group of nodes the filters cannot tell apart:
    # (the verdict for the group's first node, every node of the group). Expanded per node only
    # when asked (`rejected`), which is rare: millions of results for a large repository otherwise.
    rejected_groups: tuple[tuple[FilterResult, tuple[str, ...]], ...] = ()
    node_order: Mapping[str, int] | None = None  # sorts the expanded results as the nodes were given

    @property
    def unschedulable(self) -> bool:
        return not self.nodes

    @property
    def rejected(self) -> tuple[FilterResult, ...]:
        out = [
            result
            if name == result.node
            else FilterResult(name, False, result.plugin, result.reason, result.code)
            for result, names in self.rejected_groups
            for name in names
        ]
        if self.node_order is not None:
            order = self.node_order
            out.sort(key=lambda r: order[r.node])
        return tuple(out)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RolePlacement):
            return NotImplemented
        return (self.role, self.zones, self.nodes, self.rejected) == (
            other.role,
            other.zones,
            other.nodes,
            other.rejected,
        )

    def __hash__(self) -> int:
        return hash((self.role, self.zones, self.nodes))


def place_role(
    role: Role, nodes: Sequence[Node], zone_key: str, volume_zones: Mapping[str, frozenset[str]] | None = None
) -> RolePlacement:
    ok: list[Node] = []
    rejected: list[FilterResult] = []
    for node in nodes:
        result = filter_node(role.template, node, volume_zones)
        if result.ok:
            ok.append(node)
        else:
            rejected.append(result)
    zones = sorted({z for n in ok if (z := n.label_map.get(zone_key))})
    return RolePlacement(
        role, tuple(zones), tuple(n.name for n in ok), tuple((r, (r.node,)) for r in rejected)
    )


def _filter_signature(role: Role) -> str:
    """Everything the node filters read from a pod template, as one comparable value."""
    t = role.template
    spec = t.spec if isinstance(t.spec, Mapping) else {}
    tolerations = [[x.key, x.operator, x.value, x.effect] for x in t.tolerations]
    return json.dumps(
        [
            t.node_selector,
            t.affinity,
            tolerations,
            t.node_name,
            t.requests,
            spec.get("initContainers"),
            spec.get("overhead"),
            spec.get("volumes"),
        ],
        sort_keys=True,
        default=str,
    )


def place_roles(
    roles: Sequence[Role],
    nodes: Sequence[Node],
    zone_key: str,
    volume_zones: Mapping[Role, Mapping[str, frozenset[str]]] | None = None,
) -> dict[Role, RolePlacement]:
    """place_role for many roles; roles whose templates ask the same of nodes share one filtering pass
    (on a large repository most jobs come from a few templates)."""
    done: dict[str, RolePlacement] = {}
    out: dict[Role, RolePlacement] = {}
    read = {zone_key, *TOPOLOGY_KEYS}.union(*(node_label_keys(r.template) for r in roles))
    groups = _node_groups(nodes, read)
    position = {n.name: i for i, n in enumerate(nodes)}
    for role in roles:
        claims = (volume_zones or {}).get(role) or {}
        signature = _filter_signature(role)
        key = signature + json.dumps(sorted((k, sorted(v)) for k, v in claims.items()))
        found = done.get(key)
        if found is None:
            if role.template.node_name or any(k in signature for k in _NAMES_A_NODE):
                found = place_role(role, nodes, zone_key, claims)
            else:
                found = _place_by_groups(role, groups, zone_key, claims, position)
            done[key] = found
        out[role] = RolePlacement(role, found.zones, found.nodes, found.rejected_groups, found.node_order)
    return out


# Node-filter inputs that single out one node: a template using them is filtered node by node.
_NAMES_A_NODE = (HOSTNAME_KEY, "metadata.name")


def _node_groups(nodes: Sequence[Node], read: set[str]) -> list[list[Node]]:
    """Nodes the filters cannot tell apart unless a template names a host: same values of the
    labels some template or filter reads (`read`; the hostname aside), same taints, cordon state
    and allocatable. A pool of 500 nodes is a few groups, even with per-rack labels nobody selects."""
    read = read - {HOSTNAME_KEY}
    groups: dict[tuple[object, ...], list[Node]] = {}
    for n in nodes:
        key = (
            tuple(kv for kv in n.labels if kv[0] in read),
            n.taints,
            n.unschedulable,
            n.allocatable,
        )
        groups.setdefault(key, []).append(n)
    return list(groups.values())


def _place_by_groups(
    role: Role,
    groups: Sequence[Sequence[Node]],
    zone_key: str,
    claims: Mapping[str, frozenset[str]],
    position: Mapping[str, int],
) -> RolePlacement:
    ok: list[Node] = []
    rejected: list[tuple[FilterResult, tuple[str, ...]]] = []
    for group in groups:
        result = filter_node(role.template, group[0], claims)
        if result.ok:
            ok.extend(group)
        else:
            rejected.append((result, tuple(n.name for n in group)))
    ok.sort(key=lambda n: position[n.name])  # node order, as filtering one by one gives
    zones = sorted({z for n in ok if (z := n.label_map.get(zone_key))})
    return RolePlacement(role, tuple(zones), tuple(n.name for n in ok), tuple(rejected), position)


@dataclass(frozen=True, slots=True)
class PairPlacement:
    pairs: tuple[tuple[str, str], ...]  # allowed (source zone, destination zone)
    split: str | None  # always | likely | possible; None when no allowed placement splits
    coupling: str  # the constraint that decided, in words


def _affinity_terms(role: Role, kind: str, required: bool) -> list[Mapping[str, Any]]:
    affinity = role.template.affinity if isinstance(role.template.affinity, Mapping) else {}
    section = affinity.get(kind)
    if not isinstance(section, Mapping):
        return []
    if required:
        terms = section.get("requiredDuringSchedulingIgnoredDuringExecution") or []
        return [t for t in terms if isinstance(t, Mapping)]
    weighted = section.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    return [
        t["podAffinityTerm"]
        for t in weighted
        if isinstance(t, Mapping) and isinstance(t.get("podAffinityTerm"), Mapping)
    ]


def _zone_level(key: str, zone_key: str) -> bool:
    """A topology key whose domains lie within one zone (the zone itself, a rack, a host)."""
    return key == zone_key or (
        bool(key) and key not in (REGION_KEY, "failure-domain.beta.kubernetes.io/region")
    )


def term_selects(term: Mapping[str, Any], owner: Role, other: Role) -> bool:
    """Whether a pod (anti)affinity term of `owner` selects the pods of `other`."""
    try:
        selector: LabelSelector = parse_label_selector(term.get("labelSelector"), "labelSelector")
    except SelectorError:
        return False
    if term.get("labelSelector") is None:
        return False  # a null selector matches no pods
    namespaces = term.get("namespaces") or []
    if term.get("namespaceSelector") is None and not namespaces:
        if other.workload.namespace != owner.workload.namespace:
            return False
    elif namespaces and term.get("namespaceSelector") is None and other.workload.namespace not in namespaces:
        return False
    return selector.matches(other.template.label_map)


def _zone_terms(role: Role, kind: str, required: bool, zone_key: str) -> list[Mapping[str, Any]]:
    return [t for t in _affinity_terms(role, kind, required) if t.get("topologyKey") == zone_key]


def _annotation(role: Role, key: str) -> str:
    return dict(role.template.annotations).get(key, "")


def _spread_forces_split(p: RolePlacement, zone_key: str) -> bool:
    spec = p.role.template.spec if isinstance(p.role.template.spec, Mapping) else {}
    for c in spec.get("topologySpreadConstraints") or []:
        if not isinstance(c, Mapping) or c.get("topologyKey") != zone_key:
            continue
        if c.get("whenUnsatisfiable", "DoNotSchedule") != "DoNotSchedule":
            continue
        try:
            sel = parse_label_selector(c.get("labelSelector"), "labelSelector")
        except SelectorError:
            continue
        max_skew = int(c.get("maxSkew") or 1)
        if (
            c.get("labelSelector") is not None
            and sel.matches(p.role.template.label_map)
            and (len(p.zones) >= 2 and p.role.replicas > max_skew)
        ):
            return True
    return False


def _jobs(role: Role) -> int:
    text = role.template.label_map.get(RJOB_REPLICAS, "1")
    return int(text) if text.isdigit() else 1


def _co_located_within(p: RolePlacement, zone_key: str) -> str:
    role = p.role
    if len(p.zones) <= 1:
        return f"{role} can land in one zone only"
    exclusive = _annotation(role, EXCLUSIVE)
    if exclusive and _zone_level(exclusive, zone_key) and _jobs(role) == 1:
        return f"{role} is one Job with JobSet exclusive topology on {exclusive}"
    kueue = _annotation(role, KUEUE_REQUIRED)
    if kueue and _zone_level(kueue, zone_key):
        return f"{role} has {KUEUE_REQUIRED}: {kueue}"
    for t in _zone_terms(role, "podAffinity", True, zone_key):
        if term_selects(t, role, role):
            return f"{role} requires podAffinity to its own pods on {zone_key}"
    return ""


def pair_placement(a: RolePlacement, b: RolePlacement, zone_key: str) -> PairPlacement:
    """Allowed zone pairs for traffic from a pod of `a` to a pod of `b`."""
    za, zb = set(a.zones), set(b.zones)
    if a.role == b.role:
        reason = _co_located_within(a, zone_key)
        if reason:
            return PairPlacement(tuple((z, z) for z in sorted(za)), None, reason)
        pairs = tuple((x, y) for x in sorted(za) for y in sorted(za))
        if a.role.replicas < 2:
            return PairPlacement(tuple((z, z) for z in sorted(za)), None, f"{a.role} has one replica")
        if _annotation(a.role, EXCLUSIVE) == zone_key and _jobs(a.role) > 1:
            return PairPlacement(
                pairs,
                "always",
                f"{a.role}: JobSet exclusive topology puts each of its {_jobs(a.role)} Jobs in its own zone",
            )
        if _spread_forces_split(a, zone_key):
            return PairPlacement(
                pairs, "always", f"{a.role} has a DoNotSchedule topology spread on {zone_key}"
            )
        if _zone_terms(a.role, "podAntiAffinity", True, zone_key) and any(
            term_selects(t, a.role, a.role) for t in _zone_terms(a.role, "podAntiAffinity", True, zone_key)
        ):
            return PairPlacement(
                tuple(p for p in pairs if p[0] != p[1]),
                "always",
                f"{a.role} requires podAntiAffinity to its own pods on {zone_key}",
            )
        return PairPlacement(
            pairs,
            "likely",
            f"{a.role}: nothing keeps its replicas in one zone; default spreading places them apart",
        )
    common = sorted(za & zb)
    # Required podAffinity on the zone key towards the other role: the follower shares its zone.
    for x, y in ((a, b), (b, a)):
        if any(term_selects(t, x.role, y.role) for t in _zone_terms(x.role, "podAffinity", True, zone_key)):
            return PairPlacement(
                tuple((z, z) for z in common),
                None,
                f"{x.role} requires podAffinity to {y.role} on {zone_key}",
            )
    for x, y in ((a, b), (b, a)):
        if any(
            term_selects(t, x.role, y.role) for t in _zone_terms(x.role, "podAntiAffinity", True, zone_key)
        ):
            return PairPlacement(
                tuple((p, q) for p in sorted(za) for q in sorted(zb) if p != q),
                "always",
                f"{x.role} requires podAntiAffinity to {y.role} on {zone_key}",
            )
    if (
        a.role.workload == b.role.workload
        and _annotation(a.role, EXCLUSIVE) == zone_key
        and _annotation(b.role, EXCLUSIVE) == zone_key
    ):
        return PairPlacement(
            tuple((p, q) for p in sorted(za) for q in sorted(zb) if p != q),
            "always",
            f"JobSet exclusive topology on {zone_key} puts each child Job in its own zone",
        )
    group_a, group_b = _annotation(a.role, KUEUE_GROUP), _annotation(b.role, KUEUE_GROUP)
    same_workload = a.role.workload == b.role.workload
    if (
        same_workload
        and group_a
        and group_a == group_b
        and _zone_level(_annotation(a.role, KUEUE_REQUIRED) or _annotation(b.role, KUEUE_REQUIRED), zone_key)
    ):
        return PairPlacement(
            tuple((z, z) for z in common),
            None,
            f"{a.role} and {b.role} share Kueue pod-set group {group_a!r} with a required topology",
        )
    pairs = tuple((p, q) for p in sorted(za) for q in sorted(zb))
    if not common:
        return PairPlacement(
            pairs,
            "always",
            f"{a.role} can land only in {', '.join(sorted(za))} and {b.role} only in {', '.join(sorted(zb))}",
        )
    if len(za | zb) == 1:
        return PairPlacement(pairs, None, f"both can land only in {common[0]}")
    preferred = any(
        term_selects(t, x.role, y.role)
        for x, y in ((a, b), (b, a))
        for t in _zone_terms(x.role, "podAffinity", False, zone_key)
    )
    if preferred:
        return PairPlacement(
            pairs, "possible", "a preferred podAffinity pulls them together but does not force it"
        )
    return PairPlacement(pairs, "likely", f"nothing couples {a.role} and {b.role} to one zone")
