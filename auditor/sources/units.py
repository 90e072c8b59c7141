"""The units of a tree an incremental audit re-audits alone, and what ties them together.

A unit is a namespace: a file whose objects all live in one namespace belongs to that namespace's
unit. Everything else — cluster-scoped objects (nodes, namespaces, cluster-wide and admin
policies, cluster training runtimes, storage classes and volumes, Calico tiers, Kueue's cluster
objects, snapshot headers), the `cilium-config` ConfigMap, objects of unknown kinds without a
namespace, and files that mix namespaces or hold no object — is the *cluster part* (`CLUSTER`),
which every unit's audit reads.

What a unit's part of the audit (its findings, groups, errors, notes and counts) depends on:

* the cluster part and the unit's own documents;
* the units it *reads* (`unit_reads`): the namespaces its workloads name (Service DNS names,
  `talks-to`: it gets edges into them, whose verdicts read their pods, placements and policies)
  and those its pod (anti-)affinity terms reach (a namespaceSelector: every unit); and where the
  pods of any unit whose placements it reads can land, transitively (`dependencies`);
* with custom rules, whose `role.split` covers paths into a role, the units that name it;
* and what the rest of the tree contributes to its inventory (each unit's `unit_facts`, joined:
  sources.objects.Elsewhere): the policy kinds that decide the CNI, and the per-replica label
  keys and comparisons.

Who reaches a workload is not part of its unit's fragment: rules/groups.summarise decides it from
every unit's group entries. A changed file costs the audit of the units that depend on its unit,
with the cluster part and what those read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from auditor import yamlio
from auditor.inventory import Inventory
from auditor.model.objects import Service, Workload
from auditor.model.pickling import by_fields
from auditor.sources.objects import (
    SUPPORTED_VERSIONS,
    Elsewhere,
    RawObject,
    cni_kinds,
    iter_objects,
    replica_facts,
)
from auditor.workloads import replicas
from auditor.workloads.edges import named_namespaces

CLUSTER = ""
"""The cluster part's unit (no namespace is named "")."""
EVERY = "*"
"""A read of every unit (a pod affinity term with a namespaceSelector)."""

CLUSTER_SCOPED = frozenset(
    {
        "Node",
        "Namespace",
        "ClusterTrainingRuntime",
        "CiliumClusterwideNetworkPolicy",
        "GlobalNetworkPolicy",
        "AdminNetworkPolicy",
        "BaselineAdminNetworkPolicy",
        "ClusterNetworkPolicy",
        "StorageClass",
        "PersistentVolume",
        "Tier",
        "ClusterQueue",
        "Topology",
        "ClusterSnapshot",
        "NodePool",
        "NodeClaim",
        "ResourceFlavor",
        "HyperNode",
        "DeviceClass",
        "ResourceSlice",
    }
)


def object_unit(raw: RawObject, default_namespace: str) -> str:
    """The unit of one object."""
    if raw.kind in CLUSTER_SCOPED or (
        raw.kind == "ConfigMap" and raw.name in ("cilium-config", "cluster-autoscaler-status")
    ):
        return CLUSTER
    if raw.kind not in SUPPORTED_VERSIONS and raw.namespace("") == "":
        return CLUSTER  # a kind we do not know the scope of, and no namespace: assume cluster-wide
    return raw.namespace(default_namespace)


def file_units(
    documents: Iterable[yamlio.Document], files: Iterable[str], default_namespace: str
) -> dict[str, str]:
    """The unit of each file: the one namespace all its objects live in, else the cluster part
    (a file of cluster-scoped objects, of several namespaces, or of no object)."""
    found: dict[str, set[str]] = {}
    for doc in documents:
        units = found.setdefault(doc.source.file, set())
        objects = list(iter_objects([doc]))
        if not objects:
            units.add(CLUSTER)
        units.update(object_unit(raw, default_namespace) for raw in objects)
    out: dict[str, str] = {}
    for file in files:
        units = found.get(file, set())
        out[file] = next(iter(units)) if len(units) == 1 else CLUSTER
    return out


