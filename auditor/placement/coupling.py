"""Where the roles of a training group can land relative to each other (pure).

One model: every question below is answered with the typed scheduling fields of the pod template
(`auditor.model.scheduling`) and the scheduler's own filters (`filters.filter_node`,
`podfilters.TopologySpread`, `podfilters.InterPodAffinity`) — the code the upstream scheduler cases
in tests/data/scheduler replay.

Per role (`place_roles`): the nodes it can land on — the node filters, PodTopologySpread's
rejection of nodes lacking a DoNotSchedule constraint's key, InterPodAffinity's rejection of nodes
lacking a required term's key or holding no pod the terms select (the first-pod exemption for a pod
that matches all its own terms) — hence its feasible zones; how many of its replicas can be placed
at all (hard spread whose eligible domains include some the pod cannot reach caps every domain at
maxSkew; one pod per domain under required anti-affinity to its own pods; NodeResourcesFit: an empty
node holds as many of its pods as its allocatable covers for every requested resource and its `pods`
slots, so eight whole-node GPU workers on two 8-GPU nodes per zone need four zones' worth of nodes
— an upper bound, since other roles' pods are not subtracted, so what it says cannot fit cannot);
whether its replicas must share one zone, or are forced across several (hard zone spread,
anti-affinity needing more domains than a zone has, or more pods than a zone's nodes hold).

Per pair (`pair_placement`): the zone pairs the group constraints allow for traffic from a pod of
one role to a pod of the other, and how certain a split across zones is:

* co-located: required podAffinity towards the other role's pods on a key whose domains nest inside
  zones (a follower waits for the pods it follows and shares their domain; a term that also selects
  the follower's own pods lets the first of them start anywhere, so it does not necessarily follow),
  LeaderWorkerSet exclusive topology, Kueue `podset-required-topology` within one pod set or a
  shared `podset-group-name`, a hard Volcano networkTopology whose allowed HyperNodes each lie in
  one zone, or a single common zone;
* separated: required podAntiAffinity, or JobSet exclusive topology, on a key whose domains are the
  zones;
* split `always`: no common feasible zone, or one role forced across zones while the other keeps to
  one zone;
* `possible`: something packs the roles but does not force it (preferred podAffinity, Kueue
  `podset-preferred-topology` or `podset-slice-required-topology`, a soft Volcano
  networkTopology, a follower that may start first, two pod sets each kept in one zone by their
  Kueue flavors, which they share unless quota runs short), or the split needs a node that does
  not exist yet (a Karpenter NodePool or an autoscaled node group makes one only for pods the
  present nodes cannot take); otherwise `likely`
  (the default spreading nudges pods of one workload apart).

Whether a topology key's domains nest inside zones is decided from the node labels, never from the
key's name: a node pool or rack whose nodes span two zones does not keep a group in one zone; a
Kueue Topology whose levels put the key at or below the zone level says so too. The nodes include
those a provisioner can make (placement/capacity.py) and Kueue-managed roles are placed as admitted
(placement/kueue.py); docs/placement.md lists every object read and what is not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from auditor.model.labels import LabelSelector
from auditor.model.objects import ZONE_KEY, Node, PodTemplate, Role, Toleration, WorkloadRef
from auditor.model.scheduling import AffinityTerm, namespace_label_map
from auditor.model.values import value
from auditor.placement import capacity, dra, kueue, volcano
from auditor.placement.filters import TOPOLOGY_KEYS, UNRESOLVABLE, FilterResult, filter_node, node_label_keys
from auditor.placement.podfilters import ExistingPod, InterPodAffinity, TopologySpread, missing_topology_key
from auditor.placement.resources import extended_resources, pods_per_node
from auditor.workloads.operators import (
    EXCLUSIVE,
    LWS_EXCLUSIVE,
    LWS_SIZE,
    LWS_SUBGROUP_EXCLUSIVE,
    LWS_SUBGROUP_SIZE,
    job_count,
)

KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_GROUP = "kueue.x-k8s.io/podset-group-name"
HOSTNAME_KEY = "kubernetes.io/hostname"


@dataclass(frozen=True, slots=True)
class PlacementOptions:
    """What, besides the manifests and nodes, decides where pods land."""

    zone_key: str = ZONE_KEY
    # The ExtendedResourceToleration admission plugin (off upstream; managed clusters such as GKE
    # run an equivalent): pods requesting an extended resource tolerate NoSchedule taints keyed by it.
    extended_resource_toleration: bool = False
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict, compare=False, hash=False)
    # How Kueue admits the pod sets it manages, by (workload, role name), and the TAS Topologies'
    # levels by name (placement/kueue.py).
    admissions: Mapping[tuple[WorkloadRef, str], kueue.Admission] = field(
        default_factory=dict, compare=False, hash=False
    )
    topologies: Mapping[str, Sequence[str]] = field(default_factory=dict, compare=False, hash=False)
    # Volcano Jobs with a networkTopology: the HyperNodes each may be placed in (placement/volcano.py).
    volcano: Mapping[WorkloadRef, volcano.Domains] = field(default_factory=dict, compare=False, hash=False)
    # DRA DeviceClasses, ResourceSlices, claims and claim templates (placement/dra.py).
    devices: dra.Devices | None = field(default=None, compare=False, hash=False)

    def admission(self, role: Role) -> kueue.Admission | None:
        return self.admissions.get((role.workload, role.name)) if self.admissions else None


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
    # At most this many replicas can be placed (None: all of them), and why.
    max_replicas: int | None = None
    capacity_reason: str = ""
    one_zone: str = ""  # why every replica lands in one zone ("" when nothing says so)
    forced_spread: str = ""  # why the replicas cannot all share one zone ("" when they can)
    notes: tuple[str, ...] = ()  # what changed the verdict and is worth saying (admission plugins)
    # Zones the role reaches only through nodes a provisioner would make, and which would make
    # them: ((zone, ("NodePool gpu-spot",)), ...). Empty without such nodes (placement/capacity.py).
    provisioned: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # Each Kueue flavor the role can be admitted under keeps it in one zone (placement/kueue.py).
    flavor_one_zone: bool = False
    # The DRA ResourceClaims its pods share (namespace, name), and why that keeps them in one zone
    # ("" when it does not; placement/dra.py).
    shared_claims: tuple[tuple[str, str], ...] = ()
    claim_one_zone: str = ""

    @property
    def provisioned_zones(self) -> frozenset[str]:
        return frozenset(z for z, _ in self.provisioned)

    @property
    def unschedulable(self) -> bool:
        return not self.nodes or self.max_replicas == 0

    @property
    def partly_unschedulable(self) -> bool:
        return self.max_replicas is not None and 0 < self.max_replicas < self.role.replicas

    @property
    def single_zone(self) -> bool:
        """Every replica in one zone: one replica, one feasible zone, or a constraint that says so."""
        return self.role.replicas <= 1 or len(self.zones) <= 1 or bool(self.one_zone)

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

    def _compared(self) -> tuple[object, ...]:
        return (self.role, self.zones, self.nodes, self.rejected, self.max_replicas, self.one_zone)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RolePlacement):
            return NotImplemented
        return self._compared() == other._compared()

    def __hash__(self) -> int:
        return hash((self.role, self.zones, self.nodes))


# --- topology ---------------------------------------------------------------------------------


class Topology:
    """The nodes, and what their labels say about topology keys (worked out once per key)."""

    def __init__(self, nodes: Sequence[Node], zone_key: str) -> None:
        self.nodes = nodes
        self.zone_key = zone_key
        self._zones_of: dict[str, dict[str, set[str]]] = {}

    def zones_of_domains(self, key: str) -> Mapping[str, set[str]]:
        """Each value of `key` on the nodes → the zones its nodes are in ("" for a node without one)."""
        found = self._zones_of.get(key)
        if found is None:
            found = {}
            for n in self.nodes:
                value = n.label_map.get(key)
                if value is not None:
                    found.setdefault(value, set()).add(n.label_map.get(self.zone_key, ""))
            self._zones_of[key] = found
        return found

    def nests(self, key: str) -> bool:
        """Whether every domain of `key` lies inside one zone, on these nodes (a host, a rack of one
        zone). The zone key itself does; a key no node carries does not (nothing to decide from)."""
        if key == self.zone_key:
            return True
        domains = self.zones_of_domains(key)
        return bool(domains) and all(len(z) == 1 and "" not in z for z in domains.values())

    def is_zone(self, key: str) -> bool:
        """Whether the domains of `key` are the zones themselves (one domain per zone)."""
        if key == self.zone_key:
            return True
        if not self.nests(key):
            return False
        zones = [next(iter(z)) for z in self.zones_of_domains(key).values()]
        return len(zones) == len(set(zones))


def _describe(key: str, topology: Topology) -> str:
    if key == topology.zone_key:
        return key
    if topology.is_zone(key):
        return f"{key} (one domain per zone on these nodes)"
    if topology.nests(key):
        return f"{key} (each domain inside one zone on these nodes)"
    return key


# --- per role ---------------------------------------------------------------------------------


def _annotation(role: Role, key: str) -> str:
    return dict(role.template.annotations).get(key, "")


def _int_annotation(role: Role, key: str, default: int) -> int:
    text = _annotation(role, key)
    return int(text) if text.isdigit() else default


def admitted_tolerations(role: Role, options: PlacementOptions) -> tuple[Toleration, ...]:
    """The tolerations the pod carries once admitted: its own, plus those of admission plugins."""
    own = role.template.tolerations
    if not options.extended_resource_toleration:
        return own
    extra = [
        Toleration(name, "Exists", "", "NoSchedule") for name in sorted(extended_resources(role.template))
    ]
    return own + tuple(t for t in extra if t not in own)


def _filter_signature(role: Role, claims: Mapping[str, frozenset[str]], options: PlacementOptions) -> object:
    """Everything the node filters read from a pod template, as one hashable value."""
    t = role.template
    return (
        t.node_selector,
        t.scheduling.node_affinity,
        tuple(c for c in t.scheduling.hard_spread),
        tuple(x.topology_key for x in t.scheduling.pod_affinity.required),
        admitted_tolerations(role, options),
        t.node_name,
        t.requests,
        t.pod_requests,  # what the resource filter reads
        t.claims,  # and the volume filter
        tuple(sorted((k, tuple(sorted(v))) for k, v in claims.items())),
    )


def _keys_read(role: Role) -> set[str]:
    """The node label keys any filter reads for this role."""
    s = role.template.scheduling
    keys = node_label_keys(role.template)
    keys.update(c.topology_key for c in s.spread)
    keys.update(t.topology_key for t in s.pod_affinity.required)
    keys.update(t.topology_key for t in s.pod_anti_affinity.required)
    return keys


def _names_a_node(role: Role) -> bool:
    """A template whose filters single out one node is filtered node by node."""
    t = role.template
    if t.node_name is not None or HOSTNAME_KEY in _keys_read(role):
        return True
    required = t.scheduling.node_affinity.required or ()
    return any(term.match_fields for term in required)


_GROUPS_KEPT = 8
_groups_seen: dict[tuple[tuple[int, ...], frozenset[str]], tuple[tuple[Node, ...], list[list[Node]]]] = {}


def _node_groups(nodes: Sequence[Node], read: set[str]) -> list[list[Node]]:
    """Nodes the filters cannot tell apart unless a template names a host: same values of the
    labels some template or filter reads (`read`; the hostname aside), same taints, cordon state
    and allocatable. A pool of 500 nodes is a few groups, even with per-rack labels nobody selects.

    Kept for the last few node lists, by the identity of their Node objects (held with the entry,
    so an id is never reused while kept) and the keys read: the admission webhook audits every
    request against the same parsed Nodes. The groups are only read, never changed."""
    key = (tuple(map(id, nodes)), frozenset(read - {HOSTNAME_KEY}))
    seen = _groups_seen.get(key)
    if seen is not None:
        return seen[1]
    groups = _group_nodes(nodes, key[1])
    if len(_groups_seen) >= _GROUPS_KEPT:
        _groups_seen.clear()
    _groups_seen[key] = (tuple(nodes), groups)
    return groups


def _group_nodes(nodes: Sequence[Node], read: frozenset[str]) -> list[list[Node]]:
    groups: dict[tuple[object, ...], list[Node]] = {}
    for n in nodes:
        key = (
            tuple(kv for kv in n.labels if kv[0] in read),
            n.taints,
            n.unschedulable,
            n.allocatable,
            n.ranges,  # a node to be made is judged by what it may become
            n.open_keys,
        )
        groups.setdefault(key, []).append(n)
    return list(groups.values())


def _static_filter(
    role: Role,
    node: Node,
    claims: Mapping[str, frozenset[str]],
    spread: TopologySpread | None,
    options: PlacementOptions,
    on_node: Sequence[PodTemplate] = (),
) -> FilterResult:
    """The node-level filters (with the requests of the pods already on the node), then
    PodTopologySpread and the topology keys InterPodAffinity requires of a node."""
    template = role.template
    tolerations = admitted_tolerations(role, options)
    if tolerations is not template.tolerations:
        template = replace(template, tolerations=tolerations)
    result = filter_node(template, node, claims, on_node)
    if not result.ok:
        return result
    if spread is not None:
        # With no pod placed yet, the spread filter rejects only nodes lacking a constraint's key.
        result = spread.filter(node)
        if not result.ok:
            return result
    missing = missing_topology_key(template.scheduling.pod_affinity.required, node)
    return FilterResult(node.name, True) if missing is None else missing


def _partition(
    groups: Iterable[Sequence[Node]], judge: Callable[[Node], FilterResult]
) -> tuple[list[Node], list[tuple[FilterResult, tuple[str, ...]]]]:
    """The nodes of the groups whose first node passes `judge`, and the verdict on each other group."""
    ok: list[Node] = []
    rejected: list[tuple[FilterResult, tuple[str, ...]]] = []
    for group in groups:
        result = judge(group[0])
        if result.ok:
            ok.extend(group)
        else:
            rejected.append((result, tuple(n.name for n in group)))
    return ok, rejected


def _feasible(
    role: Role,
    nodes: Sequence[Node],
    groups: Sequence[Sequence[Node]] | None,
    claims: Mapping[str, frozenset[str]],
    options: PlacementOptions,
    position: Mapping[str, int],
    existing: Sequence[ExistingPod] = (),
) -> tuple[list[Node], list[tuple[FilterResult, tuple[str, ...]]]]:
    """The nodes `role` passes the filters on (in `position` order) and why the others fail."""
    spread = (
        TopologySpread.build(role.template, role.workload.namespace, nodes, existing)
        if role.template.scheduling.hard_spread
        else None
    )
    on_node: dict[str, list[PodTemplate]] = {}
    for pod in existing:
        if pod.template is not None:
            on_node.setdefault(pod.node_name, []).append(pod.template)
    ok, rejected = _partition(
        groups if groups is not None else [[n] for n in nodes],
        lambda n: _static_filter(role, n, claims, spread, options, on_node.get(n.name, ())),
    )
    if groups is not None:
        ok.sort(key=lambda n: position[n.name])  # node order, as filtering one by one gives
    return ok, rejected


@value(frozen=True)
class _Matches:
    """The roles whose pods a role's required podAffinity terms select (all terms at once)."""

    others: tuple[Role, ...]
    itself: bool  # the role's own pods match all its terms (the first-pod exemption applies)


