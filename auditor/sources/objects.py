"""Loaded YAML documents → the typed inventory: nodes, namespaces, workloads, services, storage
zones, live pods and their owners, the CNI settings and compiled policies. Pure: documents in,
values and error entries out.

Every object that cannot be read becomes a LoadError naming the file, line, object and field;
every other object still loads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, TypeVar

from auditor import yamlio
from auditor.inventory import Inventory
from auditor.model.labels import SelectorError
from auditor.model.objects import (
    Labels,
    LivePod,
    Node,
    ReplicaTest,
    Service,
    ServicePort,
    Taint,
    Workload,
    WorkloadRef,
    freeze_labels,
)
from auditor.model.pickling import by_fields
from auditor.model.source import LoadError, SourceRef
from auditor.model.values import value
from auditor.placement import capacity, dra, kueue, routing, volcano
from auditor.reachability import adminpolicy, calico, cilium, cni, netpol, specs
from auditor.reachability.engine import NAMESPACE_TIER
from auditor.reachability.policy import CompiledPolicy
from auditor.settings.config import AuditSettings, AuditView
from auditor.workloads import replicas
from auditor.workloads.adapters import ADAPTERS, CONTEXT_KINDS, adapt

CILIUM_KINDS = ("CiliumNetworkPolicy", "CiliumClusterwideNetworkPolicy")
ADMIN_KINDS = ("AdminNetworkPolicy", "BaselineAdminNetworkPolicy", "ClusterNetworkPolicy")
CALICO_GROUPS = ("projectcalico.org/", "crd.projectcalico.org/")
_KUBEFLOW = ("PyTorchJob", "TFJob", "XGBoostJob", "PaddleJob", "JAXJob")
# The apiVersions we understand for each kind we audit.
SUPPORTED_VERSIONS: dict[str, tuple[str, ...]] = {
    "Pod": ("v1",),
    "Service": ("v1",),
    "Node": ("v1",),
    "Namespace": ("v1",),
    "ReplicationController": ("v1",),
    "Deployment": ("apps/v1",),
    "StatefulSet": ("apps/v1",),
    "ReplicaSet": ("apps/v1",),
    "DaemonSet": ("apps/v1",),
    "Job": ("batch/v1",),
    "CronJob": ("batch/v1",),
    "NetworkPolicy": ("networking.k8s.io/v1", "projectcalico.org/v3", "crd.projectcalico.org/v1"),
    "GlobalNetworkPolicy": ("projectcalico.org/v3", "crd.projectcalico.org/v1"),
    "CiliumNetworkPolicy": ("cilium.io/v2",),
    "CiliumClusterwideNetworkPolicy": ("cilium.io/v2",),
    "AdminNetworkPolicy": ("policy.networking.k8s.io/v1alpha1",),
    "BaselineAdminNetworkPolicy": ("policy.networking.k8s.io/v1alpha1",),
    "ClusterNetworkPolicy": ("policy.networking.k8s.io/v1alpha2",),
    **dict.fromkeys(_KUBEFLOW, ("kubeflow.org/v1",)),
    "MPIJob": ("kubeflow.org/v1", "kubeflow.org/v2beta1"),
    "JobSet": ("jobset.x-k8s.io/v1alpha2",),
    "TrainJob": ("trainer.kubeflow.org/v1alpha1",),
    "TrainingRuntime": ("trainer.kubeflow.org/v1alpha1",),
    "ClusterTrainingRuntime": ("trainer.kubeflow.org/v1alpha1",),
    "RayCluster": ("ray.io/v1", "ray.io/v1alpha1"),
    "RayJob": ("ray.io/v1", "ray.io/v1alpha1"),
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io/v1",),
    "PersistentVolumeClaim": ("v1",),
    "PersistentVolume": ("v1",),
    "StorageClass": ("storage.k8s.io/v1",),
    capacity.NODEPOOL_KIND: capacity.KARPENTER_VERSIONS,
    "LocalQueue": kueue.VERSIONS,
    "ClusterQueue": kueue.VERSIONS,
    "ResourceFlavor": kueue.VERSIONS,
    "Topology": kueue.TOPOLOGY_VERSIONS,
    volcano.KIND: volcano.VERSIONS,
    capacity.NODECLAIM_KIND: capacity.KARPENTER_VERSIONS,
    **dict.fromkeys(dra.KINDS, dra.VERSIONS),
}
SUPPORTED_VERSIONS["Job"] = ("batch/v1", "batch.volcano.sh/v1alpha1")
RUNTIME_KINDS = ("TrainingRuntime", "ClusterTrainingRuntime")
SNAPSHOT_KIND = "ClusterSnapshot"  # the header of `auditor snapshot` files


@value(frozen=True)
class RawObject:
    obj: Mapping[str, Any]
    source: SourceRef
    # Read for every object by every pass of the inventory: taken from the manifest once.
    kind: str = field(init=False)
    api_version: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", str(self.obj.get("kind", "")))
        object.__setattr__(self, "api_version", str(self.obj.get("apiVersion", "")))

    @property
    def name(self) -> str:
        meta = self.obj.get("metadata")
        return str(meta.get("name", "")) if isinstance(meta, Mapping) else ""

    def namespace(self, default: str) -> str:
        meta = self.obj.get("metadata")
        ns = meta.get("namespace") if isinstance(meta, Mapping) else None
        return str(ns) if ns else default

    def is_calico(self) -> bool:
        return self.api_version.startswith(CALICO_GROUPS)


def document_problems(documents: Iterable[yamlio.Document]) -> Iterator[LoadError]:
    """Documents that are not Kubernetes objects: a list or scalar, or a mapping without kind/apiVersion."""
    for doc in documents:
        data, src = doc.data, doc.source
        if isinstance(data, list):
            yield LoadError(src.file, src.line, "document is a list, not a Kubernetes object; skipped")
        elif not isinstance(data, Mapping):
            yield LoadError(
                src.file,
                src.line,
                f"document is a {type(data).__name__} scalar, not a Kubernetes object; skipped",
            )
        elif not isinstance(data.get("kind"), str) or not isinstance(data.get("apiVersion"), str):
            missing = [k for k in ("apiVersion", "kind") if not isinstance(data.get(k), str)]
            yield LoadError(
                src.file, src.line, f"not a Kubernetes object: no {' or '.join(missing)}; skipped"
            )


def iter_objects(documents: Iterable[yamlio.Document]) -> Iterator[RawObject]:
    """Kubernetes objects in the documents, with `List`/`*List` kinds flattened."""
    for doc in documents:
        data = doc.data
        if not isinstance(data, Mapping):
            continue
        kind = data.get("kind")
        items = data.get("items")
        if isinstance(kind, str) and kind.endswith("List") and isinstance(items, list):
            for i, item in enumerate(items):
                if isinstance(item, Mapping):
                    # NamespaceList/PodList items may omit kind and apiVersion.
                    if "kind" not in item and kind != "List":
                        item = {
                            **item,
                            "kind": kind[: -len("List")],
                            "apiVersion": data.get("apiVersion", "v1"),
                        }
                    line = specs.item_line(items, i, doc.source.line)
                    yield RawObject(item, SourceRef(doc.source.file, line, doc.source.document))
            continue
        if isinstance(kind, str) and "apiVersion" in data:
            yield RawObject(data, doc.source)


def locate(obj: Any, field_path: str, default: int) -> int:
    """Best line for a dotted field path (`spec.ingress[0].from`) inside a located object."""
    node = obj
    line = default
    for part in field_path.replace("]", "").replace("[", ".").split("."):
        if not part:
            continue
        if isinstance(node, Mapping) and part in node:
            line = yamlio.key_line(node, part, line)
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            line = specs.item_line(node, int(part), line)
            node = node[int(part)]
        else:
            break
    return line


def _error(raw: RawObject, exc: SelectorError, namespace: str | None) -> LoadError:
    ns = f"{namespace}/" if namespace else ""
    return LoadError(
        raw.source.file,
        locate(raw.obj, exc.field, raw.source.line),
        exc.message,
        f"{raw.kind} {ns}{raw.name}",
        exc.field,
    )


T = TypeVar("T")


class Memo(Protocol):
    """Parsed parts of objects kept across inventories built from the same objects (the
    admission webhook builds one per request from its warm model): `make` runs only when the
    memo holds no value for this very object under `part`. Only parts that depend on the object
    alone (and on what `part` names: the namespace, the policy tier) are memoised: a Node, a
    Service, a Namespace's labels, a compiled policy with its notes; never what depends on the
    rest of the inventory (a pod's owner, a workload's runtime). An error `make` raises is never
    kept. What a memo returns is shared between inventories: nothing may change it."""

    def __call__(self, obj: Mapping[str, Any], part: str, make: Callable[[], T]) -> T: ...


def no_memo(obj: Mapping[str, Any], part: str, make: Callable[[], T]) -> T:
    """Parse every time (a scan reads each object once)."""
    return make()


@by_fields
@dataclass(frozen=True, slots=True)
class Elsewhere:
    """What the documents of a tree that are *not* given to build_inventory contribute to the
    inventory as a whole (an incremental audit builds the inventory of part of a tree): whether
    they hold the policy kinds that decide the CNI, and the per-replica label keys their
    workloads carry and the comparisons their selectors make on such keys."""

    cilium_kinds: bool = False
    calico_policies: bool = False
    replica_keys: frozenset[str] = frozenset()
    replica_tests: frozenset[ReplicaTest] = frozenset()

    @staticmethod
    def joined(parts: Iterable[Elsewhere]) -> Elsewhere:
        """What several parts of a tree contribute together."""
        cilium = calico = False
        keys: set[str] = set()
        tests: set[ReplicaTest] = set()
        for part in parts:
            cilium = cilium or part.cilium_kinds
            calico = calico or part.calico_policies
            keys |= part.replica_keys
            tests |= part.replica_tests
        return Elsewhere(cilium, calico, frozenset(keys), frozenset(tests))


NOWHERE = Elsewhere()


def cni_kinds(objects: Iterable[RawObject]) -> tuple[bool, bool]:
    """Whether the objects hold Cilium policies, and Calico (Global)NetworkPolicies: the kinds
    that decide the CNI when nothing configures it."""
    cilium = calico = False
    for r in objects:
        cilium = cilium or r.kind in CILIUM_KINDS
        calico = calico or (r.is_calico() and r.kind in ("NetworkPolicy", "GlobalNetworkPolicy"))
    return cilium, calico


def detect_cni(
    objects: Sequence[RawObject], settings: AuditSettings, elsewhere: Elsewhere = NOWHERE
) -> tuple[cni.NetworkSettings, list[LoadError]]:
    """The CNI settings in force: a cilium-config ConfigMap wins, then the config file, then what
    the policy kinds present imply."""
    errors: list[LoadError] = []
    configured = settings.network.cni
    for raw in objects:
        if raw.kind == "ConfigMap" and raw.name == "cilium-config" and configured in ("auto", "cilium"):
            data = raw.obj.get("data")
            where = f"ConfigMap {raw.namespace('kube-system')}/cilium-config ({raw.source})"
            net, problems = cni.settings_from_cilium_config(data if isinstance(data, Mapping) else {}, where)
            for p in problems:
                key = p.split(":", 1)[0]
                errors.append(
                    LoadError(
                        raw.source.file,
                        locate(raw.obj, f"data.{key}", raw.source.line),
                        p,
                        f"ConfigMap {raw.namespace('kube-system')}/cilium-config",
                        f"data.{key}",
                    )
                )
            return net, errors
    if configured != "auto":
        return settings.network.to_settings(configured, f"config file {settings.source}"), errors
    cilium, calico = cni_kinds(objects)
    if cilium or elsewhere.cilium_kinds:
        return settings.network.to_settings(
            "cilium", "inferred: Cilium policies present, no cilium-config"
        ), errors
    if calico or elsewhere.calico_policies:
        return settings.network.to_settings("calico", "inferred: Calico policies present"), errors
    return settings.network.to_settings("generic", "inferred: only Kubernetes policy kinds present"), errors


def build_inventory(
    documents: Iterable[yamlio.Document],
    settings: AuditView,
    load_errors: Iterable[LoadError] = (),
    elsewhere: Elsewhere = NOWHERE,
    *,
    manifests: bool = False,
    memo: Memo = no_memo,
    nodes: Sequence[Node] = (),
) -> Inventory:
    """`elsewhere`: what the rest of the tree contributes, when `documents` are part of it.
    `manifests`: keep each workload's manifest (Inventory.manifests), which only remediation
    reads; an audit lets them go once the inventory is built (half the memory a large scan holds).
    `memo`: parsed Nodes, Services, Namespace labels and compiled policies kept across builds
    (see Memo). `nodes`: Nodes parsed already (from objects not among `documents`; their errors
    among `load_errors`), listed first: the webhook parses the cluster's Nodes once per change of
    them, not once per request."""
    settings = AuditSettings.of(settings)  # the core keeps only what it reads
    documents = list(documents)
    load_errors = list(load_errors)
    objects = list(iter_objects(documents))
    network, cni_errors = detect_cni(objects, settings, elsewhere)
    inv = Inventory(settings, network, errors=[*load_errors, *document_problems(documents), *cni_errors])
    inv.file_order = file_order(documents, load_errors)
    inv.nodes.extend(nodes)
    default_ns = settings.kubernetes.default_namespace
    for raw in objects:
        if raw.kind == "Namespace" and not raw.is_calico():
            inv.namespaces[raw.name] = memo(raw.obj, "labels", partial(_own_labels, raw.obj))
        elif raw.kind == "Tier" and raw.is_calico():
            spec_raw = raw.obj.get("spec")
            spec: Mapping[str, Any] = spec_raw if isinstance(spec_raw, Mapping) else {}
            order = spec.get("order")
            inv.calico_tiers[raw.name] = (
                float(order) if isinstance(order, (int, float)) else float("inf"),
                str(spec.get("defaultAction") or "Deny"),
            )
    np_tier = "calico:default" if network.cni == "calico" else NAMESPACE_TIER
    inv.runtimes = {
        (
            raw.kind,
            "" if raw.kind == "ClusterTrainingRuntime" else raw.namespace(default_ns),
            raw.name,
        ): raw.obj
        for raw in objects
        if raw.kind in RUNTIME_KINDS and raw.api_version in SUPPORTED_VERSIONS[raw.kind]
    }
    _storage(objects, inv, default_ns)
    owned = _live_state(objects, inv, default_ns)
    for raw in objects:
        if id(raw) in owned:
            continue  # created by a controller we also read: audited through its owner
        try:
            _load_object(raw, inv, default_ns, np_tier, manifests, memo)
        except SelectorError as exc:
            cluster_scoped = raw.kind in _CLUSTER_SCOPED_SELECTING
            inv.errors.append(_error(raw, exc, None if cluster_scoped else raw.namespace(default_ns)))
    if inv.queues:
        inv.workloads, inv.admissions, kueue_notes = kueue.apply(inv.workloads, inv.queues)
        inv.file_notes.extend(kueue_notes)
        inv._by_name_for = []
    _split_per_replica(objects, inv, elsewhere)
    _provision(inv)
    inv.volcano = volcano.job_domains(inv.workloads, inv.hypernodes, inv.nodes)
    return inv


def _own_labels(obj: Mapping[str, Any]) -> Labels:
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return freeze_labels(labels if isinstance(labels, Mapping) else None)


def file_order(documents: Iterable[yamlio.Document], errors: Iterable[LoadError]) -> dict[str, int]:
    """Rank of each file in what reports list per file: files with documents in the order read,
    then files without (a file that could not be read, or held only errors)."""
    order = dict.fromkeys(d.source.file for d in documents)
    order.update(dict.fromkeys(e.file for e in errors if e.file not in order))
    return {f: i for i, f in enumerate(order)}


POLICY_KINDS = ("NetworkPolicy", "GlobalNetworkPolicy", *CILIUM_KINDS, *ADMIN_KINDS)
_CLUSTER_SCOPED_SELECTING = frozenset(
    (
        *ADMIN_KINDS,
        "CiliumClusterwideNetworkPolicy",
        "GlobalNetworkPolicy",
        "Node",
        "NodePool",
        "NodeClaim",
        "ClusterQueue",
        "ResourceFlavor",
        "Topology",
        "HyperNode",
        *dra.CLUSTER_KINDS,
    )
)
"""Kinds with selectors that have no namespace: a selector error in one names no namespace."""


def replica_facts(
    objects: Iterable[RawObject],
    workloads: Sequence[Workload],
    services: Sequence[Service],
    keys: frozenset[str],
) -> frozenset[ReplicaTest]:
    """The comparisons on per-replica `keys` the Services, workloads and the policy manifests
    among `objects` make."""
    policies = (raw.obj for raw in objects if raw.kind in POLICY_KINDS)
    return replicas.mentioned_tests(workloads, services, policies, keys)


def _split_per_replica(objects: Sequence[RawObject], inv: Inventory, elsewhere: Elsewhere) -> None:
    """Roles whose per-replica labels some selector reads become one role per class of replicas
    (workloads/replicas.py); elsewhere nothing changes."""
    keys = replicas.replica_keys(inv.workloads) | elsewhere.replica_keys
    if not keys:
        return
    tests = replica_facts(objects, inv.workloads, inv.services, keys) | elsewhere.replica_tests
    if tests:
        inv.workloads, notes = replicas.split_workloads(
            inv.workloads, tests, inv.settings.kubernetes.version_tuple()
        )
        inv.file_notes.extend(notes)
        inv._by_name_for = []  # workloads replaced: index again on next use


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _controller(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ownerReference marked `controller: true` (the object that manages this one)."""
    refs = _meta(obj).get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, Mapping) and ref.get("controller") is True and ref.get("kind") and ref.get("name"):
            return ref
    return None


