"""A local HTTP server that speaks the Kubernetes list API the live audit uses, for the benchmark
and the cluster tests (tests/cluster/fakeapi.py re-exports it): paginated lists (`limit`,
`continue`, `resourceVersion`), 410 Gone for an expired continue token, 403 Status objects, 404 for
APIs not served (absent CRDs), and injectable faults (5xx, slow answers, connections cut mid-list).
The official client talks to it through a generated kubeconfig with a bearer token.

It also accepts server-side apply of custom resources it is told about (`apply_kinds`, e.g.
PolicyReports): `PATCH` with `Content-Type: application/apply-patch+yaml`, `fieldManager` required
(422 without it), 415 for another patch type, 404 when the CRD is not served, 403 for a forbidden
path, 400 when the body's apiVersion, kind, name or namespace disagree with the URL, 422 when the
object does not validate against the CRD's openAPIV3Schema (as kube-apiserver does), 409 when
another field manager owns the object and `force` is not set; 201 on create, 200 on update, with
uid, resourceVersion, generation and managedFields. Applied objects are served back by GET.

Watch: tests change the cluster with `put` (create or replace) and `remove` (delete); each change
takes the next `resource_version` and is recorded in an event log that keeps the last
`watch_window` events. `GET <collection>?watch=true&resourceVersion=RV` answers 200 with a chunked
stream of newline-delimited watch events (`{"type": "ADDED|MODIFIED|DELETED|BOOKMARK|ERROR",
"object": ...}`): every event after RV, then new ones as they happen, until `timeoutSeconds`
(default `watch_timeout_default`, capped at `watch_timeout_max`), the server's shutdown or the
client's hang-up. An RV older than the log's window gets one ERROR event holding a 410 "Expired"
Status (as kube-apiserver sends for "too old resource version"); RV "0" or none first sends the
current objects as ADDED. With `allowWatchBookmarks=true` a BOOKMARK (apiVersion, kind and
metadata.resourceVersion only) goes out every `bookmark_interval` seconds without events, and
before the stream ends. Lists report the current resourceVersion and page a consistent snapshot:
a continue token reads the collection as it was when the list began (a snapshot is kept for the
last `list_history` changes of a collection; an older one is 410 Expired). Namespaced collections
(`/api/v1/namespaces/NS/configmaps`, `/apis/G/V/namespaces/NS/PLURAL`) and a `fieldSelector` of
`metadata.name` / `metadata.namespace` equalities filter lists and watches. Faults for watches:
`watch_cut` (the stream is dropped mid-event, without its last chunk), `watch_gone` (the next watch
gets the 410 ERROR event); `fail`, `throttle`, `slow` and `forbidden` apply to watches as well."""

from __future__ import annotations

import base64
import copy
import json
import select
import socket
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from world.httpserve import handler_serving

TOKEN = "fake-api-token"

PLURALS = {
    ("v1", "Node"): ("/api/v1/nodes", False),
    ("v1", "Namespace"): ("/api/v1/namespaces", False),
    ("v1", "Pod"): ("/api/v1/pods", True),
    ("v1", "Service"): ("/api/v1/services", True),
    ("v1", "Secret"): ("/api/v1/secrets", True),
    ("v1", "ConfigMap"): ("/api/v1/configmaps", True),
    ("v1", "PersistentVolumeClaim"): ("/api/v1/persistentvolumeclaims", True),
    ("v1", "PersistentVolume"): ("/api/v1/persistentvolumes", False),
    ("storage.k8s.io/v1", "StorageClass"): ("/apis/storage.k8s.io/v1/storageclasses", False),
    ("apps/v1", "Deployment"): ("/apis/apps/v1/deployments", True),
    ("apps/v1", "StatefulSet"): ("/apis/apps/v1/statefulsets", True),
    ("apps/v1", "ReplicaSet"): ("/apis/apps/v1/replicasets", True),
    ("apps/v1", "DaemonSet"): ("/apis/apps/v1/daemonsets", True),
    ("batch/v1", "Job"): ("/apis/batch/v1/jobs", True),
    ("batch/v1", "CronJob"): ("/apis/batch/v1/cronjobs", True),
    ("networking.k8s.io/v1", "NetworkPolicy"): ("/apis/networking.k8s.io/v1/networkpolicies", True),
    ("cilium.io/v2", "CiliumNetworkPolicy"): ("/apis/cilium.io/v2/ciliumnetworkpolicies", True),
    ("cilium.io/v2", "CiliumClusterwideNetworkPolicy"): (
        "/apis/cilium.io/v2/ciliumclusterwidenetworkpolicies",
        False,
    ),
    ("kubeflow.org/v1", "PyTorchJob"): ("/apis/kubeflow.org/v1/pytorchjobs", True),
}
# APIs served even when empty (the built-in ones); CRD paths are served only when named in `crds`.
BUILTIN = {
    path
    for (api, _), (path, _) in PLURALS.items()
    if api.split("/")[0] in ("v1", "apps", "batch", "storage.k8s.io", "networking.k8s.io")
}


