"""An informer: list-then-watch of what the live audit reads, to keep a warm model of a cluster
current (the admission webhook's, auditor/admission/warm.py) without listing on every request.

One daemon thread per resource of `RESOURCES`, and one per namespace of
`cilium_config_namespaces` for the ConfigMap `cilium-config` (listed and watched in that namespace
with `fieldSelector=metadata.name=cilium-config`). Each thread:

1. lists the resource page by page (`limit`/`continue`) and hands the whole set to
   `Sink.replace` with the list's resourceVersion; the items are what `Reader.read` gives (through
   `kubeapi._prepare`; owned pods slimmed by `slim_pod`);
2. watches from that resourceVersion (`watch=true`, `allowWatchBookmarks`, `timeoutSeconds`) and
   hands each ADDED/MODIFIED event to `Sink.upsert` and each DELETED one to `Sink.delete`, in the
   order the API server sent them; a BOOKMARK only moves the resourceVersion on;
3. when the watch ends (its timeout, a cut connection), watches again from the last resourceVersion
   it saw; it lists again only after a 410 (an ERROR event with code 410, or HTTP 410: the
   resourceVersion is too old), or after a 403/404 or an error in its own handling.

Failures: a connection error, 429 or 5xx marks the resource unhealthy (`problem="failed"`) and is
retried with exponential backoff (`backoff_seconds` doubled up to `max_backoff_seconds`; a
Retry-After is honoured) — a failed page of a list is retried in place, a failed watch is opened
again from the same resourceVersion; any other 4xx is retried the same way, from a new list. A 404
of an optional resource (a CRD not installed) makes it `absent` (synced and healthy; the sink gets
an empty `replace`), checked again every `absent_recheck_seconds`; a 403 makes it `forbidden`
(synced, unhealthy, the RBAC rule in the message), retried every `max_backoff_seconds`. For
cilium-config a 403 is `absent`, as for `Reader`: a cluster without Cilium has no Role there.

The sink is called from the informer's threads, several at a time (one per resource): it must be
thread-safe. The calls for one resource come in order from one thread. cilium-config is one
pseudo-resource for the sink, `kubeapi.CILIUM_CONFIG`, whatever the namespace: its `replace` holds
the cilium-config of every namespace (sent once each namespace has listed once, then on each
relist), its `state` combines theirs; `states()` keeps one entry per namespace.

`stop()` sets an Event every backoff waits on and shuts the open watch connections, so the threads
end within a fraction of a second, except one blocked in a list request (bounded by the
transport's read timeout).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from auditor.sources.kubeapi import (
    CILIUM_CONFIG,
    RESOURCES,
    LineStream,
    Resource,
    StreamTransport,
    TransportError,
    _Failed,
    _message,
    _page,
    _prepare,
    slim_pod,
)

log = logging.getLogger(__name__)

CILIUM_CONFIG_NAME = "cilium-config"


class Sink(Protocol):
    """Where the informer puts what it reads (thread-safe; see the module docstring)."""

    def replace(self, resource: Resource, items: list[dict[str, Any]], resource_version: str) -> None:
        """After each (re)list: the whole set of that resource."""

    def upsert(self, resource: Resource, item: dict[str, Any]) -> None:
        """An ADDED or MODIFIED event's object."""

    def delete(self, resource: Resource, item: dict[str, Any]) -> None:
        """A DELETED event's object (its last state)."""

    def state(self, resource: Resource, status: ResourceState) -> None:
        """The resource's state changed (synced, healthy, problem or message; not `since`)."""


@dataclass(frozen=True, slots=True)
class ResourceState:
    synced: bool  # listed at least once (absent and forbidden count as synced)
    healthy: bool  # the last list or watch worked (or the resource is absent)
    problem: str  # "" | "absent" | "forbidden" | "failed"
    message: str
    since: float  # monotonic time of the last successful list, event or bookmark (0.0: never)
    resource_version: str = ""  # where the next watch starts