class Owners:
    """The objects read that can own pods, by kind, namespace and name: the one owner resolver,
    for a live cluster, a snapshot and files in a tree alike.

    A reference matches an object of its kind and name in the referring object's namespace, and
    by uid too when both carry one (a manifest in Git has none; a dump of a cluster has). A
    ReplicaSet that is not read stands for the Deployment that created it: its name is the
    Deployment's plus `-<pod-template-hash>`, and the pod carries that hash as a label.
    """

    def __init__(self, objects: Iterable[RawObject], default_ns: str) -> None:
        self.default_ns = default_ns
        self._by_name: dict[tuple[str, str, str], list[RawObject]] = {}
        for raw in objects:
            if raw.kind != "Pod" and (raw.kind in ADAPTERS or raw.kind in CONTEXT_KINDS):
                self._by_name.setdefault((raw.kind, raw.namespace(default_ns), raw.name), []).append(raw)

    def __bool__(self) -> bool:
        return bool(self._by_name)

    def _find(self, ref: Mapping[str, Any], kind: str, namespace: str, name: str) -> RawObject | None:
        uid = str(ref.get("uid") or "")
        group = str(ref.get("apiVersion") or "").rpartition("/")[0]
        found: RawObject | None = None
        for raw in self._by_name.get((kind, namespace, name), ()):
            have = str(_meta(raw.obj).get("uid") or "")
            if uid and have and have != uid:
                continue  # another object of that name: the owner was deleted and recreated
            if raw.api_version.rpartition("/")[0] == group:
                return raw  # batch/v1 Job and Volcano Job share a kind name
            found = found or raw
        return found

    def parent(self, raw: RawObject) -> tuple[Mapping[str, Any] | None, RawObject | None]:
        """The controller reference of `raw`, and the object it names among those read."""
        ref = _controller(raw.obj)
        if ref is None:
            return None, None
        namespace = raw.namespace(self.default_ns)
        kind, name = str(ref["kind"]), str(ref["name"])
        found = self._find(ref, kind, namespace, name)
        if found is None and kind == "ReplicaSet" and raw.kind == "Pod":
            labels = _meta(raw.obj).get("labels")
            suffix = f"-{labels.get('pod-template-hash')}" if isinstance(labels, Mapping) else ""
            read = ("ReplicaSet", namespace, name) in self._by_name
            if not read and len(suffix) > 1 and name.endswith(suffix):
                found = self._find({"apiVersion": "apps/v1"}, "Deployment", namespace, name[: -len(suffix)])
        return ref, found

    def top(self, owner: RawObject) -> RawObject:
        """The top of the owner chain among the objects read (ReplicaSet → Deployment, Job →
        JobSet or CronJob); a cycle or a chain longer than 8 stops where it is."""
        for _ in range(8):
            _, parent = self.parent(owner)
            if parent is None:
                break
            owner = parent
        return owner


