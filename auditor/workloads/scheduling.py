"""Read a pod spec's scheduling fields (spec.affinity, spec.topologySpreadConstraints) into the typed
values of `auditor.model.scheduling`, once, naming the field of any problem.

What the API server rejects is an error here (a pod affinity selector or a spread constraint that
does not validate: the workload could not be created). Node affinity is the exception, following
kube-scheduler: a node selector term with a requirement apimachinery cannot parse is kept, marked
`valid=False`, and matches no node (the scheduler parses terms lazily; the upstream cases expect it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from auditor.model.labels import LabelSelector, Requirement, SelectorError, parse_label_selector
from auditor.model.scheduling import (
    DO_NOT_SCHEDULE,
    SCHEDULE_ANYWAY,
    AffinityTerm,
    NodeAffinity,
    NodeRequirement,
    NodeSelectorTerm,
    PodAffinity,
    Scheduling,
    SpreadConstraint,
    parse_int64,
)

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"

# apimachinery's label syntax: a requirement that breaks it makes its whole node term match nothing.
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _valid_label_key(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_NAME.match(name))


def _valid_label_value(value: str) -> bool:
    return len(value) <= 63 and bool(_VALUE.match(value))


def _values(expr: Mapping[str, Any]) -> list[str] | None:
    raw = expr.get("values")
    if raw is None:
        return []
    # The API server takes strings only (a YAML `true` or `null` is rejected); numbers are let through.
    if not isinstance(raw, list) or any(isinstance(v, (dict, list, bool)) or v is None for v in raw):
        return None
    return [str(v) for v in raw]


def _label_requirement(expr: Any) -> NodeRequirement | None:
    """A matchExpressions entry, or None when apimachinery's labels.NewRequirement rejects it."""
    if not isinstance(expr, Mapping):
        return None
    key, op, values = str(expr.get("key", "")), expr.get("operator"), _values(expr)
    if values is None or not _valid_label_key(key):
        return None
    if op in ("In", "NotIn"):
        ok = len(values) > 0
    elif op in ("Exists", "DoesNotExist"):
        ok = not values
    elif op in ("Gt", "Lt"):
        ok = len(values) == 1 and parse_int64(values[0]) is not None
    else:
        return None
    return (
        NodeRequirement(key, str(op), tuple(values)) if ok and all(map(_valid_label_value, values)) else None
    )


def _field_requirement(expr: Any) -> NodeRequirement | None:
    if not isinstance(expr, Mapping):
        return None
    values = _values(expr)
    if expr.get("operator") not in ("In", "NotIn") or values is None or len(values) != 1:
        return None
    return NodeRequirement(str(expr.get("key", "")), str(expr["operator"]), tuple(values))


def node_selector_term(raw: Any) -> NodeSelectorTerm:
    body: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    exprs_raw = body.get("matchExpressions") or []
    fields_raw = body.get("matchFields") or []
    exprs_raw = exprs_raw if isinstance(exprs_raw, list) else [None]
    fields_raw = fields_raw if isinstance(fields_raw, list) else [None]
    exprs = [_label_requirement(e) for e in exprs_raw]
    fields = [_field_requirement(f) for f in fields_raw]
    valid = isinstance(raw, Mapping) and None not in exprs and None not in fields
    return NodeSelectorTerm(
        tuple(e for e in exprs if e is not None), tuple(f for f in fields if f is not None), valid
    )


def node_affinity(raw: Any) -> NodeAffinity:
    if not isinstance(raw, Mapping):
        return NodeAffinity()
    required_raw = raw.get(REQUIRED)
    required: tuple[NodeSelectorTerm, ...] | None = None
    if isinstance(required_raw, Mapping):
        terms = required_raw.get("nodeSelectorTerms") or []
        required = (
            tuple(node_selector_term(t) for t in terms if isinstance(t, Mapping))
            if isinstance(terms, list)
            else ()
        )
    preferred: list[tuple[int, NodeSelectorTerm]] = []
    for item in raw.get(PREFERRED) or []:
        if isinstance(item, Mapping) and isinstance(item.get("preference"), Mapping):
            weight = item.get("weight")
            preferred.append(
                (weight if isinstance(weight, int) else 0, node_selector_term(item["preference"]))
            )
    return NodeAffinity(required, tuple(preferred))


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


def _term_selector(raw: Mapping[str, Any], labels: Mapping[str, str], at: str) -> LabelSelector:
    """A term's labelSelector with its label keys merged; a null one selects nothing (the API server
    merges no label keys into a null selector)."""
    if raw.get("labelSelector") is None:
        return LabelSelector.nothing()
    return _with_label_keys(
        parse_label_selector(raw.get("labelSelector"), f"{at}.labelSelector"), raw, labels, at
    )


