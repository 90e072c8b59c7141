"""kube-scheduler filters that depend on the pods already running (pure functions).

PodTopologySpread (`whenUnsatisfiable: DoNotSchedule` constraints only; ScheduleAnyway only scores):
the domains of a constraint are the values of its topology key on the eligible nodes: nodes carrying
every constraint's key, that match the pod's nodeSelector/required node affinity unless
`nodeAffinityPolicy: Ignore`, and (only with `nodeTaintsPolicy: Honor`) whose NoSchedule/NoExecute
taints the pod tolerates. Each domain counts the pods in the incoming pod's namespace that match the
constraint's labelSelector (plus `matchLabelKeys` taken from the pod's own labels), terminating pods
excluded; a null selector matches nothing and an empty one counts nothing. A node passes when, for
every constraint, it has the key and `count(its domain) + (1 if the pod matches the selector) -
global minimum <= maxSkew`, where the global minimum is 0 while there are fewer domains than
`minDomains`. A node lacking the key is UnschedulableAndUnresolvable, a skew violation Unschedulable.

InterPodAffinity: a required podAffinity term is satisfied on a node whose value of the term's
topology key is shared by a node running a pod that matches all of the pod's affinity terms; when no
such pod exists anywhere, the pod may go anywhere that has the keys if it matches all its own terms
(the first pod of a group that attracts itself), otherwise it waits (UnschedulableAndUnresolvable).
Required podAntiAffinity terms, and the required anti-affinity of the pods already running matched
against the incoming pod, exclude the nodes sharing the topology value (Unschedulable). A term's
namespaces default to its pod's namespace; `namespaceSelector` is matched against namespace labels
(every namespace carries `kubernetes.io/metadata.name`); a null labelSelector matches no pod.

Both filters judge one node against precomputed counts, as the scheduler's PreFilter/Filter do:
build `TopologySpread`/`InterPodAffinity` once per pod and call `.filter(node)` for each node;
`topology_spread_ok` and `inter_pod_affinity_ok` are one-node conveniences. Existing pods on a node
that is not in `nodes` are ignored. Malformed selectors raise `SelectorError` (a `ValueError`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from auditor.model.labels import LabelSelector, Requirement, SelectorError, parse_label_selector
from auditor.model.objects import Labels, Node, PodTemplate, freeze_labels
from auditor.placement.filters import (
    UNRESOLVABLE,
    UNSCHEDULABLE,
    FilterResult,
    node_affinity_ok,
    untolerated_taint,
)

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
TOPOLOGY_SPREAD = "PodTopologySpread"
INTER_POD_AFFINITY = "InterPodAffinity"


def namespace_label_map(
    namespace: str, namespace_labels: Mapping[str, Mapping[str, str]] | None
) -> dict[str, str]:
    """A namespace's labels, with the `kubernetes.io/metadata.name` label the API server always sets."""
    labels = dict((namespace_labels or {}).get(namespace, {}))
    labels[NAMESPACE_NAME_LABEL] = namespace
    return labels


