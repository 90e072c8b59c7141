"""Kueue: where a workload admitted through a queue can land (pure).

A workload labelled `kueue.x-k8s.io/queue-name: <q>` (on the workload or, for plain pods and
Deployments, the pod template; a namespace with a LocalQueue named `default` gives it to workloads
without the label, as Kueue's LocalQueueDefaulting does) goes LocalQueue → ClusterQueue →
ResourceFlavors. Kueue admits each pod set under one flavor per resource group whose covered
resources the pod set requests, tried in the ClusterQueue's order, and injects the flavor's
`nodeLabels` into the pods' nodeSelector and its `tolerations` into theirs. A flavor whose
`nodeTaints` the pod set (with the flavor's tolerations) does not tolerate is never chosen.

So a pod set lands where the node labels of *one* of its admissible flavor combinations hold:
its template's required node affinity becomes the OR over those combinations (each ANDed with
the terms it had), its tolerations gain the flavors'. With per-zone flavors, each pod set keeps to
one zone (`one_zone`), but two pod sets of a workload may be admitted under different flavors when
the first has no quota left for both: a split between them is `possible`.

Topology-Aware Scheduling: a flavor's `topologyName` names a Topology whose `levels` (highest
first) say which node labels nest: a `podset-required-topology` (or a shared `podset-group-name`)
at the zone level or below keeps the pod set (or the group) in one zone, even where the nodes
alone do not show it. `podset-preferred-topology` and `podset-slice-required-topology` (each slice
in one domain, the pod set over several) leave a split `possible`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import product
from typing import Any

from auditor.model.objects import (
    Labels,
    Node,
    PodTemplate,
    Role,
    Taint,
    Toleration,
    Workload,
    WorkloadRef,
    freeze_labels,
)
from auditor.model.scheduling import NodeAffinity, NodeRequirement, NodeSelectorTerm
from auditor.model.source import SourceRef
from auditor.placement.capacity import parse_taints
from auditor.reachability import specs
from auditor.reachability.specs import PolicyError
from auditor.workloads.podspec import parse_tolerations

GROUP = "kueue.x-k8s.io"
VERSIONS = ("kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2")
TOPOLOGY_VERSIONS = ("kueue.x-k8s.io/v1alpha1", "kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2")
KINDS = ("LocalQueue", "ClusterQueue", "ResourceFlavor", "Topology")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
DEFAULT_QUEUE = "default"
SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
MAX_COMBINATIONS = 64


KueueError = PolicyError
"""The error of an object of this module's kinds that cannot be read (`field`: the dotted path
in it): mypyc's compiled SelectorError cannot be subclassed outside the compiled modules."""


@dataclass(frozen=True, slots=True)
class Flavor:
    name: str
    node_labels: Labels = ()
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    topology: str = ""
    source: SourceRef = SourceRef("")


@dataclass(frozen=True, slots=True)
class ClusterQueue:
    name: str
    # Per resource group: the resources it covers, and its flavors in order.
    groups: tuple[tuple[frozenset[str], tuple[str, ...]], ...]
    source: SourceRef = SourceRef("")


@dataclass
class Queues:
    """The Kueue objects of an inventory."""

    local: dict[tuple[str, str], str] = field(default_factory=dict)  # (namespace, name) → ClusterQueue
    cluster: dict[str, ClusterQueue] = field(default_factory=dict)
    flavors: dict[str, Flavor] = field(default_factory=dict)
    topologies: dict[str, tuple[str, ...]] = field(default_factory=dict)  # name → level node labels

    def __bool__(self) -> bool:
        return bool(self.local or self.cluster)


@dataclass(frozen=True, slots=True)
class Admission:
    """How Kueue admits one pod set: through which queues, under which flavor combinations."""

    local_queue: str
    cluster_queue: str
    combinations: tuple[tuple[Flavor, ...], ...]  # admissible, in the order Kueue tries them
    # Read for every note and coupling of thousands of pod sets sharing a few admissions.
    flavor_names: tuple[str, ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        names = tuple("+".join(f.name for f in c) for c in self.combinations)
        object.__setattr__(self, "flavor_names", names)

    def topologies(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f.topology for c in self.combinations for f in c if f.topology))