@dataclass
class Faults:
    fail: dict[str, int] = field(default_factory=dict)  # path → answer 500 this many times
    slow: dict[str, float] = field(default_factory=dict)  # path → sleep before answering
    slow_pages: dict[str, float] = field(default_factory=dict)  # path → sleep before each later page
    gone: dict[str, int] = field(default_factory=dict)  # path → expire this many continue tokens (410)
    cut: dict[str, int] = field(default_factory=dict)  # path → drop the connection this many times
    forbidden: set[str] = field(default_factory=set)  # paths answered 403
    throttle: dict[str, int] = field(default_factory=dict)  # path → answer 429 (Retry-After: 0)
    watch_cut: dict[str, int] = field(default_factory=dict)  # path → drop this many watch streams
    watch_gone: dict[str, int] = field(default_factory=dict)  # path → answer this many watches 410


@dataclass
class ApplyKind:
    """A custom resource the server accepts by server-side apply: its kind, and the CRD's
    openAPIV3Schema (None: not validated)."""

    kind: str
    namespaced: bool
    schema: dict[str, Any] | None = None


@dataclass(frozen=True)
class _Event:
    """One change in the event log: its resourceVersion, collection, where, and the line sent."""

    rv: int
    path: str
    namespace: str
    name: str
    line: bytes


class _Cut(Exception):
    """The watch stream is to be dropped mid-event (the `watch_cut` fault)."""


Matcher = Callable[[str, str], bool]  # (namespace, name) -> listed or watched