def _live_state(objects: Sequence[RawObject], inv: Inventory, default_ns: str) -> set[int]:
    """Live pods (with their top-level owner) and the controller-created objects to skip.

    A Pod bound to a node or with a phase (read from a cluster, a snapshot, or a `kubectl get
    pods -o yaml` dump in the tree) is an observation of the workload its ownerReferences lead to.
    A ReplicaSet created by a Deployment, a Job created by a CronJob or a JobSet, a Pod created by
    any of them is audited through its owner, not again on its own. Returns the ids of the skipped
    objects. A pod whose owner is not read is a workload of its own; a note says how many.
    """
    owners = Owners(objects, default_ns)
    if not owners and not any(raw.kind == "Pod" for raw in objects):
        return set()
    skipped: set[int] = set()
    orphans: list[tuple[RawObject, Mapping[str, Any]]] = []
    for raw in objects:
        if not (raw.kind in ADAPTERS or raw.kind in CONTEXT_KINDS):
            continue
        ref, owner = owners.parent(raw)
        if owner is not None:
            skipped.add(id(raw))
        if raw.kind != "Pod" or raw.api_version != "v1":
            continue
        spec = raw.obj.get("spec") if isinstance(raw.obj.get("spec"), Mapping) else {}
        status = raw.obj.get("status") if isinstance(raw.obj.get("status"), Mapping) else {}
        node = spec.get("nodeName") if isinstance(spec, Mapping) else None
        phase = status.get("phase") if isinstance(status, Mapping) else None
        if not node and not phase:
            continue  # a manifest, not a pod a cluster reported
        top: tuple[str, str] | None = None
        if owner is not None:
            found = owners.top(owner)
            top = (found.kind, found.name)
        elif ref is not None and ref.get("kind") != "Node":  # a static pod's mirror is bare anyway
            orphans.append((raw, ref))
        message = ""
        for cond in status.get("conditions") or [] if isinstance(status, Mapping) else []:
            if (
                isinstance(cond, Mapping)
                and cond.get("type") == "PodScheduled"
                and cond.get("status") == "False"
            ):
                message = str(cond.get("message") or cond.get("reason") or "not scheduled")
        labels = _meta(raw.obj).get("labels")
        inv.live_pods.append(
            LivePod(
                raw.namespace(default_ns),
                raw.name,
                freeze_labels(labels if isinstance(labels, Mapping) else None),
                str(node) if node else None,
                str(phase or ""),
                top,
                message,
                raw.source,
            )
        )
    if orphans:
        raw, ref = orphans[0]
        inv.notes.append(
            f"{len(orphans)} pod(s) name an owner that is not among the objects read, or whose uid "
            f"differs (e.g. {raw.namespace(default_ns)}/{raw.name}, owned by {ref.get('kind')} "
            f"{ref.get('name')}): each is audited as a workload of its own"
        )
    return skipped