# --- reading ---------------------------------------------------------------------------------------


def _name(obj: Any, at: str) -> str:
    if not isinstance(obj, str) or not obj:
        raise KueueError(at, "is required and must be a string")
    return obj


def read(kind: str, obj: Mapping[str, Any], namespace: str, source: SourceRef, into: Queues) -> None:
    """Add one Kueue object to `into` (KueueError naming the field when it cannot be read)."""
    name = str(specs.mapping(obj.get("metadata"), "metadata").get("name"))  # the loader requires it
    spec = specs.mapping(obj.get("spec"), "spec")
    if kind == "LocalQueue":
        into.local[(namespace, name)] = _name(spec.get("clusterQueue"), "spec.clusterQueue")
    elif kind == "ClusterQueue":
        groups = []
        for i, g in enumerate(specs.seq(spec.get("resourceGroups"), "spec.resourceGroups")):
            at = f"spec.resourceGroups[{i}]"
            body = specs.mapping(g, at)
            covered = frozenset(
                str(r) for r in specs.seq(body.get("coveredResources"), f"{at}.coveredResources")
            )
            flavors = tuple(
                _name(specs.mapping(f, f"{at}.flavors[{j}]").get("name"), f"{at}.flavors[{j}].name")
                for j, f in enumerate(specs.seq(body.get("flavors"), f"{at}.flavors"))
            )
            groups.append((covered, flavors))
        into.cluster[name] = ClusterQueue(name, tuple(groups), source)
    elif kind == "ResourceFlavor":
        labels = specs.mapping(spec.get("nodeLabels"), "spec.nodeLabels")
        into.flavors[name] = Flavor(
            name,
            freeze_labels(labels),
            parse_taints(spec.get("nodeTaints"), "spec.nodeTaints"),
            tuple(parse_tolerations(spec.get("tolerations"), "spec.tolerations")),
            str(spec.get("topologyName") or ""),
            source,
        )
    elif kind == "Topology":
        levels = []
        for i, level in enumerate(specs.seq(spec.get("levels"), "spec.levels")):
            levels.append(
                _name(
                    specs.mapping(level, f"spec.levels[{i}]").get("nodeLabel"), f"spec.levels[{i}].nodeLabel"
                )
            )
        into.topologies[name] = tuple(levels)


# --- admission -------------------------------------------------------------------------------------


def queue_of(workload: Workload, role: Role) -> str:
    return (
        dict(workload.labels).get(QUEUE_LABEL)
        or role.template.label_map.get(QUEUE_LABEL)
        or (workload.annotations.get(QUEUE_LABEL) or "")
    )


def _requested(role: Role) -> set[str]:
    names = {name for name, amount in role.template.pod_requests.amounts if amount > 0}
    for container in role.template.requests:
        names.update(k for k, _ in container)
    return names


def _tolerated(taints: Iterable[Taint], tolerations: Sequence[Toleration]) -> bool:
    return all(
        any(t.tolerates(taint) for t in tolerations)
        for taint in taints
        if taint.effect in ("NoSchedule", "NoExecute")
    )


def _selects_flavor(flavor: Flavor, role: Role, keys: frozenset[str]) -> bool:
    """Kueue's flavor selector: the pod set's nodeSelector and required node affinity, restricted
    to the label keys the ClusterQueue's flavors define, must hold on the flavor's nodeLabels."""
    from auditor.placement.filters import term_matches

    labels = dict(flavor.node_labels)
    t = role.template
    if any(labels.get(k) != v for k, v in t.node_selector if k in keys):
        return False
    required = t.scheduling.node_affinity.required
    if required is None:
        return True
    probe = Node(f"flavor/{flavor.name}", flavor.node_labels)
    for term in required:
        kept = tuple(e for e in term.match_expressions if e.key in keys)
        if not kept or term_matches(replace(term, match_expressions=kept, match_fields=()), probe):
            return True
    return False


_Found = tuple[Admission | None, str]