def _with_label_keys(
    selector: LabelSelector, raw: Mapping[str, Any], labels: Mapping[str, str], at: str
) -> LabelSelector:
    """Merge matchLabelKeys (In) and mismatchLabelKeys (NotIn) with the pod's own label values."""
    extra: list[Requirement] = []
    for name, op in (("matchLabelKeys", "In"), ("mismatchLabelKeys", "NotIn")):
        keys = raw.get(name) or []
        if not isinstance(keys, list):
            raise SelectorError(f"{at}.{name}", "must be a list of label keys")
        extra.extend(Requirement(str(k), op, (labels[str(k)],)) for k in keys if str(k) in labels)
    return selector.and_(LabelSelector(tuple(extra))) if extra else selector


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A required pod (anti-)affinity term with its namespaces resolved."""

    selector: LabelSelector  # LabelSelector.nothing() for a null labelSelector
    namespaces: frozenset[str]
    namespace_selector: LabelSelector  # LabelSelector.nothing() for a null namespaceSelector
    topology_key: str

    def matches(self, namespace: str, labels: Mapping[str, str], namespace_labels: Mapping[str, str]) -> bool:
        """Whether a pod in `namespace` (whose namespace carries `namespace_labels`) is selected."""
        if namespace in self.namespaces or self.namespace_selector.matches(namespace_labels):
            return self.selector.matches(labels)
        return False


def parse_affinity_term(raw: Any, namespace: str, labels: Mapping[str, str], at: str) -> AffinityTerm:
    """One PodAffinityTerm of a pod in `namespace` carrying `labels`."""
    if not isinstance(raw, Mapping):
        raise SelectorError(at, "must be a mapping (a PodAffinityTerm)")
    if raw.get("labelSelector") is None:
        selector = LabelSelector.nothing()  # the API server merges no label keys into a null selector
    else:
        selector = _with_label_keys(
            parse_label_selector(raw.get("labelSelector"), f"{at}.labelSelector"), raw, labels, at
        )
    names = raw.get("namespaces") or []
    if not isinstance(names, list):
        raise SelectorError(f"{at}.namespaces", "must be a list of namespace names")
    ns_raw = raw.get("namespaceSelector")
    namespaces = frozenset(str(n) for n in names) if names or ns_raw is not None else frozenset({namespace})
    ns_selector = (
        LabelSelector.nothing() if ns_raw is None else parse_label_selector(ns_raw, f"{at}.namespaceSelector")
    )
    return AffinityTerm(selector, namespaces, ns_selector, str(raw.get("topologyKey") or ""))


def required_terms(
    affinity: Any, kind: str, namespace: str, labels: Mapping[str, str], at: str = "spec.affinity"
) -> tuple[AffinityTerm, ...]:
    """The required terms of `affinity[kind]` ("podAffinity" or "podAntiAffinity")."""
    block = affinity.get(kind) if isinstance(affinity, Mapping) else None
    raw = block.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(block, Mapping) else None
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise SelectorError(f"{at}.{kind}.requiredDuringSchedulingIgnoredDuringExecution", "must be a list")
    where = f"{at}.{kind}.requiredDuringSchedulingIgnoredDuringExecution"
    return tuple(parse_affinity_term(t, namespace, labels, f"{where}[{i}]") for i, t in enumerate(raw))


@dataclass(frozen=True, slots=True)
class ExistingPod:
    """A pod already bound to a node, as the pod filters see it."""

    namespace: str
    labels: Labels
    node_name: str
    anti_affinity: tuple[AffinityTerm, ...] = ()  # its required podAntiAffinity terms
    terminating: bool = False  # metadata.deletionTimestamp is set

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)


def existing_pod(obj: Mapping[str, Any]) -> ExistingPod:
    """An ExistingPod from a Pod object (metadata, spec.nodeName, spec.affinity)."""
    raw_meta, raw_spec = obj.get("metadata"), obj.get("spec")
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
    spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
    namespace = str(meta.get("namespace") or "default")
    labels = freeze_labels(meta.get("labels") if isinstance(meta.get("labels"), Mapping) else None)
    anti = required_terms(spec.get("affinity"), "podAntiAffinity", namespace, dict(labels))
    return ExistingPod(
        namespace,
        labels,
        str(spec.get("nodeName") or ""),
        anti,
        meta.get("deletionTimestamp") is not None,
    )


def _pods_by_node(existing: Iterable[ExistingPod], nodes: Sequence[Node]) -> dict[str, list[ExistingPod]]:
    by_node: dict[str, list[ExistingPod]] = {n.name: [] for n in nodes}
    for pod in existing:
        if pod.node_name in by_node:
            by_node[pod.node_name].append(pod)
    return by_node


# --- PodTopologySpread -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A DoNotSchedule topology spread constraint, defaults applied."""

    max_skew: int
    topology_key: str
    selector: LabelSelector
    min_domains: int = 1
    honor_node_affinity: bool = True  # nodeAffinityPolicy: Honor (default) / Ignore
    honor_taints: bool = False  # nodeTaintsPolicy: Ignore (default) / Honor
    # The scheduler counts no existing pod for an empty selector (labels.Everything().Empty()),
    # while the incoming pod still matches it.
    count_existing: bool = True


def _policy(raw: Mapping[str, Any], name: str, default: str, at: str) -> bool:
    value = raw.get(name) or default
    if value not in ("Honor", "Ignore"):
        raise SelectorError(f"{at}.{name}", f"must be Honor or Ignore, got {value!r}")
    return value == "Honor"


def _positive_int(raw: Any, at: str, default: int | None = None) -> int:
    if raw is None and default is not None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise SelectorError(at, f"must be an integer >= 1, got {raw!r}")
    return raw