@dataclass(frozen=True, slots=True)
class InformerOptions:
    page_size: int = 500
    watch_timeout_seconds: int = 300  # timeoutSeconds of each watch request
    backoff_seconds: float = 0.5  # first wait after a failure, doubled after each one
    max_backoff_seconds: float = 30.0  # cap of that wait; also the retry period when forbidden
    cilium_config_namespaces: tuple[str, ...] = ("kube-system", "cilium")
    bookmarks: bool = True  # allowWatchBookmarks
    absent_recheck_seconds: float = 300.0  # how often an absent resource (404) is looked for
    read_margin_seconds: float = 30.0  # silence past timeoutSeconds after which a watch is dead
    list_restarts: int = 3  # restarts of one list whose continue token expired (410), then a failure


class _Expired(Exception):
    """410: the resourceVersion (or continue token) is too old; list again."""


class _Stopped(Exception):
    """stop() was called."""


class _Retry(Exception):
    """A failed request that is retried: the wait before it (Retry-After) and the message."""

    def __init__(self, message: str, wait: float = 0.0) -> None:
        super().__init__(message)
        self.message = message
        self.wait = wait


_OK = ("", "")  # (problem, message) of a healthy resource


@dataclass(eq=False)
class _Unit:
    """One list-then-watch: a resource, or cilium-config in one namespace."""

    key: str  # states() key: the collection path (cilium-config: the object's path)
    resource: Resource  # what the sink is told about (CILIUM_CONFIG for cilium-config)
    path: str  # the collection listed and watched
    selector: str  # fieldSelector ("" for none)
    optional: bool  # 404 is "absent"
    forbidden_is_absent: bool  # 403 is "absent" (cilium-config)
    out: _Output = field(repr=False)
    synced: bool = False
    healthy: bool = True
    problem: str = ""
    message: str = ""
    since: float = 0.0
    rv: str = ""
    lines: LineStream | None = None
    thread: threading.Thread | None = None

    def snapshot(self) -> ResourceState:
        return ResourceState(self.synced, self.healthy, self.problem, self.message, self.since, self.rv)

    @property
    def what(self) -> str:
        if self.selector:
            return f"ConfigMap {self.path.split('/')[4]}/{CILIUM_CONFIG_NAME}"
        return f"{self.resource.kind} ({self.resource.api_version})"


class _Output(Protocol):
    def replace(self, unit: _Unit, items: list[dict[str, Any]], rv: str) -> None: ...
    def upsert(self, unit: _Unit, item: dict[str, Any]) -> None: ...
    def delete(self, unit: _Unit, item: dict[str, Any]) -> None: ...
    def state(self, unit: _Unit, status: ResourceState) -> None: ...


