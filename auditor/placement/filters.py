"""kube-scheduler filters for one pod template against one node (pure functions).

In the scheduler's order: NodeName, NodeUnschedulable (`spec.unschedulable` unless the pod tolerates
`node.kubernetes.io/unschedulable:NoSchedule`), NodeAffinity (nodeSelector exact match AND required
nodeAffinity: terms ORed, expressions ANDed; In, NotIn (true when the label is absent), Exists,
DoesNotExist, Gt/Lt as int64; an empty term matches nothing, and so does a term with an invalid
requirement; matchFields on metadata.name), TaintToleration (NoSchedule/NoExecute taints need a
toleration, PreferNoSchedule does not filter), NodeResourcesFit (requests against allocatable, see
`resources`), VolumeZone (a claim confined to zones keeps the pod out of the others).

Filters that need the pods already running (topology spread, inter-pod affinity) are in `podfilters`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from auditor.model.objects import REGION_KEY, ZONE_KEY, Node, PodTemplate, Taint
from auditor.placement.resources import insufficient_resources

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
BETA_ZONE_KEY = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION_KEY = "failure-domain.beta.kubernetes.io/region"
TOPOLOGY_KEYS = (BETA_ZONE_KEY, ZONE_KEY, BETA_REGION_KEY, REGION_KEY)

# Filter status codes, as kube-scheduler names them.
UNSCHEDULABLE = "Unschedulable"
UNRESOLVABLE = "UnschedulableAndUnresolvable"


@dataclass(frozen=True, slots=True)
class FilterResult:
    node: str
    ok: bool
    plugin: str = ""  # NodeName | NodeUnschedulable | NodeAffinity | TaintToleration | NodeResourcesFit | ...
    reason: str = ""
    code: str = ""  # "" when ok, else Unschedulable | UnschedulableAndUnresolvable


# apimachinery's label syntax: a requirement that breaks it makes its whole term match nothing.
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_INT64 = re.compile(r"^[+-]?[0-9]+$")


def _valid_label_key(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_NAME.match(name))


def _valid_label_value(value: str) -> bool:
    return len(value) <= 63 and bool(_VALUE.match(value))


def parse_int64(text: str) -> int | None:
    """Go's strconv.ParseInt(text, 10, 64): no spaces or underscores, within int64."""
    if not _INT64.match(text):
        return None
    n = int(text)
    return n if -(2**63) <= n < 2**63 else None


def _values(expr: Mapping[str, Any]) -> list[str] | None:
    raw = expr.get("values")
    if raw is None:
        return []
    # The API server takes strings only (a YAML `true` or `null` is rejected); numbers are let through.
    if not isinstance(raw, list) or any(isinstance(v, (dict, list, bool)) or v is None for v in raw):
        return None
    return [str(v) for v in raw]


def _valid_expression(expr: Any) -> bool:
    """Whether a matchExpressions entry is a requirement apimachinery accepts (labels.NewRequirement)."""
    if not isinstance(expr, Mapping):
        return False
    key, op, values = str(expr.get("key", "")), expr.get("operator"), _values(expr)
    if values is None or not _valid_label_key(key):
        return False
    if op in ("In", "NotIn"):
        ok = len(values) > 0
    elif op in ("Exists", "DoesNotExist"):
        ok = not values
    elif op in ("Gt", "Lt"):
        ok = len(values) == 1 and parse_int64(values[0]) is not None
    else:
        return False
    return ok and all(_valid_label_value(v) for v in values)


def _valid_field(expr: Any) -> bool:
    if not isinstance(expr, Mapping):
        return False
    values = _values(expr)
    return expr.get("operator") in ("In", "NotIn") and values is not None and len(values) == 1


def _expr_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = str(expr.get("key", ""))
    op = expr.get("operator")
    values = _values(expr) or []
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
        have, want = parse_int64(value), parse_int64(values[0])
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _field_matches(expr: Mapping[str, Any], node: Node) -> bool:
    # The only node field a selector can name is metadata.name; any other field reads as "".
    fields = {"metadata.name": node.name}
    have = fields.get(str(expr.get("key", "")), "")
    want = (_values(expr) or [""])[0]
    return have == want if expr.get("operator") == "In" else have != want


def term_matches(term: Mapping[str, Any], node: Node) -> bool:
    exprs = list(term.get("matchExpressions") or [])
    fields = list(term.get("matchFields") or [])
    if not exprs and not fields:
        return False  # an empty term matches nothing
    if not all(_valid_expression(e) for e in exprs) or not all(_valid_field(f) for f in fields):
        return False  # a term that does not parse matches nothing (the scheduler's lazy parse errors)
    labels = node.label_map
    if not all(_expr_matches(e, labels) for e in exprs):
        return False
    return all(_field_matches(f, node) for f in fields)


