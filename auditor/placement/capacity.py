"""Capacity that does not exist yet, as nodes placement can land on (pure).

A cluster with Karpenter or the cluster-autoscaler is not only its present nodes: a pending pod that
no node admits makes the provisioner create one, possibly in a zone that has no node today. So "all
GPU nodes are in zone-a" is no guarantee, and a group can split into a zone through a pool.

* **Karpenter NodePool** (`karpenter.sh/v1`, v1beta1 read alike): one node per zone the pool can
  create nodes in, `multiplies` (it makes as many as pods need), labelled with the template's labels,
  `karpenter.sh/nodepool` and every requirement with a single `In` value; every other requirement is a
  `range` the node's value is picked from when it is made (`instance-type In [a, b]`, `capacity-type
  NotIn [spot]`, `instance-generation Gt 2`). Node affinity is then *compatible* as in Karpenter's
  `Requirements.Compatible`: some value the pool allows satisfies the pod's requirement; a
  well-known label the pool leaves open (zone, instance type, arch, os, capacity type, the cloud
  provider's `karpenter.k8s.aws/…` family) takes any value; any other label the pool does not set
  is absent. Zones: the pool's zone requirement or template label; with none (or NotIn/Exists), every
  zone the cluster's nodes, NodeClaims and pools name (where the NodeClass's subnets put nodes is
  the cloud's, not the cluster's). Template taints apply (startupTaints do not: they are removed
  once the node is ready). `spec.limits` against `status.resources`: a pool whose cpu, memory,
  `nodes` or `pods` usage has reached its limit makes no node; an extended resource (GPUs) at its
  limit makes no node that has it. The capacity of a node to be made is unknown (the instance
  types are the cloud's): it fits any pod.
* **NodeClaim**: a node Karpenter is making or made. One whose `status.nodeName` names a Node held
  is that Node; else it is a node of its own in the zone its labels (or a single-valued zone
  requirement) name, with its `status.allocatable`.
* **cluster-autoscaler node groups**: a Node in the nodes file annotated
  `placement-auditor.io/node-template: <node group>` is the group's template (its labels and taints
  are those of every node the group makes) and `multiplies`. The autoscaler's status ConfigMap
  (`kube-system/cluster-autoscaler-status`, its YAML or legacy text `status`) tells a group at its
  `maxSize`: its template then makes no node.

Nothing here changes when none of these objects is present: `provisioned` returns no node.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from auditor.model.objects import REGION_KEY, ZONE_KEY, Labels, Node, Taint, freeze_labels
from auditor.model.scheduling import NodeRequirement, parse_int64
from auditor.model.source import SourceRef
from auditor.reachability import specs
from auditor.reachability.specs import PolicyError

NODEPOOL_KIND = "NodePool"
NODECLAIM_KIND = "NodeClaim"
KARPENTER_VERSIONS = ("karpenter.sh/v1", "karpenter.sh/v1beta1")
NODEPOOL_LABEL = "karpenter.sh/nodepool"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
HOSTNAME_LABEL = "kubernetes.io/hostname"
TEMPLATE_ANNOTATION = "placement-auditor.io/node-template"
AUTOSCALER_STATUS = ("kube-system", "cluster-autoscaler-status")
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
# Karpenter's well-known labels (core, and those the cloud providers register): a node Karpenter
# makes always carries them, with some value of the instance type and offering it picks.
WELL_KNOWN = frozenset(
    {
        ZONE_KEY,
        REGION_KEY,
        "node.kubernetes.io/instance-type",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        CAPACITY_TYPE_LABEL,
        "node.kubernetes.io/windows-build",
        "topology.k8s.aws/zone-id",
    }
)
WELL_KNOWN_PREFIXES = (
    "karpenter.k8s.aws/",
    "karpenter.azure.com/",
    "karpenter.k8s.gcp/",
    "karpenter.kwok.sh/",
)
# Pools whose zones are open make one node per known zone; bound what hostile input can ask for.
MAX_ZONES_PER_POOL = 64
# Limits that, once reached, stop every node of the pool (every instance has cpu and memory).
_WHOLE_NODE = ("cpu", "memory", "nodes", "pods", "ephemeral-storage")


CapacityError = PolicyError
"""The error of an object of this module's kinds that cannot be read (`field`: the dotted path
in it): mypyc's compiled SelectorError cannot be subclassed outside the compiled modules."""


