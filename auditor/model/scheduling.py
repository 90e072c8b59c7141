"""The scheduling fields of a pod template as typed, immutable values.

Parsed once from the manifest (`auditor/workloads/scheduling.py`) and read by every placement
question — the node filters, the filters that depend on running pods, and the group coupling
analysis — so the model that the upstream scheduler cases test is the model every audit runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from auditor.model.labels import LabelSelector
from auditor.model.values import value

DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
_INT64 = re.compile(r"^[+-]?[0-9]+$")


def parse_int64(text: str) -> int | None:
    """Go's strconv.ParseInt(text, 10, 64) (node affinity Gt/Lt): no spaces or underscores, within int64."""
    if not _INT64.match(text):
        return None
    n = int(text)
    return n if -(2**63) <= n < 2**63 else None


@dataclass(frozen=True, slots=True)
class NodeRequirement:
    """A matchExpressions (on labels) or matchFields (on fields) entry of a node selector term."""

    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    match_expressions: tuple[NodeRequirement, ...] = ()
    match_fields: tuple[NodeRequirement, ...] = ()
    # False: a requirement apimachinery rejects, so the term matches nothing (kube-scheduler's lazy parse).
    valid: bool = True

    @property
    def empty(self) -> bool:
        return not self.match_expressions and not self.match_fields


@value(frozen=True)
class NodeAffinity:
    """spec.affinity.nodeAffinity: required terms ORed (expressions ANDed), preferred ones only score.
    `required` None: no required affinity (every node passes)."""

    required: tuple[NodeSelectorTerm, ...] | None = None
    preferred: tuple[tuple[int, NodeSelectorTerm], ...] = ()  # (weight, term)

    @property
    def label_keys(self) -> frozenset[str]:
        """The node label keys the required terms read."""
        return frozenset(e.key for t in self.required or () for e in t.match_expressions)


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A PodAffinityTerm of a pod template (namespace-free: `own_namespace` resolves per pod)."""

    selector: LabelSelector  # matchLabelKeys merged; LabelSelector.nothing() for a null labelSelector
    topology_key: str
    namespaces: frozenset[str] = frozenset()
    namespace_selector: LabelSelector | None = None  # None: no namespaceSelector; empty: all namespaces
    own_namespace: bool = True  # neither namespaces nor namespaceSelector: the pod's own namespace

    def selects_namespace(
        self, owner_namespace: str, namespace: str, namespace_labels: Mapping[str, str]
    ) -> bool:
        """Whether pods in `namespace` (carrying `namespace_labels`) are in the term's scope, for a
        term of a pod in `owner_namespace`."""
        if self.own_namespace:
            return namespace == owner_namespace
        if namespace in self.namespaces:
            return True
        return self.namespace_selector is not None and self.namespace_selector.matches(namespace_labels)

    def matches(
        self,
        owner_namespace: str,
        namespace: str,
        labels: Mapping[str, str],
        namespace_labels: Mapping[str, str],
    ) -> bool:
        """Whether a pod in `namespace` with `labels` is selected by this term of a pod in
        `owner_namespace`."""
        return self.selects_namespace(owner_namespace, namespace, namespace_labels) and self.selector.matches(
            labels
        )


@value(frozen=True)
class PodAffinity:
    """The required and preferred terms of spec.affinity.podAffinity (or podAntiAffinity)."""

    required: tuple[AffinityTerm, ...] = ()
    preferred: tuple[tuple[int, AffinityTerm], ...] = ()  # (weight, term)

    @property
    def present(self) -> bool:
        return bool(self.required or self.preferred)


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """One topologySpreadConstraint, defaults applied."""

    max_skew: int
    topology_key: str
    selector: LabelSelector  # matchLabelKeys merged; LabelSelector.nothing() for a null selector
    when_unsatisfiable: str = DO_NOT_SCHEDULE
    min_domains: int = 1
    honor_node_affinity: bool = True  # nodeAffinityPolicy: Honor (default) / Ignore
    honor_taints: bool = False  # nodeTaintsPolicy: Ignore (default) / Honor

    @property
    def hard(self) -> bool:
        return self.when_unsatisfiable == DO_NOT_SCHEDULE

    @property
    def counts_existing(self) -> bool:
        """The scheduler counts no existing pod for an empty selector (labels.Everything().Empty()),
        while the incoming pod still matches it."""
        return not self.selector.is_everything()


@value(frozen=True)
class Scheduling:
    """Everything the scheduler reads from a pod template besides labels, tolerations and requests."""

    node_affinity: NodeAffinity = NodeAffinity()
    pod_affinity: PodAffinity = PodAffinity()
    pod_anti_affinity: PodAffinity = PodAffinity()
    spread: tuple[SpreadConstraint, ...] = ()

    @property
    def hard_spread(self) -> tuple[SpreadConstraint, ...]:
        return tuple(c for c in self.spread if c.hard)

    @property
    def selectors(self) -> tuple[LabelSelector, ...]:
        """Every pod label selector of the pod (affinity and anti-affinity terms, spread constraints)."""
        terms = [
            *self.pod_affinity.required,
            *(t for _, t in self.pod_affinity.preferred),
            *self.pod_anti_affinity.required,
            *(t for _, t in self.pod_anti_affinity.preferred),
        ]
        return (*(t.selector for t in terms), *(c.selector for c in self.spread))

    @property
    def affinity_kinds(self) -> frozenset[str]:
        """Which of spec.affinity's blocks the template sets (remediation must not overwrite them)."""
        kinds = set()
        if self.node_affinity.required is not None or self.node_affinity.preferred:
            kinds.add("nodeAffinity")
        if self.pod_affinity.present:
            kinds.add("podAffinity")
        if self.pod_anti_affinity.present:
            kinds.add("podAntiAffinity")
        return frozenset(kinds)


NO_SCHEDULING = Scheduling()


def namespace_label_map(
    namespace: str, namespace_labels: Mapping[str, Mapping[str, str]] | None
) -> dict[str, str]:
    """A namespace's labels, with the `kubernetes.io/metadata.name` label the API server always sets."""
    labels = dict((namespace_labels or {}).get(namespace, {}))
    labels[NAMESPACE_NAME_LABEL] = namespace
    return labels
