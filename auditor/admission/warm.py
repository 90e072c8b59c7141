"""The webhook's warm model of a cluster: every object the live audit reads, kept current by the
informer's list-then-watch (auditor/sources/informer.py feeds it as its `Sink`), in buckets per
namespace ("" holds the cluster-scoped objects) with a version per bucket.

A request never lists the API: `documents` hands out the objects of the buckets it needs, and
`related` finds which workloads a workload can have edges with, through an index of what each
workload's text names (Service DNS names, pod names, workload names) kept up to date as events
arrive; so an answer reads a few namespaces, not the cluster. Objects are replaced, never changed
in place: a snapshot taken under the lock stays valid after it.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from auditor import yamlio
from auditor.model.source import SourceRef
from auditor.sources.cluster import allowed
from auditor.sources.kubeapi import CILIUM_CONFIG, RESOURCES, Resource, _prepare

T = TypeVar("T")
NODE = ("", "Node")

# (API group, kind) of what the webhook answers for.
WORKLOAD_KINDS: frozenset[tuple[str, str]] = frozenset(
    {
        ("apps", "Deployment"),
        ("apps", "StatefulSet"),
        ("apps", "DaemonSet"),
        ("batch", "Job"),
        ("batch", "CronJob"),
        *(
            ("kubeflow.org", k)
            for k in ("PyTorchJob", "TFJob", "XGBoostJob", "PaddleJob", "JAXJob", "MPIJob")
        ),
        ("trainer.kubeflow.org", "TrainJob"),
        ("jobset.x-k8s.io", "JobSet"),
        ("ray.io", "RayCluster"),
        ("ray.io", "RayJob"),
        ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
        ("batch.volcano.sh", "Job"),
    }
)
POLICY_KINDS: frozenset[tuple[str, str]] = frozenset(
    {
        ("networking.k8s.io", "NetworkPolicy"),
        ("cilium.io", "CiliumNetworkPolicy"),
        ("cilium.io", "CiliumClusterwideNetworkPolicy"),
        ("policy.networking.k8s.io", "AdminNetworkPolicy"),
        ("policy.networking.k8s.io", "BaselineAdminNetworkPolicy"),
        ("policy.networking.k8s.io", "ClusterNetworkPolicy"),
        ("crd.projectcalico.org", "NetworkPolicy"),
        ("crd.projectcalico.org", "GlobalNetworkPolicy"),
        ("projectcalico.org", "NetworkPolicy"),
        ("projectcalico.org", "GlobalNetworkPolicy"),
    }
)
# Kinds a workload check reads of the namespaces it involves; Pods and ReplicaSets only where a
# running group matters (a policy check): a workload being applied has no pods yet.
_CONTEXT = frozenset(
    {
        ("", "Service"),
        ("", "PersistentVolumeClaim"),
        ("trainer.kubeflow.org", "TrainingRuntime"),
        ("kueue.x-k8s.io", "LocalQueue"),  # where Kueue admits the namespace's workloads
        ("resource.k8s.io", "ResourceClaim"),  # DRA: where the namespace's claims can be met
        ("resource.k8s.io", "ResourceClaimTemplate"),
    }
)
_LIVE = frozenset({("", "Pod"), ("apps", "ReplicaSet")})

_HOST = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*", re.IGNORECASE)

Key = tuple[str, str, str]  # (API group, kind, name) within a bucket
WorkloadId = tuple[str, str, str, str]  # (namespace, API group, kind, name)


def group_of(obj: Mapping[str, Any]) -> str:
    api = obj.get("apiVersion")
    return api.rpartition("/")[0] if isinstance(api, str) and "/" in api else ""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def identity(obj: Mapping[str, Any], namespace: str = "") -> WorkloadId:
    meta = _meta(obj)
    return (
        str(meta.get("namespace") or namespace),
        group_of(obj),
        str(obj.get("kind") or ""),
        str(meta.get("name") or ""),
    )


def _strings(value: Any, out: list[str], depth: int = 0) -> None:
    if depth > 40:
        return
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, Mapping):
        for v in value.values():
            _strings(v, out, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out, depth + 1)


def _prefixes(word: str) -> Iterator[str]:
    """A pod or host name and its shorter forms at '-': `job-worker-0` names `job-worker` and `job`."""
    yield word
    while "-" in word:
        word = word.rpartition("-")[0]
        if word:
            yield word


def references(obj: Mapping[str, Any], namespace: str) -> set[tuple[str, str]]:
    """(namespace, name) pairs the object's text can name: a host `a.b.svc…` names `a` in `b` (and
    in its own namespace, where `b` may be a subdomain); a bare word names it in its own namespace."""
    texts: list[str] = []
    _strings(obj.get("spec"), texts)
    _strings(_meta(obj).get("annotations"), texts)
    out: set[tuple[str, str]] = set()
    for text in texts:
        for match in _HOST.finditer(text):
            parts = match.group(0).lower().split(".")
            for word in _prefixes(parts[0]):
                out.add((namespace, word))
                if len(parts) > 1:
                    out.add((parts[1], word))
    return out


def _label_maps(value: Any, out: list[Mapping[str, Any]], depth: int = 0) -> None:
    """Every `labels` map of the object and its templates."""
    if depth > 40:
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            if k == "labels" and isinstance(v, Mapping):
                out.append(v)
            else:
                _label_maps(v, out, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _label_maps(v, out, depth + 1)


def _selects(selector: Mapping[str, Any], labels: Iterable[Mapping[str, Any]]) -> bool:
    return bool(selector) and any(all(m.get(k) == v for k, v in selector.items()) for m in labels)


@dataclass(frozen=True, slots=True)
class Health:
    """Whether answers can be trusted: every resource listed once, and none broken too long."""

    synced: bool
    stale_seconds: float  # how long the oldest broken resource has been broken (0: none)
    problems: tuple[str, ...]  # "Kind: message" of each broken resource


class WarmModel:
    """The informer's sink (see the module docstring)."""

    def __init__(self, context: str, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.context = context
        self.monotonic = monotonic
        self._lock = threading.Lock()
        self._buckets: dict[str, dict[Key, dict[str, Any]]] = defaultdict(dict)
        self._versions: dict[str, int] = defaultdict(int)
        self._synced: set[str] = set()
        self._expected: set[str] = set()
        self._broken: dict[str, tuple[float, str]] = {}  # resource label -> (since, message)
        # Workload text index: (namespace, word) -> workloads whose text names it.
        self._named_by: dict[tuple[str, str], set[WorkloadId]] = defaultdict(set)
        self._refs: dict[WorkloadId, set[tuple[str, str]]] = {}
        self._names_cache: dict[str, tuple[int, dict[str, set[WorkloadId]]]] = {}
        # Per object held (by id: the model holds the object, so the id is its own while kept):
        # its document, and what build_inventory parsed of it (`memo`); dropped with the object.
        self._docs: dict[int, yamlio.Document] = {}
        self._parsed: dict[int, dict[str, Any]] = {}
        self._kinds: Counter[tuple[str, str]] = Counter()  # (group, kind) -> objects held

    # -- the informer's Sink -------------------------------------------------------------------

    @staticmethod
    def label(resource: Resource) -> str:
        return f"{resource.kind} ({resource.api_version})"

    def expect(self, resources: Iterable[Resource]) -> None:
        """The resources that must have listed once before the model is synced."""
        with self._lock:
            self._expected |= {self.label(r) for r in resources}

    def replace(
        self,
        resource: Resource,
        items: list[dict[str, Any]],
        resource_version: str,
        namespace: str | None = None,
    ) -> None:
        """The whole set of one resource, after a (re)list; `namespace`: of that namespace only
        (cilium-config is listed per namespace it may live in)."""
        group, kind = resource.group, resource.kind
        with self._lock:
            for ns, bucket in self._buckets.items():
                gone = [
                    k
                    for k in bucket
                    if k[0] == group
                    and k[1] == kind
                    and (namespace is None or _bucket_namespace(ns, k) == namespace)
                ]
                for key in gone:
                    self._drop(ns, key)
                if gone:
                    self._versions[ns] += 1
            for item in items:
                self._put(resource, item)
            self._synced.add(self.label(resource))
            self._broken.pop(self.label(resource), None)

    def load(self, objects: Iterable[Mapping[str, Any]]) -> None:
        """A whole list of objects at once, as the informer's first lists give them (tests, the
        benchmark, a snapshot): every resource of RESOURCES is then synced."""
        per: dict[Resource, list[dict[str, Any]]] = {r: [] for r in RESOURCES}
        flat: list[Mapping[str, Any]] = []
        for obj in objects:
            items = obj.get("items")
            if str(obj.get("kind") or "").endswith("List") and isinstance(items, list):
                flat.extend(i for i in items if isinstance(i, Mapping))
            else:
                flat.append(obj)
        for obj in flat:
            resource = resource_for(group_of(obj), str(obj.get("kind") or ""))
            if resource is None and obj.get("kind") == "ConfigMap":
                resource = CILIUM_CONFIG
            if resource is not None:
                per.setdefault(resource, []).append(dict(obj))
        self.expect(per)
        for resource, items in per.items():
            self.replace(resource, items, "")

    def upsert(self, resource: Resource, item: dict[str, Any]) -> None:
        with self._lock:
            self._put(resource, item)
            self._broken.pop(self.label(resource), None)

    def delete(self, resource: Resource, item: dict[str, Any]) -> None:
        ns, key = _place(resource, _prepare(item, resource))
        with self._lock:
            if key in self._buckets.get(ns, {}):
                self._drop(ns, key)
                self._versions[ns] += 1

    def state(self, resource: Resource, status: Any) -> None:
        """An informer ResourceState: synced, healthy, problem, message."""
        label = self.label(resource)
        with self._lock:
            if getattr(status, "synced", False):
                self._synced.add(label)
            if getattr(status, "healthy", True):
                self._broken.pop(label, None)
            elif label not in self._broken:
                self._broken[label] = (self.monotonic(), str(getattr(status, "message", "") or "broken"))

    def _put(self, resource: Resource, item: dict[str, Any]) -> None:
        item = _prepare(item, resource)
        if not allowed(item):
            return
        ns, key = _place(resource, item)
        if key in self._buckets[ns]:
            self._drop(ns, key)
        self._buckets[ns][key] = item
        self._docs[id(item)] = yamlio.Document(item, origin(self.context, item))
        self._kinds[key[:2]] += 1
        self._versions[ns] += 1
        if (resource.group, resource.kind) in WORKLOAD_KINDS:
            wid = (ns, resource.group, resource.kind, key[2])
            refs = references(item, ns)
            self._refs[wid] = refs
            for ref in refs:
                self._named_by[ref].add(wid)

    def _drop(self, ns: str, key: Key) -> None:
        item = self._buckets[ns].pop(key, None)
        if item is not None:
            self._docs.pop(id(item), None)
            self._parsed.pop(id(item), None)
            self._kinds[key[:2]] -= 1
            if self._kinds[key[:2]] <= 0:
                del self._kinds[key[:2]]
        wid = (ns, *key)
        for ref in self._refs.pop(wid, ()):
            holders = self._named_by.get(ref)
            if holders is not None:
                holders.discard(wid)
                if not holders:
                    del self._named_by[ref]

    # -- what a request reads ------------------------------------------------------------------

    def health(self) -> Health:
        now = self.monotonic()
        with self._lock:
            synced = self._expected <= self._synced
            oldest = min((since for since, _ in self._broken.values()), default=now)
            problems = tuple(f"{label}: {msg}" for label, (_, msg) in sorted(self._broken.items()))
        return Health(synced, max(0.0, now - oldest) if self._broken else 0.0, problems)

    def versions(self, namespaces: Iterable[str]) -> tuple[tuple[str, int], ...]:
        with self._lock:
            return tuple((ns, self._versions.get(ns, 0)) for ns in sorted({"", *namespaces}))

    def version(self, namespace: str) -> int:
        """The version of one bucket ("" : the cluster-scoped objects)."""
        with self._lock:
            return self._versions.get(namespace, 0)

    def namespaces(self) -> list[str]:
        """Every namespace the model holds objects of."""
        with self._lock:
            return sorted(ns for ns, bucket in self._buckets.items() if ns and bucket)

    def namespaces_with_workloads(self) -> list[str]:
        with self._lock:
            return sorted(
                ns
                for ns, bucket in self._buckets.items()
                if ns and any(k[:2] in WORKLOAD_KINDS for k in bucket)
            )

    def get(self, namespace: str, group: str, kind: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._buckets.get(namespace, {}).get((group, kind, name))

    def namespace_object(self, name: str) -> Mapping[str, Any] | None:
        return self.get("", "", "Namespace", name)

    def workloads(self, namespace: str) -> list[WorkloadId]:
        with self._lock:
            return [(namespace, *k) for k in self._buckets.get(namespace, {}) if k[:2] in WORKLOAD_KINDS]

    def _names(self, namespace: str) -> dict[str, set[WorkloadId]]:
        """name -> workloads of the namespace it names: their own names, and the Services whose
        selector matches one of their label maps (cached per bucket version; under the lock)."""
        version = self._versions.get(namespace, 0)
        cached = self._names_cache.get(namespace)
        if cached is not None and cached[0] == version:
            return cached[1]
        bucket = self._buckets.get(namespace, {})
        names: dict[str, set[WorkloadId]] = defaultdict(set)
        services = [
            (k[2], o.get("spec", {}).get("selector") or {})
            for k, o in bucket.items()
            if k[:2] == ("", "Service") and isinstance(o.get("spec"), Mapping)
        ]
        for key, obj in bucket.items():
            if key[:2] not in WORKLOAD_KINDS:
                continue
            wid = (namespace, *key)
            names[key[2].lower()].add(wid)
            labels: list[Mapping[str, Any]] = []
            _label_maps(obj, labels)
            for svc, selector in services:
                if isinstance(selector, Mapping) and _selects(selector, labels):
                    names[svc.lower()].add(wid)
        self._names_cache[namespace] = (version, names)
        return names

    def names_of(self, obj: Mapping[str, Any], namespace: str) -> set[str]:
        """The words that name this workload: its name, and the Services in force that select it."""
        labels: list[Mapping[str, Any]] = []
        _label_maps(obj, labels)
        out = {str(_meta(obj).get("name") or "").lower()}
        with self._lock:
            for key, svc in self._buckets.get(namespace, {}).items():
                if key[:2] != ("", "Service") or not isinstance(svc.get("spec"), Mapping):
                    continue
                selector = svc["spec"].get("selector") or {}
                if isinstance(selector, Mapping) and _selects(selector, labels):
                    out.add(key[2].lower())
        out.discard("")
        return out

    def related(
        self, obj: Mapping[str, Any], namespace: str, skip: WorkloadId | None = None
    ) -> set[WorkloadId]:
        """The workloads this workload can have an edge with: those its text names, and those whose
        text names it (a conservative superset: a word that merely looks like a name pulls a workload in)."""
        refs = references(obj, namespace)
        names = self.names_of(obj, namespace)
        out: set[WorkloadId] = set()
        with self._lock:
            by_ns: dict[str, list[str]] = defaultdict(list)
            for ns, word in refs:
                by_ns[ns].append(word)
            for ns, words in by_ns.items():
                if ns not in self._buckets:
                    continue
                index = self._names(ns)
                for word in words:
                    out |= index.get(word, set())
            for word in names:
                out |= self._named_by.get((namespace, word), set())
        out.discard(skip) if skip is not None else None
        return out

    def documents(
        self,
        namespaces: Iterable[str],
        workloads: Iterable[WorkloadId] | None,
        *,
        live: bool = False,
        policies: bool = True,
        skip: Iterable[WorkloadId] = (),
        nodes: bool = True,
    ) -> list[yamlio.Document]:
        """The cluster bucket (without its Nodes unless `nodes`), and of each namespace its
        context (Services, claims, runtimes), its policies, the given workloads (None: all of
        them) and, `live`, its pods and ReplicaSets."""
        wanted = set(workloads) if workloads is not None else None
        skipped = set(skip)
        out: list[yamlio.Document] = []
        with self._lock:
            for key, obj in self._buckets.get("", {}).items():
                kind = key[:2]
                if (policies or kind not in POLICY_KINDS) and (nodes or kind != NODE):
                    out.append(self._document(obj))
            for ns in sorted(set(namespaces) - {""}):
                for key, obj in self._buckets.get(ns, {}).items():
                    kind = key[:2]
                    if kind in WORKLOAD_KINDS:
                        wid = (ns, *key)
                        if wid in skipped or (wanted is not None and wid not in wanted):
                            continue
                    elif kind in POLICY_KINDS:
                        if not policies:
                            continue
                    elif kind in _LIVE:
                        if not live:
                            continue
                    elif kind not in _CONTEXT:
                        continue
                    out.append(self._document(obj))
        return out

    def nodes(self) -> tuple[int, list[yamlio.Document]]:
        """The cluster bucket's version and its Nodes (their version moves with any
        cluster-scoped object: a conservative key for what is parsed of them)."""
        with self._lock:
            bucket = self._buckets.get("", {})
            docs = [self._document(obj) for key, obj in bucket.items() if key[:2] == NODE]
            return self._versions.get("", 0), docs

    def policies(self, namespaces: Iterable[str] | None = None) -> list[yamlio.Document]:
        """Every policy object of the namespaces (None: all) and the cluster-scoped ones."""
        with self._lock:
            chosen = list(self._buckets) if namespaces is None else ["", *namespaces]
            return [
                self._document(obj)
                for ns in chosen
                for key, obj in self._buckets.get(ns, {}).items()
                if key[:2] in POLICY_KINDS
            ]

    def cni_kinds(self) -> tuple[bool, bool]:
        """Whether the cluster holds Cilium policies, and Calico ones (they decide the CNI)."""
        with self._lock:
            kinds = list(self._kinds)
        cilium = any(group == "cilium.io" for group, _ in kinds)
        calico = any(g.endswith("projectcalico.org") and k.endswith("NetworkPolicy") for g, k in kinds)
        return cilium, calico

    def memo(self, obj: Mapping[str, Any], part: str, make: Callable[[], T]) -> T:
        """build_inventory's Memo: a part parsed once per object the model holds (an object of
        the request, which the model does not hold, is parsed every time)."""
        key = id(obj)
        with self._lock:
            held = self._docs.get(key)
            if held is None or held.data is not obj:
                held = None
            else:
                parts = self._parsed.get(key)
                if parts is not None and part in parts:
                    return cast(T, parts[part])
        value = make()
        if held is not None:
            with self._lock:
                if (doc := self._docs.get(key)) is not None and doc.data is obj:
                    self._parsed.setdefault(key, {})[part] = value
        return value

    def count(self) -> int:
        with self._lock:
            return sum(len(b) for b in self._buckets.values())

    def _document(self, obj: Mapping[str, Any]) -> yamlio.Document:
        """(Under the lock.)"""
        doc = self._docs.get(id(obj))
        return doc if doc is not None and doc.data is obj else yamlio.Document(obj, origin(self.context, obj))


def _bucket_namespace(bucket: str, key: Key) -> str:
    """The namespace of an object kept in `bucket` under `key` (cilium-config: in its key)."""
    return key[2].partition("/")[0] if key[1] == "ConfigMap" else bucket


def _place(resource: Resource, item: Mapping[str, Any]) -> tuple[str, Key]:
    """The bucket and key of an object; cilium-config (the CNI's settings, whatever namespace
    Cilium runs in) is kept with the cluster-scoped objects: every answer reads it."""
    meta = _meta(item)
    ns = str(meta.get("namespace") or "") if resource.namespaced else ""
    name = str(meta.get("name") or "")
    if resource.kind == "ConfigMap":
        return "", (resource.group, resource.kind, f"{ns}/{name}")
    return ns, (resource.group, resource.kind, name)


def origin(context: str, obj: Mapping[str, Any]) -> SourceRef:
    meta = _meta(obj)
    ns = meta.get("namespace")
    where = f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))
    return SourceRef(f"cluster:{context}/{obj.get('kind')}/{where}", 0, 0)


def resource_for(group: str, kind: str) -> Resource | None:
    return next((r for r in RESOURCES if r.group == group and r.kind == kind), None)