def well_known(key: str) -> bool:
    return key in WELL_KNOWN or key.startswith(WELL_KNOWN_PREFIXES)


# --- what a pool allows, against what a pod asks ------------------------------------------------


def _ints(values: Iterable[str]) -> list[int]:
    return [n for v in values if (n := parse_int64(v)) is not None]


def _bounds(req: NodeRequirement) -> tuple[int | None, int | None]:
    """The open interval (low, high) of integers a Gt/Lt requirement allows."""
    n = parse_int64(req.values[0]) if len(req.values) == 1 else None
    if req.operator == "Gt":
        return n, None
    return None, n


def _allows(req: NodeRequirement, value: str) -> bool:
    """Whether the pool's requirement lets a made node carry `value` for the key."""
    op = req.operator
    if op == "In":
        return value in req.values
    if op == "NotIn":
        return value not in req.values
    if op == "Exists":
        return True
    if op in ("Gt", "Lt"):
        n = parse_int64(value)
        low, high = _bounds(req)
        return n is not None and (low is None or n > low) and (high is None or n < high)
    return False  # DoesNotExist: no value at all


def _may_be_absent(req: NodeRequirement | None, key: str) -> bool:
    if req is None:
        return not well_known(key)
    return req.operator == "DoesNotExist" or (req.operator == "NotIn" and not well_known(key))


def compatible(want: NodeRequirement, pool: NodeRequirement | None, key_open: bool) -> bool:
    """Whether some node the pool can make satisfies the pod's requirement `want` on its key.

    `pool`: the pool's requirement on that key (None: none); `key_open`: without one, the
    provisioner sets the key to some value anyway (a well-known label)."""
    op = want.operator
    if pool is None and not key_open:
        return op in ("NotIn", "DoesNotExist")  # the made node will not carry the label
    absent = _may_be_absent(pool, want.key) if pool is not None else False
    if pool is not None and pool.operator == "DoesNotExist":
        return op in ("NotIn", "DoesNotExist")
    if op == "DoesNotExist":
        return absent
    if op == "Exists":
        return True
    if op == "In":
        return pool is None or any(_allows(pool, v) for v in want.values)
    if op == "NotIn":
        if absent or pool is None:
            return True
        if pool.operator == "In":
            return any(v not in want.values for v in pool.values)
        return True  # NotIn, Exists, Gt, Lt: infinitely many values, some outside `want`
    if op in ("Gt", "Lt"):
        wanted = _bounds(want)
        if len(want.values) != 1 or (wanted[0] is None and wanted[1] is None):
            return False
        if pool is None:
            return True
        if pool.operator == "In":
            return any(_allows(want, v) for v in pool.values)
        if pool.operator in ("Gt", "Lt"):
            lows = [b for b in (wanted[0], _bounds(pool)[0]) if b is not None]
            highs = [b for b in (wanted[1], _bounds(pool)[1]) if b is not None]
            return not lows or not highs or min(highs) - max(lows) > 1
        return True
    return False


def range_matches(want: NodeRequirement, node: Node) -> bool | None:
    """How a node to be made meets a requirement on a key it holds no fixed value for: True or
    False, or None when the node's key is fixed (its labels decide, as for any node)."""
    if want.key in node.label_map:
        return None
    pool = next((r for r in node.ranges if r.key == want.key), None)
    if pool is None and not (node.open_keys and well_known(want.key)):
        return None  # absent from the made node: its labels decide (NotIn and DoesNotExist hold)
    return compatible(want, pool, node.open_keys and well_known(want.key))


# --- reading the objects -----------------------------------------------------------------------


def _requirements(obj: Any, field: str) -> tuple[NodeRequirement, ...]:
    out = []
    for i, item in enumerate(specs.seq(obj, field)):
        at = f"{field}[{i}]"
        body = specs.mapping(item, at)
        key, op = body.get("key"), body.get("operator")
        if not isinstance(key, str) or not key:
            raise CapacityError(f"{at}.key", "is required and must be a string")
        if op not in _OPERATORS:
            raise CapacityError(f"{at}.operator", f"must be one of {', '.join(_OPERATORS)}, got {op!r}")
        values = tuple(str(v) for v in specs.seq(body.get("values"), f"{at}.values"))
        if op in ("In", "NotIn") and not values:
            raise CapacityError(f"{at}.values", f"must not be empty for operator {op}")
        if op in ("Gt", "Lt") and (len(values) != 1 or parse_int64(values[0]) is None):
            raise CapacityError(f"{at}.values", f"must be one integer for operator {op}")
        out.append(NodeRequirement(key, str(op), values))
    return tuple(out)