def _zone_values(expressions: Any) -> set[str] | None:
    """Values of `In` requirements on a zone key (`topology.kubernetes.io/zone`, CSI `*/zone` keys)."""
    found: set[str] | None = None
    for expr in expressions if isinstance(expressions, list) else []:
        if not isinstance(expr, Mapping):
            continue
        key = str(expr.get("key", ""))
        if (key.endswith("/zone") or key.endswith(".zone")) and expr.get("operator", "In") == "In":
            values = {str(v) for v in expr.get("values") or []}
            found = values if found is None else found & values
    return found


def _storage(objects: Sequence[RawObject], inv: Inventory, default_ns: str) -> None:
    """Zone confinement of claims (the scheduler's VolumeZone and volume binding)."""
    pv_zones: dict[str, frozenset[str]] = {}
    for raw in objects:
        spec = raw.obj.get("spec") if isinstance(raw.obj.get("spec"), Mapping) else {}
        assert isinstance(spec, Mapping)
        if raw.kind == "StorageClass" and raw.api_version == "storage.k8s.io/v1":
            zones: set[str] = set()
            for topo in raw.obj.get("allowedTopologies") or []:
                if isinstance(topo, Mapping):
                    zones |= (
                        _zone_values(
                            [
                                {**e, "operator": "In"}
                                for e in topo.get("matchLabelExpressions") or []
                                if isinstance(e, Mapping)
                            ]
                        )
                        or set()
                    )
            if zones:
                inv.class_zones[raw.name] = frozenset(zones)
        elif raw.kind == "PersistentVolume" and raw.api_version == "v1":
            affinity = spec.get("nodeAffinity")
            required = affinity.get("required") if isinstance(affinity, Mapping) else None
            terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
            zones = set()
            for term in terms if isinstance(terms, list) else []:
                if isinstance(term, Mapping):
                    zones |= _zone_values(term.get("matchExpressions")) or set()
            meta = raw.obj.get("metadata") if isinstance(raw.obj.get("metadata"), Mapping) else {}
            assert isinstance(meta, Mapping)
            labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
            assert isinstance(labels, Mapping)
            for key in ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone"):
                if key in labels:
                    zones.add(str(labels[key]))
            if zones:
                pv_zones[raw.name] = frozenset(zones)
    for raw in objects:
        if raw.kind == "PersistentVolumeClaim" and raw.api_version == "v1":
            spec = raw.obj.get("spec") if isinstance(raw.obj.get("spec"), Mapping) else {}
            assert isinstance(spec, Mapping)
            zones_of = pv_zones.get(str(spec.get("volumeName") or ""))
            if zones_of is None:
                zones_of = inv.class_zones.get(str(spec.get("storageClassName") or ""))
            if zones_of is not None:
                inv.claim_zones[(raw.namespace(default_ns), raw.name)] = zones_of