def _selects(term: AffinityTerm, owner: Role, other: Role, options: PlacementOptions) -> bool:
    ns = other.workload.namespace
    ns_labels = namespace_label_map(ns, options.namespace_labels)
    return term.matches(owner.workload.namespace, ns, other.template.label_map, ns_labels)


class _RoleIndex:
    """The roles by namespace and by label, so a selector is matched only against the roles one of
    its `In` requirements can select (a repository has thousands of roles)."""

    def __init__(self, roles: Sequence[Role]) -> None:
        self.roles = roles
        self.by_namespace: dict[str, list[Role]] = {}
        self.by_label: dict[tuple[str, str], list[Role]] = {}
        for r in roles:
            self.by_namespace.setdefault(r.workload.namespace, []).append(r)
            for kv in r.template.labels:
                self.by_label.setdefault(kv, []).append(r)

    def candidates(self, selector: LabelSelector, namespace: str | None) -> Iterable[Role]:
        """A superset of the roles `selector` selects (in `namespace` when given)."""
        narrowest: list[Role] | None = None
        for req in selector.requirements:
            if req.operator != "In":
                continue
            found = [r for v in req.values for r in self.by_label.get((req.key, v), ())]
            if narrowest is None or len(found) < len(narrowest):
                narrowest = found
        if narrowest is None:
            narrowest = (
                list(self.by_namespace.get(namespace, ())) if namespace is not None else list(self.roles)
            )
        if namespace is not None:
            return [r for r in narrowest if r.workload.namespace == namespace]
        return narrowest