def parse_taints(obj: Any, field: str) -> tuple[Taint, ...]:
    out = []
    for i, item in enumerate(specs.seq(obj, field)):
        body = specs.mapping(item, f"{field}[{i}]")
        effect = str(body.get("effect") or "")
        if effect not in ("NoSchedule", "NoExecute", "PreferNoSchedule"):
            raise CapacityError(
                f"{field}[{i}].effect", f"must be NoSchedule, PreferNoSchedule or NoExecute, got {effect!r}"
            )
        key = body.get("key")
        if not isinstance(key, str) or not key:
            raise CapacityError(f"{field}[{i}].key", "is required and must be a string")
        out.append(Taint(key, str(body.get("value") or ""), effect))
    return tuple(out)


def _quantity(text: Any, field: str) -> Fraction:
    from auditor.placement.resources import parse_quantity

    try:
        return parse_quantity(text)
    except ValueError as exc:
        raise CapacityError(field, str(exc)) from None


@dataclass(frozen=True, slots=True)
class NodePool:
    """A Karpenter NodePool as placement reads it."""

    name: str
    labels: Labels  # spec.template.metadata.labels
    requirements: tuple[NodeRequirement, ...]
    taints: tuple[Taint, ...]
    source: SourceRef
    exhausted: str = ""  # why it makes no node at all ("" when it can)
    spent: tuple[str, ...] = ()  # extended resources at their limit: no node it makes has them

    def requirement(self, key: str) -> NodeRequirement | None:
        return next((r for r in self.requirements if r.key == key), None)


def parse_node_pool(obj: Mapping[str, Any], source: SourceRef) -> NodePool:
    meta = specs.mapping(obj.get("metadata"), "metadata")
    name = str(meta.get("name"))  # the loader requires it
    spec = specs.mapping(obj.get("spec"), "spec")
    template = specs.mapping(spec.get("template"), "spec.template")
    tmeta = specs.mapping(template.get("metadata"), "spec.template.metadata")
    tspec = specs.mapping(template.get("spec"), "spec.template.spec")
    labels = specs.mapping(tmeta.get("labels"), "spec.template.metadata.labels")
    requirements = _requirements(tspec.get("requirements"), "spec.template.spec.requirements")
    taints = parse_taints(tspec.get("taints"), "spec.template.spec.taints")
    parse_taints(tspec.get("startupTaints"), "spec.template.spec.startupTaints")  # read, never applied
    limits = specs.mapping(spec.get("limits"), "spec.limits")
    used = specs.mapping(specs.mapping(obj.get("status"), "status").get("resources"), "status.resources")
    exhausted, spent = "", []
    for resource in sorted(limits, key=str):
        limit = _quantity(limits[resource], f"spec.limits.{resource}")
        if resource not in used:
            continue
        usage = _quantity(used[resource], f"status.resources.{resource}")
        if usage < limit:
            continue
        if str(resource) in _WHOLE_NODE:
            exhausted = exhausted or (
                f"its limit {resource}: {limits[resource]} is reached ({used[resource]} in use)"
            )
        else:
            spent.append(str(resource))
    return NodePool(name, freeze_labels(labels), requirements, taints, source, exhausted, tuple(spent))


def _zone_of(labels: Mapping[str, str], requirements: Sequence[NodeRequirement], zone_key: str) -> str | None:
    if zone_key in labels:
        return labels[zone_key]
    req = next((r for r in requirements if r.key == zone_key), None)
    if req is not None and req.operator == "In" and len(req.values) == 1:
        return req.values[0]
    return None


