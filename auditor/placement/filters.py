"""kube-scheduler filters for one pod template against one node (pure functions).

nodeSelector (exact match) AND required nodeAffinity (terms ORed, expressions ANDed; In, NotIn
(true when the label is absent), Exists, DoesNotExist, Gt/Lt as int64; an empty term matches
nothing; matchFields on metadata.name); taints with effect NoSchedule/NoExecute need a toleration
(PreferNoSchedule does not filter); `spec.unschedulable` nodes are skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from auditor.model.objects import Node, PodTemplate

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


@dataclass(frozen=True, slots=True)
class FilterResult:
    node: str
    ok: bool
    plugin: str = ""  # NodeAffinity | TaintToleration | NodeUnschedulable | NodeName
    reason: str = ""


def _expr_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = str(expr.get("key", ""))
    op = expr.get("operator")
    values = [str(v) for v in (expr.get("values") or [])]
    value = labels.get(key)
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        if value is None or len(values) != 1:
            return False
        try:
            have, want = int(value), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def term_matches(term: Mapping[str, Any], node: Node) -> bool:
    exprs = list(term.get("matchExpressions") or [])
    fields = list(term.get("matchFields") or [])
    if not exprs and not fields:
        return False  # an empty term matches nothing
    labels = node.label_map
    if not all(_expr_matches(e, labels) for e in exprs):
        return False
    return all(_expr_matches(f, {"metadata.name": node.name}) for f in fields)


def node_affinity_ok(template: PodTemplate, node: Node) -> bool:
    labels = node.label_map
    if any(labels.get(k) != v for k, v in template.node_selector):
        return False
    affinity = template.affinity if isinstance(template.affinity, Mapping) else {}
    na = affinity.get("nodeAffinity") if isinstance(affinity.get("nodeAffinity"), Mapping) else {}
    required = na.get("requiredDuringSchedulingIgnoredDuringExecution") if na else None
    if not isinstance(required, Mapping):
        return True
    terms = required.get("nodeSelectorTerms") or []
    return any(term_matches(t, node) for t in terms if isinstance(t, Mapping))


def untolerated_taint(template: PodTemplate, node: Node) -> str | None:
    for taint in node.taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(t.tolerates(taint) for t in template.tolerations):
            return (
                f"{taint.key}={taint.value}:{taint.effect}" if taint.value else f"{taint.key}:{taint.effect}"
            )
    return None


def filter_node(template: PodTemplate, node: Node) -> FilterResult:
    if template.node_name is not None and template.node_name != node.name:
        return FilterResult(node.name, False, "NodeName", f"pod is bound to node {template.node_name}")
    if node.unschedulable and not any(t.tolerates_key(UNSCHEDULABLE_TAINT) for t in template.tolerations):
        return FilterResult(node.name, False, "NodeUnschedulable", "node is cordoned (spec.unschedulable)")
    if not node_affinity_ok(template, node):
        return FilterResult(node.name, False, "NodeAffinity", "node does not match nodeSelector/affinity")
    taint = untolerated_taint(template, node)
    if taint is not None:
        return FilterResult(node.name, False, "TaintToleration", f"untolerated taint {taint}")
    return FilterResult(node.name, True)


def feasible_nodes(template: PodTemplate, nodes: Iterable[Node]) -> list[Node]:
    return [n for n in nodes if filter_node(template, n).ok]


def feasible_zones(template: PodTemplate, nodes: Iterable[Node], zone_key: str) -> list[str]:
    return sorted({z for n in feasible_nodes(template, nodes) if (z := n.label_map.get(zone_key))})