def _topology_key(raw: Mapping[str, Any], at: str) -> str:
    # The API server requires a topologyKey; without one no node carries the key (the filter's view).
    key = raw.get("topologyKey") or ""
    if not isinstance(key, str):
        raise SelectorError(f"{at}.topologyKey", "must be a node label key")
    return key


def affinity_term(raw: Any, labels: Mapping[str, str], at: str) -> AffinityTerm:
    """One PodAffinityTerm of a pod carrying `labels`."""
    if not isinstance(raw, Mapping):
        raise SelectorError(at, "must be a mapping (a PodAffinityTerm)")
    selector = _term_selector(raw, labels, at)
    names = raw.get("namespaces") or []
    if not isinstance(names, list):
        raise SelectorError(f"{at}.namespaces", "must be a list of namespace names")
    ns_raw = raw.get("namespaceSelector")
    ns_selector = None if ns_raw is None else parse_label_selector(ns_raw, f"{at}.namespaceSelector")
    return AffinityTerm(
        selector,
        _topology_key(raw, at),
        frozenset(str(n) for n in names),
        ns_selector,
        own_namespace=not names and ns_raw is None,
    )


def pod_affinity(raw: Any, labels: Mapping[str, str], at: str) -> PodAffinity:
    """spec.affinity.podAffinity or podAntiAffinity (`at` is its field path)."""
    if raw is None:
        return PodAffinity()
    if not isinstance(raw, Mapping):
        raise SelectorError(at, "must be a mapping")
    required_raw = raw.get(REQUIRED)
    if required_raw is not None and not isinstance(required_raw, list):
        raise SelectorError(f"{at}.{REQUIRED}", "must be a list")
    required = tuple(
        affinity_term(t, labels, f"{at}.{REQUIRED}[{i}]") for i, t in enumerate(required_raw or [])
    )
    preferred_raw = raw.get(PREFERRED)
    if preferred_raw is not None and not isinstance(preferred_raw, list):
        raise SelectorError(f"{at}.{PREFERRED}", "must be a list")
    preferred = []
    for i, item in enumerate(preferred_raw or []):
        where = f"{at}.{PREFERRED}[{i}]"
        if not isinstance(item, Mapping):
            raise SelectorError(where, "must be a mapping (a WeightedPodAffinityTerm)")
        weight = item.get("weight")
        preferred.append(
            (
                weight if isinstance(weight, int) else 0,
                affinity_term(item.get("podAffinityTerm"), labels, f"{where}.podAffinityTerm"),
            )
        )
    return PodAffinity(required, tuple(preferred))


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


def spread_constraint(raw: Any, labels: Mapping[str, str], at: str) -> SpreadConstraint:
    if not isinstance(raw, Mapping):
        raise SelectorError(at, "must be a mapping")
    mode = raw.get("whenUnsatisfiable")
    if mode not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
        raise SelectorError(
            f"{at}.whenUnsatisfiable", f"must be DoNotSchedule or ScheduleAnyway, got {mode!r}"
        )
    key = _topology_key(raw, at)
    selector = _term_selector(raw, labels, at)
    return SpreadConstraint(
        max_skew=_positive_int(raw.get("maxSkew"), f"{at}.maxSkew"),
        topology_key=key,
        selector=selector,
        when_unsatisfiable=str(mode),
        min_domains=_positive_int(raw.get("minDomains"), f"{at}.minDomains", 1),
        honor_node_affinity=_policy(raw, "nodeAffinityPolicy", "Honor", at),
        honor_taints=_policy(raw, "nodeTaintsPolicy", "Ignore", at),
    )


def spread_constraints(raw: Any, labels: Mapping[str, str], at: str) -> tuple[SpreadConstraint, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise SelectorError(at, "must be a list")
    return tuple(spread_constraint(c, labels, f"{at}[{i}]") for i, c in enumerate(raw))


def parse_scheduling(spec: Mapping[str, Any], labels: Mapping[str, str], at: str = "spec") -> Scheduling:
    """The scheduling fields of a pod spec; `at` is the spec's field path (e.g. `spec.template.spec`)."""
    affinity = spec.get("affinity")
    if affinity is not None and not isinstance(affinity, Mapping):
        raise SelectorError(f"{at}.affinity", "must be a mapping")
    affinity = affinity or {}
    return Scheduling(
        node_affinity=node_affinity(affinity.get("nodeAffinity")),
        pod_affinity=pod_affinity(affinity.get("podAffinity"), labels, f"{at}.affinity.podAffinity"),
        pod_anti_affinity=pod_affinity(
            affinity.get("podAntiAffinity"), labels, f"{at}.affinity.podAntiAffinity"
        ),
        spread=spread_constraints(
            spec.get("topologySpreadConstraints"), labels, f"{at}.topologySpreadConstraints"
        ),
    )