def parse_node_claim(obj: Mapping[str, Any], source: SourceRef, zone_key: str) -> tuple[Node | None, str]:
    """The node a NodeClaim stands for (None when it names no zone), and the Node name it became
    ("" while it is not registered)."""
    meta = specs.mapping(obj.get("metadata"), "metadata")
    name = str(meta.get("name"))  # the loader requires it
    spec = specs.mapping(obj.get("spec"), "spec")
    status = specs.mapping(obj.get("status"), "status")
    labels = {str(k): str(v) for k, v in specs.mapping(meta.get("labels"), "metadata.labels").items()}
    requirements = _requirements(spec.get("requirements"), "spec.requirements")
    taints = parse_taints(spec.get("taints"), "spec.taints")
    node_name = status.get("nodeName")
    allocatable = specs.mapping(status.get("allocatable"), "status.allocatable")
    zone = _zone_of(labels, requirements, zone_key)
    if zone is None:
        return None, str(node_name or "")
    for r in requirements:
        if r.operator == "In" and len(r.values) == 1:
            labels.setdefault(r.key, r.values[0])
    labels[zone_key] = zone
    pool = labels.get(NODEPOOL_LABEL, "")
    labels.setdefault(HOSTNAME_LABEL, f"nodeclaim/{name}")
    node = Node(
        f"nodeclaim/{name}",
        freeze_labels(labels),
        taints,
        allocatable=tuple(sorted((str(k), str(v)) for k, v in allocatable.items())),
        source=source,
        provisioner=f"NodeClaim {name}" + (f" of NodePool {pool}" if pool else ""),
        ranges=tuple(r for r in requirements if r.key not in labels),
        open_keys=True,
    )
    return node, str(node_name or "")


def template_group(node: Node, annotations: Mapping[str, Any]) -> Node:
    """A Node of the nodes file annotated as a node group's template: the nodes the group makes."""
    group = str(annotations.get(TEMPLATE_ANNOTATION) or "")
    if not group:
        return node
    labels = dict(node.label_map)
    labels.setdefault(HOSTNAME_LABEL, node.name)
    return replace(
        node,
        labels=freeze_labels(labels),
        provisioner=group_provisioner(group),
        multiplies=True,
    )


def group_provisioner(group: str) -> str:
    """What makes the nodes of an autoscaled node group, as Node.provisioner says it."""
    return f"node group {group} (cluster-autoscaler)"


_LEGACY_GROUP = re.compile(
    r"Name:\s*(\S+)\s*\n\s*Health:[^\n]*?cloudProviderTarget=(\d+)[^\n]*?maxSize=(\d+)"
)


def autoscaler_full_groups(status_text: str) -> dict[str, str]:
    """Node groups at their maxSize in the cluster-autoscaler's status text → why, from the YAML
    status (cluster-autoscaler 1.30+) or the legacy text. Anything unreadable says nothing."""
    import yaml

    out: dict[str, str] = {}
    if len(status_text) > 1_000_000:
        return out
    data: Any = None
    try:
        data = yaml.safe_load(status_text) if "nodeGroups:" in status_text else None
    except yaml.YAMLError:
        data = None
    if isinstance(data, Mapping):
        for group in data.get("nodeGroups") or []:
            if not isinstance(group, Mapping):
                continue
            health = group.get("health")
            if not isinstance(health, Mapping):
                continue
            target, most = health.get("cloudProviderTarget"), health.get("maxSize")
            if isinstance(target, int) and isinstance(most, int) and target >= most:
                out[str(group.get("name"))] = f"at its maxSize {most} (cloudProviderTarget {target})"
        return out
    for m in _LEGACY_GROUP.finditer(status_text):
        target, most = int(m.group(2)), int(m.group(3))
        if target >= most:
            out[m.group(1)] = f"at its maxSize {most} (cloudProviderTarget {target})"
    return out


# --- the nodes they make -----------------------------------------------------------------------


def known_zones(nodes: Iterable[Node], pools: Iterable[NodePool], zone_key: str) -> list[str]:
    zones = {z for n in nodes if (z := n.label_map.get(zone_key))}
    for p in pools:
        if zone_key in dict(p.labels):
            zones.add(dict(p.labels)[zone_key])
        req = p.requirement(zone_key)
        if req is not None and req.operator == "In":
            zones.update(req.values)
    return sorted(zones)