def _snapshot_header(raw: RawObject, inv: Inventory) -> None:
    """The header `auditor snapshot` writes: which cluster, when, and what could not be read."""
    spec_raw = raw.obj.get("spec")
    spec: Mapping[str, Any] = spec_raw if isinstance(spec_raw, Mapping) else {}
    inv.file_notes.append(
        (
            raw.source.file,
            f"snapshot of cluster {spec.get('context', '?')} "
            f"({spec.get('serverVersion') or 'version unknown'}) read at {spec.get('readAt', '?')}",
        )
    )
    for p in spec.get("problems") or []:
        if not isinstance(p, Mapping):
            continue
        text = f"{p.get('what')}: {p.get('message')}"
        if p.get("problem") == "absent":
            inv.file_notes.append((raw.source.file, text))
        else:
            grant = f"; grant it with: {p.get('rbac')}" if p.get("rbac") else ""
            inv.errors.append(
                LoadError(raw.source.file, raw.source.line, f"the snapshot is incomplete: {text}{grant}")
            )


def _load_object(
    raw: RawObject, inv: Inventory, default_ns: str, np_tier: str, manifests: bool, memo: Memo = no_memo
) -> None:
    kind = raw.kind
    ns = raw.namespace(default_ns)
    if kind == SNAPSHOT_KIND and raw.api_version.startswith("placement-auditor.io/"):
        _snapshot_header(raw, inv)
        return
    supported = SUPPORTED_VERSIONS.get(kind)
    if kind == "ConfigMap" and (ns, raw.name) == capacity.AUTOSCALER_STATUS and raw.api_version == "v1":
        _autoscaler_status(raw, inv)
        return
    if supported is None:
        if kind not in ("Tier", "ConfigMap") or (kind == "ConfigMap" and raw.name != "cilium-config"):
            at = (raw.source.file, kind)
            inv.skipped[at] = inv.skipped.get(at, 0) + 1
        return
    if raw.api_version not in supported:
        raise specs.PolicyError(
            "apiVersion",
            f"{raw.api_version!r} is not a supported apiVersion of {kind} "
            f"(supported: {', '.join(supported)})",
        )
    if not raw.name:
        raise specs.PolicyError("metadata.name", "is required")
    if kind == "Namespace":
        return
    if raw.is_calico():
        if kind in ("NetworkPolicy", "GlobalNetworkPolicy", "StagedNetworkPolicy"):
            if inv.network.cni != "calico":
                inv.file_notes.append(
                    (raw.source.file, f"Calico {kind} {raw.name}: not enforced, the CNI is {inv.network.cni}")
                )
                return
            notes: list[str] = []

            def make_calico() -> tuple[CompiledPolicy, tuple[str, ...]]:
                scope = ns if kind == "NetworkPolicy" else None
                return calico.compile_calico_policy(raw.obj, raw.source, scope, notes), tuple(notes)

            try:
                policy, said = memo(raw.obj, f"calico:{ns}", make_calico)
            except BaseException:
                inv.file_notes.extend((raw.source.file, n) for n in notes)
                raise
            inv.policies.append(policy)
            inv.file_notes.extend((raw.source.file, n) for n in said)
        return
    if kind == "NetworkPolicy":
        specs.mapping(raw.obj, "", ("apiVersion", "kind", "metadata", "spec", "status"))
        inv.policies.append(
            memo(
                raw.obj,
                f"netpol:{ns}:{np_tier}",
                lambda: netpol.compile_network_policy(raw.obj, raw.source, ns, np_tier),
            )
        )
    elif kind in CILIUM_KINDS:
        specs.mapping(raw.obj, "", ("apiVersion", "kind", "metadata", "spec", "specs", "status"))
        if inv.network.cni != "cilium":
            inv.file_notes.append(
                (raw.source.file, f"{kind} {raw.name}: not enforced, the CNI is {inv.network.cni}")
            )
            return

        def make_cilium() -> tuple[list[CompiledPolicy], list[LoadError], list[str]]:
            scope = ns if kind == "CiliumNetworkPolicy" else None
            return cilium.compile_cilium_policy(raw.obj, raw.source, scope, NAMESPACE_TIER)

        policies, errors, cilium_notes = memo(raw.obj, f"cilium:{ns}", make_cilium)
        inv.policies.extend(policies)
        inv.errors.extend(errors)
        inv.file_notes.extend((raw.source.file, n) for n in cilium_notes)
        inv._by_name_for = []  # workloads replaced: index again on next use
    elif kind in ADMIN_KINDS:
        specs.mapping(raw.obj, "", ("apiVersion", "kind", "metadata", "spec", "status"))
        inv.policies.append(
            memo(raw.obj, "admin", lambda: adminpolicy.compile_admin_policy(raw.obj, raw.source))
        )
    elif kind == "Node":
        inv.nodes.append(memo(raw.obj, "node", lambda: parse_node(raw)))
    elif kind == volcano.KIND:
        inv.hypernodes.append(
            memo(raw.obj, "hypernode", lambda: volcano.parse_hypernode(raw.obj, raw.source))
        )
    elif kind == "ResourceSlice":
        slice_devices = memo(raw.obj, "resourceslice", lambda: dra.parse_slice(raw.obj, raw.source))
        inv.devices.devices.extend(slice_devices)
    elif kind in dra.KINDS:
        dra.read(kind, raw.obj, ns, raw.source, inv.devices)
    elif kind in kueue.KINDS:
        kueue.read(kind, raw.obj, ns, raw.source, inv.queues)
    elif kind == capacity.NODEPOOL_KIND:
        pool = memo(raw.obj, "nodepool", lambda: capacity.parse_node_pool(raw.obj, raw.source))
        inv.capacity = dataclasses.replace(inv.capacity, pools=(*inv.capacity.pools, pool))
    elif kind == capacity.NODECLAIM_KIND:
        zone_key = inv.settings.topology.zone_key
        claim, became = memo(
            raw.obj, f"nodeclaim:{zone_key}", lambda: capacity.parse_node_claim(raw.obj, raw.source, zone_key)
        )
        if claim is None:
            inv.file_notes.append(
                (raw.source.file, f"NodeClaim {raw.name} names no zone yet: where it lands is not known")
            )
        else:
            inv.capacity = dataclasses.replace(inv.capacity, claims=(*inv.capacity.claims, (claim, became)))
    elif kind == "Service":
        inv.services.append(memo(raw.obj, f"service:{ns}", lambda: parse_service(raw, ns)))
    elif kind in ADAPTERS or kind in CONTEXT_KINDS:
        ref = WorkloadRef(raw.api_version, kind, ns, raw.name, raw.source)
        inv.workloads.append(adapt(raw.obj, ref, inv.runtimes))
        if manifests:
            inv.manifests[ref] = raw.obj