def spread_constraints(
    template: PodTemplate, raw: Sequence[Mapping[str, Any]] | None = None
) -> tuple[SpreadConstraint, ...]:
    """The pod's DoNotSchedule constraints (from `raw`, else `spec.topologySpreadConstraints`)."""
    if raw is None:
        spec = template.spec if isinstance(template.spec, Mapping) else {}
        found = spec.get("topologySpreadConstraints")
        raw = found if isinstance(found, list) else []
    labels = template.label_map
    out: list[SpreadConstraint] = []
    for i, c in enumerate(raw):
        at = f"spec.topologySpreadConstraints[{i}]"
        if not isinstance(c, Mapping):
            raise SelectorError(at, "must be a mapping")
        if c.get("whenUnsatisfiable") != "DoNotSchedule":
            continue
        if c.get("labelSelector") is None:
            selector = LabelSelector.nothing()
        else:
            selector = _with_label_keys(
                parse_label_selector(c.get("labelSelector"), f"{at}.labelSelector"), c, labels, at
            )
        out.append(
            SpreadConstraint(
                max_skew=_positive_int(c.get("maxSkew"), f"{at}.maxSkew"),
                topology_key=str(c.get("topologyKey") or ""),
                selector=selector,
                min_domains=_positive_int(c.get("minDomains"), f"{at}.minDomains", 1),
                honor_node_affinity=_policy(c, "nodeAffinityPolicy", "Honor", at),
                honor_taints=_policy(c, "nodeTaintsPolicy", "Ignore", at),
                count_existing=not selector.is_everything(),
            )
        )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class TopologySpread:
    """The per-domain counts of one incoming pod's DoNotSchedule constraints (the scheduler's PreFilter)."""

    constraints: tuple[SpreadConstraint, ...]
    pod_labels: Mapping[str, str] = field(compare=False)
    counts: tuple[Mapping[str, int], ...] = field(compare=False)

    @staticmethod
    def build(
        template: PodTemplate,
        namespace: str,
        nodes: Sequence[Node],
        existing: Iterable[ExistingPod],
        constraints: Sequence[Mapping[str, Any]] | None = None,
    ) -> TopologySpread:
        parsed = spread_constraints(template, constraints)
        counts: list[Counter[str]] = [Counter() for _ in parsed]
        by_node = _pods_by_node(existing, nodes)
        for node in nodes:
            labels = node.label_map
            if not all(c.topology_key in labels for c in parsed):
                continue  # a node must carry every constraint's key to count for any of them
            for i, c in enumerate(parsed):
                if c.honor_node_affinity and not node_affinity_ok(template, node):
                    continue
                if c.honor_taints and untolerated_taint(template, node) is not None:
                    continue
                value = labels[c.topology_key]
                matching = 0
                if c.count_existing:
                    matching = sum(
                        1
                        for p in by_node[node.name]
                        if not p.terminating and p.namespace == namespace and c.selector.matches(p.label_map)
                    )
                counts[i][value] += matching  # the domain exists even with no matching pod
        return TopologySpread(parsed, template.label_map, tuple(counts))

    def filter(self, node: Node) -> FilterResult:
        labels = node.label_map
        for c, domains in zip(self.constraints, self.counts, strict=True):
            value = labels.get(c.topology_key)
            if value is None:
                return FilterResult(
                    node.name,
                    False,
                    TOPOLOGY_SPREAD,
                    f"node lacks the topology key {c.topology_key}",
                    UNRESOLVABLE,
                )
            minimum = 0 if len(domains) < c.min_domains else min(domains.values(), default=0)
            own = 1 if c.selector.matches(self.pod_labels) else 0
            skew = domains.get(value, 0) + own - minimum
            if skew > c.max_skew:
                return FilterResult(
                    node.name,
                    False,
                    TOPOLOGY_SPREAD,
                    f"skew {skew} > maxSkew {c.max_skew} on {c.topology_key}={value}",
                    UNSCHEDULABLE,
                )
        return FilterResult(node.name, True)


def topology_spread_filter(
    template: PodTemplate,
    namespace: str,
    node: Node,
    nodes: Sequence[Node],
    existing: Iterable[ExistingPod],
    constraints: Sequence[Mapping[str, Any]] | None = None,
) -> FilterResult:
    return TopologySpread.build(template, namespace, nodes, existing, constraints).filter(node)


def topology_spread_ok(
    template: PodTemplate,
    namespace: str,
    node: Node,
    nodes: Sequence[Node],
    existing: Iterable[ExistingPod],
    constraints: Sequence[Mapping[str, Any]] | None = None,
) -> bool:
    """Whether `node` satisfies the pod's hard spread constraints (default: its own)."""
    return topology_spread_filter(template, namespace, node, nodes, existing, constraints).ok


# --- InterPodAffinity --------------------------------------------------------------------------

Pair = tuple[str, str]  # (topology key, value)