def pool_zones(pool: NodePool, candidates: Sequence[str], zone_key: str) -> Sequence[str | None]:
    """The zones a pool can make nodes in (None: a node without a zone label)."""
    labels = dict(pool.labels)
    if zone_key in labels:
        return [labels[zone_key]]
    req = pool.requirement(zone_key)
    if req is None:
        return list(candidates) or [None]
    if req.operator == "In":
        return list(dict.fromkeys(req.values))[:MAX_ZONES_PER_POOL]
    if req.operator == "DoesNotExist":
        return [None]
    return [z for z in candidates if _allows(req, z)][:MAX_ZONES_PER_POOL]


def pool_nodes(pool: NodePool, candidates: Sequence[str], zone_key: str) -> list[Node]:
    """One node per zone the pool can make nodes in."""
    if pool.exhausted:
        return []
    fixed = dict(pool.labels)
    for r in pool.requirements:
        if r.operator == "In" and len(r.values) == 1 and r.key != zone_key:
            fixed.setdefault(r.key, r.values[0])
    fixed[NODEPOOL_LABEL] = pool.name
    ranges = tuple(r for r in pool.requirements if r.key not in fixed and r.key != zone_key)
    allocatable = tuple((r, "0") for r in pool.spent)
    out = []
    for zone in pool_zones(pool, candidates, zone_key):
        labels = dict(fixed)
        name = f"nodepool/{pool.name}/{zone or '(no zone)'}"
        if zone is not None:
            labels[zone_key] = zone
        labels[HOSTNAME_LABEL] = name
        out.append(
            Node(
                name,
                freeze_labels(labels),
                pool.taints,
                allocatable=allocatable,
                source=pool.source,
                provisioner=f"NodePool {pool.name}",
                multiplies=True,
                ranges=ranges,
                open_keys=True,
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class Capacity:
    """What the capacity objects of an inventory hold: pools, NodeClaims not yet Nodes (with the
    Node names the others became), and node groups the autoscaler cannot grow."""

    pools: tuple[NodePool, ...] = ()
    claims: tuple[tuple[Node, str], ...] = ()
    full_groups: Mapping[str, str] | None = None

    def __bool__(self) -> bool:
        return bool(self.pools or self.claims or self.full_groups)


def provisioned(
    capacity: Capacity, nodes: Sequence[Node], zone_key: str
) -> tuple[list[Node], list[Node], list[tuple[str, str]]]:
    """(the nodes as given, less node-group templates the autoscaler cannot grow; the nodes the
    provisioners can make; notes on what was left out and why, by the file of the object)."""
    notes: list[tuple[str, str]] = []
    kept: list[Node] = list(nodes)
    full_by = {group_provisioner(g): why for g, why in (capacity.full_groups or {}).items()}
    if full_by:
        kept = []
        for n in nodes:
            why = full_by.get(n.provisioner) if n.provisioner else None
            if why is not None:
                notes.append(
                    (n.source.file, f"{n.provisioner} is {why}: its template {n.name} makes no node")
                )
                continue
            kept.append(n)
    names = {n.name for n in kept}
    made = [c for c, became in capacity.claims if not became or became not in names]
    zones = known_zones([*kept, *made], capacity.pools, zone_key)
    extra: list[Node] = list(made)
    for pool in capacity.pools:
        if pool.exhausted:
            notes.append((pool.source.file, f"NodePool {pool.name} makes no node: {pool.exhausted}"))
            continue
        if pool.spent:
            notes.append(
                (
                    pool.source.file,
                    f"NodePool {pool.name} makes no node with {', '.join(pool.spent)}: its limit is reached",
                )
            )
        made_nodes = pool_nodes(pool, zones, zone_key)
        if any(zone_key not in n.label_map for n in made_nodes):
            notes.append(
                (
                    pool.source.file,
                    f"NodePool {pool.name} names no zone and no node or pool names one: "
                    "where it makes nodes is unknown",
                )
            )
        extra.extend(made_nodes)
    return kept, extra, notes


def provenance(nodes: Iterable[Node], zone_key: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The zones of `nodes` reached only through nodes that do not exist yet, with what would
    make them: ((zone, ("NodePool gpu-spot",)), ...), zones sorted."""
    present: set[str] = set()
    through: dict[str, set[str]] = {}
    for n in nodes:
        zone = n.label_map.get(zone_key)
        if not zone:
            continue
        if n.provisioner:
            through.setdefault(zone, set()).add(n.provisioner)
        else:
            present.add(zone)
    return tuple((z, tuple(sorted(p))) for z, p in sorted(through.items()) if z not in present)