def _affinity_matches(role: Role, index: _RoleIndex, options: PlacementOptions) -> _Matches:
    terms = role.template.scheduling.pod_affinity.required
    first = terms[0]
    pool = index.candidates(first.selector, role.workload.namespace if first.own_namespace else None)
    others = [
        r for r in dict.fromkeys(pool) if r is not role and all(_selects(t, role, r, options) for t in terms)
    ]
    return _Matches(tuple(others), all(_selects(t, role, role, options) for t in terms))


def _inter_pod(
    role: Role,
    matches: _Matches,
    ok: Sequence[Node],
    nodes: Sequence[Node],
    feasible: Mapping[Role, Sequence[Node]],
    existing: Sequence[ExistingPod],
    options: PlacementOptions,
) -> tuple[list[Node], list[tuple[FilterResult, tuple[str, ...]]]]:
    """InterPodAffinity, by the scheduler's own filter, over the pods already running and — for a
    follower — one pod of each role it follows on each node that role can use (it lands only near
    them; with none among the manifests it waits)."""
    synthetic: list[ExistingPod] = []
    if not matches.itself:
        synthetic = [
            ExistingPod(r.workload.namespace, r.template.labels, n.name)
            for r in matches.others
            for n in feasible[r]
        ]
    affinity = InterPodAffinity.build(
        role.template, role.workload.namespace, nodes, [*existing, *synthetic], options.namespace_labels
    )
    return _partition([[n] for n in ok], affinity.filter)


@dataclass(frozen=True, slots=True)
class _Cap:
    """A constraint that bounds how many replicas of a role fit in a set of zones."""

    reason: str
    key: str
    per_domain: int  # replicas per domain of `key` at most
    eligible: frozenset[str] | None  # spread: the domains counted; None: anti-affinity (no minimum)
    min_domains: int = 1

    def within(self, ok: Sequence[Node], zones: set[str] | None, zone_key: str) -> int | None:
        """At most this many replicas on the nodes `ok` in `zones` (all of them when None);
        None: no bound."""
        in_zones = [n for n in ok if zones is None or n.label_map.get(zone_key) in zones]
        if self.key == HOSTNAME_KEY and any(n.multiplies for n in in_zones):
            return None  # a pool makes as many hosts as the pods need
        if self.eligible is None:
            if any(self.key not in n.label_map for n in in_zones):
                return None  # a node without the key never violates the anti-affinity term
            return self.per_domain * len({n.label_map[self.key] for n in in_zones})
        reachable = {n.label_map[self.key] for n in in_zones if self.key in n.label_map}
        if len(self.eligible) >= self.min_domains and self.eligible <= reachable:
            return None  # every counted domain can take pods: they spread evenly, without bound
        # A counted domain no replica can reach stays at 0 (so does the minimum while there are
        # fewer domains than minDomains): each reachable domain holds at most maxSkew replicas.
        return self.per_domain * len(reachable)


_Alloc = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class _Pools:
    """A role's feasible nodes counted by zone (None: no zone label) and allocatable."""

    by_zone: Mapping[str | None, Mapping[_Alloc, int]]
    fewest: int  # nodes in the zone with fewest: each holds one pod at least (it passed the filter)

    @staticmethod
    def of(ok: Sequence[Node], key_of: Mapping[int, tuple[str | None, _Alloc]]) -> _Pools:
        by_zone: dict[str | None, dict[_Alloc, int]] = {}
        for (zone, allocatable), count in Counter(map(key_of.__getitem__, map(id, ok))).items():
            by_zone.setdefault(zone, {})[allocatable] = count
        return _Pools(by_zone, min((sum(c.values()) for c in by_zone.values()), default=0))


@dataclass(frozen=True, slots=True)
class _FitCap:
    """NodeResourcesFit as a bound: an empty feasible node holds at most so many of the role's
    pods (its requests against the node's allocatable, and the `pods` slots), so a zone holds at
    most the sum over its nodes. An upper bound: other roles' pods are not subtracted, so what it
    says cannot fit, cannot."""

    reason: str
    per_zone: Mapping[str | None, int]  # pods the zone's feasible nodes hold (None: no zone label)

    def within(self, ok: Sequence[Node], zones: set[str] | None, zone_key: str) -> int | None:
        del ok, zone_key  # counted from the same feasible nodes when the cap was made
        return sum(count for zone, count in self.per_zone.items() if zones is None or zone in zones)