def admission(
    workload: Workload, role: Role, queues: Queues, memo: dict[tuple[object, ...], _Found] | None = None
) -> _Found:
    """How Kueue admits the role's pod set (None: not through Kueue, or not resolvable), and a
    note when its queue names something the inventory does not hold. `memo`: answers kept by
    queue and by what of the pod template the answer reads (thousands of pod sets, a few
    templates)."""
    ns = workload.ref.namespace
    queue = queue_of(workload, role)
    if not queue:
        if (ns, DEFAULT_QUEUE) not in queues.local:
            return None, ""
        queue = DEFAULT_QUEUE
    wanted = frozenset(_requested(role))
    if memo is None:
        return _admission(ns, queue, role, queues, wanted)
    t = role.template
    key = (ns, queue, t.node_selector, t.scheduling.node_affinity.required, t.tolerations, wanted)
    found = memo.get(key)
    if found is None:
        found = memo[key] = _admission(ns, queue, role, queues, wanted)
    return found


def _admission(ns: str, queue: str, role: Role, queues: Queues, wanted: frozenset[str]) -> _Found:
    cq_name = queues.local.get((ns, queue))
    if cq_name is None:
        return None, f"LocalQueue {ns}/{queue}"
    cq = queues.cluster.get(cq_name)
    if cq is None:
        return None, f"ClusterQueue {cq_name} (of LocalQueue {ns}/{queue})"
    missing = [n for _, names in cq.groups for n in names if n not in queues.flavors]
    if missing:
        return None, f"ResourceFlavor {missing[0]} (of ClusterQueue {cq_name})"
    keys = frozenset(k for _, names in cq.groups for n in names for k, _ in queues.flavors[n].node_labels)
    per_group: list[list[Flavor]] = []
    for covered, names in cq.groups:
        if not (covered & wanted):
            continue
        flavors = []
        for n in names:
            f = queues.flavors[n]
            tolerated = _tolerated(f.node_taints, (*role.template.tolerations, *f.tolerations))
            if tolerated and _selects_flavor(f, role, keys):
                flavors.append(f)
        per_group.append(flavors)
    if not per_group:
        return Admission(queue, cq_name, ((),)), ""  # requests nothing the queue covers: no flavor
    combos = []
    for combo in product(*per_group):
        labels: dict[str, str] = {}
        if all(labels.setdefault(k, v) == v for f in combo for k, v in f.node_labels):
            combos.append(tuple(combo))
        if len(combos) >= MAX_COMBINATIONS:
            break
    return Admission(queue, cq_name, tuple(combos)), ""


_Admitted = dict[tuple[object, ...], PodTemplate | None]


def admitted_role(role: Role, adm: Admission, memo: _Admitted | None = None) -> Role:
    """The role as Kueue admits it: its pods land where one flavor combination's node labels hold,
    and carry the flavors' tolerations. `memo`: admitted templates by admission and template."""
    if memo is None:
        template = _admitted_template(role.template, adm)
    else:
        t = role.template
        key = (id(adm), t.node_selector, t.tolerations, t.scheduling.node_affinity)
        if key in memo:
            template = memo[key]
            if template is not None:  # the same fields admitted before, on another template
                affinity = template.scheduling.node_affinity
                template = replace(
                    t,
                    node_selector=template.node_selector,
                    tolerations=template.tolerations,
                    scheduling=t.scheduling
                    if affinity == t.scheduling.node_affinity
                    else replace(t.scheduling, node_affinity=affinity),
                )
        else:
            template = memo[key] = _admitted_template(t, adm)
    return role if template is None else replace(role, template=template)