@by_fields
@dataclass(frozen=True, slots=True)
class Reads:
    """What one unit's audit reads of other units (itself excluded)."""

    # Namespaces its workloads live in or name (Service DNS names, `talks-to`): it gets edges into
    # them, whose verdicts read their pods, placements and policies.
    edges: frozenset[str] = frozenset()
    # Namespaces its pod (anti-)affinity terms reach (`EVERY` for a namespaceSelector): where its
    # pods can land reads their pods and where those can land.
    affinity: frozenset[str] = frozenset()


def unit_reads(inv: Inventory, unit_of: Mapping[str, str]) -> dict[str, Reads]:
    """What each unit with workloads reads."""
    edges: dict[str, set[str]] = {}
    affinity: dict[str, set[str]] = {}
    for w in inv.workloads:
        unit = unit_of.get(w.ref.source.file, CLUSTER)
        named = edges.setdefault(unit, set())
        reached = affinity.setdefault(unit, set())
        named.add(w.ref.namespace)
        for role in w.roles:
            named |= named_namespaces(role)
            scheduling = role.template.scheduling
            for terms in (scheduling.pod_affinity, scheduling.pod_anti_affinity):
                for term in (*terms.required, *(t for _, t in terms.preferred)):
                    if term.own_namespace:
                        reached.add(w.ref.namespace)
                        continue
                    reached |= term.namespaces
                    if term.namespace_selector is not None:
                        reached.add(EVERY)
    return {u: Reads(frozenset(edges[u] - {u}), frozenset(affinity[u] - {u})) for u in edges}


def dependencies(
    unit: str, reads: Mapping[str, Reads], units: Iterable[str], readers: Mapping[str, set[str]] | None
) -> frozenset[str]:
    """The units whose documents `unit`'s part of the audit depends on: itself, those it reads,
    with `readers` (unit → units that name it) those whose edges lead into it, and, for every
    unit whose placements that reads, the units their affinity reaches, transitively."""
    everything = frozenset(units)
    own = reads.get(unit, Reads())
    placed = {unit, *own.edges, *own.affinity}
    if readers is not None:
        placed |= readers.get(unit, set())
    found = set(placed)
    pending = list(placed)
    while pending:
        for other in reads.get(pending.pop(), Reads()).affinity:
            for target in everything if other == EVERY else (other,):
                if target not in found:
                    found.add(target)
                    pending.append(target)
    if EVERY in found:
        found |= everything
        found.discard(EVERY)
    return frozenset(found)


def readers_of(reads: Mapping[str, Reads]) -> dict[str, set[str]]:
    """Unit → the units whose workloads name it."""
    out: dict[str, set[str]] = {}
    for unit, r in reads.items():
        for named in r.edges:
            out.setdefault(named, set()).add(unit)
    return out


def unit_facts(
    documents: Sequence[yamlio.Document],
    inv: Inventory,
    unit_of: Mapping[str, str],
    keys: frozenset[str] | None = None,
) -> dict[str, Elsewhere]:
    """What each unit contributes to the inventories of the tree's other parts, from its
    documents and its part of the inventory; the per-replica comparisons are those on `keys`
    (default: the keys of the whole inventory)."""
    objects: dict[str, list[RawObject]] = {}
    for raw in iter_objects(documents):
        objects.setdefault(unit_of.get(raw.source.file, CLUSTER), []).append(raw)
    workloads: dict[str, list[Workload]] = {}
    for w in inv.workloads:
        workloads.setdefault(unit_of.get(w.ref.source.file, CLUSTER), []).append(w)
    services: dict[str, list[Service]] = {}
    for svc in inv.services:
        services.setdefault(unit_of.get(svc.source.file, CLUSTER), []).append(svc)
    keys = replicas.replica_keys(inv.workloads) if keys is None else keys
    out: dict[str, Elsewhere] = {}
    for unit in {*objects, *workloads, *services}:
        own, own_workloads = objects.get(unit, []), workloads.get(unit, [])
        cilium, calico = cni_kinds(own)
        tests = replica_facts(own, own_workloads, services.get(unit, []), keys)
        out[unit] = Elsewhere(cilium, calico, replicas.replica_keys(own_workloads), tests)
    return out