@dataclass(frozen=True, slots=True)
class InterPodAffinity:
    """Topology-pair counts for one incoming pod (the scheduler's PreFilter), judged per node."""

    affinity: tuple[AffinityTerm, ...]
    anti_affinity: tuple[AffinityTerm, ...]
    self_match: bool  # the pod matches all of its own affinity terms (first-pod exemption)
    affinity_counts: Mapping[Pair, int] = field(compare=False)
    anti_affinity_counts: Mapping[Pair, int] = field(compare=False)
    existing_anti_affinity_counts: Mapping[Pair, int] = field(compare=False)

    @staticmethod
    def build(
        template: PodTemplate,
        namespace: str,
        nodes: Sequence[Node],
        existing: Iterable[ExistingPod],
        namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
    ) -> InterPodAffinity:
        labels = template.label_map
        affinity = required_terms(template.affinity, "podAffinity", namespace, labels)
        anti = required_terms(template.affinity, "podAntiAffinity", namespace, labels)
        own_ns = namespace_label_map(namespace, namespace_labels)
        self_match = bool(affinity) and all(t.matches(namespace, labels, own_ns) for t in affinity)
        aff: Counter[Pair] = Counter()
        anti_counts: Counter[Pair] = Counter()
        existing_anti: Counter[Pair] = Counter()
        by_node = _pods_by_node(existing, nodes)
        for node in nodes:
            node_labels = node.label_map
            for pod in by_node[node.name]:
                pod_labels = pod.label_map
                pod_ns = namespace_label_map(pod.namespace, namespace_labels)
                # An existing pod counts for affinity only if it matches all the terms at once.
                if affinity and all(t.matches(pod.namespace, pod_labels, pod_ns) for t in affinity):
                    for t in affinity:
                        if t.topology_key in node_labels:
                            aff[(t.topology_key, node_labels[t.topology_key])] += 1
                for t in anti:
                    if t.topology_key in node_labels and t.matches(pod.namespace, pod_labels, pod_ns):
                        anti_counts[(t.topology_key, node_labels[t.topology_key])] += 1
                for t in pod.anti_affinity:
                    if t.topology_key in node_labels and t.matches(namespace, labels, own_ns):
                        existing_anti[(t.topology_key, node_labels[t.topology_key])] += 1
        return InterPodAffinity(affinity, anti, self_match, aff, anti_counts, existing_anti)

    def filter(self, node: Node) -> FilterResult:
        labels = node.label_map
        pods_exist = True
        for t in self.affinity:
            if t.topology_key not in labels:
                return self._fail(node, f"node lacks the topology key {t.topology_key}", UNRESOLVABLE)
            if self.affinity_counts.get((t.topology_key, labels[t.topology_key]), 0) <= 0:
                pods_exist = False
        # The first pod of a self-attracting group may start anywhere while no matching pod exists.
        if not pods_exist and not (not self.affinity_counts and self.self_match):
            return self._fail(node, "no pod matching the required podAffinity in this topology", UNRESOLVABLE)
        if self.anti_affinity_counts:
            for t in self.anti_affinity:
                value = labels.get(t.topology_key)
                if value is not None and self.anti_affinity_counts.get((t.topology_key, value), 0) > 0:
                    return self._fail(
                        node,
                        f"a pod matching the required podAntiAffinity runs in {t.topology_key}={value}",
                        UNSCHEDULABLE,
                    )
        if self.existing_anti_affinity_counts:
            for pair in labels.items():
                if self.existing_anti_affinity_counts.get(pair, 0) > 0:
                    return self._fail(
                        node,
                        f"a running pod's podAntiAffinity excludes this pod from {pair[0]}={pair[1]}",
                        UNSCHEDULABLE,
                    )
        return FilterResult(node.name, True)

    @staticmethod
    def _fail(node: Node, reason: str, code: str) -> FilterResult:
        return FilterResult(node.name, False, INTER_POD_AFFINITY, reason, code)


def inter_pod_affinity_filter(
    template: PodTemplate,
    namespace: str,
    node: Node,
    nodes: Sequence[Node],
    existing: Iterable[ExistingPod],
    namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
) -> FilterResult:
    return InterPodAffinity.build(template, namespace, nodes, existing, namespace_labels).filter(node)


def inter_pod_affinity_ok(
    template: PodTemplate,
    namespace: str,
    node: Node,
    nodes: Sequence[Node],
    existing: Iterable[ExistingPod],
    namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
) -> bool:
    """Whether `node` satisfies the pod's required inter-pod (anti-)affinity and the running pods'."""
    return inter_pod_affinity_filter(template, namespace, node, nodes, existing, namespace_labels).ok