def parse_node(raw: RawObject) -> Node:
    meta = specs.mapping(raw.obj.get("metadata"), "metadata")
    spec = specs.mapping(raw.obj.get("spec"), "spec")
    status = specs.mapping(raw.obj.get("status"), "status")
    taints = []
    for i, t in enumerate(specs.seq(spec.get("taints"), "spec.taints")):
        tb = specs.mapping(t, f"spec.taints[{i}]")
        effect = str(tb.get("effect") or "")
        if effect not in ("NoSchedule", "NoExecute", "PreferNoSchedule"):
            raise specs.PolicyError(
                f"spec.taints[{i}].effect",
                f"must be NoSchedule, PreferNoSchedule or NoExecute, got {effect!r}",
            )
        taints.append(
            Taint(specs.string(tb.get("key"), f"spec.taints[{i}].key"), str(tb.get("value") or ""), effect)
        )
    cidrs = [str(c) for c in specs.seq(spec.get("podCIDRs"), "spec.podCIDRs")]
    if spec.get("podCIDR") and str(spec["podCIDR"]) not in cidrs:
        cidrs.insert(0, str(spec["podCIDR"]))
    addresses = tuple(
        str(a.get("address"))
        for a in specs.seq(status.get("addresses"), "status.addresses")
        if isinstance(a, Mapping) and a.get("address")
    )
    allocatable = specs.mapping(status.get("allocatable"), "status.allocatable")
    annotations = specs.mapping(meta.get("annotations"), "metadata.annotations")
    node = Node(
        raw.name,
        freeze_labels(specs.mapping(meta.get("labels"), "metadata.labels")),
        tuple(taints),
        bool(spec.get("unschedulable")),
        tuple(sorted((str(k), str(v)) for k, v in allocatable.items())),
        tuple(cidrs),
        addresses,
        raw.source,
    )
    return capacity.template_group(node, annotations) if capacity.TEMPLATE_ANNOTATION in annotations else node