class FakeCluster:
    def __init__(
        self,
        objects: list[dict[str, Any]],
        crds: set[str] | None = None,
        version: str = "v1.34.2",
        apply_kinds: dict[str, ApplyKind] | None = None,
    ) -> None:
        # collection path (/apis/group/version/plural) -> what may be applied there
        self.apply_kinds = dict(apply_kinds or {})
        self.applied: dict[str, dict[str, Any]] = {}  # object path -> stored object
        self.patches: list[tuple[str, str]] = []  # (path with query, content type)
        self.by_path: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self._serialized: dict[str, list[bytes]] = {}
        self.singles: dict[str, dict[str, Any]] = {}
        self.served = set(BUILTIN) | set(crds or ())
        self.version = version
        self.faults = Faults()
        self.requests: list[str] = []
        self.resource_version = 1000
        # Watch: one lock (a Condition) guards the objects, the log and the counter.
        self._changed = threading.Condition(threading.RLock())
        self._log: deque[_Event] = deque()
        self._compacted = self.resource_version  # events up to here are no longer in the log
        self.watch_window = 1000  # events kept for watches to resume from
        self.bookmark_interval = 1.0  # seconds without events before a BOOKMARK
        self.watch_timeout_default = 30.0  # a watch without timeoutSeconds
        self.watch_timeout_max = 600.0
        self.list_history = 64  # snapshots per collection kept for continue tokens
        # collection -> [(resourceVersion that replaced it, items, serialized items or None)]
        self._history: dict[str, list[tuple[int, list[dict[str, Any]], list[bytes] | None]]] = {}
        self._history_floor: dict[str, int] = {}  # continue tokens older than this are expired
        self.watching: dict[str, int] = defaultdict(int)  # collection path -> open watch streams
        for obj in objects:
            path, _namespaced = PLURALS[(obj["apiVersion"], obj["kind"])]
            self.by_path[path].append(obj)
            if obj["kind"] == "ConfigMap":
                meta = obj["metadata"]
                self.singles[f"/api/v1/namespaces/{meta['namespace']}/configmaps/{meta['name']}"] = obj
            self.served.add(path)

    # -- the protocol -----------------------------------------------------------------------

    def answer(self, raw_path: str, headers: Any) -> tuple[int, dict[str, str], bytes]:
        parts = urlsplit(raw_path)
        path, query = parts.path, parse_qs(parts.query)
        self.requests.append(raw_path)
        refused = self._refuse(path, query, headers)
        if refused is not None:
            return refused
        if path == "/version":
            return (
                200,
                {"Content-Type": "application/json"},
                json.dumps({"gitVersion": self.version}).encode(),
            )
        if path in self.faults.forbidden:
            return _forbidden(path)
        if path in self.singles:
            return 200, {"Content-Type": "application/json"}, json.dumps(self.singles[path]).encode()
        if path in self.applied:
            return 200, {"Content-Type": "application/json"}, json.dumps(self.applied[path]).encode()
        if path in self.apply_kinds and path in self.served:
            return self._applied_list(path, query)
        collection, namespace = _collection(path)
        if collection not in self.served:
            return _status(404, "NotFound", "the server could not find the requested resource")
        match = _matcher(namespace, query)
        if isinstance(match, tuple):
            return match
        return self._list(collection, query, match)

    def _refuse(
        self, path: str, query: dict[str, list[str]], headers: Any
    ) -> tuple[int, dict[str, str], bytes] | None:
        """What every GET (list, single object, watch) meets first: auth and the injected faults."""
        if headers.get("Authorization") != f"Bearer {TOKEN}":
            return _status(401, "Unauthorized", "Unauthorized")
        if path in self.faults.slow:
            time.sleep(self.faults.slow[path])
        if path in self.faults.slow_pages and "continue" in query:
            time.sleep(self.faults.slow_pages[path])
        if self.faults.fail.get(path, 0) > 0:
            self.faults.fail[path] -= 1
            return _status(500, "InternalError", "etcdserver: request timed out")
        if self.faults.throttle.get(path, 0) > 0:
            self.faults.throttle[path] -= 1
            code, head, body = _status(429, "TooManyRequests", "too many requests")
            head["Retry-After"] = "0"
            return code, head, body
        return None

    def _list(
        self, path: str, query: dict[str, list[str]], match: Matcher | None
    ) -> tuple[int, dict[str, str], bytes]:
        """One page of a collection: from the snapshot its continue token was cut from, or the
        current objects; `match` (a namespace or fieldSelector) filters before paging."""
        token = query.get("continue", [""])[0]
        with self._changed:
            start = 0
            rv = self.resource_version
            items = self.by_path.get(path, [])
            cached = self._serialized.get(path)
            if token:
                if self.faults.gone.get(path, 0) > 0:
                    self.faults.gone[path] -= 1
                    return _expired_list()
                decoded = json.loads(base64.b64decode(token))
                start = int(decoded["start"])
                rv = int(decoded.get("rv", rv))
                snapshot = self._snapshot(path, rv)
                if snapshot is None:
                    return _expired_list()
                items, cached = snapshot
            if cached is not None and len(cached) != len(items):
                cached = None  # the objects were changed behind the cache's back
            chosen = None if match is None else [i for i, o in enumerate(items) if match(*_ident(o))]
            total = len(items) if chosen is None else len(chosen)
            limit = int(query.get("limit", ["0"])[0] or 0) or total or 1
            nxt = start + limit
            meta: dict[str, Any] = {"resourceVersion": str(rv)}
            if nxt < total:
                meta["continue"] = base64.b64encode(json.dumps({"start": nxt, "rv": rv}).encode()).decode()
                meta["remainingItemCount"] = total - nxt
            kind = _kind_of(path)
            if cached is not None:
                page_bytes = cached[start:nxt] if chosen is None else [cached[i] for i in chosen[start:nxt]]
                head = json.dumps({"kind": f"{kind}List", "apiVersion": "v1", "metadata": meta})[:-1]
                data = head.encode() + b', "items": [' + b",".join(page_bytes) + b"]}"
                return 200, {"Content-Type": "application/json"}, data
            page = items[start:nxt] if chosen is None else [items[i] for i in chosen[start:nxt]]
            body = {
                "kind": f"{kind}List",
                "apiVersion": "v1",
                "metadata": meta,
                "items": [_listed(o) for o in page],
            }
            return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()

    def _snapshot(self, path: str, rv: int) -> tuple[list[dict[str, Any]], list[bytes] | None] | None:
        """The collection as it was at `rv` (None: no longer kept). Under the lock."""
        if rv < self._history_floor.get(path, 0):
            return None
        for until, items, cached in self._history.get(path, []):
            if until > rv:
                return items, cached
        return self.by_path.get(path, []), self._serialized.get(path)

    # -- changes (tests) -------------------------------------------------------------------

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an object (by apiVersion, kind, namespace and name): it gets the next
        resourceVersion (and a uid if new) and an ADDED or MODIFIED event. Returns a copy of what
        is stored."""
        stored = copy.deepcopy(obj)
        path, namespaced = PLURALS[(stored["apiVersion"], stored["kind"])]
        meta = stored.setdefault("metadata", {})
        if namespaced:
            meta.setdefault("namespace", "default")
        namespace, name = str(meta.get("namespace") or ""), str(meta["name"])
        with self._changed:
            items = self.by_path.get(path, [])
            index = _index(items, namespace, name)
            self.resource_version += 1
            rv = self.resource_version
            meta["resourceVersion"] = str(rv)
            if index is not None:
                old_uid = (items[index].get("metadata") or {}).get("uid")
                if old_uid:
                    meta.setdefault("uid", old_uid)
            meta.setdefault("uid", f"uid-{rv}")
            new_items, new_cached = self._before_change(path, rv)
            if index is None:
                new_items.append(stored)
                if new_cached is not None:
                    new_cached.append(json.dumps(_listed(stored)).encode())
            else:
                new_items[index] = stored
                if new_cached is not None:
                    new_cached[index] = json.dumps(_listed(stored)).encode()
            self._commit(path, new_items, new_cached)
            if stored["kind"] == "ConfigMap":
                self.singles[f"/api/v1/namespaces/{namespace}/configmaps/{name}"] = stored
            self.served.add(path)
            self._record(rv, path, namespace, name, "MODIFIED" if index is not None else "ADDED", stored)
            return copy.deepcopy(stored)

    def remove(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any]:
        """Delete an object: a DELETED event with its last state at a new resourceVersion.
        Returns that last state; KeyError when there is no such object."""
        path, namespaced = PLURALS[(api_version, kind)]
        namespace = namespace if namespaced else ""
        with self._changed:
            items = self.by_path.get(path, [])
            index = _index(items, namespace, name)
            if index is None:
                raise KeyError(f"{kind} {namespace}/{name}")
            self.resource_version += 1
            rv = self.resource_version
            last = copy.deepcopy(items[index])
            last.setdefault("metadata", {})["resourceVersion"] = str(rv)
            new_items, new_cached = self._before_change(path, rv)
            del new_items[index]
            if new_cached is not None:
                del new_cached[index]
            self._commit(path, new_items, new_cached)
            if kind == "ConfigMap":
                self.singles.pop(f"/api/v1/namespaces/{namespace}/configmaps/{name}", None)
            self._record(rv, path, namespace, name, "DELETED", last)
            return last

    def compact(self) -> None:
        """Drop the whole event log, as etcd's compaction does: a watch from any resourceVersion
        before now gets 410 Expired."""
        with self._changed:
            self._log.clear()
            self._compacted = self.resource_version
            self._changed.notify_all()

    def wake(self) -> None:
        """Wake every open watch (it then checks for faults and the server's shutdown)."""
        with self._changed:
            self._changed.notify_all()

    def _before_change(self, path: str, rv: int) -> tuple[list[dict[str, Any]], list[bytes] | None]:
        """Copies of the collection (and its serialized form) to change; the current ones are kept
        as the snapshot continue tokens from before `rv` read. Under the lock."""
        items = self.by_path.get(path, [])
        cached = self._serialized.get(path)
        if cached is not None and len(cached) != len(items):
            cached = None
        history = self._history.setdefault(path, [])
        history.append((rv, items, cached))
        while len(history) > self.list_history:
            until, _, _ = history.pop(0)
            self._history_floor[path] = until
        new_cached = list(cached) if cached is not None else None
        if new_cached is None and self._serialized and path not in self._serialized and not items:
            new_cached = []  # a new collection of a preserialized cluster is cached too
        return list(items), new_cached

    def _commit(self, path: str, items: list[dict[str, Any]], cached: list[bytes] | None) -> None:
        self.by_path[path] = items
        if cached is None:
            self._serialized.pop(path, None)
        else:
            self._serialized[path] = cached

    def _record(self, rv: int, path: str, namespace: str, name: str, kind: str, obj: dict[str, Any]) -> None:
        """Log one event and wake the watches. Under the lock."""
        line = json.dumps({"type": kind, "object": obj}).encode() + b"\n"
        self._log.append(_Event(rv, path, namespace, name, line))
        while len(self._log) > max(0, self.watch_window):
            self._compacted = self._log.popleft().rv
        self._changed.notify_all()

    # -- watch ------------------------------------------------------------------------------

    def watch(
        self,
        raw_path: str,
        headers: Any,
        stop: threading.Event | None = None,
        alive: Callable[[], bool] = lambda: True,
    ) -> tuple[int, dict[str, str], bytes | Iterator[bytes]]:
        """A watch request: an error answer (bytes), or 200 and the stream's pieces (each one or
        more whole event lines). The stream ends at its timeout, when `stop` is set (the server
        stops) or `alive()` turns false (the client hung up); it raises _Cut for `watch_cut`."""
        parts = urlsplit(raw_path)
        path, query = parts.path, parse_qs(parts.query)
        self.requests.append(raw_path)
        refused = self._refuse(path, query, headers)
        if refused is not None:
            return refused
        if path in self.faults.forbidden:
            return _forbidden(path, "watch")
        collection, namespace = _collection(path)
        if collection not in self.served:
            return _status(404, "NotFound", "the server could not find the requested resource")
        match = _matcher(namespace, query)
        if isinstance(match, tuple):
            return match
        rv_text = query.get("resourceVersion", [""])[0]
        if rv_text not in ("", "0") and not rv_text.isdigit():
            return _status(400, "BadRequest", f"invalid resource version: {rv_text!r}")
        since = int(rv_text) if rv_text not in ("", "0") else None
        try:
            timeout = float(query.get("timeoutSeconds", [""])[0] or self.watch_timeout_default)
        except ValueError:
            return _status(400, "BadRequest", "timeoutSeconds is not a number")
        timeout = max(0.0, min(timeout, self.watch_timeout_max))
        bookmarks = query.get("allowWatchBookmarks", ["false"])[0] in ("1", "true")
        gone = self.faults.watch_gone.get(collection, 0) > 0
        if gone:
            self.faults.watch_gone[collection] -= 1
        events = self._events(
            collection, match, since, timeout, bookmarks, gone, stop or threading.Event(), alive
        )
        return 200, {"Content-Type": "application/json"}, events

    def _events(
        self,
        path: str,
        match: Matcher | None,
        since: int | None,
        timeout: float,
        bookmarks: bool,
        gone: bool,
        stop: threading.Event,
        alive: Callable[[], bool],
    ) -> Iterator[bytes]:
        with self._changed:
            self.watching[path] += 1
        try:
            yield from self._stream(path, match, since, timeout, bookmarks, gone, stop, alive)
        finally:
            with self._changed:
                self.watching[path] -= 1

    def _stream(
        self,
        path: str,
        match: Matcher | None,
        since: int | None,
        timeout: float,
        bookmarks: bool,
        gone: bool,
        stop: threading.Event,
        alive: Callable[[], bool],
    ) -> Iterator[bytes]:
        deadline = time.monotonic() + timeout
        api_version, kind = _api_kind_of(path)
        with self._changed:
            position = self.resource_version if since is None else since
            if gone or position < self._compacted:
                yield _expired_event(position, self._compacted)
                return
            initial = []
            if since is None:  # "0" or none: the current state first, as ADDED events
                for obj in self.by_path.get(path, []):
                    if match is None or match(*_ident(obj)):
                        full = {"apiVersion": api_version, "kind": kind, **obj}
                        initial.append(json.dumps({"type": "ADDED", "object": full}).encode() + b"\n")
        if initial:
            yield b"".join(initial)
        last_sent = time.monotonic()
        while True:
            lines: list[bytes] = []
            expired = False
            with self._changed:
                if self.faults.watch_cut.get(path, 0) > 0:
                    self.faults.watch_cut[path] -= 1
                    raise _Cut
                if position < self._compacted:
                    expired = True
                else:
                    for event in reversed(self._log):
                        if event.rv <= position:
                            break
                        if event.path == path and (match is None or match(event.namespace, event.name)):
                            lines.append(event.line)
                    lines.reverse()
                    position = max(position, self.resource_version)
                    now = time.monotonic()
                    if not lines and not stop.is_set() and now < deadline:
                        wait = min(0.25, deadline - now)
                        if bookmarks:
                            wait = min(wait, max(0.0, last_sent + self.bookmark_interval - now))
                        if wait > 0:
                            self._changed.wait(wait)
            if expired:
                yield _expired_event(position, self._compacted)
                return
            if lines:
                yield b"".join(lines)
                last_sent = time.monotonic()
            now = time.monotonic()
            if stop.is_set() or not alive():
                return
            if now >= deadline:
                if bookmarks:
                    yield _bookmark(api_version, kind, position)
                return
            if bookmarks and now - last_sent >= self.bookmark_interval:
                yield _bookmark(api_version, kind, position)
                last_sent = now

    def apply(self, raw_path: str, headers: Any, body: bytes) -> tuple[int, dict[str, str], bytes]:
        """Server-side apply of one custom resource (see the module docstring)."""
        parts = urlsplit(raw_path)
        path, query = parts.path, parse_qs(parts.query)
        self.requests.append(f"PATCH {raw_path}")
        self.patches.append((raw_path, headers.get("Content-Type", "")))
        if headers.get("Authorization") != f"Bearer {TOKEN}":
            return _status(401, "Unauthorized", "Unauthorized")
        segments = path.strip("/").split("/")
        if len(segments) == 7 and segments[0] == "apis" and segments[3] == "namespaces":
            _, group, version, _, namespace, plural, name = segments
        elif len(segments) == 5 and segments[0] == "apis":
            _, group, version, plural, name = segments
            namespace = ""
        else:
            return _status(
                405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
            )
        collection = f"/apis/{group}/{version}/{plural}"
        if collection in self.faults.forbidden or path in self.faults.forbidden:
            return _status(
                403,
                "Forbidden",
                f'{plural}.{group} "{name}" is forbidden: User "system:serviceaccount:audit:auditor" '
                f'cannot patch resource "{plural}" in API group "{group}"'
                + (f' in the namespace "{namespace}"' if namespace else " at the cluster scope"),
            )
        spec = self.apply_kinds.get(collection)
        if spec is None or collection not in self.served:
            return _status(404, "NotFound", "the server could not find the requested resource")
        if spec.namespaced != bool(namespace):
            return _status(404, "NotFound", "the server could not find the requested resource")
        content_type = headers.get("Content-Type", "").split(";")[0].strip()
        if content_type != "application/apply-patch+yaml":
            return _status(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format: {content_type}",
            )
        manager = query.get("fieldManager", [""])[0]
        if not manager:
            return _status(
                422,
                "Invalid",
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                "is required for apply patch",
            )
        try:
            obj = yaml.safe_load(body)
        except yaml.YAMLError as exc:
            return _status(400, "BadRequest", f"error decoding YAML: {exc}")
        if not isinstance(obj, dict):
            return _status(400, "BadRequest", "the body is not an object")
        meta = obj.get("metadata") or {}
        if obj.get("apiVersion") != f"{group}/{version}" or obj.get("kind") != spec.kind:
            return _status(400, "BadRequest", f"the object is not a {spec.kind} of {group}/{version}")
        if meta.get("name") != name:
            return _status(400, "BadRequest", "the name of the object does not match the name on the URL")
        if namespace and meta.get("namespace", namespace) != namespace:
            return _status(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the request",
            )
        if spec.schema is not None:
            import jsonschema

            errors = sorted(
                jsonschema.Draft4Validator(spec.schema).iter_errors(obj), key=lambda e: list(e.absolute_path)
            )
            if errors:
                causes = "; ".join(f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:5])
                return _status(422, "Invalid", f'{spec.kind}.{group} "{name}" is invalid: {causes}')
        old = self.applied.get(path)
        force = query.get("force", ["false"])[0] == "true"
        if old is not None:
            owner = old["metadata"]["managedFields"][0]["manager"]
            if owner != manager and not force:
                return _status(
                    409,
                    "Conflict",
                    f'Apply failed with 1 conflict: conflict with "{owner}": .results',
                )
        with self._changed:
            self.resource_version += 1
        stored = json.loads(json.dumps(obj))
        stored_meta = stored.setdefault("metadata", {})
        if namespace:
            stored_meta["namespace"] = namespace
        stored_meta["uid"] = old["metadata"]["uid"] if old else f"uid-{self.resource_version}"
        stored_meta["resourceVersion"] = str(self.resource_version)
        stored_meta["generation"] = old["metadata"]["generation"] + 1 if old else 1
        stored_meta["managedFields"] = [
            {
                "manager": manager,
                "operation": "Apply",
                "apiVersion": f"{group}/{version}",
                "fieldsType": "FieldsV1",
            }
        ]
        self.applied[path] = stored
        return (
            (201 if old is None else 200),
            {"Content-Type": "application/json"},
            json.dumps(stored).encode(),
        )

    def _applied_list(
        self, collection: str, query: dict[str, list[str]]
    ) -> tuple[int, dict[str, str], bytes]:
        """A list of applied custom resources across namespaces, with an equality labelSelector."""
        if collection in self.faults.forbidden:
            return _status(403, "Forbidden", f"cannot list resource at the cluster scope: {collection}")
        _, group, version, plural = collection.strip("/").split("/")
        wanted = dict(
            term.split("=", 1) for term in query.get("labelSelector", [""])[0].split(",") if "=" in term
        )
        items = []
        for path, obj in sorted(self.applied.items()):
            segments = path.strip("/").split("/")
            if segments[1:3] != [group, version] or segments[-2] != plural:
                continue
            labels = obj["metadata"].get("labels") or {}
            if all(labels.get(k) == v for k, v in wanted.items()):
                items.append(obj)
        kind = self.apply_kinds[collection].kind
        body = {
            "apiVersion": f"{group}/{version}",
            "kind": f"{kind}List",
            "metadata": {"resourceVersion": str(self.resource_version)},
            "items": items,
        }
        return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()

    def delete(self, raw_path: str, headers: Any) -> tuple[int, dict[str, str], bytes]:
        path = urlsplit(raw_path).path
        self.requests.append(f"DELETE {raw_path}")
        if headers.get("Authorization") != f"Bearer {TOKEN}":
            return _status(401, "Unauthorized", "Unauthorized")
        if path not in self.applied:
            return _status(404, "NotFound", f"{path.rsplit('/', 1)[-1]} not found")
        del self.applied[path]
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
        return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()

    def preserialize(self) -> None:
        """Keep every object serialized, as kube-apiserver's watch cache does, so that answering a
        list costs what a real server's does (joining bytes), not a Python json.dumps per page."""
        self._serialized = {
            path: [json.dumps(_listed(o)).encode() for o in items] for path, items in self.by_path.items()
        }


