"""The HTTP API (FastAPI; its OpenAPI document is served at /api/v1/openapi.json), health,
readiness and Prometheus metrics.

Every filter is validated (enumerations, lengths, page size) before a query is built, and every
value reaches SQL as a bound parameter: hostile input gets a 4xx, never a 500 or an injection.
Write endpoints need `Authorization: Bearer <token>` with the configured token; without a
configured token they are refused (403), never open. With `service.read_token_required`, reads
(GET /api/v1/*, the pages) need it too; /healthz, /readyz and /metrics stay open for probes and
Prometheus (they carry states and counts, no names).

Every response carries a Content-Security-Policy (no script, the pages' own styles by hash, no
framing), X-Frame-Options, X-Content-Type-Options and Referrer-Policy. When the server is bound to
a loopback address, a request whose Host is not localhost, 127.0.0.1 or [::1] is refused (421):
a web page elsewhere cannot reach the API through a DNS name rebound to 127.0.0.1.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import urllib.parse
from collections.abc import Awaitable, Callable
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Protocol

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy.exc import SQLAlchemyError

from auditor import __version__
from auditor.admission.record import OUTCOMES
from auditor.errors import ConfigError
from auditor.service import web, wire
from auditor.service.access import Authenticator, Principal, Unauthorized
from auditor.service.metrics import registry_for
from auditor.service.runner import AuditRunner, TargetBusy
from auditor.service.signin import SignIn
from auditor.service.signin import mount as mount_signin
from auditor.store import database
from auditor.store.records import AdmissionDecisionRecord, FindingRecord, Page, RunRecord
from auditor.store.repository import BadCursor, FindingFilter, SlotTaken, Store, UnknownTarget

log = logging.getLogger("auditor.api")

MAX_PAGE = 500
Text = Annotated[str | None, Query(max_length=253, pattern=r"^[\w./:@-]+$")]
# One of the admission webhook's outcomes (auditor/admission/record.py OUTCOMES).
Outcome = Annotated[
    str | None,
    Query(
        pattern="^(" + "|".join(map(re.escape, OUTCOMES)) + ")$", json_schema_extra={"enum": list(OUTCOMES)}
    ),
]


class Severity(StrEnum):
    critical = "critical"
    high = "high"
    medium = "medium"
    low = "low"


class Status(StrEnum):
    new = "new"
    open = "open"
    resolved = "resolved"
    reopened = "reopened"
    waived = "waived"


class Submitter(Protocol):
    def submit(self, run_id: int, target: str) -> None: ...

    @property
    def running(self) -> bool: ...


# Paths that answer without a token even when reads need one: probes and the metrics scrape.
# /hooks/github authenticates each delivery by its HMAC signature instead.
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/hooks/github"})
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})


def is_loopback(host: str) -> bool:
    """Whether the server's bind address only listens on this machine."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_allowed(header: str) -> bool:
    """A Host header naming this machine's loopback: localhost, 127.0.0.1 or [::1], any port."""
    host = header.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        name, rest = (host[: end + 1], host[end + 1 :]) if end > 0 else ("", "")
    else:
        name, colon, port = host.partition(":")
        rest = colon + port
    if rest and not (rest.startswith(":") and rest[1:].isdigit()):
        return False
    return name in LOOPBACK_NAMES


def _address(request: Request) -> str:
    return request.client.host if request.client is not None else ""


# The write endpoints, by route path: the action the audit log records, and the path parameter
# that names its subject.
WRITES = {"/api/v1/targets/{name}/runs": ("run.start", "name")}


