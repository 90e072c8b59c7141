"""`auditor admit`: the validating admission webhook over HTTPS (docs/admission.md).

`Webhook` turns a request body into an answer: it parses the AdmissionReview, reads the
namespace's mode, asks the `Checker` within the time budget, and records the answer (the store,
through a background `Recorder`, and the Prometheus metrics). It never denies on a model it cannot
trust: not yet synced, a watch broken longer than `admission.max_staleness_seconds`, an answer
over `admission.budget_ms`, a busy webhook or an error in the check are all answered allowed,
with a warning that says so.

`AdmissionServer` is the HTTPS side: HTTP/1.1 on the standard library's threading server, TLS
from a certificate and key file that are reloaded when they change (a cert-manager renewal or a
rotated Secret), without a restart and without dropping a connection. A plain-HTTP request on
the TLS port is answered 400 in plain HTTP. POST /validate answers reviews; GET /healthz says the
process answers; GET /readyz says the model is synced. Metrics are served in plain HTTP on a port
of their own (`metrics_server`). Request bodies are never logged: an object can carry secrets.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import queue
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from auditor.admission import review as rv
from auditor.admission.answer import Answer, answer, failed_open, mode_of
from auditor.admission.check import Checker, Verdict
from auditor.admission.record import AdmissionRecord
from auditor.admission.warm import POLICY_KINDS, WarmModel
from auditor.clock import Clock, utc_date
from auditor.settings.admission import AdmissionSettings

log = logging.getLogger(__name__)

# What placement and reachability read of an object: an UPDATE that changes none of it (a
# finalizer, a managed field, an owner reference) cannot change an answer.
_READ_META = ("labels", "annotations", "name", "namespace")
_POLICY_READ_META = ("name", "namespace")  # a policy's labels and annotations select nothing


class RecordSink(Protocol):
    def record_admission(self, decision: AdmissionRecord) -> bool: ...


def _is_policy(group: str, kind: str) -> bool:
    return (group, kind) in POLICY_KINDS


def _placement_digest(obj: Mapping[str, Any] | None, policy: bool = False) -> bytes:
    if obj is None:
        return b""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    # Everything but status and the metadata nothing reads: a Cilium policy's `specs`, a Calico
    # policy's top-level rules and whatever a CRD keeps outside `spec` count as changes.
    kept = {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion")}
    kept["metadata"] = {k: meta.get(k) for k in (_POLICY_READ_META if policy else _READ_META)}
    return hashlib.sha256(orjson.dumps(kept, option=orjson.OPT_SORT_KEYS)).digest()


class Metrics:
    """The webhook's Prometheus metrics, on a registry of its own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "placement_auditor_admission_requests",
            "AdmissionReview requests answered, by kind, operation and outcome.",
            ["kind", "operation", "outcome"],
            registry=self.registry,
        )
        self.findings = Counter(
            "placement_auditor_admission_findings",
            "Findings admission answered about, by rule and outcome (warned, denied).",
            ["rule", "outcome"],
            registry=self.registry,
        )
        self.rejected = Counter(
            "placement_auditor_admission_bad_requests",
            "Requests refused before a review was read (4xx), by HTTP status.",
            ["code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "placement_auditor_admission_latency_seconds",
            "From a review's arrival to its answer.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=self.registry,
        )
        self.staleness = Gauge(
            "placement_auditor_admission_model_staleness_seconds",
            "How long the oldest broken watch of the warm model has been broken (0: none).",
            registry=self.registry,
        )
        self.synced = Gauge(
            "placement_auditor_admission_model_synced",
            "1 once every resource of the warm model has listed.",
            registry=self.registry,
        )
        self.objects = Gauge(
            "placement_auditor_admission_model_objects",
            "Objects in the warm model.",
            registry=self.registry,
        )
        self.unrecorded = Counter(
            "placement_auditor_admission_unrecorded",
            "Answers that could not be written to the store (queue full or store error).",
            registry=self.registry,
        )


class Recorder:
    """Writes answers to the store off the request path (a bounded queue and one thread)."""

    def __init__(self, sink: RecordSink | None, metrics: Metrics, capacity: int = 10_000) -> None:
        self.sink = sink
        self.metrics = metrics
        self._queue: queue.Queue[AdmissionRecord | None] = queue.Queue(capacity)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.sink is not None and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="admission-recorder", daemon=True)
            self._thread.start()

    def put(self, record: AdmissionRecord) -> None:
        if self.sink is None:
            return
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            self.metrics.unrecorded.inc()
            log.error("admission answer %s not recorded: the recorder's queue is full", record.uid)

    def _run(self) -> None:
        assert self.sink is not None
        while True:
            record = self._queue.get()
            try:
                if record is None:
                    return
                for attempt in range(3):
                    try:
                        self.sink.record_admission(record)
                        break
                    except Exception as exc:  # the store is down: retry, then count it
                        if attempt == 2:
                            self.metrics.unrecorded.inc()
                            log.error("admission answer %s not recorded: %s", record.uid, type(exc).__name__)
                        else:
                            time.sleep(0.2 * (attempt + 1))
            finally:
                self._queue.task_done()

    def flush(self, timeout: float = 10.0) -> None:
        """Wait until what was queued is written (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)

    def stop(self) -> None:
        if self._thread is not None:
            self.flush()
            self._queue.put(None)
            self._thread.join(5)
            self._thread = None


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    content_type: str = "application/json"


def _status_body(code: int, message: str) -> bytes:
    reason = {400: "BadRequest", 404: "NotFound", 405: "MethodNotAllowed", 411: "LengthRequired"}.get(
        code, {413: "RequestEntityTooLarge", 415: "UnsupportedMediaType"}.get(code, "Error")
    )
    return orjson.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "code": code,
            "reason": reason,
            "message": message,
        }
    )


class Webhook:
    """Answers AdmissionReview bodies (see the module docstring)."""

    def __init__(
        self,
        model: WarmModel,
        checker: Checker,
        settings: AdmissionSettings,
        clock: Clock,
        *,
        cluster: str,
        recorder: Recorder | None = None,
        metrics: Metrics | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        workers: int = 4,
    ) -> None:
        self.model = model
        self.checker = checker
        self.settings = settings
        self.clock = clock
        self.cluster = cluster
        self.metrics = metrics or Metrics()
        self.recorder = recorder or Recorder(None, self.metrics)
        self.monotonic = monotonic
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="admission-check")
        self._slots = threading.BoundedSemaphore(workers * 4)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def refresh_gauges(self) -> None:
        health = self.model.health()
        self.metrics.staleness.set(health.stale_seconds)
        self.metrics.synced.set(1 if health.synced else 0)
        self.metrics.objects.set(self.model.count())

    def review(self, body: bytes, arrived: float | None = None) -> Reply:
        """The reply to one POST /validate body."""
        start = self.monotonic() if arrived is None else arrived
        try:
            request = rv.parse(body)
        except rv.BadReview as exc:
            self.metrics.rejected.labels("400").inc()
            return Reply(400, _status_body(400, f"not an AdmissionReview this webhook answers: {exc}"))
        meta_ns = self.model.namespace_object(request.namespace) if request.namespace else None
        mode, where = mode_of(meta_ns, self.settings)
        result, verdict = self._decide(request, mode, where, start)
        latency = self.monotonic() - start
        self._account(request, mode, result, verdict, latency)
        return Reply(
            200, rv.response(request.uid, result.allowed, warnings=result.warnings, message=result.message)
        )

    def _decide(
        self, request: rv.Review, mode: str, where: str, start: float
    ) -> tuple[Answer, Verdict | None]:
        if mode == "off":
            return Answer(True, "ignored", reason=f"mode off ({where})"), None
        if request.sub_resource:
            return Answer(True, "ignored", reason=f"subresource {request.sub_resource}"), None
        if (
            request.operation == "UPDATE"
            and request.old_object is not None
            and _placement_digest(request.object, policy := _is_policy(request.kind.group, request.kind.kind))
            == _placement_digest(request.old_object, policy)
        ):
            return Answer(True, "allowed", reason="nothing placement reads changed"), None
        health = self.model.health()
        if not health.synced:
            return failed_open("the cluster model is not synced yet"), None
        if health.stale_seconds > self.settings.max_staleness_seconds:
            first = health.problems[0] if health.problems else "a watch"
            return failed_open(f"model stale {health.stale_seconds:.0f}s: {first[:40]}"), None
        if not self._slots.acquire(blocking=False):
            return failed_open("webhook busy"), None
        future: Future[Verdict] = self._pool.submit(self._check, request)
        future.add_done_callback(lambda _: self._slots.release())
        left = self.settings.budget_ms / 1000.0 - (self.monotonic() - start)
        try:
            verdict = future.result(timeout=max(0.0, left))
        except FutureTimeout:
            return failed_open(f"over the {self.settings.budget_ms} ms budget"), None
        except Exception as exc:
            log.error(
                "admission check of %s %s/%s failed: %s: %s",
                request.kind.kind,
                request.namespace,
                request.name,
                type(exc).__name__,
                str(exc)[:200],
            )
            return failed_open(f"internal error {type(exc).__name__}"), None
        ns = f"{request.namespace}/" if request.namespace else ""
        subject = f"{request.operation} of {request.kind.kind} {ns}{request.name}"
        return answer(verdict, mode, where, subject, self.settings), verdict

    def _check(self, request: rv.Review) -> Verdict:
        return self.checker.check(request, utc_date(self.clock))

    def _account(
        self, request: rv.Review, mode: str, result: Answer, verdict: Verdict | None, latency: float
    ) -> None:
        findings = (*verdict.findings, *verdict.kept) if verdict is not None else ()
        self.metrics.requests.labels(request.kind.kind, request.operation, result.outcome).inc()
        self.metrics.latency.observe(latency)
        if result.outcome in ("warned", "denied"):
            for f in findings:
                self.metrics.findings.labels(f.rule, result.outcome).inc()
        self.refresh_gauges()
        messages = (result.message,) if result.message else result.warnings
        self.recorder.put(
            AdmissionRecord(
                uid=request.uid,
                at=self.clock(),
                cluster=self.cluster,
                operation=request.operation,
                api_version=request.kind.api_version,
                kind=request.kind.kind,
                namespace=request.namespace,
                name=request.name,
                user=request.user,
                mode=mode,
                outcome=result.outcome,
                dry_run=request.dry_run,
                latency_ms=round(latency * 1000.0, 3),
                rules=tuple(sorted({f.rule for f in findings})),
                groups=verdict.groups if verdict is not None else (),
                messages=tuple(messages),
                reason=result.reason,
                fingerprints=tuple(sorted({f.fingerprint for f in findings})),
            )
        )


# -- TLS ---------------------------------------------------------------------------------------


def _stamp(path: Path) -> tuple[int, int, int]:
    st = path.stat()  # follows the ..data symlink of a mounted Secret
    return (st.st_mtime_ns, st.st_ino, st.st_size)


class Certificates:
    """The serving certificate: an SSLContext rebuilt when the files change (checked every
    `interval` seconds by `watch`, or on `reload`); a broken new pair keeps the old one."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.cert = cert
        self.key = key
        self._lock = threading.Lock()
        self._stamps = (_stamp(cert), _stamp(key))
        self._context = self._load()
        self.reloads = 0

    def _load(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(str(self.cert), str(self.key))
        context.set_alpn_protocols(["http/1.1"])
        return context

    @property
    def context(self) -> ssl.SSLContext:
        with self._lock:
            return self._context

    def reload(self) -> bool:
        """Load the files again if they changed; True when a new certificate is in use."""
        try:
            stamps = (_stamp(self.cert), _stamp(self.key))
        except OSError as exc:
            log.error("TLS files not readable (%s); keeping the certificate in use", exc)
            return False
        if stamps == self._stamps:
            return False
        try:
            context = self._load()
        except (OSError, ssl.SSLError) as exc:  # a half-written pair: try again next time
            log.error("new TLS files do not load (%s); keeping the certificate in use", exc)
            return False
        with self._lock:
            self._context, self._stamps = context, stamps
        self.reloads += 1
        log.info("TLS certificate reloaded from %s", self.cert)
        return True

    def watch(self, interval: float, stop: threading.Event) -> None:
        while not stop.wait(interval):
            self.reload()


def _plain_http_answer() -> bytes:
    text = b"plain HTTP request sent to the HTTPS port: use https://\n"
    return (
        b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
        + f"Content-Length: {len(text)}\r\n\r\n".encode()
        + text
    )


class _Handler(BaseHTTPRequestHandler):
    server: AdmissionServer
    protocol_version = "HTTP/1.1"
    timeout = 15  # a client that stops sending is dropped (the API server's own timeout is 10 s)
    # Buffered: the status line, headers and body leave in one write at handle_one_request's
    # flush (unbuffered, the headers and the body go as two segments, and Nagle's algorithm with
    # the client's delayed ACK holds the second for up to 40 ms).
    wbufsize = 64 * 1024
    server_version = "placement-auditor-admission"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def log_error(self, format: str, *args: Any) -> None:
        log.info("%s %s", self.address_string(), format % args)

    def _send(self, reply: Reply, close: bool = False) -> None:
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(reply.body)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._send(Reply(200, b"ok\n", "text/plain"))
        elif path == "/readyz":
            health = self.server.webhook.model.health()
            if self.server.draining.is_set():
                self._send(Reply(503, b"shutting down\n", "text/plain"))
            elif health.synced:
                self._send(Reply(200, b"ready\n", "text/plain"))
            else:
                self._send(Reply(503, b"the cluster model is not synced yet\n", "text/plain"))
        else:
            self._send(Reply(404, _status_body(404, f"no such path: {path[:100]}")))

    def do_POST(self) -> None:
        arrived = self.server.webhook.monotonic()
        metrics = self.server.webhook.metrics
        path = self.path.split("?", 1)[0]
        raw_length = self.headers.get("Content-Length")
        length = int(raw_length) if raw_length is not None and raw_length.strip().isdigit() else None
        if path != "/validate":
            self._discard(length or 0)
            metrics.rejected.labels("404").inc()
            self._send(
                Reply(404, _status_body(404, f"no such path: {path[:100]} (POST /validate)")), close=True
            )
            return
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            metrics.rejected.labels("411").inc()
            self._send(Reply(411, _status_body(411, "a Content-Length is required")), close=True)
            return
        ctype = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        if ctype != "application/json":
            metrics.rejected.labels("415").inc()
            msg = f"Content-Type must be application/json, not {ctype[:60]!r}"
            self._discard(length or 0)
            self._send(Reply(415, _status_body(415, msg)), close=True)
            return
        if length is None:
            metrics.rejected.labels("411").inc()
            self._send(Reply(411, _status_body(411, "a Content-Length is required")), close=True)
            return
        limit = self.server.webhook.settings.max_body_bytes
        if length > limit:
            metrics.rejected.labels("413").inc()
            msg = f"the body is {length} bytes; the limit is {limit} (admission.max_body_bytes)"
            self._discard(length)
            self._send(Reply(413, _status_body(413, msg)), close=True)
            return
        body = self.rfile.read(length)
        if len(body) < length:
            self.close_connection = True
            return
        self._send(self.server.webhook.review(body, arrived))

    def _discard(self, length: int, cap: int = 64 * 1024 * 1024) -> None:
        """Read and drop a refused body (up to `cap`), so the client reads the answer instead of a
        reset connection; never kept in memory."""
        left = min(length, cap)
        while left > 0:
            chunk = self.rfile.read(min(left, 65536))
            if not chunk:
                return
            left -= len(chunk)

    def do_PUT(self) -> None:
        self._send(Reply(405, _status_body(405, "POST /validate only")), close=True)

    do_DELETE = do_PATCH = do_PUT


class AdmissionServer(ThreadingHTTPServer):
    """HTTPS with certificates reloaded in place (see the module docstring)."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], webhook: Webhook, certificates: Certificates) -> None:
        self.webhook = webhook
        self.certificates = certificates
        self.draining = threading.Event()  # /readyz answers 503: the endpoints drop this replica
        super().__init__(address, _Handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        """In the connection's thread: a plain-HTTP request gets a plain 400; anything else is
        handshaken with the certificate in use now."""
        sock: socket.socket = request
        sock.settimeout(10)
        with contextlib.suppress(OSError):  # answers are small and must not wait for an ACK
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            first = sock.recv(1, socket.MSG_PEEK)
        except OSError:
            return
        if not first:
            return
        if first != b"\x16":  # not a TLS handshake record
            if first.isalpha():
                self.webhook.metrics.rejected.labels("400").inc()
                with contextlib.suppress(OSError):
                    sock.sendall(_plain_http_answer())
            return
        try:
            tls = self.certificates.context.wrap_socket(sock, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            log.info("TLS handshake with %s failed: %s", client_address[0], type(exc).__name__)
            return
        try:
            self.RequestHandlerClass(tls, client_address, self)  # type: ignore[arg-type]
        finally:
            with contextlib.suppress(OSError):
                tls.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.exception("admission: unexpected error with %s", client_address[0] if client_address else "?")


def metrics_server(metrics: Metrics, host: str, port: int, webhook: Webhook) -> ThreadingHTTPServer:
    """Plain HTTP /metrics (Prometheus text format) on a port of its own."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                body, code, ctype = b"not found\n", 404, "text/plain"
            else:
                webhook.refresh_gauges()
                body, code, ctype = generate_latest(metrics.registry), 200, CONTENT_TYPE_LATEST
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


class Running:
    """An admission server and its threads: the HTTPS server, the metrics server, the
    certificate watcher and the recorder (what `auditor admit` runs and tests start)."""

    def __init__(
        self,
        webhook: Webhook,
        certificates: Certificates,
        host: str,
        port: int,
        metrics_port: int | None,
        reload_seconds: float,
    ) -> None:
        self.webhook = webhook
        self.certificates = certificates
        self.https = AdmissionServer((host, port), webhook, certificates)
        self.metrics = (
            metrics_server(webhook.metrics, host, metrics_port, webhook) if metrics_port is not None else None
        )
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self.https.serve_forever, name="admission-https", daemon=True),
            threading.Thread(
                target=certificates.watch,
                args=(reload_seconds, self._stop),
                name="admission-tls",
                daemon=True,
            ),
        ]
        if self.metrics is not None:
            self._threads.append(
                threading.Thread(target=self.metrics.serve_forever, name="admission-metrics", daemon=True)
            )

    @property
    def port(self) -> int:
        return int(self.https.server_address[1])

    @property
    def metrics_port(self) -> int | None:
        return None if self.metrics is None else int(self.metrics.server_address[1])

    def start(self) -> Running:
        self.webhook.recorder.start()
        for t in self._threads:
            t.start()
        return self

    def drain(self, seconds: float) -> None:
        """Before stop() on SIGTERM: /readyz answers 503 while reviews are still answered for
        `seconds`, so that the API server stops sending here before the port closes (the
        endpoints follow readiness; a review in flight is never cut)."""
        self.https.draining.set()
        if seconds > 0:
            self._stop.wait(seconds)

    def stop(self) -> None:
        self._stop.set()
        self.https.shutdown()
        self.https.server_close()
        if self.metrics is not None:
            self.metrics.shutdown()
            self.metrics.server_close()
        self.webhook.recorder.stop()
        self.webhook.close()

    def wait(self) -> None:
        """Block until stopped (SIGTERM is turned into KeyboardInterrupt by the CLI)."""
        while not self._stop.wait(1.0):
            pass