def _ident(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _index(items: list[dict[str, Any]], namespace: str, name: str) -> int | None:
    return next((i for i, o in enumerate(items) if _ident(o) == (namespace, name)), None)


def _collection(path: str) -> tuple[str, str]:
    """(cluster-wide collection path, namespace) of a namespaced collection path
    (/api/v1/namespaces/NS/PLURAL, /apis/G/V/namespaces/NS/PLURAL); any other path as it is."""
    seg = path.strip("/").split("/")
    if len(seg) == 5 and seg[0] == "api" and seg[2] == "namespaces":
        return f"/api/{seg[1]}/{seg[4]}", seg[3]
    if len(seg) == 6 and seg[0] == "apis" and seg[3] == "namespaces":
        return f"/apis/{seg[1]}/{seg[2]}/{seg[5]}", seg[4]
    return path, ""


def _matcher(
    namespace: str, query: dict[str, list[str]]
) -> Matcher | tuple[int, dict[str, str], bytes] | None:
    """What a namespaced path and a fieldSelector of metadata.name / metadata.namespace
    equalities keep (None: everything), or a 400 answer for a selector not supported."""
    wanted: dict[str, str] = {}
    if namespace:
        wanted["metadata.namespace"] = namespace
    for term in query.get("fieldSelector", [""])[0].split(","):
        if not term.strip():
            continue
        key, sep, value = term.partition("==") if "==" in term else term.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key.endswith("!") or key not in ("metadata.name", "metadata.namespace"):
            return _status(
                400,
                "BadRequest",
                f'"{term}": only metadata.name and metadata.namespace equalities are supported',
            )
        if wanted.get(key, value) != value:
            return lambda ns, name: False
        wanted[key] = value
    if not wanted:
        return None
    want_ns, want_name = wanted.get("metadata.namespace"), wanted.get("metadata.name")
    return lambda ns, name: (want_ns is None or ns == want_ns) and (want_name is None or name == want_name)


def _api_kind_of(path: str) -> tuple[str, str]:
    """(apiVersion, kind) of a collection path."""
    for (api, kind), (p, _) in PLURALS.items():
        if p == path:
            return api, kind
    seg = path.strip("/").split("/")
    api = f"{seg[1]}/{seg[2]}" if seg[0] == "apis" and len(seg) > 2 else "v1"
    return api, "Unknown"


def _kind_of(path: str) -> str:
    return next((k for (_, k), (p, _) in PLURALS.items() if p == path), "Unknown")


def _forbidden(path: str, verb: str = "list") -> tuple[int, dict[str, str], bytes]:
    collection, namespace = _collection(path)
    resource = collection.rsplit("/", 1)[-1]
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    return _status(
        403,
        "Forbidden",
        f'{resource} is forbidden: User "system:serviceaccount:audit:auditor" cannot {verb} '
        f'resource "{resource}" {scope}',
    )


def _expired_list() -> tuple[int, dict[str, str], bytes]:
    return _status(
        410,
        "Expired",
        "The provided continue parameter is too old to display a consistent list result.",
    )


def _expired_event(rv: int, compacted: int) -> bytes:
    """The ERROR event kube-apiserver sends a watch from a resourceVersion it no longer has."""
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"too old resource version: {rv} ({compacted + 1})",
        "reason": "Expired",
        "code": 410,
    }
    return json.dumps({"type": "ERROR", "object": status}).encode() + b"\n"


