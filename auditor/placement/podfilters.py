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
build `TopologySpread`/`InterPodAffinity` once per pod and call `.filter(node)` for each node.
Existing pods on a node that is not in `nodes` are ignored. Malformed selectors raise
`SelectorError` (a `ValueError`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from auditor.model.objects import Labels, Node, PodTemplate, freeze_labels
from auditor.model.scheduling import AffinityTerm, SpreadConstraint, namespace_label_map
from auditor.placement.filters import (
    UNRESOLVABLE,
    UNSCHEDULABLE,
    FilterResult,
    node_affinity_ok,
    untolerated_taint,
)
from auditor.workloads.scheduling import pod_affinity

TOPOLOGY_SPREAD = "PodTopologySpread"
INTER_POD_AFFINITY = "InterPodAffinity"


@dataclass(frozen=True, slots=True)
class ExistingPod:
    """A pod already bound to a node, as the pod filters see it."""

    namespace: str
    labels: Labels
    node_name: str
    anti_affinity: tuple[AffinityTerm, ...] = ()  # its required podAntiAffinity terms (of its namespace)
    terminating: bool = False  # metadata.deletionTimestamp is set
    # Its spec, when known: what it requests of its node (NodeResourcesFit counts it).
    template: PodTemplate | None = field(default=None, compare=False)

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
    raw_affinity = spec.get("affinity")
    anti = pod_affinity(
        raw_affinity.get("podAntiAffinity") if isinstance(raw_affinity, Mapping) else None,
        dict(labels),
        "spec.affinity.podAntiAffinity",
    ).required
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
        constraints: Sequence[SpreadConstraint] | None = None,
    ) -> TopologySpread:
        """Counts for `constraints` (default: the template's DoNotSchedule constraints)."""
        parsed = tuple(template.scheduling.hard_spread if constraints is None else constraints)
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
                if c.counts_existing:
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
                return FilterResult.reject(
                    node, TOPOLOGY_SPREAD, f"node lacks the topology key {c.topology_key}", UNRESOLVABLE
                )
            minimum = 0 if len(domains) < c.min_domains else min(domains.values(), default=0)
            own = 1 if c.selector.matches(self.pod_labels) else 0
            skew = domains.get(value, 0) + own - minimum
            if skew > c.max_skew:
                reason = f"skew {skew} > maxSkew {c.max_skew} on {c.topology_key}={value}"
                return FilterResult.reject(node, TOPOLOGY_SPREAD, reason, UNSCHEDULABLE)
        return FilterResult(node.name, True)


# --- InterPodAffinity --------------------------------------------------------------------------

Pair = tuple[str, str]  # (topology key, value)


def missing_topology_key(affinity: Sequence[AffinityTerm], node: Node) -> FilterResult | None:
    """InterPodAffinity's rejection of a node lacking the topology key of a required term, or None."""
    for t in affinity:
        if t.topology_key not in node.label_map:
            return FilterResult.reject(
                node, INTER_POD_AFFINITY, f"node lacks the topology key {t.topology_key}", UNRESOLVABLE
            )
    return None


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
        affinity = template.scheduling.pod_affinity.required
        anti = template.scheduling.pod_anti_affinity.required
        own_ns = namespace_label_map(namespace, namespace_labels)
        self_match = bool(affinity) and all(t.matches(namespace, namespace, labels, own_ns) for t in affinity)
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
                if affinity and all(
                    t.matches(namespace, pod.namespace, pod_labels, pod_ns) for t in affinity
                ):
                    for t in affinity:
                        if t.topology_key in node_labels:
                            aff[(t.topology_key, node_labels[t.topology_key])] += 1
                for t in anti:
                    if t.topology_key in node_labels and t.matches(
                        namespace, pod.namespace, pod_labels, pod_ns
                    ):
                        anti_counts[(t.topology_key, node_labels[t.topology_key])] += 1
                for t in pod.anti_affinity:
                    if t.topology_key in node_labels and t.matches(pod.namespace, namespace, labels, own_ns):
                        existing_anti[(t.topology_key, node_labels[t.topology_key])] += 1
        return InterPodAffinity(affinity, anti, self_match, aff, anti_counts, existing_anti)

    def filter(self, node: Node) -> FilterResult:
        missing = missing_topology_key(self.affinity, node)
        if missing is not None:
            return missing
        labels = node.label_map
        pods_exist = all(
            self.affinity_counts.get((t.topology_key, labels[t.topology_key]), 0) > 0 for t in self.affinity
        )
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
        return FilterResult.reject(node, INTER_POD_AFFINITY, reason, code)