class _Direct:
    """A resource of its own: the sink gets exactly what the unit reads; when it turns absent, an
    empty replace first (a CRD removed takes its objects with it)."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self._absent: set[str] = set()  # unit keys last reported absent (one thread each)

    def replace(self, unit: _Unit, items: list[dict[str, Any]], rv: str) -> None:
        self.sink.replace(unit.resource, items, rv)

    def upsert(self, unit: _Unit, item: dict[str, Any]) -> None:
        self.sink.upsert(unit.resource, item)

    def delete(self, unit: _Unit, item: dict[str, Any]) -> None:
        self.sink.delete(unit.resource, item)

    def state(self, unit: _Unit, status: ResourceState) -> None:
        if status.problem == "absent" and unit.key not in self._absent:
            self._absent.add(unit.key)
            self.sink.replace(unit.resource, [], "")
        elif status.problem != "absent":
            self._absent.discard(unit.key)
        self.sink.state(unit.resource, status)


class _Merged:
    """Several units (cilium-config in each namespace) seen by the sink as one resource: it keeps
    what each unit holds, so that a replace is the whole set, and combines their states."""

    def __init__(self, sink: Sink, resource: Resource) -> None:
        self.sink = sink
        self.resource = resource
        self.units: list[_Unit] = []
        self._lock = threading.Lock()
        self._items: dict[str, dict[str, dict[str, Any]]] = {}  # unit key -> name -> item
        self._states: dict[str, ResourceState] = {}
        self._sent: tuple[bool, bool, str, str] | None = None

    def replace(self, unit: _Unit, items: list[dict[str, Any]], rv: str) -> None:
        with self._lock:
            self._items[unit.key] = {_name(i): i for i in items}
            self._send_replace(rv)

    def upsert(self, unit: _Unit, item: dict[str, Any]) -> None:
        with self._lock:
            self._items.setdefault(unit.key, {})[_name(item)] = item
            self.sink.upsert(self.resource, item)

    def delete(self, unit: _Unit, item: dict[str, Any]) -> None:
        with self._lock:
            self._items.setdefault(unit.key, {}).pop(_name(item), None)
            self.sink.delete(self.resource, item)

    def state(self, unit: _Unit, status: ResourceState) -> None:
        with self._lock:
            first = unit.key not in self._states or not self._states[unit.key].synced
            self._states[unit.key] = status
            if status.problem in ("absent", "forbidden") and self._items.get(unit.key):
                self._items[unit.key] = {}
                self._send_replace(status.resource_version)
            elif status.synced and first and unit.key not in self._items:
                self._items[unit.key] = {}  # absent from the start: nothing to wait for
                self._send_replace(status.resource_version)
            combined = self._combined()
            key = (combined.synced, combined.healthy, combined.problem, combined.message)
            if key != self._sent:
                self._sent = key
                self.sink.state(self.resource, combined)

    def _send_replace(self, rv: str) -> None:
        """Under the lock: the whole set, once every unit has listed (or is absent)."""
        if all(u.key in self._items for u in self.units):
            items = [i for u in self.units for i in self._items[u.key].values()]
            self.sink.replace(self.resource, items, rv)

    def _combined(self) -> ResourceState:
        states = [self._states.get(u.key) for u in self.units]
        known = [s for s in states if s is not None]
        synced = len(known) == len(states) and all(s.synced for s in known)
        broken = [s for s in known if not s.healthy]
        if broken:
            problem = broken[0].problem
        elif known and all(s.problem == "absent" for s in known) and len(known) == len(states):
            problem = "absent"
        else:
            problem = ""
        messages = [
            f"{u.what}: {s.message}"
            for u, s in zip(self.units, states, strict=True)
            if s is not None and s.message and (not s.healthy or problem == "absent")
        ]
        since = min((s.since for s in known), default=0.0)
        rv = max((s.resource_version for s in known), key=_rv_order, default="")
        return ResourceState(synced, not broken, problem, "; ".join(messages), since, rv)


def _rv_order(rv: str) -> tuple[int, str]:
    return (int(rv), rv) if rv.isdigit() else (-1, rv)


def _name(item: dict[str, Any]) -> str:
    meta = item.get("metadata")
    if not isinstance(meta, dict):
        return ""
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def _item(obj: dict[str, Any], resource: Resource) -> dict[str, Any]:
    """An object as `Reader` gives it: apiVersion/kind set, no managedFields, owned pods slimmed."""
    item = _prepare(obj, resource)
    if resource.kind == "Pod" and not resource.group:
        return slim_pod(item)
    return item


def _rbac(resource: Resource) -> str:
    return f'apiGroups: ["{resource.group}"], resources: ["{resource.plural}"], verbs: ["list", "watch"]'


class Informer:
    """List-then-watch of `resources` (and cilium-config) into `sink`; see the module docstring.

    `sleep` waits out backoffs; the default waits on the stop Event (stop() ends it at once). A
    replacement (tests) should return promptly; the informer checks for stop() after it."""

    def __init__(
        self,
        transport: StreamTransport,
        sink: Sink,
        resources: Sequence[Resource] = RESOURCES,
        options: InformerOptions | None = None,
        sleep: Callable[[float], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.transport = transport
        self.sink = sink
        self.options = options or InformerOptions()
        self.monotonic = monotonic
        self._stop = threading.Event()
        self._sleep = sleep
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._started = False
        self._units: list[_Unit] = []
        direct = _Direct(sink)
        for resource in resources:
            self._units.append(
                _Unit(resource.path, resource, resource.path, "", resource.optional, False, direct)
            )
        merged = _Merged(sink, CILIUM_CONFIG)
        for namespace in self.options.cilium_config_namespaces:
            unit = _Unit(
                f"/api/v1/namespaces/{namespace}/configmaps/{CILIUM_CONFIG_NAME}",
                CILIUM_CONFIG,
                f"/api/v1/namespaces/{namespace}/configmaps",
                f"metadata.name={CILIUM_CONFIG_NAME}",
                True,
                True,
                merged,
            )
            merged.units.append(unit)
            self._units.append(unit)

    # -- the public side ----------------------------------------------------------------------

    def start(self) -> None:
        """Start one daemon thread per resource (once; an informer is not restarted after stop)."""
        with self._lock:
            if self._started:
                raise RuntimeError("the informer was started already")
            self._started = True
            for unit in self._units:
                name = f"informer {unit.key}"
                unit.thread = threading.Thread(target=self._run, args=(unit,), name=name, daemon=True)
            threads = [u.thread for u in self._units if u.thread is not None]
        for thread in threads:
            thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End every thread: wake the backoffs, shut the open watches, wait up to `timeout`."""
        self._stop.set()
        with self._lock:
            streams = [u.lines for u in self._units if u.lines is not None]
            threads = [u.thread for u in self._units if u.thread is not None]
            self._changed.notify_all()
        for lines in streams:
            try:
                lines.close()
            except Exception as exc:
                log.debug("closing a watch: %s", exc)
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        left = [t.name for t in threads if t.is_alive()]
        if left:
            log.warning("informer: %d thread(s) still running after %.1f s: %s", len(left), timeout, left)

    def synced(self) -> bool:
        """Every resource has listed at least once (absent and forbidden count as listed)."""
        with self._lock:
            return all(u.synced for u in self._units)

    def states(self) -> dict[str, ResourceState]:
        """Each resource's state, keyed by its collection path (cilium-config: the object's path,
        /api/v1/namespaces/NS/configmaps/cilium-config)."""
        with self._lock:
            return {u.key: u.snapshot() for u in self._units}

    def wait_synced(self, timeout: float) -> bool:
        """Wait until synced() (True) or `timeout` seconds pass or stop() is called (False)."""
        with self._changed:
            return self._changed.wait_for(lambda: self.synced() or self._stop.is_set(), timeout) and (
                self.synced()
            )

    # -- one resource's thread ----------------------------------------------------------------

    def _run(self, unit: _Unit) -> None:
        delay = self.options.backoff_seconds
        relist = True
        cuts = 0  # watches cut in a row before a single line came
        while not self._stop.is_set():
            pause = 0.0
            try:
                if relist:
                    items, rv = self._list(unit)
                    with self._lock:
                        unit.rv = rv
                    unit.out.replace(unit, items, rv)
                    self._set(unit, synced=True, problem_message=_OK, progress=True)
                    relist = False
                    delay = self.options.backoff_seconds
                progressed, cut = self._watch(unit)
                if progressed:
                    cuts, delay = 0, self.options.backoff_seconds
                elif cut:
                    cuts += 1
                    if cuts > 1:  # dropped again at once: wait, and say so
                        self._set(unit, problem_message=("failed", "the watch keeps being cut"))
                        pause, delay = delay, self._next(delay)
            except _Stopped:
                break
            except _Expired:
                log.info("%s: resourceVersion %s expired (410); listing again", unit.what, unit.rv)
                relist = True
            except _Retry as exc:  # a watch that could not be opened: again, from the same version
                self._set(unit, problem_message=("failed", exc.message))
                pause, delay = max(delay, exc.wait), self._next(delay)
            except _Failed as exc:
                relist = True
                if exc.status == 404 and unit.optional:
                    self._absent(unit, "the API is not served (CRD not installed)")
                    pause = self.options.absent_recheck_seconds
                elif exc.status == 403 and unit.forbidden_is_absent:
                    namespace = unit.path.split("/")[4]
                    self._absent(
                        unit,
                        f"not readable (permission denied); Cilium settings from the config file. "
                        f"If Cilium runs in {namespace}, grant: namespace: {namespace}, "
                        f'apiGroups: [""], resources: ["configmaps"], '
                        f'resourceNames: ["{CILIUM_CONFIG_NAME}"], verbs: ["get", "list", "watch"]',
                    )
                    pause = self.options.absent_recheck_seconds
                elif exc.status == 403:
                    message = f"permission denied: {exc.message}; grant: {_rbac(unit.resource)}"
                    self._set(unit, synced=True, problem_message=("forbidden", message))
                    pause = self.options.max_backoff_seconds
                else:
                    self._set(unit, problem_message=("failed", exc.message))
                    pause, delay = delay, self._next(delay)
            except Exception as exc:  # the sink failed, or a bug: start again from a list
                log.exception("%s: informer error; listing again", unit.what)
                self._set(unit, problem_message=("failed", f"{type(exc).__name__}: {exc}"))
                relist = True
                pause, delay = delay, self._next(delay)
            if pause > 0:
                try:
                    self._wait(pause)
                except _Stopped:
                    break
        log.debug("%s: informer thread ends", unit.what)

    def _next(self, delay: float) -> float:
        return min(delay * 2, self.options.max_backoff_seconds)

    def _wait(self, seconds: float) -> None:
        """Backoff; raises _Stopped when stop() was (or is, during the wait) called."""
        if self._sleep is None:
            self._stop.wait(max(0.0, seconds))
        else:
            self._sleep(seconds)
        if self._stop.is_set():
            raise _Stopped

    def _set(
        self,
        unit: _Unit,
        *,
        problem_message: tuple[str, str],
        synced: bool | None = None,
        progress: bool = False,
    ) -> None:
        """Record the unit's state; the sink hears of it when it changed."""
        problem, message = problem_message
        healthy = problem in ("", "absent")
        with self._lock:
            if progress:
                unit.since = self.monotonic()
            before = (unit.synced, unit.healthy, unit.problem, unit.message)
            if synced is not None:
                unit.synced = unit.synced or synced
            unit.healthy, unit.problem, unit.message = healthy, problem, message
            changed = before != (unit.synced, unit.healthy, unit.problem, unit.message)
            status = unit.snapshot()
            self._changed.notify_all()
        if changed:
            if healthy and not problem:
                log.info("%s: in sync at resourceVersion %s", unit.what, unit.rv)
            elif problem == "absent":
                log.info("%s: absent: %s", unit.what, message)
            else:
                log.warning("%s: %s: %s", unit.what, problem, message)
            unit.out.state(unit, status)

    def _absent(self, unit: _Unit, message: str) -> None:
        with self._lock:
            unit.rv = ""
        self._set(unit, synced=True, problem_message=("absent", message), progress=True)

    # -- list -----------------------------------------------------------------------------------

    def _list(self, unit: _Unit) -> tuple[list[dict[str, Any]], str]:
        """Every item and the list's resourceVersion, page by page; a failed page is retried in
        place; an expired continue token restarts the list (`list_restarts` times)."""
        for _ in range(self.options.list_restarts + 1):
            items: list[dict[str, Any]] = []
            token = ""
            version = ""
            while True:
                query = [("limit", str(self.options.page_size))]
                if unit.selector:
                    query.append(("fieldSelector", unit.selector))
                if token:
                    query.append(("continue", token))
                status, body = self._get(unit, query)
                if status == 410:
                    log.info("%s: continue token expired (410); listing again", unit.what)
                    break
                if status in (403, 404):
                    raise _Failed(status, _message(body))
                page_items, token, page_version = _page(body, unit.resource)
                items.extend(page_items)
                version = version or page_version
                if not token:
                    return items, version
        raise _Failed(410, f"the list kept expiring (410 Gone) after {self.options.list_restarts} restarts")

    def _get(self, unit: _Unit, query: list[tuple[str, str]]) -> tuple[int, bytes]:
        """One page, retried (with backoff) on connection errors, 429 and 5xx until it answers:
        (status, body) for 2xx, 403, 404 and 410; raises _Failed for another status."""
        delay = self.options.backoff_seconds
        while True:
            if self._stop.is_set():
                raise _Stopped
            wait = 0.0
            try:
                status, headers, body = self.transport.get(unit.path, query)
            except TransportError as exc:
                last = str(exc)
            else:
                if 200 <= status < 300 or status in (403, 404, 410):
                    return status, body
                last = f"HTTP {status}: {_message(body)}"
                if status != 429 and status < 500:
                    raise _Failed(status, last)
                wait = _retry_after(headers)
            self._set(unit, problem_message=("failed", f"GET {unit.path}: {last}"))
            self._wait(max(delay, wait))
            delay = self._next(delay)

    # -- watch ----------------------------------------------------------------------------------

    def _watch(self, unit: _Unit) -> tuple[bool, bool]:
        """One watch from unit.rv until its stream ends: (whether a line came, whether it was cut).
        Raises _Expired (410), _Retry (not opened: connection error, 429, 5xx; an ERROR event),
        _Failed (another status) and _Stopped."""
        timeout = max(1, int(self.options.watch_timeout_seconds))
        query = [("watch", "true"), ("timeoutSeconds", str(timeout))]
        if unit.rv:
            query.append(("resourceVersion", unit.rv))
        if self.options.bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        if unit.selector:
            query.append(("fieldSelector", unit.selector))
        opened = progressed = False
        try:
            with self.transport.stream(unit.path, query, timeout + self.options.read_margin_seconds) as (
                status,
                headers,
                lines,
            ):
                opened = True
                self._register(unit, lines)
                try:
                    if status != 200:
                        self._refused(status, headers, lines)
                    if not unit.healthy and unit.problem == "failed":
                        self._set(unit, problem_message=_OK)
                    for line in lines:
                        if self._stop.is_set():
                            raise _Stopped
                        if not line.strip():
                            continue
                        if not self._event(unit, line):
                            return progressed, True
                        progressed = True
                finally:
                    self._register(unit, None)
        except TransportError as exc:
            if self._stop.is_set():
                raise _Stopped from None
            if not opened:
                raise _Retry(f"watch {unit.path}: {exc}") from None
            log.info("%s: watch cut (%s); watching again from %s", unit.what, exc, unit.rv)
            return progressed, True
        if self._stop.is_set():
            raise _Stopped
        return progressed, False

    def _refused(self, status: int, headers: dict[str, str], lines: LineStream) -> None:
        """A watch answered with an error status: raise what it means."""
        body = b"\n".join(lines)
        if status == 410:
            raise _Expired
        message = f"HTTP {status}: {_message(body)}"
        if status == 429 or status >= 500:
            raise _Retry(f"watch: {message}", _retry_after(headers))
        raise _Failed(status, message)

    def _register(self, unit: _Unit, lines: LineStream | None) -> None:
        """The unit's open stream, for stop() to shut; shut at once if stop() came first."""
        with self._lock:
            unit.lines = lines
            stopping = self._stop.is_set()
        if lines is not None and stopping:
            lines.close()

    def _event(self, unit: _Unit, line: bytes) -> bool:
        """Apply one watch event; False for a line that is not one (a stream cut mid-event)."""
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            log.info("%s: watch sent a partial event; watching again from %s", unit.what, unit.rv)
            return False
        if not isinstance(event, dict):
            return False
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            log.warning("%s: watch event %s without an object; ignored", unit.what, kind)
            return True
        if kind == "ERROR":
            code = obj.get("code")
            message = str(obj.get("message") or obj.get("reason") or "watch error")
            if code == 410:
                raise _Expired
            raise _Retry(f"watch: ERROR {code}: {message}")
        meta = obj.get("metadata")
        rv = str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""
        if kind in ("ADDED", "MODIFIED"):
            unit.out.upsert(unit, _item(obj, unit.resource))
        elif kind == "DELETED":
            unit.out.delete(unit, _item(obj, unit.resource))
        elif kind != "BOOKMARK":
            log.warning("%s: unknown watch event type %r; ignored", unit.what, kind)
            return True
        with self._lock:
            if rv:
                unit.rv = rv
            unit.since = self.monotonic()
        return True


def _retry_after(headers: dict[str, str]) -> float:
    value = {k.lower(): v for k, v in headers.items()}.get("retry-after", "")
    return min(float(value), 60.0) if value.isdigit() else 0.0