def _fit_cap(role: Role, pools: _Pools) -> _FitCap | None:
    """The resource bound of `role` on its feasible nodes, when it binds: a zone holds fewer
    than its replicas."""
    if role.replicas <= pools.fewest:
        return None  # every zone has a feasible node per replica
    fits: dict[_Alloc, tuple[int, str]] = {}
    for by_alloc in pools.by_zone.values():
        for allocatable in by_alloc:
            if allocatable not in fits:
                fit = pods_per_node(role.template, allocatable)
                if fit is None:
                    return None  # a node of unknown capacity: its zone might hold them all
                fits[allocatable] = fit
    per_zone = {
        zone: sum(fits[a][0] * count for a, count in by_alloc.items())
        for zone, by_alloc in pools.by_zone.items()
    }
    if not per_zone or min(per_zone.values()) >= role.replicas:
        return None
    limits: dict[str, set[int]] = {}
    for count, resource in fits.values():
        limits.setdefault(resource, set()).add(count)
    per_node = "; ".join(
        f"{res}: at most {'–'.join(str(k) for k in sorted({min(v), max(v)}))} per node"
        for res, v in sorted(limits.items())
    )
    return _FitCap(f"NodeResourcesFit with its requests ({per_node})", per_zone)


def _caps(role: Role, nodes: Sequence[Node], index: _RoleIndex, options: PlacementOptions) -> list[_Cap]:
    """The constraints of `role` that bound its own replicas: hard spread whose selector counts only
    its own pods (other roles' pods might fill the domains it cannot reach), and required
    podAntiAffinity to its own pods (one per domain)."""
    caps: list[_Cap] = []
    labels = role.template.label_map
    ns = role.workload.namespace
    for c in role.template.scheduling.hard_spread:
        if not c.selector.matches(labels):
            continue
        if any(
            o is not role and c.selector.matches(o.template.label_map)
            for o in index.candidates(c.selector, ns)
        ):
            continue
        eligible = TopologySpread.build(role.template, ns, nodes, (), [c]).counts[0]
        min_domains = f", minDomains {c.min_domains}" if c.min_domains > 1 else ""
        reason = f"its DoNotSchedule topology spread on {c.topology_key} (maxSkew {c.max_skew}{min_domains})"
        caps.append(_Cap(reason, c.topology_key, c.max_skew, frozenset(eligible), c.min_domains))
    for t in role.template.scheduling.pod_anti_affinity.required:
        if _selects(t, role, role, options):
            reason = f"its required podAntiAffinity to its own pods on {t.topology_key}"
            caps.append(_Cap(reason, t.topology_key, 1, None))
    return caps


def _fit(
    caps: Sequence[_Cap | _FitCap], ok: Sequence[Node], zones: set[str] | None, zone_key: str
) -> tuple[int | None, str]:
    """The tightest bound of `caps` on the nodes in `zones`, and its reason."""
    best: tuple[int | None, str] = (None, "")
    for cap in caps:
        value = cap.within(ok, zones, zone_key)
        if value is not None and (best[0] is None or value < best[0]):
            best = (value, cap.reason)
    return best


def _replica_bounds(
    role: Role,
    ok: Sequence[Node],
    zones: Sequence[str],
    one_zone: str,
    caps: Sequence[_Cap | _FitCap],
    zone_key: str,
) -> tuple[int | None, str, str]:
    """(how many replicas can be placed at most or None, why, why they cannot share one zone)."""
    if not caps or not ok:
        return None, "", ""
    per_zone = {z: _fit(caps, ok, {z}, zone_key) for z in zones}
    unbounded_zone = any(v is None for v, _ in per_zone.values())
    best_zone = max((v for v, _ in per_zone.values() if v is not None), default=0)
    best_reason = next((r for v, r in per_zone.values() if v == best_zone), "")
    if one_zone:
        total, reason = (None, "") if unbounded_zone or not zones else (best_zone, best_reason)
    else:
        total, reason = _fit(caps, ok, None, zone_key)
    max_replicas = total if total is not None and total < role.replicas else None
    placed = role.replicas if max_replicas is None else max_replicas
    forced = ""
    if not one_zone and len(zones) >= 2 and not unbounded_zone and best_zone < placed:
        forced = (
            f"{role}: {best_reason} allows at most {best_zone} of its {role.replicas} replicas in one zone"
        )
    return max_replicas, reason, forced


def _kueue_nests(role: Role, key: str, topology: Topology, options: PlacementOptions) -> bool:
    """A Kueue topology level whose domains nest inside zones: by the nodes, or by the order of
    the levels of the Topology its flavors name."""
    if topology.nests(key):
        return True
    return kueue.level_nests(options.admission(role), key, topology.zone_key, options.topologies)


def flavor_zones(adm: kueue.Admission, ok: Iterable[Node], zone_key: str) -> list[set[str]]:
    """The zones of the nodes `ok` under each flavor combination of the admission."""
    out = []
    for combo in adm.combinations:
        labels = [kv for f in combo for kv in f.node_labels]
        out.append(
            {
                z
                for n in ok
                if all(n.label_map.get(k) == v for k, v in labels) and (z := n.label_map.get(zone_key))
            }
        )
    return out


_FlavorCache = dict[tuple[int, tuple[str, ...]], bool]


def _one_flavor_zone(
    role: Role, ok: Sequence[Node], options: PlacementOptions, zone_key: str, cache: _FlavorCache
) -> str:
    adm = options.admission(role)
    if adm is None or len(adm.combinations) < 2:
        return ""
    # Roles filtered in one pass share their list of nodes, and the roles of one ClusterQueue its
    # flavors: worked out once per pair (thousands of Kueue-managed roles).
    key = (id(ok), adm.flavor_names)
    kept = cache.get(key)
    if kept is None:
        kept = cache[key] = all(len(z) <= 1 for z in flavor_zones(adm, ok, zone_key))
    if kept:
        return (
            f"{role} is admitted by Kueue under one ResourceFlavor of ClusterQueue {adm.cluster_queue} "
            f"at a time, and each of its flavors ({', '.join(adm.flavor_names)}) keeps to one zone"
        )
    return ""


def _self_colocation(
    role: Role,
    zones: Sequence[str],
    matches: _Matches,
    topology: Topology,
    options: PlacementOptions,
    ok: Sequence[Node],
    flavor: str,
) -> str:
    """Why every replica of the role lands in one zone ("" when nothing says so); `flavor`: what
    its Kueue flavors say (_one_flavor_zone), the last reason tried."""
    if len(zones) <= 1:
        return f"{role} can land in one zone only"
    exclusive = _annotation(role, EXCLUSIVE)
    if exclusive and job_count(role) == 1 and topology.nests(exclusive):
        return f"{role} is one Job with JobSet exclusive topology on {_describe(exclusive, topology)}"
    lws = _annotation(role, LWS_EXCLUSIVE)
    if lws and topology.nests(lws) and role.replicas <= max(1, _int_annotation(role, LWS_SIZE, 1)):
        return f"{role} is one LeaderWorkerSet group, kept in one domain of {_describe(lws, topology)}"
    hyper = _volcano_one_zone(role, ok, options, topology.zone_key)
    if hyper:
        return hyper
    required = _annotation(role, KUEUE_REQUIRED)
    if required and _kueue_nests(role, required, topology, options):
        return f"{role} has {KUEUE_REQUIRED}: {_describe_level(role, required, topology, options)}"
    if matches.itself and not matches.others:
        key = _zone_nested_key(role, topology)
        if key:
            return f"{role} requires podAffinity to its own pods on {_describe(key, topology)}"
    return flavor