def _admitted_template(t: PodTemplate, adm: Admission) -> PodTemplate | None:
    """The template as admitted under `adm`, or None when admission changes nothing."""
    combos = list(adm.combinations)
    if combos == [()]:
        return None
    tolerations = list(t.tolerations)
    for combo in combos:
        for f in combo:
            tolerations.extend(x for x in f.tolerations if x not in tolerations)
    if len(combos) == 1:
        selector = dict(t.node_selector)
        selector.update(kv for f in combos[0] for kv in f.node_labels)
        if freeze_labels(selector) == freeze_labels(dict(t.node_selector)) and len(tolerations) == len(
            t.tolerations
        ):
            return None  # a flavor that adds nothing (the documentation's `default-flavor`)
        return replace(t, node_selector=freeze_labels(selector), tolerations=tuple(tolerations))
    required = t.scheduling.node_affinity.required
    preferred = t.scheduling.node_affinity.preferred
    if not combos:
        affinity = NodeAffinity((), preferred)  # no flavor admits it: no node either
    elif required is None and any(not any(f.node_labels for f in c) for c in combos):
        affinity = t.scheduling.node_affinity  # a flavor without node labels: any node
    else:
        base: tuple[NodeSelectorTerm, ...] = required if required is not None else (NodeSelectorTerm(),)
        terms = []
        for combo in combos:
            extra = tuple(NodeRequirement(k, "In", (v,)) for f in combo for k, v in f.node_labels)
            for term in base:
                terms.append(replace(term, match_expressions=term.match_expressions + extra))
        affinity = NodeAffinity(tuple(terms), preferred)
    scheduling = replace(t.scheduling, node_affinity=affinity)
    return replace(t, scheduling=scheduling, tolerations=tuple(tolerations))


def apply(
    workloads: Sequence[Workload], queues: Queues
) -> tuple[list[Workload], dict[tuple[WorkloadRef, str], Admission], list[tuple[str, str]]]:
    """The workloads with their Kueue-managed roles as admitted, each such role's admission by
    (workload, role name), and notes by the workload's file: how Kueue admits it, or what its
    queue names that the inventory lacks (one note per workload: an incremental audit keeps
    them with the workload's unit)."""
    if not queues:
        return list(workloads), {}, []
    out: list[Workload] = []
    admissions: dict[tuple[WorkloadRef, str], Admission] = {}
    notes: list[tuple[str, str]] = []
    found: dict[tuple[object, ...], _Found] = {}
    made: _Admitted = {}
    for w in workloads:
        roles = []
        changed = False
        lacking: dict[str, list[str]] = {}
        admitted: list[str] = []
        for r in w.roles:
            adm, missing = admission(w, r, queues, found)
            if missing:
                lacking.setdefault(missing, []).append(r.label)
            if adm is None:
                roles.append(r)
                continue
            admissions[(w.ref, r.name)] = adm
            new = admitted_role(r, adm, made)
            changed = changed or new is not r
            roles.append(new)
            if not adm.combinations:
                notes.append(
                    (
                        w.ref.source.file,
                        f"{r}: no ResourceFlavor of ClusterQueue {adm.cluster_queue} admits it (their "
                        "nodeTaints are not tolerated, or their nodeLabels contradict its node selection): "
                        "Kueue never admits it",
                    )
                )
            elif new is not r:
                admitted.append(f"{r.label} under {' or '.join(adm.flavor_names)}")
        file = w.ref.source.file
        for missing, names in lacking.items():
            notes.append(
                (
                    file,
                    f"{w.ref}: {missing} is not among the objects read: Kueue's flavors are not "
                    f"applied to {', '.join(names)}",
                )
            )
        if admitted:
            adm0 = admissions[(w.ref, next(r.name for r in w.roles if (w.ref, r.name) in admissions))]
            notes.append(
                (
                    file,
                    f"{w.ref}: admitted by Kueue through LocalQueue {w.ref.namespace}/{adm0.local_queue} "
                    f"(ClusterQueue {adm0.cluster_queue}): {'; '.join(admitted)}, whose nodeLabels join "
                    "its nodeSelector",
                )
            )
        out.append(replace(w, roles=tuple(roles)) if changed else w)
    return out, admissions, notes


def level_nests(
    adm: Admission | None, key: str, zone_key: str, topologies: Mapping[str, Sequence[str]]
) -> bool:
    """Whether the Topology of the role's flavors puts `key` at the zone level or below it."""
    if adm is None:
        return False
    found = False
    for name in adm.topologies():
        levels = list(topologies.get(name, ()))
        if key not in levels or zone_key not in levels or levels.index(key) < levels.index(zone_key):
            return False
        found = True
    return found