def _autoscaler_status(raw: RawObject, inv: Inventory) -> None:
    """kube-system/cluster-autoscaler-status: the node groups that cannot grow (their templates
    make no node)."""
    data = specs.mapping(raw.obj.get("data"), "data")
    text = data.get("status")
    if not isinstance(text, str):
        raise specs.PolicyError("data.status", "must be the cluster-autoscaler's status text")
    full = capacity.autoscaler_full_groups(text)
    inv.capacity = dataclasses.replace(inv.capacity, full_groups={**(inv.capacity.full_groups or {}), **full})


def _provision(inv: Inventory) -> None:
    """The nodes the provisioners of the inventory can make, after the nodes it holds."""
    if not inv.capacity:
        return
    kept, made, notes = capacity.provisioned(inv.capacity, inv.nodes, inv.settings.topology.zone_key)
    inv.nodes[:] = [*kept, *made]
    inv.file_notes.extend(notes)


def parse_service(raw: RawObject, namespace: str) -> Service:
    spec = specs.mapping(raw.obj.get("spec"), "spec")
    ports = []
    for i, p in enumerate(specs.seq(spec.get("ports"), "spec.ports")):
        pb = specs.mapping(p, f"spec.ports[{i}]")
        port = specs.integer(pb.get("port"), f"spec.ports[{i}].port", 1, 65535)
        target = pb.get("targetPort", port)
        ports.append(
            ServicePort(str(pb.get("name") or ""), port, str(target), str(pb.get("protocol") or "TCP"))
        )
    selector = specs.mapping(spec.get("selector"), "spec.selector")
    distribution = str(spec.get("trafficDistribution") or "")
    if distribution and distribution not in routing.TRAFFIC_DISTRIBUTIONS:
        raise specs.PolicyError(
            "spec.trafficDistribution",
            f"must be one of {', '.join(routing.TRAFFIC_DISTRIBUTIONS)}, got {distribution!r}",
        )
    internal = str(spec.get("internalTrafficPolicy") or "")
    if internal and internal not in ("Cluster", "Local"):
        raise specs.PolicyError("spec.internalTrafficPolicy", f"must be Cluster or Local, got {internal!r}")
    annotations = specs.mapping(_meta(raw.obj).get("annotations"), "metadata.annotations")
    return Service(
        namespace,
        raw.name,
        freeze_labels(selector),
        tuple(ports),
        raw.source,
        str(spec.get("clusterIP") or ""),
        distribution,
        internal,
        routing.topology_mode(annotations),
    )