def _volcano_one_zone(role: Role, ok: Sequence[Node], options: PlacementOptions, zone_key: str) -> str:
    """A hard networkTopology whose every allowed HyperNode lies inside one zone."""
    domains = options.volcano.get(role.workload) if options.volcano else None
    if domains is None or domains.mode != "hard" or not domains.domains:
        return ""
    zones = volcano.zones_of(domains, ok, zone_key)
    if not all(len(z - {""}) <= 1 for z in zones.values()):
        return ""
    return (
        f"{role.workload} has a hard Volcano networkTopology (highestTierAllowed {domains.tier}): "
        f"its pods share one HyperNode ({', '.join(h for h, _ in domains.domains)}), each inside one zone"
    )


def _describe_level(role: Role, key: str, topology: Topology, options: PlacementOptions) -> str:
    if topology.nests(key):
        return _describe(key, topology)
    names = ", ".join((options.admission(role) or kueue.Admission("", "", ())).topologies())
    return f"{key} (at or below the zone level of Topology {names})"


def place_roles(
    roles: Sequence[Role],
    nodes: Sequence[Node],
    zone_key: str,
    volume_zones: Mapping[Role, Mapping[str, frozenset[str]]] | None = None,
    options: PlacementOptions | None = None,
    existing: Sequence[ExistingPod] = (),
) -> dict[Role, RolePlacement]:
    """Where each role can land, and how many of its replicas, given the pods already running
    (`existing`: none for manifests). Roles whose templates ask the same of nodes share one
    filtering pass (on a large repository most jobs come from a few templates)."""
    opts = options or PlacementOptions(zone_key)
    topology = Topology(nodes, zone_key)
    read = {zone_key, *TOPOLOGY_KEYS}.union(*(_keys_read(r) for r in roles))
    groups = _node_groups(nodes, read)
    position = {n.name: i for i, n in enumerate(nodes)}
    done: dict[object, tuple[list[Node], list[tuple[FilterResult, tuple[str, ...]]]]] = {}
    feasible: dict[Role, list[Node]] = {}
    rejected: dict[Role, list[tuple[FilterResult, tuple[str, ...]]]] = {}
    claimed = dra.Bounds(opts.devices, nodes, zone_key) if opts.devices else None
    claim_zones: dict[Role, dra.Bound] = {}
    for role in roles:
        claims = (volume_zones or {}).get(role) or {}
        key = _filter_signature(role, claims, opts)
        if existing:  # the pods already running count per namespace and label set
            key = (key, role.workload.namespace, role.template.labels)
        found = done.get(key)
        if found is None:
            by_group = None if existing or _names_a_node(role) else groups
            found = done[key] = _feasible(role, nodes, by_group, claims, opts, position, existing)
        feasible[role], rejected[role] = found[0], list(found[1])
        domains = opts.volcano.get(role.workload) if opts.volcano else None
        if domains is not None and domains.mode == "hard":
            allowed = domains.nodes
            outside = tuple(n.name for n in feasible[role] if n.name not in allowed)
            if outside:
                feasible[role] = [n for n in feasible[role] if n.name in allowed]
                why = FilterResult(
                    outside[0],
                    False,
                    "NetworkTopology",
                    f"in no HyperNode of tier {domains.tier} or lower (Volcano networkTopology hard)",
                    UNRESOLVABLE,
                )
                rejected[role] = [*rejected[role], (why, outside)]
        if claimed is not None and role.template.resource_claims:
            _claim_filter(role, claimed, feasible, rejected, claim_zones)
    # Required podAffinity: a follower lands only near pods of the roles its terms select; with
    # none among the manifests it waits, unless its own pods match (the first may start anywhere).
    # Pods already running (their anti-affinity too) are judged by the same filter.
    running_anti = any(p.anti_affinity for p in existing)
    index = _RoleIndex(roles)
    matches: dict[Role, _Matches] = {}
    static = dict(feasible)
    for role in roles:
        s_ = role.template.scheduling
        if s_.pod_affinity.required:
            matches[role] = _affinity_matches(role, index, opts)
        m = matches.get(role, _Matches((), True))
        follower = bool(s_.pod_affinity.required) and not m.itself
        if not (
            follower
            or (existing and (s_.pod_affinity.required or s_.pod_anti_affinity.required or running_anti))
        ):
            continue
        kept, more = _inter_pod(role, m, static[role], nodes, static, existing, opts)
        feasible[role] = kept
        rejected[role] = rejected[role] + more
    out: dict[Role, RolePlacement] = {}
    zone_cache: dict[int, tuple[tuple[str, ...], tuple[str, ...]]] = {}

    def zones_of(ok: list[Node]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        # Roles filtered in one pass share their list of nodes: its zones and names are worked
        # out once (thousands of roles, hundreds of nodes each).
        found = zone_cache.get(id(ok))
        if found is None:
            found = zone_cache[id(ok)] = (
                tuple(sorted({z for n in ok if (z := n.label_map.get(zone_key))})),
                tuple(n.name for n in ok),
            )
        return found

    pool_cache: dict[int, _Pools] = {}
    node_keys = {id(n): (n.label_map.get(zone_key), n.allocatable) for n in nodes}
    to_be_made = any(n.provisioner for n in nodes)
    flavor_cache: _FlavorCache = {}
    provenance_cache: dict[int, tuple[tuple[str, tuple[str, ...]], ...]] = {}

    def provenance_of(ok: list[Node]) -> tuple[tuple[str, tuple[str, ...]], ...]:
        found = provenance_cache.get(id(ok))
        if found is None:
            found = provenance_cache[id(ok)] = capacity.provenance(ok, zone_key)
        return found

    def pools_of(ok: list[Node]) -> _Pools:
        found = pool_cache.get(id(ok))
        if found is None:
            found = pool_cache[id(ok)] = _Pools.of(ok, node_keys)
        return found

    for role in roles:
        ok = feasible[role]
        zones, names = zones_of(ok)
        m = matches.get(role, _Matches((), False))
        flavor = _one_flavor_zone(role, ok, opts, zone_key, flavor_cache) if opts.admissions and ok else ""
        claim = claim_zones.get(role)
        claim_zone = claim.one_zone if claim is not None else ""
        one_zone = _self_colocation(role, zones, m, topology, opts, ok, claim_zone or flavor) if ok else ""
        caps: list[_Cap | _FitCap] = [*_caps(role, nodes, index, opts)]
        multiplying = to_be_made and any(n.multiplies for n in ok)
        fit = _fit_cap(role, pools_of(ok)) if role.replicas > 1 and not multiplying else None
        if fit is not None:
            caps.append(fit)
        max_replicas, capacity_reason, forced = _replica_bounds(role, ok, zones, one_zone, caps, zone_key)
        notes = _admission_notes(role, rejected[role], opts) + (claim.notes if claim is not None else ())
        out[role] = RolePlacement(
            role,
            zones,
            names,
            tuple((r, names) for r, names in rejected[role]),
            position if len(nodes) else None,
            max_replicas,
            capacity_reason,
            one_zone,
            forced,
            notes,
            provenance_of(ok) if to_be_made else (),
            bool(flavor),
            tuple((role.workload.namespace, c) for c in claim.shared) if claim is not None else (),
            claim_zone,
        )
    return _propagate_followers(out, matches, topology)


def _claim_filter(
    role: Role,
    claimed: dra.Bounds,
    feasible: dict[Role, list[Node]],
    rejected: dict[Role, list[tuple[FilterResult, tuple[str, ...]]]],
    claim_zones: dict[Role, dra.Bound],
) -> None:
    """The scheduler's DynamicResources filter: only nodes every claim of the role can be met from."""
    found = claimed.of(role.workload.namespace, role.template)
    if found is None:
        return
    claim_zones[role] = found
    kept = [n for n in feasible[role] if n.name in found.allowed]
    if len(kept) == len(feasible[role]):
        return
    by_reason: dict[str, list[str]] = {}
    for n in feasible[role]:
        if n.name not in found.allowed:
            by_reason.setdefault(found.why.get(n.name, "its claims cannot be met"), []).append(n.name)
    feasible[role] = kept
    rejected[role] = [
        *rejected[role],
        *(
            (FilterResult(names[0], False, "DynamicResources", reason, UNRESOLVABLE), tuple(names))
            for reason, names in by_reason.items()
        ),
    ]


def _admission_notes(
    role: Role,
    rejected: Sequence[tuple[FilterResult, tuple[str, ...]]],
    options: PlacementOptions,
) -> tuple[str, ...]:
    """Say when the ExtendedResourceToleration admission plugin would change where the role lands."""
    resources = extended_resources(role.template)
    if not resources:
        return ()
    if options.extended_resource_toleration:
        return (
            "the ExtendedResourceToleration admission plugin adds tolerations for "
            f"{', '.join(sorted(resources))}",
        )
    tainted = [
        r
        for r, _ in rejected
        if r.plugin == "TaintToleration"
        and any(r.reason.startswith(f"untolerated taint {k}") for k in resources)
    ]
    if not tainted:
        return ()
    return (
        "the ExtendedResourceToleration admission plugin is assumed off (as upstream); where it runs "
        f"(kubernetes.extended_resource_toleration: true; GKE does the same for GPUs), pods requesting "
        f"{', '.join(sorted(resources))} tolerate NoSchedule taints of that key and could use the "
        f"{sum(len(n) for r, n in rejected if r in tainted)} node(s) rejected for it",
    )


def _propagate_followers(
    placements: dict[Role, RolePlacement], matches: Mapping[Role, _Matches], topology: Topology
) -> dict[Role, RolePlacement]:
    """A role that must follow pods of one role that keeps to one zone keeps to that zone too."""
    for role, m in matches.items():
        group = {role, *m.others}
        key = _zone_nested_key(role, topology)
        if not m.itself or not m.others or not key or placements[role].one_zone:
            continue
        # Every pod of the group matches every member's terms: after the first pod (which may start
        # anywhere), each one must join a domain holding a pod of the group — the first one's.
        if all(o in matches and matches[o].itself and {o, *matches[o].others} == group for o in m.others):
            names = ", ".join(sorted(str(r) for r in group))
            placements[role] = replace(
                placements[role],
                one_zone=f"{names} require podAffinity to one another's pods on {_describe(key, topology)}: "
                "the first pod decides the zone",
            )
    changed = True
    while changed:
        changed = False
        for role, m in matches.items():
            p = placements[role]
            if p.one_zone or m.itself or len(m.others) != 1 or p.role.replicas <= 1:
                continue
            (leader,) = m.others
            key = _zone_nested_key(role, topology)
            if key and leader in placements and placements[leader].single_zone:
                placements[role] = replace(
                    p,
                    one_zone=f"{role} follows {leader} (podAffinity on {_describe(key, topology)}), "
                    "whose pods share one zone",
                )
                changed = True
    return placements


def _zone_nested_key(role: Role, topology: Topology) -> str:
    """The key of the role's first required podAffinity term whose domains nest inside zones, or ""."""
    terms = role.template.scheduling.pod_affinity.required
    return next((t.topology_key for t in terms if topology.nests(t.topology_key)), "")


# --- per pair ---------------------------------------------------------------------------------


@value(frozen=True)
class PairPlacement:
    pairs: tuple[tuple[str, str], ...]  # allowed (source zone, destination zone)
    split: str | None  # always | likely | possible; None when no allowed placement splits
    coupling: str  # the constraint that decided, in words
    # Zones an end reaches only through nodes that do not exist yet: (end "source" or
    # "destination", role, zone, what would make the node). Empty without such nodes.
    provisioned: tuple[tuple[str, str, str, tuple[str, ...]], ...] = ()

    def through(self, source_zones: Iterable[str], destination_zones: Iterable[str]) -> str:
        """`; ns/job/Worker: zone-b only through NodePool gpu-spot` for the zones given, or ""."""
        wanted = {"source": set(source_zones), "destination": set(destination_zones)}
        clauses = [
            f"{role}: {zone} only through {', '.join(made)}"
            for end, role, zone, made in self.provisioned
            if zone in wanted[end]
        ]
        return "; " + "; ".join(dict.fromkeys(clauses)) if clauses else ""


class PairContext:
    """What pair_placement needs besides the two roles: the nodes' topology and the options."""

    def __init__(self, nodes: Sequence[Node], options: PlacementOptions) -> None:
        self.topology = Topology(nodes, options.zone_key)
        self.options = options
        self._by_name: dict[str, Node] | None = None

    def node_index(self) -> Mapping[str, Node]:
        if self._by_name is None:
            self._by_name = {n.name: n for n in self.topology.nodes}
        return self._by_name


def _terms_select(x: Role, y: Role, kind: str, ctx: PairContext, zone_only: bool) -> str:
    """The topology key of a required term of `x`'s `kind` that selects `y`'s pods, if its domains
    nest inside zones (`zone_only`: are the zones); "" otherwise."""
    s = x.template.scheduling
    block = s.pod_affinity if kind == "podAffinity" else s.pod_anti_affinity
    for t in block.required:
        key = t.topology_key
        fits = ctx.topology.is_zone(key) if zone_only else ctx.topology.nests(key)
        if fits and _selects(t, x, y, ctx.options):
            return key
    return ""


def _all_terms_select(x: Role, y: Role, ctx: PairContext) -> bool:
    terms = x.template.scheduling.pod_affinity.required
    return bool(terms) and all(_selects(t, x, y, ctx.options) for t in terms)


def _preferred_selects(x: Role, y: Role, ctx: PairContext) -> bool:
    return any(
        ctx.topology.nests(t.topology_key) and _selects(t, x, y, ctx.options)
        for _, t in x.template.scheduling.pod_affinity.preferred
    )


def pair_placement(a: RolePlacement, b: RolePlacement, ctx: PairContext) -> PairPlacement:
    """Allowed zone pairs for traffic from a pod of `a` to a pod of `b`."""
    found = _within(a, ctx) if a.role == b.role else _between(a, b, ctx)
    if a.provisioned or b.provisioned:
        found = _through_provisioners(found, a, b)
        return replace(
            found,
            provisioned=tuple(
                (end, str(p.role), zone, made)
                for end, p in (("source", a), ("destination", b))
                for zone, made in p.provisioned
            ),
        )
    return found


def _through_provisioners(found: PairPlacement, a: RolePlacement, b: RolePlacement) -> PairPlacement:
    """A split that needs a node no cluster holds yet happens only if a provisioner makes one: it
    does so for pods the present nodes cannot take, so a `likely` split is only `possible`."""
    if found.split != "likely":
        return found
    za, zb = a.provisioned_zones, b.provisioned_zones
    cross = [(x, y) for x, y in found.pairs if x != y]
    if not cross or not all(x in za or y in zb for x, y in cross):
        return found
    through = sorted({f"{z} through {', '.join(p)}" for z, p in (*a.provisioned, *b.provisioned)})
    return PairPlacement(
        found.pairs,
        "possible",
        f"{found.coupling}; a split needs a node that does not exist yet ({'; '.join(through)}), "
        "made only for pods the present nodes cannot take",
    )


def _within(a: RolePlacement, ctx: PairContext) -> PairPlacement:
    role = a.role
    za = sorted(a.zones)
    same = tuple((z, z) for z in za)
    everywhere = tuple((x, y) for x in za for y in za)
    topo = ctx.topology
    if a.one_zone:
        return PairPlacement(same, None, a.one_zone)
    if role.replicas < 2 or (a.max_replicas is not None and a.max_replicas < 2):
        return PairPlacement(same, None, f"{role} has one replica")
    exclusive = _annotation(role, EXCLUSIVE)
    if exclusive and job_count(role) > 1 and topo.is_zone(exclusive):
        return PairPlacement(
            everywhere,
            "always",
            f"{role}: JobSet exclusive topology on {_describe(exclusive, topo)} puts each "
            f"of its {job_count(role)} Jobs in its own zone",
        )
    if a.forced_spread:
        return PairPlacement(everywhere, "always", a.forced_spread)
    anti = _terms_select(role, role, "podAntiAffinity", ctx, zone_only=True)
    if anti:
        return PairPlacement(
            tuple(p for p in everywhere if p[0] != p[1]),
            "always",
            f"{role} requires podAntiAffinity to its own pods on {_describe(anti, topo)}",
        )
    key = _zone_nested_key(role, topo)
    if key and _all_terms_select(role, role, ctx):
        # Its terms also select other roles' pods (else it would keep to one zone): each replica
        # joins a domain holding some selected pod, and those can be in several zones.
        return PairPlacement(
            everywhere,
            "possible",
            f"{role} requires podAffinity on {_describe(key, topo)} to pods that include other roles': "
            "each replica joins a zone holding one of them, and they can be in several zones",
        )
    preferred = _annotation(role, KUEUE_PREFERRED)
    if preferred and _kueue_nests(role, preferred, topo, ctx.options):
        return PairPlacement(
            everywhere,
            "possible",
            f"{role} has {KUEUE_PREFERRED}: {_describe(preferred, topo)} — Kueue packs the pod "
            "set into one domain unless it does not fit",
        )
    soft = _soft_topology(role, ctx)
    if soft:
        return PairPlacement(everywhere, "possible", soft)
    sliced = _annotation(role, kueue.SLICE_REQUIRED)
    if sliced and _kueue_nests(role, sliced, topo, ctx.options):
        size = _annotation(role, "kueue.x-k8s.io/podset-slice-size") or "?"
        return PairPlacement(
            everywhere,
            "possible",
            f"{role} has {kueue.SLICE_REQUIRED}: {_describe_level(role, sliced, topo, ctx.options)} — each "
            f"slice of {size} pods keeps to one domain, the slices do not",
        )
    if _preferred_selects(role, role, ctx):
        return PairPlacement(
            everywhere,
            "possible",
            f"a preferred podAffinity pulls {role}'s replicas together but does not force it",
        )
    return PairPlacement(
        everywhere,
        "likely",
        f"{role}: nothing keeps its replicas in one zone; default spreading places them apart",
    )


def _follows(x: RolePlacement, y: RolePlacement, ctx: PairContext) -> str:
    """Why every pod of `x` shares a zone with the pods of `y` it follows ("" if nothing says so)."""
    key = _terms_select(x.role, y.role, "podAffinity", ctx, zone_only=False)
    if not key or not _all_terms_select(x.role, y.role, ctx) or _all_terms_select(x.role, x.role, ctx):
        return ""
    return key


def _between(a: RolePlacement, b: RolePlacement, ctx: PairContext) -> PairPlacement:
    topo = ctx.topology
    za, zb = set(a.zones), set(b.zones)
    common = sorted(za & zb)
    same = tuple((z, z) for z in common)
    everywhere = tuple((p, q) for p in sorted(za) for q in sorted(zb))
    apart = tuple((p, q) for p, q in everywhere if p != q)
    ra, rb = a.role, b.role
    # Required podAffinity on a zone-nested key towards the other role's pods.
    for follower, leader in ((a, b), (b, a)):
        key = _follows(follower, leader, ctx)
        if not key:
            continue
        if leader.single_zone:
            return PairPlacement(
                same, None, f"{follower.role} requires podAffinity to {leader.role} on {_describe(key, topo)}"
            )
        return PairPlacement(
            everywhere,
            "possible",
            f"{follower.role} lands next to some pod of {leader.role} "
            f"(podAffinity on {_describe(key, topo)}), "
            f"but {leader.role}'s pods can spread over several zones",
        )
    mutual_a = _all_terms_select(ra, rb, ctx) and _all_terms_select(ra, ra, ctx)
    mutual_b = _all_terms_select(rb, ra, ctx) and _all_terms_select(rb, rb, ctx)
    key_a, key_b = _zone_nested_key(ra, topo), _zone_nested_key(rb, topo)
    if mutual_a and mutual_b and key_a and key_b:
        return PairPlacement(
            same,
            None,
            f"{ra} and {rb} both require podAffinity to pods of either role on "
            f"{_describe(key_a, topo)}: the first pod decides the zone",
        )
    for x, y, mutual, key in ((ra, rb, mutual_a, key_a), (rb, ra, mutual_b, key_b)):
        if mutual and key:
            return PairPlacement(
                everywhere,
                "possible",
                f"{x}'s podAffinity term also selects its own pods: the first of them may start anywhere "
                f"before {y}'s pods exist (the first-pod exemption), so {x} does not necessarily follow {y}",
            )
    for x, y in ((ra, rb), (rb, ra)):
        anti = _terms_select(x, y, "podAntiAffinity", ctx, zone_only=True)
        if anti:
            return PairPlacement(
                apart, "always", f"{x} requires podAntiAffinity to {y} on {_describe(anti, topo)}"
            )
    same_workload = ra.workload == rb.workload
    exclusive_a, exclusive_b = _annotation(ra, EXCLUSIVE), _annotation(rb, EXCLUSIVE)
    if same_workload and exclusive_a and exclusive_a == exclusive_b and topo.is_zone(exclusive_a):
        return PairPlacement(
            apart,
            "always",
            f"JobSet exclusive topology on {_describe(exclusive_a, topo)} puts "
            "each child Job in its own zone",
        )
    lws = _annotation(ra, LWS_EXCLUSIVE)
    same_lws = same_workload and lws and lws == _annotation(rb, LWS_EXCLUSIVE)
    if same_lws or (same_workload and _annotation(ra, LWS_SUBGROUP_EXCLUSIVE)):
        subgroup = _lws_subgroups_apart(ra, rb, topo)
        if subgroup:
            return PairPlacement(everywhere, "always", subgroup)
    if same_lws and topo.nests(lws):
        return PairPlacement(
            same,
            None,
            f"LeaderWorkerSet exclusive topology on {_describe(lws, topo)} keeps each "
            "group (leader and workers) in one domain",
        )
    if same_workload and ctx.options.volcano and ra.workload in ctx.options.volcano:
        hyper = _volcano_one_zone(ra, [*_nodes_of(a, ctx), *_nodes_of(b, ctx)], ctx.options, topo.zone_key)
        if hyper:
            return PairPlacement(same, None, hyper)
    shared = set(a.shared_claims) & set(b.shared_claims)
    if shared and (a.claim_one_zone or b.claim_one_zone):
        ns, name = min(shared)
        return PairPlacement(
            same,
            None,
            f"{ra} and {rb} share ResourceClaim {ns}/{name}: {a.claim_one_zone or b.claim_one_zone}",
        )
    group_a, group_b = _annotation(ra, KUEUE_GROUP), _annotation(rb, KUEUE_GROUP)
    if same_workload and group_a and group_a == group_b:
        required = _annotation(ra, KUEUE_REQUIRED) or _annotation(rb, KUEUE_REQUIRED)
        if required and _kueue_nests(ra, required, topo, ctx.options):
            return PairPlacement(
                same,
                None,
                f"{ra} and {rb} share Kueue pod-set group {group_a!r} with "
                f"{KUEUE_REQUIRED}: {_describe_level(ra, required, topo, ctx.options)}",
            )
        preferred = _annotation(ra, KUEUE_PREFERRED) or _annotation(rb, KUEUE_PREFERRED)
        if preferred and topo.nests(preferred) and common:
            return PairPlacement(
                everywhere,
                "possible",
                f"{ra} and {rb} share Kueue pod-set group {group_a!r} with {KUEUE_PREFERRED}: "
                "packed into one domain unless they do not fit",
            )
    if not common:
        return PairPlacement(
            everywhere,
            "always",
            f"{ra} can land only in {', '.join(sorted(za))} and {rb} only in {', '.join(sorted(zb))}",
        )
    for spread, other in ((a, b), (b, a)):
        if spread.forced_spread and other.single_zone:
            return PairPlacement(
                everywhere, "always", f"{spread.forced_spread}, while {other.role} keeps to one zone"
            )
    group = _group_spread(a, b, ctx)
    if group:
        return PairPlacement(everywhere, "always", group)
    if len(za | zb) == 1:
        return PairPlacement(everywhere, None, f"both can land only in {common[0]}")
    if _preferred_selects(ra, rb, ctx) or _preferred_selects(rb, ra, ctx):
        return PairPlacement(
            everywhere, "possible", "a preferred podAffinity pulls them together but does not force it"
        )
    flavors = _same_flavor(a, b, ctx) or (_soft_topology(ra, ctx) if same_workload else "")
    if flavors:
        return PairPlacement(everywhere, "possible", flavors)
    return PairPlacement(everywhere, "likely", f"nothing couples {ra} and {rb} to one zone")


def _nodes_of(p: RolePlacement, ctx: PairContext) -> list[Node]:
    by_name = ctx.node_index()
    return [by_name[n] for n in p.nodes if n in by_name]


def _soft_topology(role: Role, ctx: PairContext) -> str:
    domains = ctx.options.volcano.get(role.workload) if ctx.options.volcano else None
    if domains is None or domains.mode != "soft":
        return ""
    return f"{role.workload} has a soft Volcano networkTopology: it prefers one HyperNode, not requires it"


def _same_flavor(a: RolePlacement, b: RolePlacement, ctx: PairContext) -> str:
    """Two pod sets of one workload, each kept in one zone by its Kueue flavor: Kueue tries the
    flavors in the same order for both, so they share one unless quota runs out first."""
    adm_a, adm_b = ctx.options.admission(a.role), ctx.options.admission(b.role)
    if adm_a is None or adm_b is None or a.role.workload != b.role.workload:
        return ""
    if adm_a.cluster_queue != adm_b.cluster_queue or not (a.flavor_one_zone and b.flavor_one_zone):
        return ""
    return (
        f"Kueue admits {a.role} and {b.role} under one flavor each of ClusterQueue {adm_a.cluster_queue} "
        f"({', '.join(adm_a.flavor_names)}, one zone each): both take the first with quota for them, "
        "different ones when it runs short"
    )


def _lws_subgroups_apart(a: Role, b: Role, topo: Topology) -> str:
    """LWS subgroup exclusive topology on a key whose domains are zones, with more than one subgroup
    per group: the leader's subgroup and the others are in different zones."""
    key = _annotation(a, LWS_SUBGROUP_EXCLUSIVE)
    if not key or key != _annotation(b, LWS_SUBGROUP_EXCLUSIVE) or not topo.is_zone(key):
        return ""
    size = _int_annotation(a, LWS_SIZE, 1)
    subgroup = _int_annotation(a, LWS_SUBGROUP_SIZE, size)
    if subgroup >= size:
        return ""
    return (
        f"LeaderWorkerSet subgroup exclusive topology on {_describe(key, topo)}: "
        f"each group of {size} pods is "
        f"{-(-size // subgroup)} subgroups of {subgroup}, each in its own zone"
    )


def _group_spread(a: RolePlacement, b: RolePlacement, ctx: PairContext) -> str:
    """A hard spread over the zones whose selector counts exactly the pods of these two roles: when
    more of them exist than maxSkew, they cannot all share a zone — and then a pod of one is in
    another zone than a pod of the other."""
    for x, y in ((a, b), (b, a)):
        for c in x.role.template.scheduling.hard_spread:
            if not (
                ctx.topology.is_zone(c.topology_key)
                and c.selector.matches(x.role.template.label_map)
                and c.selector.matches(y.role.template.label_map)
                and x.role.workload.namespace == y.role.workload.namespace
            ):
                continue
            zones = set(x.zones) | set(y.zones)
            total = x.role.replicas + y.role.replicas
            if len(zones) >= 2 and total > c.max_skew:
                return (
                    f"{x.role} has a DoNotSchedule topology spread on "
                    f"{c.topology_key} (maxSkew {c.max_skew}) "
                    f"counting the {total} pods of both roles: they cannot share one zone"
                )
    return ""