def node_label_keys(template: PodTemplate) -> set[str]:
    """The node label keys the template's nodeSelector and required node affinity read (the only
    labels, besides the topology ones, any filter looks at)."""
    keys = {k for k, _ in template.node_selector}
    affinity = template.affinity if isinstance(template.affinity, Mapping) else {}
    na = affinity.get("nodeAffinity")
    required = na.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(na, Mapping) else None
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    for term in terms if isinstance(terms, list) else []:
        exprs = term.get("matchExpressions") if isinstance(term, Mapping) else None
        for expr in exprs if isinstance(exprs, list) else []:
            if isinstance(expr, Mapping):
                keys.add(str(expr.get("key", "")))
    return keys


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


def claim_names(template: PodTemplate) -> list[str]:
    """The PersistentVolumeClaims the pod mounts (spec.volumes[].persistentVolumeClaim.claimName)."""
    spec = template.spec if isinstance(template.spec, Mapping) else {}
    volumes = spec.get("volumes")
    out: list[str] = []
    for v in volumes if isinstance(volumes, list) else []:
        pvc = v.get("persistentVolumeClaim") if isinstance(v, Mapping) else None
        if isinstance(pvc, Mapping) and pvc.get("claimName"):
            out.append(str(pvc["claimName"]))
    return out


def volume_zone_conflict(
    template: PodTemplate, node: Node, volume_zones: Mapping[str, frozenset[str]]
) -> str | None:
    """The first mounted claim whose allowed zones exclude the node's zone, or None.

    `volume_zones` maps a claim name to the zones its bound PersistentVolume (or its StorageClass's
    allowedTopologies) allows; claims not in it are unconstrained. The node's zone is its
    `topology.kubernetes.io/zone` label, else the legacy `failure-domain.beta.kubernetes.io/zone` one.
    As in kube-scheduler, a node with no zone/region label at all passes (a single-zone cluster).
    """
    labels = node.label_map
    if not any(k in labels for k in TOPOLOGY_KEYS):
        return None
    zone = labels.get(ZONE_KEY, labels.get(BETA_ZONE_KEY))
    for claim in claim_names(template):
        allowed = volume_zones.get(claim)
        if allowed is not None and zone not in allowed:
            return claim
    return None


def filter_node(
    template: PodTemplate,
    node: Node,
    volume_zones: Mapping[str, frozenset[str]] | None = None,
    existing: Iterable[PodTemplate] = (),
) -> FilterResult:
    """The first filter that rejects `node` for the pod, or an ok result.

    `existing` are the pods already bound to this node (their requests use its resources).
    """
    if template.node_name is not None and template.node_name != node.name:
        return FilterResult(
            node.name, False, "NodeName", f"pod is bound to node {template.node_name}", UNRESOLVABLE
        )
    # Equal with an empty value tolerates the taint too, so compare with the taint itself.
    cordon = Taint(UNSCHEDULABLE_TAINT, "", "NoSchedule")
    if node.unschedulable and not any(t.tolerates(cordon) for t in template.tolerations):
        return FilterResult(
            node.name, False, "NodeUnschedulable", "node is cordoned (spec.unschedulable)", UNRESOLVABLE
        )
    if not node_affinity_ok(template, node):
        return FilterResult(
            node.name, False, "NodeAffinity", "node does not match nodeSelector/affinity", UNRESOLVABLE
        )
    taint = untolerated_taint(template, node)
    if taint is not None:
        return FilterResult(node.name, False, "TaintToleration", f"untolerated taint {taint}", UNRESOLVABLE)
    try:
        missing = insufficient_resources(template, node, existing)
    except ValueError as e:
        # The API server would reject the object; no placement can exist, so say why.
        return FilterResult(node.name, False, "NodeResourcesFit", f"invalid quantity: {e}", UNRESOLVABLE)
    if missing:
        code = UNRESOLVABLE if any(m.unresolvable for m in missing) else UNSCHEDULABLE
        return FilterResult(node.name, False, "NodeResourcesFit", ", ".join(m.reason for m in missing), code)
    if volume_zones:
        claim = volume_zone_conflict(template, node, volume_zones)
        if claim is not None:
            return FilterResult(
                node.name,
                False,
                "VolumeZone",
                f"volume of claim {claim} is in zone(s) {', '.join(sorted(volume_zones[claim]))}",
                UNRESOLVABLE,
            )
    return FilterResult(node.name, True)


def feasible_nodes(
    template: PodTemplate,
    nodes: Iterable[Node],
    volume_zones: Mapping[str, frozenset[str]] | None = None,
) -> list[Node]:
    return [n for n in nodes if filter_node(template, n, volume_zones).ok]


def feasible_zones(
    template: PodTemplate,
    nodes: Iterable[Node],
    zone_key: str,
    volume_zones: Mapping[str, frozenset[str]] | None = None,
) -> list[str]:
    feasible = feasible_nodes(template, nodes, volume_zones)
    return sorted({z for n in feasible if (z := n.label_map.get(zone_key))})
