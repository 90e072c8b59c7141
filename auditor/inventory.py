"""The typed inventory an audit reads: a plain value built by `sources/objects.py` (from files,
renders, a cluster or a snapshot) and read by placement, the communication graph, reachability and
the rules."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from auditor.model.objects import LivePod, Node, Role, Service, Workload, WorkloadRef, freeze_labels
from auditor.model.source import LoadError, NotAudited
from auditor.placement.capacity import Capacity
from auditor.placement.dra import Devices
from auditor.placement.kueue import Admission, Queues
from auditor.placement.pods import pod_endpoint
from auditor.placement.volcano import Domains, HyperNode
from auditor.reachability import cni
from auditor.reachability.endpoints import PodEndpoint
from auditor.reachability.engine import PolicyEngine, standard_tiers
from auditor.reachability.policy import CompiledPolicy
from auditor.settings.config import AuditSettings


@dataclass
class Inventory:
    settings: AuditSettings
    network: cni.NetworkSettings
    namespaces: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    workloads: list[Workload] = field(default_factory=list)
    services: list[Service] = field(default_factory=list)
    policies: list[CompiledPolicy] = field(default_factory=list)
    calico_tiers: dict[str, tuple[float, str]] = field(default_factory=dict)
    errors: list[LoadError] = field(default_factory=list)
    # Notes about the inventory as a whole; `file_notes`: (file, note) for notes one object caused.
    notes: list[str] = field(default_factory=list)
    file_notes: list[tuple[str, str]] = field(default_factory=list)
    # Files and directories whose content was not seen (the audit is partial; sources/manifests.py).
    not_audited: list[NotAudited] = field(default_factory=list)
    # Kinds present but not audited (ConfigMap, Ingress, ...): counted by (file, kind), not errors.
    skipped: dict[tuple[str, str], int] = field(default_factory=dict)
    # The files read, in the order reports list what concerns them: files with documents as read,
    # then files without any (unreadable, or holding only errors).
    file_order: dict[str, int] = field(default_factory=dict)
    # (Cluster)TrainingRuntimes by (kind, namespace or "", name): TrainJobs are built from them.
    runtimes: dict[tuple[str, str, str], Mapping[str, Any]] = field(default_factory=dict)
    # Zones a PersistentVolumeClaim confines its pods to, by (namespace, claim): from its bound
    # PersistentVolume's node affinity or labels, or its StorageClass's allowedTopologies.
    claim_zones: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    # StorageClass name → zones (for StatefulSet volumeClaimTemplates).
    class_zones: dict[str, frozenset[str]] = field(default_factory=dict)
    # Capacity that does not exist yet (placement/capacity.py): Karpenter NodePools, NodeClaims
    # not yet Nodes, node groups the cluster-autoscaler cannot grow. The nodes they can make are
    # in `nodes` (Node.provisioner says which) once the inventory is built.
    capacity: Capacity = field(default_factory=Capacity)
    # Kueue's queues and flavors (placement/kueue.py), and how it admits each pod set it manages,
    # by (workload, role name): those roles' templates are already as admitted.
    queues: Queues = field(default_factory=Queues)
    admissions: dict[tuple[WorkloadRef, str], Admission] = field(default_factory=dict)
    # Volcano HyperNodes (placement/volcano.py): the network domains a hard networkTopology keeps a job in.
    hypernodes: list[HyperNode] = field(default_factory=list)
    # DRA DeviceClasses, ResourceSlices' devices, ResourceClaims and templates (placement/dra.py).
    devices: Devices = field(default_factory=Devices)
    # The HyperNodes each Volcano Job with a networkTopology may be placed in, worked out once the
    # nodes (those to be made included) are known.
    volcano: dict[WorkloadRef, Domains] = field(default_factory=dict)
    # Pods a cluster or snapshot reported with their node: where groups actually run.
    live_pods: list[LivePod] = field(default_factory=list)
    # The manifest each workload was read from (as rendered): remediation patches it. Kept only
    # when asked (build_inventory's `manifests`).
    manifests: dict[WorkloadRef, Mapping[str, Any]] = field(default_factory=dict)
    _by_name: dict[tuple[str, str], list[Workload]] = field(default_factory=dict, repr=False)
    _by_name_for: list[int] = field(default_factory=list, repr=False)

    @property
    def skipped_kinds(self) -> dict[str, int]:
        return kinds_skipped(self.skipped)

    def namespace_labels(self, namespace: str) -> tuple[tuple[str, str], ...]:
        labels = dict(self.namespaces.get(namespace, ()))
        labels.setdefault("kubernetes.io/metadata.name", namespace)
        return freeze_labels(labels)

    def workload(self, namespace: str, name: str) -> list[Workload]:
        # Indexed on first use (and again if workloads were added since): rules ask per role.
        if len(self._by_name_for) != 1 or self._by_name_for[0] != len(self.workloads):
            self._by_name = {}
            for w in self.workloads:
                self._by_name.setdefault((w.ref.namespace, w.ref.name), []).append(w)
            self._by_name_for = [len(self.workloads)]
        return list(self._by_name.get((namespace, name), ()))


def kinds_skipped(skipped: Mapping[tuple[str, str], int]) -> dict[str, int]:
    """Skipped objects by kind, from their counts by (file, kind)."""
    counts: dict[str, int] = {}
    for (_, kind), n in skipped.items():
        counts[kind] = counts.get(kind, 0) + n
    return counts


def role_claim_zones(inv: Inventory, role: Role) -> dict[str, frozenset[str]]:
    """Claim name → zones for the claims a role's pods mount (including StatefulSet claim templates)."""
    out: dict[str, frozenset[str]] = {}
    for claim in role.template.claims:
        zones = inv.claim_zones.get((role.workload.namespace, claim.name))
        if zones is not None:
            out[claim.name] = zones
    # StatefulSet claim templates: claims <template>-<set>-<n> are provisioned from the template's class.
    for claim in role.template.claims:
        zones = inv.class_zones.get(claim.storage_class) if claim.storage_class is not None else None
        if zones is not None:
            out[claim.name] = zones
    return out


def role_endpoint(
    inv: Inventory,
    role: Role,
    zone: str | None,
    node: Node | None,
    *,
    namespace_labels: tuple[tuple[str, str], ...] | None = None,
    pod_zone_labels: tuple[tuple[str, str], ...] | None = None,
) -> PodEndpoint:
    """A replica of `role` on `node` (or somewhere in `zone`), with the labels copied at binding.
    `namespace_labels` (of the role's namespace) and `pod_zone_labels` (the effective ones), when
    a caller making many endpoints has them already; else worked out here."""
    topo = inv.settings.topology
    if namespace_labels is None:
        namespace_labels = inv.namespace_labels(role.workload.namespace)
    if pod_zone_labels is None:
        pod_zone_labels = topo.effective_pod_zone_labels(inv.settings.kubernetes)
    return pod_endpoint(role, namespace_labels, zone, node, pod_zone_labels, topo.zone_key, name=str(role))


def policy_engine(inv: Inventory) -> PolicyEngine:
    """The policy engine over the inventory's compiled policies, in the CNI's tiers."""
    return PolicyEngine(inv.policies, inv.network, standard_tiers(inv.network, inv.calico_tiers))
