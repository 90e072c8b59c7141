"""Typed, immutable inventory objects: nodes, pod templates, workload roles, services."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from auditor.model.pickling import by_fields
from auditor.model.scheduling import NO_SCHEDULING, NodeRequirement, Scheduling
from auditor.model.source import SourceRef
from auditor.model.values import value

ZONE_KEY = "topology.kubernetes.io/zone"
REGION_KEY = "topology.kubernetes.io/region"

Labels = tuple[tuple[str, str], ...]


def freeze_labels(raw: Mapping[str, Any] | None) -> Labels:
    if not raw:
        return ()
    return tuple(sorted((str(k), "" if v is None else str(v)) for k, v in raw.items()))


@value(frozen=True)
class NamedPort:
    """A container port with a name (policies may refer to it by name)."""

    name: str
    protocol: str
    port: int


@value(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str  # Equal | Exists
    value: str
    effect: str  # "" matches every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    labels: Labels
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    allocatable: tuple[tuple[str, str], ...] = ()
    pod_cidrs: tuple[str, ...] = ()
    addresses: tuple[str, ...] = ()
    source: SourceRef = SourceRef("")
    # A node that does not exist yet (placement/capacity.py): what would make it ("NodePool
    # gpu-spot", "node group gpu-b (cluster-autoscaler)", "NodeClaim x of NodePool y"); "" for a
    # node the cluster or the nodes file holds.
    provisioner: str = ""
    # The provisioner can make as many such nodes as pods need (a NodePool, an autoscaled node
    # group): no bound on replicas per zone comes from this node's hostname or capacity.
    multiplies: bool = False
    # Requirements on labels whose value the provisioner picks when it makes the node (a NodePool's
    # `instance-type In [a, b]`, `capacity-type NotIn [spot]`): node affinity is compatible when
    # some allowed value satisfies it. `open_keys`: well-known labels the provisioner always sets to
    # some value when it has no requirement on them (Karpenter's well-known labels).
    ranges: tuple[NodeRequirement, ...] = ()
    open_keys: bool = False
    # Placement and endpoint building ask nodes for labels hundreds of thousands of times.
    label_map: Mapping[str, str] = field(init=False, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "label_map", dict(self.labels))


@value(frozen=True)
class Container:
    """The parts of a container (or init container) that communication edges and data-port
    ranges read: literal env values, command and args (string items, as the API types them)."""

    name: str
    env: tuple[tuple[str, str], ...] = ()  # (name, value) of each variable with a literal value
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    restart_policy: str = ""  # "Always" on an init container: a sidecar that keeps running


@dataclass(frozen=True, slots=True)
class Claim:
    """A PersistentVolumeClaim the pod mounts; `storage_class` is set for a claim its controller
    provisions from a StatefulSet volumeClaimTemplate (`<template>-<set>-<ordinal>`)."""

    name: str
    storage_class: str | None = None


@value(frozen=True)
class PodRequests:
    """The pod's effective requests as kube-scheduler computes them (`resourcehelper.PodRequests`),
    summed once when the template is read. `error` names the field of a quantity that does not
    parse: the API server would reject the pod, and the resource filter says why."""

    amounts: tuple[tuple[str, Fraction], ...] = ()
    error: str | None = None


@value(frozen=True)
class PodTemplate:
    """The parts of a pod spec that placement and policy read."""

    labels: Labels
    annotations: Labels = ()
    node_selector: Labels = ()
    scheduling: Scheduling = NO_SCHEDULING  # node/pod (anti-)affinity and topology spread, typed
    tolerations: tuple[Toleration, ...] = ()
    named_ports: tuple[NamedPort, ...] = ()
    container_ports: tuple[tuple[str, int], ...] = ()  # (protocol, port) of every declared port
    service_account: str = "default"
    host_network: bool = False
    node_name: str | None = None
    # Per container (and running sidecar): (resource, quantity) as written, limits filling absent
    # requests; summing needs Kubernetes quantity arithmetic and is left to the resource-fit filter.
    requests: tuple[tuple[tuple[str, str], ...], ...] = ()
    pod_ips: tuple[str, ...] = ()  # status.podIPs of a live or dumped Pod
    pod_requests: PodRequests = PodRequests()
    claims: tuple[Claim, ...] = ()  # spec.volumes[].persistentVolumeClaim, in order
    sysctls: tuple[tuple[str, str], ...] = ()  # spec.securityContext.sysctls (name, value)
    # spec.resourceClaims (DRA): (name, resourceClaimName, resourceClaimTemplateName), one of the
    # two names "" (placement/dra.py).
    resource_claims: tuple[tuple[str, str, str], ...] = ()
    # Compared but not hashed: templates key many caches, and the labels, ports and requests
    # above already tell templates apart.
    containers: tuple[Container, ...] = field(default=(), hash=False)
    init_containers: tuple[Container, ...] = field(default=(), hash=False)
    # Selectors of Services, policies and affinity terms read the labels over and over.
    label_map: Mapping[str, str] = field(init=False, compare=False, hash=False, repr=False)
    # Templates key roles, filter passes and admission caches: hash the (deep) fields once.
    _hash: int = field(default=0, init=False, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "label_map", dict(self.labels))
        object.__setattr__(self, "_hash", hash(self.hashed_fields()))

    def hashed_fields(self) -> tuple[object, ...]:
        """Every field compared, but containers (the labels, ports and requests tell them apart)."""
        return (
            self.labels,
            self.annotations,
            self.node_selector,
            self.scheduling,
            self.tolerations,
            self.named_ports,
            self.container_ports,
            self.service_account,
            self.host_network,
            self.node_name,
            self.requests,
            self.pod_ips,
            self.pod_requests,
            self.claims,
            self.sysctls,
            self.resource_claims,
        )

    def __hash__(self) -> int:
        return self._hash


@by_fields
@value(frozen=True)
class WorkloadRef:
    api_version: str
    kind: str
    namespace: str
    name: str
    source: SourceRef

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@value(frozen=True)
class ReplicaLabel:
    """A label its controller sets on each replica with a value derived from the replica's index
    `i` in the role: `prefix` + ((i // stride) % period + offset), `period` 0 meaning unbounded.

    StatefulSet pod-name is `ReplicaLabel(key, "<set>-")`; a JobSet child job's index is
    `ReplicaLabel(key, stride=pods_per_job, period=jobs)`. `since` is the Kubernetes (major, minor)
    from which the controller sets it (the PodIndexLabel gate, beta and on from 1.28).
    """

    key: str
    prefix: str = ""
    stride: int = 1
    period: int = 0
    offset: int = 0
    since: tuple[int, int] = (0, 0)

    def value(self, index: int) -> str:
        n = index // self.stride
        if self.period:
            n %= self.period
        return f"{self.prefix}{n + self.offset}"


@by_fields
@dataclass(frozen=True, slots=True)
class ReplicaTest:
    """A comparison some selector makes on a per-replica label: `==` (matchLabels, In, NotIn,
    Calico `==`/`in`) or Calico's `starts with` / `ends with` / `contains`."""

    key: str
    op: str  # "==" | "starts with" | "ends with" | "contains"
    literal: str

    def holds(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if value is None:
            return False
        if self.op == "starts with":
            return value.startswith(self.literal)
        if self.op == "ends with":
            return value.endswith(self.literal)
        if self.op == "contains":
            return self.literal in value
        return value == self.literal


@dataclass(frozen=True, slots=True)
class ReplicaClass:
    """The replicas of a split role that every selector in the inventory treats alike: those for
    which each of `tests` comes out as `outcome`. `first` is the lowest such index (its labels are
    the class's), `part` the indexes as text (`0`, `1-7`)."""

    tests: tuple[ReplicaTest, ...]
    outcome: tuple[bool, ...]
    first: int
    part: str

    def holds(self, labels: Mapping[str, str]) -> bool:
        return all(t.holds(labels) == o for t, o in zip(self.tests, self.outcome, strict=True))


@value(frozen=True)
class Role:
    """One pod template × replica count of a workload (PyTorchJob Worker ×8, a Deployment's pods).

    `replica_labels` describe the labels the controller sets per replica (they are added to the
    template only when some selector reads them, see workloads/replicas.py); a role split by them
    keeps its name and carries the `replica_class` its replicas form.
    """

    workload: WorkloadRef
    name: str
    replicas: int
    template: PodTemplate
    source: SourceRef
    replica_labels: tuple[ReplicaLabel, ...] = ()
    replica_class: ReplicaClass | None = None
    # Roles key placements, claims and endpoint caches: hash the (deep) fields once.
    _hash: int = field(default=0, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        fields = (
            self.workload,
            self.name,
            self.replicas,
            self.template,
            self.source,
            self.replica_labels,
            self.replica_class,
        )
        object.__setattr__(self, "_hash", hash(fields))

    def __hash__(self) -> int:
        return self._hash

    @property
    def label(self) -> str:
        """The role's name, with the replica indexes of a split role (`Worker[0]`, `Worker[1-7]`)."""
        return f"{self.name}[{self.replica_class.part}]" if self.replica_class else self.name

    def replica_labels_of(self, index: int) -> dict[str, str]:
        return {rl.key: rl.value(index) for rl in self.replica_labels}

    def holds_pod(self, labels: Mapping[str, str]) -> bool:
        """Whether a pod with `labels` is one of this role's replicas: it carries the template's
        labels (per-replica ones aside) and falls in the role's replica class."""
        per_replica = {rl.key for rl in self.replica_labels}
        if not all(labels.get(k) == v for k, v in self.template.labels if k not in per_replica):
            return False
        return self.replica_class is None or self.replica_class.holds(labels)

    def __str__(self) -> str:
        if self.name == self.workload.name and self.replica_class is None:
            return f"{self.workload.namespace}/{self.workload.name}"
        return f"{self.workload.namespace}/{self.workload.name}/{self.label}"


@dataclass(frozen=True, slots=True)
class Annotations:
    """metadata.annotations in manifest order, values as text (None where the manifest leaves a
    value empty), with the line of each key where the loader knew it (`line`: the mapping's)."""

    items: tuple[tuple[str, str | None], ...] = ()
    key_lines: tuple[tuple[str, int], ...] = field(default=(), compare=False)
    line: int = field(default=0, compare=False)

    def __contains__(self, key: str) -> bool:
        return any(k == key for k, _ in self.items)

    def get(self, key: str) -> str | None:
        return next((v for k, v in self.items if k == key), None)

    def text(self) -> dict[str, str]:
        """Key → value, an empty value as "" (what CEL rules see)."""
        return {k: "" if v is None else v for k, v in self.items}

    def line_of(self, key: str, default: int) -> int:
        """The line of `key`, else of the mapping, else `default`."""
        return next((n for k, n in self.key_lines if k == key), self.line or default)


@dataclass(frozen=True, slots=True)
class OperatorOptions:
    """Fields of a training kind's spec that its built-in edges read (workloads/edges.py)."""

    elastic: bool = False  # PyTorchJob spec.elasticPolicy is set
    rdzv_port: int | None = None  # PyTorchJob spec.elasticPolicy.rdzvPort
    ray_port: int | None = None  # Ray headGroupSpec.rayStartParams.port
    coordinator: str | None = None  # JobSet spec.coordinator.replicatedJob
    # Volcano spec.plugins: each plugin's name and its `--key=value` arguments.
    plugins: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    # Volcano spec.networkTopology: (mode "hard" | "soft", highestTierAllowed or -1 when unset);
    # ("", -1) without one.
    network_topology: tuple[str, int] = ("", -1)

    def plugin(self, name: str) -> dict[str, str] | None:
        return next((dict(args) for n, args in self.plugins if n == name), None)


@value(frozen=True)
class Workload:
    ref: WorkloadRef
    labels: Labels
    roles: tuple[Role, ...]
    annotations: Annotations = Annotations()
    options: OperatorOptions = OperatorOptions()


@dataclass(frozen=True, slots=True)
class ServicePort:
    name: str
    port: int
    target_port: str  # number or container port name, as written
    protocol: str


@dataclass(frozen=True, slots=True)
class Service:
    namespace: str
    name: str
    selector: Labels
    ports: tuple[ServicePort, ...]
    source: SourceRef
    # How kube-proxy (or the CNI in its place) routes the Service's ClusterIP traffic
    # (placement/routing.py): spec.clusterIP ("None" for a headless Service, whose DNS names
    # the pods themselves), spec.trafficDistribution, spec.internalTrafficPolicy, and the
    # service.kubernetes.io/topology-mode annotation (topology-aware hints).
    cluster_ip: str = ""
    traffic_distribution: str = ""
    internal_traffic_policy: str = ""
    topology_mode: str = ""

    @property
    def headless(self) -> bool:
        return self.cluster_ip == "None"


@dataclass(frozen=True, slots=True)
class LivePod:
    """A pod as a cluster (or a snapshot of one) reports it: where it actually runs.

    `owner` is its top-level controller among the objects read (kind, name), following
    ownerReferences (Pod → ReplicaSet → Deployment, Pod → Job → JobSet); None for a bare pod.
    """

    namespace: str
    name: str
    labels: Labels
    node: str | None  # spec.nodeName; None while Pending unscheduled
    phase: str
    owner: tuple[str, str] | None
    unschedulable: str  # the scheduler's message when PodScheduled is False (Unschedulable)
    source: SourceRef

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)