def create_app(
    store: Store,
    runner: AuditRunner,
    scheduler: Submitter,
    api_token: str,
    *,
    read_token_required: bool = False,
    bind_host: str | None = None,
    github_hook: Any = None,
    authenticator: Authenticator | None = None,
    signin: SignIn | None = None,
) -> FastAPI:
    """The app. `read_token_required`: reads need the token too. `bind_host`: the address the
    server listens on; a loopback one turns on the Host header check."""
    app = FastAPI(
        title="Placement Auditor",
        version=__version__,
        description="Findings, runs and targets of the placement audit service.",
        openapi_url="/api/v1/openapi.json",
        docs_url=None,  # Swagger UI loads from a CDN; the OpenAPI document is enough
        redoc_url=None,
    )
    registry = registry_for(store)
    security_headers = {
        "Content-Security-Policy": web.content_security_policy(),
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }
    check_host = bind_host is not None and is_loopback(bind_host)
    auth = authenticator if authenticator is not None else Authenticator(None, api_token, store.clock)
    # Reads are authenticated when identities are configured (teams scope what each caller sees),
    # or when read_token_required asks it of the one local admin token.
    reads_authenticated = auth.identities or read_token_required
    open_reads = Principal("anonymous", "read")

    def refuse(request: Request) -> Response | None:
        if check_host and not _host_allowed(request.headers.get("host", "")):
            return JSONResponse(
                {"error": "this server answers only to localhost, 127.0.0.1 or [::1] (Host header)"},
                status_code=421,
            )
        path = request.url.path
        if reads_authenticated and path not in OPEN_PATHS and not (signin and path.startswith("/auth/")):
            if not auth.configured:
                return JSONResponse(
                    {"error": "reads need the API token (read_token_required) and none is configured"},
                    status_code=403,
                )
            page = not path.startswith("/api/")
            header = request.headers.get("authorization", "")
            # The pages also take the sign-in's session cookie; the API takes bearer tokens only (a
            # cookie would let another site's form write through the caller's browser).
            session = signin.principal(request) if signin is not None and page and not header else None
            try:
                principal = session or auth.authenticate(header)
            except Unauthorized as exc:
                if signin is not None and page and not header:
                    target = path + (f"?{request.url.query}" if request.url.query else "")
                    return RedirectResponse(
                        "/auth/login?" + urllib.parse.urlencode({"next": target}), status_code=302
                    )
                challenge = 'Basic realm="placement-auditor", charset="UTF-8"' if page else "Bearer"
                return JSONResponse(
                    {"error": f"a valid bearer token is required: {exc}"},
                    status_code=401,
                    headers={"WWW-Authenticate": challenge},
                )
            request.state.principal = principal
        return None

    @app.middleware("http")
    async def hygiene(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        response = refuse(request) or await call_next(request)
        response.headers.update(security_headers)
        return response

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [
            {"where": ".".join(str(p) for p in e.get("loc", ())), "problem": e.get("msg", "")}
            for e in exc.errors()
        ]
        return JSONResponse({"error": "invalid request", "details": problems}, status_code=422)

    @app.exception_handler(SQLAlchemyError)
    async def database_error(_request: Request, exc: SQLAlchemyError) -> JSONResponse:
        log.error("database error: %s", exc)
        return JSONResponse({"error": "the database is not available"}, status_code=503)

    def audit(request: Request, actor: str, outcome: str, detail: str) -> None:
        """Append a write (or a refused one) to the audit log. A store that cannot take it does
        not change the answer; the entry goes to the error log instead, so it is not lost."""
        route = getattr(request.scope.get("route"), "path", request.url.path)
        action, param = WRITES.get(route, (f"{request.method} {route}", ""))
        subject = str(request.path_params.get(param, "")) if param else ""
        try:
            store.append_audit(
                actor, action, subject, address=_address(request), outcome=outcome, detail=detail
            )
        except SQLAlchemyError as exc:
            log.error(
                "audit log not written (%s): %s %s %s by %s from %s: %s",
                type(exc).__name__,
                outcome,
                action,
                subject,
                actor,
                _address(request),
                detail,
            )

    def authenticated(request: Request, what: str) -> Principal:
        header = request.headers.get("authorization", "")
        if not auth.configured:
            raise HTTPException(403, f"no API token is configured; {what}")
        if not header.lower().startswith("bearer "):
            raise Unauthorized("a bearer token is required")
        return auth.authenticate(header)

    def writer(request: Request) -> Principal:
        """The caller of a write endpoint (its role is checked against the subject by the endpoint)."""
        try:
            return authenticated(request, "write endpoints are disabled")
        except HTTPException:
            audit(request, "anonymous", "refused", "no API token is configured")
            raise
        except Unauthorized as exc:
            audit(request, "anonymous", "refused", str(exc))
            raise HTTPException(
                401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"}
            ) from None

    def admin(request: Request) -> Principal:
        """The audit log says who did what: an admin's, whatever read_token_required says."""
        try:
            principal = authenticated(request, "the audit log is not served")
        except Unauthorized:
            raise HTTPException(
                401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"}
            ) from None
        if not principal.admin:
            raise HTTPException(403, "the audit log is for admins")
        return principal

    def reader(request: Request) -> Principal:
        """Who reads: the caller the middleware authenticated, or anyone when reads are open."""
        return getattr(request.state, "principal", None) or open_reads

    def paged(
        read: Callable[[], Page[FindingRecord] | Page[RunRecord] | Page[AdmissionDecisionRecord]],
    ) -> dict[str, Any]:
        try:
            return wire.record_json(read())
        except BadCursor as exc:
            raise HTTPException(400, str(exc)) from None

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """The process is alive."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"])
    def readyz() -> JSONResponse:
        """The database answers and takes writes (for SQLite: the file opened is still there,
        unchanged, sound), its schema is current and the scheduler runs."""
        checks: dict[str, str] = {}
        try:
            checks["database"] = database.check_health(store.engine)
            if checks["database"] == "ok":
                checks["schema"] = (
                    "ok" if database.is_current(store.engine) else "not migrated (auditor db upgrade)"
                )
        except (SQLAlchemyError, OSError) as exc:
            checks["database"] = f"unavailable: {type(exc).__name__}"
        checks["scheduler"] = "ok" if scheduler.running else "stopped"
        ok = all(v == "ok" for v in checks.values())
        return JSONResponse(
            {"status": "ok" if ok else "unavailable", "checks": checks}, status_code=200 if ok else 503
        )

    @app.get("/metrics", tags=["health"], response_class=PlainTextResponse)
    def metrics() -> Response:
        """Prometheus text format."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/api/v1/findings", tags=["findings"])
    def findings(
        request: Request,
        target: Text = None,
        rule: Text = None,
        severity: Severity | None = None,
        status: Status | None = None,
        namespace: Text = None,
        since: datetime | None = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
        cursor: Annotated[str | None, Query(max_length=64)] = None,
    ) -> dict[str, Any]:
        """Findings, newest first, filtered; `next_cursor` fetches the next page."""
        caller = reader(request)
        flt = FindingFilter(
            target, rule, severity and severity.value, status and status.value, namespace, since
        )
        return paged(lambda: store.findings(flt, limit, cursor, caller.scope))

    @app.get("/api/v1/findings/{finding_id}", tags=["findings"])
    def finding(finding_id: Annotated[int, Path(ge=1, le=2**62)], request: Request) -> dict[str, Any]:
        """One finding with its history (one entry per run that saw or resolved it)."""
        caller = reader(request)
        found = store.finding(finding_id)
        if found is not None and not caller.scope.sees(found.target, found.workload.namespace):
            found = None  # another team's: as if it did not exist
        return wire.record_json(web.found(found, "finding"))

    @app.get("/api/v1/runs", tags=["runs"])
    def runs(
        request: Request,
        target: Text = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
        cursor: Annotated[str | None, Query(max_length=64)] = None,
    ) -> dict[str, Any]:
        """Runs, newest first."""
        caller = reader(request)
        return paged(lambda: store.runs(target, limit, cursor, caller.scope))

    @app.get("/api/v1/runs/{run_id}", tags=["runs"])
    def run(run_id: Annotated[int, Path(ge=1, le=2**62)], request: Request) -> dict[str, Any]:
        caller = reader(request)
        found = store.run(run_id)
        if found is not None and not caller.scope.sees_target(found.target):
            found = None
        return wire.record_json(web.found(found, "run"))

    @app.get("/api/v1/targets", tags=["targets"])
    def targets(request: Request) -> dict[str, Any]:
        """The targets, with their schedule and last successful run (the caller's teams')."""
        caller = reader(request)
        return {"items": [wire.record_json(t) for t in store.targets() if caller.scope.sees_target(t.name)]}

    @app.get("/api/v1/admission", tags=["admission"])
    def admission(
        request: Request,
        cluster: Text = None,
        outcome: Outcome = None,
        since: datetime | None = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
        cursor: Annotated[str | None, Query(max_length=64)] = None,
    ) -> dict[str, Any]:
        """The admission webhook's answers, newest first, of one cluster or outcome, at or after
        `since`; dry runs (`dry_run: true`) changed nothing. `next_cursor` fetches the next page."""
        caller = reader(request)
        return paged(
            lambda: store.admission_decisions(
                cluster=cluster, outcome=outcome, since=since, limit=limit, cursor=cursor, scope=caller.scope
            )
        )

    @app.get("/api/v1/audit-log", tags=["audit"], dependencies=[Depends(admin)])
    def audit_log(
        actor: Annotated[str | None, Query(max_length=256)] = None,
        action: Annotated[str | None, Query(max_length=64, pattern=r"^[\w./{} -]+$")] = None,
        since: datetime | None = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
        cursor: Annotated[str | None, Query(max_length=200)] = None,
    ) -> dict[str, Any]:
        """Every write to the service, newest first (bearer token required, also when reads are
        open): who, what, on what, when, from where, done or refused. Append-only."""
        try:
            return wire.record_json(
                store.audit_log(actor=actor, action=action, since=since, limit=limit, cursor=cursor)
            )
        except BadCursor as exc:
            raise HTTPException(400, str(exc)) from None

    @app.post(
        "/api/v1/targets/{name}/runs",
        tags=["targets"],
        status_code=202,
    )
    def trigger(
        request: Request,
        name: Annotated[str, Path(max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")],
    ) -> JSONResponse:
        """Start an audit of the target now (a token whose role covers the target). Recorded in
        the audit log."""
        caller = writer(request)
        actor = caller.actor
        if not caller.can_write(name):
            audit(request, actor, "refused", f"role {caller.role} does not cover target {name}")
            raise HTTPException(403, "your teams' role does not let you start runs of this target")
        try:
            run_id = runner.start(name, None, "api")
        except (UnknownTarget, ConfigError):
            audit(request, actor, "refused", "no such target")
            raise HTTPException(404, "no such target") from None
        except (TargetBusy, SlotTaken):
            audit(request, actor, "refused", "an audit of this target is already running")
            raise HTTPException(409, "an audit of this target is already running") from None
        audit(request, actor, "done", f"run {run_id}")
        scheduler.submit(run_id, name)
        return JSONResponse(
            {"run_id": run_id, "status": "running", "url": f"/api/v1/runs/{run_id}"},
            status_code=202,
            headers={"Location": f"/api/v1/runs/{run_id}"},
        )

    if github_hook is not None:
        limit = github_hook.app.max_body_bytes

        @app.post("/hooks/github", tags=["github"], include_in_schema=False)
        async def github_webhook(request: Request) -> JSONResponse:
            """GitHub App webhooks (X-Hub-Signature-256 verified; see auditor/service/hooks.py)."""
            declared = request.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                return JSONResponse({"error": f"payload over {limit} bytes"}, status_code=413)
            body = bytearray()
            async for chunk in request.stream():
                body.extend(chunk)
                if len(body) > limit:
                    return JSONResponse({"error": f"payload over {limit} bytes"}, status_code=413)
            # The checks touch the database: off the event loop.
            status, answer = await run_in_threadpool(
                github_hook.handle,
                request.headers.get("x-github-event", ""),
                request.headers.get("x-github-delivery"),
                request.headers.get("x-hub-signature-256"),
                bytes(body),
            )
            return JSONResponse(answer, status_code=status)

    if signin is not None:
        mount_signin(app, signin)
    web.mount(app, store, runner)
    return app