def _bookmark(api_version: str, kind: str, rv: int) -> bytes:
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"resourceVersion": str(rv)}}
    return json.dumps({"type": "BOOKMARK", "object": obj}).encode() + b"\n"


def _listed(obj: dict[str, Any]) -> dict[str, Any]:
    """Items of a list response carry no apiVersion/kind (the API server omits them)."""
    return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}


def _status(code: int, reason: str, message: str) -> tuple[int, dict[str, str], bytes]:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return code, {"Content-Type": "application/json"}, json.dumps(body).encode()


class _Handler(BaseHTTPRequestHandler):
    cluster: FakeCluster
    stopping = threading.Event()  # set when the server stops: open watch streams end
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        path = parts.path
        if parse_qs(parts.query).get("watch", [""])[0] in ("1", "true"):
            self._watch()
            return
        faults = self.cluster.faults
        if faults.cut.get(path, 0) > 0 and "continue=" in self.path:
            faults.cut[path] -= 1
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.write(b'{"kind": "PodList", "items": [{"metadata": ')
            self.wfile.flush()
            self.close_connection = True
            return
        code, headers, body = self.cluster.answer(self.path, self.headers)
        self._send(code, headers, body)

    def _watch(self) -> None:
        code, headers, body = self.cluster.watch(self.path, self.headers, self.stopping, self._client_alive)
        if isinstance(body, bytes):
            self._send(code, headers, body)
            return
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for piece in body:
                if piece:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
        except _Cut:
            partial = b'{"type": "MODIFIED", "object": {"metadata": '
            with suppress(OSError):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(partial), partial))
            self.close_connection = True
        except OSError:  # the client went away
            self.close_connection = True
        finally:
            close = getattr(body, "close", None)
            if close is not None:
                close()

    def _client_alive(self) -> bool:
        """False once the client closed its end of the connection (a readable socket at EOF)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return True
            return self.connection.recv(1, socket.MSG_PEEK) != b""
        except (OSError, ValueError):
            return False

    def do_DELETE(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self._send(*self.cluster.delete(self.path, self.headers))

    def do_PATCH(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self._send(*self.cluster.apply(self.path, self.headers, body))

    def _send(self, code: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def serve(cluster: FakeCluster) -> Iterator[str]:
    """Serve `cluster`; on the way out its open watch streams end (within a fraction of a second)."""
    stopping = threading.Event()
    with handler_serving(type("Handler", (_Handler,), {"cluster": cluster, "stopping": stopping})) as base:
        try:
            yield base
        finally:
            stopping.set()
            cluster.wake()


def kubeconfig(path: Path, server: str, context: str = "lab") -> Path:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": context, "cluster": {"server": server}}],
                "users": [{"name": "auditor", "user": {"token": TOKEN}}],
                "contexts": [{"name": context, "context": {"cluster": context, "user": "auditor"}}],
                "current-context": context,
            }
        )
    )
    return path
