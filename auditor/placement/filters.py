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

from collections.abc import Iterable, Mapping

from auditor.model.objects import REGION_KEY, ZONE_KEY, Node, PodTemplate, Taint
from auditor.model.scheduling import NodeRequirement, NodeSelectorTerm, parse_int64
from auditor.model.values import value
from auditor.placement.capacity import range_matches
from auditor.placement.resources import insufficient_resources

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
BETA_ZONE_KEY = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION_KEY = "failure-domain.beta.kubernetes.io/region"
TOPOLOGY_KEYS = (BETA_ZONE_KEY, ZONE_KEY, BETA_REGION_KEY, REGION_KEY)

# Filter status codes, as kube-scheduler names them.
UNSCHEDULABLE = "Unschedulable"
UNRESOLVABLE = "UnschedulableAndUnresolvable"


@value(frozen=True)
class FilterResult:
    node: str
    ok: bool
    plugin: str = ""  # NodeName | NodeUnschedulable | NodeAffinity | TaintToleration | NodeResourcesFit | ...
    reason: str = ""
    code: str = ""  # "" when ok, else Unschedulable | UnschedulableAndUnresolvable

    @classmethod
    def reject(cls, node: Node, plugin: str, reason: str, code: str) -> FilterResult:
        return cls(node.name, False, plugin, reason, code)


def _expr_matches(expr: NodeRequirement, labels: Mapping[str, str]) -> bool:
    op, values = expr.operator, expr.values
    value = labels.get(expr.key)
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


def _field_matches(expr: NodeRequirement, node: Node) -> bool:
    # The only node field a selector can name is metadata.name; any other field reads as "".
    have = node.name if expr.key == "metadata.name" else ""
    want = expr.values[0] if expr.values else ""
    return have == want if expr.operator == "In" else have != want


def _to_be_made_matches(expr: NodeRequirement, node: Node) -> bool:
    """A requirement on a node a provisioner would make: compatible with the values it can pick
    for a key it leaves open (placement/capacity.py), else decided by its fixed labels."""
    found = range_matches(expr, node)
    return _expr_matches(expr, node.label_map) if found is None else found


def term_matches(term: NodeSelectorTerm, node: Node) -> bool:
    if term.empty or not term.valid:
        return False  # an empty term matches nothing; so does one that does not parse (lazy parse errors)
    if node.ranges or node.open_keys:
        if not all(_to_be_made_matches(e, node) for e in term.match_expressions):
            return False
    else:
        labels = node.label_map
        if not all(_expr_matches(e, labels) for e in term.match_expressions):
            return False
    return all(_field_matches(f, node) for f in term.match_fields)


def node_label_keys(template: PodTemplate) -> set[str]:
    """The node label keys the template's nodeSelector and required node affinity read (the only
    labels, besides the topology ones, any node filter looks at)."""
    return {k for k, _ in template.node_selector} | template.scheduling.node_affinity.label_keys


def node_affinity_ok(template: PodTemplate, node: Node) -> bool:
    labels = node.label_map
    if node.ranges or node.open_keys:
        for k, v in template.node_selector:
            if not _to_be_made_matches(NodeRequirement(k, "In", (v,)), node):
                return False
    elif any(labels.get(k) != v for k, v in template.node_selector):
        return False
    required = template.scheduling.node_affinity.required
    if required is None:
        return True
    return any(term_matches(t, node) for t in required)


def untolerated_taint(template: PodTemplate, node: Node) -> str | None:
    for taint in node.taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(t.tolerates(taint) for t in template.tolerations):
            return (
                f"{taint.key}={taint.value}:{taint.effect}" if taint.value else f"{taint.key}:{taint.effect}"
            )
    return None


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
    for claim in (c.name for c in template.claims):  # spec.volumes[].persistentVolumeClaim
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
        return FilterResult.reject(
            node, "NodeName", f"pod is bound to node {template.node_name}", UNRESOLVABLE
        )
    # Equal with an empty value tolerates the taint too, so compare with the taint itself.
    cordon = Taint(UNSCHEDULABLE_TAINT, "", "NoSchedule")
    if node.unschedulable and not any(t.tolerates(cordon) for t in template.tolerations):
        return FilterResult.reject(
            node, "NodeUnschedulable", "node is cordoned (spec.unschedulable)", UNRESOLVABLE
        )
    if not node_affinity_ok(template, node):
        return FilterResult.reject(
            node, "NodeAffinity", "node does not match nodeSelector/affinity", UNRESOLVABLE
        )
    taint = untolerated_taint(template, node)
    if taint is not None:
        return FilterResult.reject(node, "TaintToleration", f"untolerated taint {taint}", UNRESOLVABLE)
    try:
        missing = insufficient_resources(template, node, existing)
    except ValueError as e:
        # The API server would reject the object; no placement can exist, so say why.
        return FilterResult.reject(node, "NodeResourcesFit", f"invalid quantity: {e}", UNRESOLVABLE)
    if missing:
        code = UNRESOLVABLE if any(m.unresolvable for m in missing) else UNSCHEDULABLE
        return FilterResult.reject(node, "NodeResourcesFit", ", ".join(m.reason for m in missing), code)
    if volume_zones:
        claim = volume_zone_conflict(template, node, volume_zones)
        if claim is not None:
            zones = ", ".join(sorted(volume_zones[claim]))
            return FilterResult.reject(
                node, "VolumeZone", f"volume of claim {claim} is in zone(s) {zones}", UNRESOLVABLE
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
