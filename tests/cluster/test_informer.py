"""The informer (list, then watch from the list's resourceVersion) through the real kubernetes
client against the fake API server's watch: events in order, no re-list per change, bookmarks,
410 Expired (as an ERROR event and after compaction) → one re-list, a cut stream resumed from the
last resourceVersion, failures with backoff, absent CRDs, forbidden resources, cilium-config per
namespace, stop(), and the admission webhook's warm model fed by it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fakeapi import FakeCluster, kubeconfig, serve
from kubernetes import config
from seedcluster import objects

from auditor.admission.warm import WarmModel
from auditor.sources.informer import Informer, InformerOptions, ResourceState
from auditor.sources.kubeapi import CILIUM_CONFIG, RESOURCES, KubernetesTransport, Resource

PODS = next(r for r in RESOURCES if r.kind == "Pod" and not r.group)
NETPOL = next(r for r in RESOURCES if r.kind == "NetworkPolicy" and r.group == "networking.k8s.io")
PYTORCH = next(r for r in RESOURCES if r.kind == "PyTorchJob")
CNP = next(r for r in RESOURCES if r.kind == "CiliumNetworkPolicy")
CNP_PATH = "/apis/cilium.io/v2/ciliumnetworkpolicies"


class Recording:
    """A thread-safe sink that keeps every call and the set each resource holds now."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.calls: list[tuple[str, str, Any]] = []
        self.held: dict[str, dict[str, dict[str, Any]]] = {}
        self.states: dict[str, ResourceState] = {}

    @staticmethod
    def _key(item: dict[str, Any]) -> str:
        meta = item["metadata"]
        return f"{meta.get('namespace') or ''}/{meta['name']}"

    def replace(self, resource: Resource, items: list[dict[str, Any]], resource_version: str) -> None:
        with self.lock:
            self.calls.append(("replace", resource.kind, [self._key(i) for i in items]))
            self.held[resource.kind] = {self._key(i): i for i in items}
            self.lock.notify_all()

    def upsert(self, resource: Resource, item: dict[str, Any]) -> None:
        with self.lock:
            self.calls.append(("upsert", resource.kind, self._key(item)))
            self.held.setdefault(resource.kind, {})[self._key(item)] = item
            self.lock.notify_all()

    def delete(self, resource: Resource, item: dict[str, Any]) -> None:
        with self.lock:
            self.calls.append(("delete", resource.kind, self._key(item)))
            self.held.setdefault(resource.kind, {}).pop(self._key(item), None)
            self.lock.notify_all()

    def state(self, resource: Resource, status: ResourceState) -> None:
        with self.lock:
            self.calls.append(("state", resource.kind, status.problem))
            self.states[resource.kind] = status
            self.lock.notify_all()

    def wait(self, what: Callable[[], bool], timeout: float = 10.0) -> None:
        """Until `what()` (polled: it may read the fake server too), at most `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while not what():
                assert time.monotonic() < deadline, f"timed out; calls: {self.calls[-12:]}"
                self.lock.wait(0.02)

    def count(self, verb: str, kind: str) -> int:
        with self.lock:
            return sum(1 for v, k, _ in self.calls if v == verb and k == kind)

    def names(self, kind: str) -> set[str]:
        with self.lock:
            return set(self.held.get(kind, {}))


def _pod(name: str, namespace: str = "web", node: str = "lab-worker3", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "web", **labels}},
        "spec": {"nodeName": node, "containers": []},
        "status": {"phase": "Running"},
    }


def _netpol(name: str, namespace: str = "ml-demo") -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
    }


def _cilium_config(namespace: str, mode: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cilium-config", "namespace": namespace},
        "data": {"policy-enforcement-mode": mode},
    }


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[FakeCluster, Any]]:
    fake = FakeCluster(objects("before") + [_pod(f"web-{i}") for i in range(7)], {CNP_PATH})
    fake.bookmark_interval = 0.2
    with serve(fake) as url:
        api = config.new_client_from_config(config_file=str(kubeconfig(tmp_path / "k", url)))
        yield fake, api
        api.close()


def _informer(
    api: Any,
    sink: Any,
    resources: tuple[Resource, ...] = (PODS, NETPOL),
    sleeps: list[float] | None = None,
    **options: Any,
) -> Informer:
    settings = {"page_size": 3, "watch_timeout_seconds": 2, "cilium_config_namespaces": (), **options}
    transport = KubernetesTransport(api, (5.0, 10.0), pool_size=len(resources) + 4)
    sleep = None
    if sleeps is not None:
        recorded = sleeps

        def sleep(seconds: float) -> None:  # record the backoff, wait only a little
            recorded.append(seconds)
            time.sleep(0.01)

    return Informer(transport, sink, resources, InformerOptions(**settings), sleep=sleep)


def _lists(fake: FakeCluster, path: str) -> int:
    """List requests of a collection (first pages only: a continue is the same list)."""
    return sum(
        1 for r in fake.requests if r.split("?")[0] == path and "watch=true" not in r and "continue=" not in r
    )


def _watches(fake: FakeCluster, path: str) -> list[str]:
    return [r for r in fake.requests if r.split("?")[0] == path and "watch=true" in r]


def test_lists_in_pages_then_follows_changes_without_listing_again(world: tuple[FakeCluster, Any]) -> None:
    fake, api = world
    sink = Recording()
    informer = _informer(api, sink)
    informer.start()
    try:
        assert informer.wait_synced(10)
        pods_before = {
            f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in fake.by_path["/api/v1/pods"]
        }
        assert sink.names("Pod") == pods_before
        sink.wait(lambda: fake.watching["/api/v1/pods"] == 1)

        fake.put(_pod("web-new"))
        sink.wait(lambda: "web/web-new" in sink.names("Pod"))
        changed = _pod("web-0", team="b")
        fake.put(changed)
        sink.wait(lambda: sink.held["Pod"]["web/web-0"]["metadata"]["labels"].get("team") == "b")
        fake.remove("v1", "Pod", "web", "web-1")
        sink.wait(lambda: "web/web-1" not in sink.names("Pod"))
        fake.put(_netpol("deny-all"))
        sink.wait(lambda: "ml-demo/deny-all" in sink.names("NetworkPolicy"))

        assert sink.names("Pod") == (pods_before | {"web/web-new"}) - {"web/web-1"}
        # Three pod changes, three events in the order made; one list, the watch from its version.
        pod_events = [(v, n) for v, k, n in sink.calls if k == "Pod" and v in ("upsert", "delete")]
        assert pod_events == [("upsert", "web/web-new"), ("upsert", "web/web-0"), ("delete", "web/web-1")]
        assert _lists(fake, "/api/v1/pods") == 1
        first_watch = _watches(fake, "/api/v1/pods")[0]
        assert "resourceVersion=" in first_watch and "allowWatchBookmarks=true" in first_watch
        # The watched pods are prepared as the reader's: apiVersion/kind set.
        assert sink.held["Pod"]["web/web-new"]["kind"] == "Pod"
        state = informer.states()["/api/v1/pods"]
        assert state.synced and state.healthy and state.problem == ""
    finally:
        informer.stop()


def test_bookmarks_move_the_resource_version_on(world: tuple[FakeCluster, Any]) -> None:
    fake, api = world
    sink = Recording()
    informer = _informer(api, sink, (PODS,))
    informer.start()
    try:
        assert informer.wait_synced(10)
        listed = informer.states()["/api/v1/pods"].resource_version
        fake.put(_netpol("elsewhere"))  # another collection's change moves the cluster's version
        target = str(fake.resource_version)
        sink.wait(lambda: informer.states()["/api/v1/pods"].resource_version == target, 5)
        assert target != listed
        assert sink.count("upsert", "Pod") == 0
    finally:
        informer.stop()


def test_watch_expired_as_an_error_event_lists_again_once(world: tuple[FakeCluster, Any]) -> None:
    fake, api = world
    sink = Recording()
    fake.faults.watch_gone["/api/v1/pods"] = 1
    informer = _informer(api, sink, (PODS,))
    informer.start()
    try:
        sink.wait(lambda: sink.count("replace", "Pod") == 2)
        sink.wait(lambda: fake.watching["/api/v1/pods"] == 1)
        fake.put(_pod("after-relist"))
        sink.wait(lambda: "web/after-relist" in sink.names("Pod"))
        assert _lists(fake, "/api/v1/pods") == 2
        assert informer.states()["/api/v1/pods"].healthy
    finally:
        informer.stop()


def test_changes_lost_to_compaction_come_back_with_the_relist(world: tuple[FakeCluster, Any]) -> None:
    """A watch from a version etcd compacted away: 410, then a list holds the changes missed."""
    fake, api = world
    sink = Recording()
    fake.watch_window = 1  # the log keeps one event: a watch that misses two cannot resume
    informer = _informer(api, sink, (PODS,), watch_timeout_seconds=1)
    informer.start()
    try:
        assert informer.wait_synced(10)
        sink.wait(lambda: fake.watching["/api/v1/pods"] == 1)
        fake.compact()  # what the open watch would resume from is gone
        fake.put(_pod("missed-1"))
        fake.put(_pod("missed-2"))
        sink.wait(lambda: {"web/missed-1", "web/missed-2"} <= sink.names("Pod"))
        assert sink.count("replace", "Pod") >= 2
    finally:
        informer.stop()


def test_a_cut_stream_resumes_from_the_last_version_without_a_list(world: tuple[FakeCluster, Any]) -> None:
    fake, api = world
    sink = Recording()
    informer = _informer(api, sink, (PODS,), watch_timeout_seconds=30)
    informer.start()
    try:
        assert informer.wait_synced(10)
        sink.wait(lambda: fake.watching["/api/v1/pods"] == 1)
        fake.put(_pod("before-cut"))
        sink.wait(lambda: "web/before-cut" in sink.names("Pod"))
        seen = informer.states()["/api/v1/pods"].resource_version
        fake.faults.watch_cut["/api/v1/pods"] = 1
        fake.wake()
        sink.wait(lambda: len(_watches(fake, "/api/v1/pods")) >= 2)
        fake.put(_pod("after-cut"))
        sink.wait(lambda: "web/after-cut" in sink.names("Pod"))
        assert _lists(fake, "/api/v1/pods") == 1
        assert f"resourceVersion={seen}" in _watches(fake, "/api/v1/pods")[1]
        assert sink.count("upsert", "Pod") == 2  # nothing twice, nothing lost
    finally:
        informer.stop()


def test_failures_back_off_and_recover(world: tuple[FakeCluster, Any]) -> None:
    fake, api = world
    sink = Recording()
    sleeps: list[float] = []
    fake.faults.fail["/api/v1/pods"] = 3
    informer = _informer(api, sink, (PODS,), sleeps=sleeps, backoff_seconds=0.5, max_backoff_seconds=1.5)
    informer.start()
    try:
        assert informer.wait_synced(10)
        assert sleeps[:3] == [0.5, 1.0, 1.5]  # doubled, capped
        problems = [p for v, k, p in sink.calls if v == "state" and k == "Pod"]
        assert problems[0] == "failed" and problems[-1] == ""
        assert informer.states()["/api/v1/pods"].healthy
    finally:
        informer.stop()


def test_a_watch_refused_with_5xx_is_opened_again_from_the_same_version(
    world: tuple[FakeCluster, Any],
) -> None:
    fake, api = world
    sink = Recording()
    sleeps: list[float] = []
    informer = _informer(api, sink, (PODS,), sleeps=sleeps, watch_timeout_seconds=1)
    informer.start()
    try:
        assert informer.wait_synced(10)
        sink.wait(lambda: len(_watches(fake, "/api/v1/pods")) >= 1)
        fake.faults.fail["/api/v1/pods"] = 2  # the next two watches (after this one's timeout) fail
        sink.wait(lambda: fake.faults.fail["/api/v1/pods"] == 0, 10)
        fake.put(_pod("after-5xx"))
        sink.wait(lambda: "web/after-5xx" in sink.names("Pod"))
        assert _lists(fake, "/api/v1/pods") == 1
        assert sleeps, "a refused watch waits before it tries again"
        sink.wait(lambda: informer.states()["/api/v1/pods"].healthy)
    finally:
        informer.stop()


def test_absent_crd_is_synced_and_empty_forbidden_is_synced_and_unhealthy(
    world: tuple[FakeCluster, Any],
) -> None:
    fake, api = world
    sink = Recording()
    fake.faults.forbidden.add("/apis/networking.k8s.io/v1/networkpolicies")
    informer = _informer(api, sink, (PODS, NETPOL, PYTORCH, CNP))
    informer.start()
    try:
        assert informer.wait_synced(10)
        states = informer.states()
        absent = states["/apis/kubeflow.org/v1/pytorchjobs"]
        assert absent.synced and absent.healthy and absent.problem == "absent"
        forbidden = states["/apis/networking.k8s.io/v1/networkpolicies"]
        assert forbidden.synced and not forbidden.healthy and forbidden.problem == "forbidden"
        assert 'resources: ["networkpolicies"], verbs: ["list", "watch"]' in forbidden.message
        assert states[CNP_PATH].problem == ""  # a served CRD is read like the rest
        assert sink.names("PyTorchJob") == set()
    finally:
        informer.stop()


def test_cilium_config_per_namespace_with_a_field_selector(world: tuple[FakeCluster, Any]) -> None:
    fake, api = world
    fake.put(_cilium_config("kube-system", "default"))
    fake.put(
        {**_cilium_config("kube-system", "x"), "metadata": {"name": "other", "namespace": "kube-system"}}
    )
    fake.faults.forbidden.add("/api/v1/namespaces/cilium/configmaps")
    sink = Recording()
    informer = _informer(api, sink, (), cilium_config_namespaces=("kube-system", "cilium"))
    informer.start()
    try:
        assert informer.wait_synced(10)
        assert sink.names("ConfigMap") == {"kube-system/cilium-config"}  # only that name, only there
        states = informer.states()
        assert states["/api/v1/namespaces/cilium/configmaps/cilium-config"].problem == "absent"
        assert "resourceNames" in states["/api/v1/namespaces/cilium/configmaps/cilium-config"].message
        assert sink.states["ConfigMap"].synced and sink.states["ConfigMap"].healthy
        lists = [r for r in fake.requests if "/namespaces/kube-system/configmaps" in r]
        assert lists and all("fieldSelector=metadata.name%3Dcilium-config" in r for r in lists)
        sink.wait(lambda: fake.watching["/api/v1/configmaps"] == 1)

        fake.put(_cilium_config("kube-system", "always"))
        sink.wait(
            lambda: (
                sink.held["ConfigMap"]["kube-system/cilium-config"]["data"]["policy-enforcement-mode"]
                == "always"
            )
        )
        fake.put(
            {**_cilium_config("kube-system", "y"), "metadata": {"name": "other", "namespace": "kube-system"}}
        )
        time.sleep(0.3)
        assert sink.names("ConfigMap") == {"kube-system/cilium-config"}
    finally:
        informer.stop()


def test_stop_ends_open_watches_promptly(world: tuple[FakeCluster, Any]) -> None:
    fake, api = world
    sink = Recording()
    informer = _informer(api, sink, (PODS, NETPOL), watch_timeout_seconds=300)
    informer.start()
    assert informer.wait_synced(10)
    sink.wait(
        lambda: (
            fake.watching["/api/v1/pods"] == 1
            and fake.watching["/apis/networking.k8s.io/v1/networkpolicies"] == 1
        )
    )
    began = time.monotonic()
    informer.stop(timeout=5)
    took = time.monotonic() - began
    assert took < 3, f"stop took {took:.2f} s with watches of 300 s open"
    assert not [t for t in threading.enumerate() if t.name.startswith("informer ")]
    with pytest.raises(RuntimeError):
        informer.start()


def test_feeds_the_admission_webhooks_warm_model(world: tuple[FakeCluster, Any]) -> None:
    fake, api = world
    model = WarmModel("lab")
    resources = tuple(RESOURCES)
    model.expect((*resources, CILIUM_CONFIG))
    transport = KubernetesTransport(api, (5.0, 10.0), pool_size=len(resources) + 4)
    options = InformerOptions(
        page_size=50, watch_timeout_seconds=5, cilium_config_namespaces=("kube-system",)
    )
    informer = Informer(transport, model, resources, options)
    assert not model.health().synced
    informer.start()
    try:
        assert informer.wait_synced(20)
        deadline = time.monotonic() + 5
        while not model.health().synced and time.monotonic() < deadline:
            time.sleep(0.02)
        health = model.health()
        assert health.synced and health.problems == ()
        assert model.get("ml-demo", "batch", "Job", "trainer-workers") is not None
        fake.put(_netpol("late-policy"))
        deadline = time.monotonic() + 5
        while model.get("ml-demo", "networking.k8s.io", "NetworkPolicy", "late-policy") is None:
            assert time.monotonic() < deadline, "the watched policy never reached the model"
            time.sleep(0.02)
        fake.remove("batch/v1", "Job", "ml-demo", "trainer-workers")
        deadline = time.monotonic() + 5
        while model.get("ml-demo", "batch", "Job", "trainer-workers") is not None:
            assert time.monotonic() < deadline, "the deleted job stayed in the model"
            time.sleep(0.02)
    finally:
        informer.stop()
