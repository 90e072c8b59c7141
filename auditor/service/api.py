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
from datetime import date, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Protocol

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.exc import SQLAlchemyError
from starlette.routing import Match

from auditor import __version__
from auditor.admission.record import OUTCOMES
from auditor.errors import ConfigError
from auditor.service import web, wire
from auditor.service.access import Authenticator, Principal, Unauthorized
from auditor.service.metrics import registry_for
from auditor.service.runner import AuditRunner, TargetBusy
from auditor.service.signin import SignIn
from auditor.service.signin import mount as mount_signin
from auditor.settings.service import validate_cron
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

    def refresh_schedules(self) -> None: ...

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


# The write endpoints, by method and route path: the action the audit log records, and the path
# parameter that names its subject.
WRITES = {
    ("POST", "/api/v1/targets/{name}/runs"): ("run.start", "name"),
    ("PUT", "/api/v1/targets/{name}/schedule"): ("schedule.set", "name"),
    ("DELETE", "/api/v1/targets/{name}/schedule"): ("schedule.reset", "name"),
    ("PUT", "/api/v1/findings/{finding_id}/acknowledgement"): ("finding.acknowledge", "finding_id"),
    ("DELETE", "/api/v1/findings/{finding_id}/acknowledgement"): ("finding.unacknowledge", "finding_id"),
    ("PUT", "/api/v1/findings/{finding_id}/suppression"): ("finding.suppress", "finding_id"),
    ("DELETE", "/api/v1/findings/{finding_id}/suppression"): ("finding.unsuppress", "finding_id"),
    ("POST", "/api/v1/findings/{finding_id}/pull-request"): ("pull-request.open", "finding_id"),
}
FindingId = Annotated[int, Path(ge=1, le=2**62)]
TargetName = Annotated[str, Path(max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
# Free text a caller writes (notes, reasons): printable, one line or several, no control characters.
_TEXT = r"^[^\x00-\x08\x0b-\x1f\x7f]*$"


class Acknowledgement(BaseModel):
    """PUT /api/v1/findings/{id}/acknowledgement: who is on it (the caller) and a note."""

    model_config = ConfigDict(extra="forbid")
    note: Annotated[str, Field(max_length=2000, pattern=_TEXT)] = ""


class SuppressionBody(BaseModel):
    """PUT /api/v1/findings/{id}/suppression: why, and through which day (UTC) at the latest."""

    model_config = ConfigDict(extra="forbid")
    reason: Annotated[str, Field(min_length=1, max_length=2000, pattern=_TEXT)]
    until: date


class ScheduleBody(BaseModel):
    """PUT /api/v1/targets/{name}/schedule: a five-field crontab line, read in service.timezone."""

    model_config = ConfigDict(extra="forbid")
    schedule: Annotated[str, Field(min_length=9, max_length=120, pattern=r"^[0-9A-Za-z*/,\- ]+$")]


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
                if request.method not in ("GET", "HEAD", "OPTIONS"):
                    audit(request, "anonymous", "refused", str(exc))
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
        route, params = request.scope.get("route"), dict(request.path_params)
        if route is None:  # refused before routing (no valid token): the route it was for
            for candidate in app.routes:
                match, child = candidate.matches(request.scope)
                if match is Match.FULL:
                    route, params = candidate, dict(child.get("path_params", {}))
                    break
        path = getattr(route, "path", request.url.path)
        action, param = WRITES.get((request.method, path), (f"{request.method} {path}", ""))
        subject = str(params.get(param, "")) if param else ""
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

    def target_writer(request: Request, name: str, doing: str) -> Principal:
        """The caller of a write on target `name` (runs, schedule): 403, and refused in the audit
        log, when its role does not cover the target."""
        caller = writer(request)
        if not caller.can_write(name):
            audit(request, caller.actor, "refused", f"role {caller.role} does not cover target {name}")
            raise HTTPException(403, f"your teams' role does not let you {doing}")
        return caller

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
    def trigger(request: Request, name: TargetName) -> JSONResponse:
        """Start an audit of the target now (a token whose role covers the target). Recorded in
        the audit log."""
        caller = target_writer(request, name, "start runs of this target")
        actor = caller.actor
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

    def writable_finding(request: Request, finding_id: int) -> tuple[Principal, FindingRecord]:
        """The caller of a finding write and the finding: 404 (and refused in the audit log) when
        there is none the caller can see, 403 when its role does not cover it."""
        caller = writer(request)
        found = store.finding(finding_id)
        if found is None or not caller.scope.sees(found.target, found.workload.namespace):
            audit(request, caller.actor, "refused", "no such finding (or not one of the caller's teams')")
            raise HTTPException(404, "no such finding")
        if not caller.can_write_finding(found.target, found.workload.namespace):
            audit(
                request,
                caller.actor,
                "refused",
                f"role {caller.role} does not cover {found.target} namespace {found.workload.namespace}",
            )
            raise HTTPException(403, "your teams' role does not let you change this finding")
        return caller, found

    def what(found: FindingRecord) -> str:
        w = found.workload
        return f"{found.rule} on {w.kind} {w.namespace}/{w.name} in {found.target}"

    def fresh(finding_id: int) -> dict[str, Any]:
        return wire.record_json(web.found(store.finding(finding_id), "finding"))

    def taken_back(
        request: Request, finding_id: int, undo: Callable[[int], bool], missing: str
    ) -> dict[str, Any]:
        """DELETE of an acknowledgement or a suppression: `undo(id)` False is a 404 (`the finding
        is <missing>`), refused in the audit log; done, the finding as it is now."""
        caller, found = writable_finding(request, finding_id)
        if not undo(finding_id):
            audit(request, caller.actor, "refused", f"{what(found)}: {missing}")
            raise HTTPException(404, f"the finding is {missing}")
        audit(request, caller.actor, "done", what(found))
        return fresh(finding_id)

    @app.put("/api/v1/findings/{finding_id}/acknowledgement", tags=["findings"])
    def acknowledge(finding_id: FindingId, body: Acknowledgement, request: Request) -> dict[str, Any]:
        """Say you are on a finding (a write role over its target or namespace). It hides nothing;
        runs keep it; recorded in the audit log."""
        caller, found = writable_finding(request, finding_id)
        store.acknowledge(finding_id, caller.actor, body.note)
        audit(request, caller.actor, "done", what(found) + (f": {body.note}" if body.note else ""))
        return fresh(finding_id)

    @app.delete("/api/v1/findings/{finding_id}/acknowledgement", tags=["findings"])
    def unacknowledge(finding_id: FindingId, request: Request) -> dict[str, Any]:
        """Take a finding's acknowledgement back."""
        return taken_back(request, finding_id, store.unacknowledge, "not acknowledged")

    @app.put("/api/v1/findings/{finding_id}/suppression", tags=["findings"])
    def suppress(finding_id: FindingId, body: SuppressionBody, request: Request) -> dict[str, Any]:
        """Suppress a finding through `until` (at most service.max_suppression_days ahead) with a
        reason: `waived` at once, and every later run of its target waives it as a policy pack's
        waiver would (origin `api`), until it expires or is lifted. Recorded in the audit log."""
        caller, found = writable_finding(request, finding_id)
        today = store.clock().date()
        longest = runner.settings.service.max_suppression_days
        if not today <= body.until <= today + timedelta(days=longest):
            problem = f"until must be between {today} and {today + timedelta(days=longest)}"
            audit(request, caller.actor, "refused", f"{what(found)}: {problem}")
            raise HTTPException(422, problem)
        store.suppress(finding_id, caller.actor, body.reason, body.until)
        audit(request, caller.actor, "done", f"{what(found)} until {body.until}: {body.reason}")
        return fresh(finding_id)

    @app.delete("/api/v1/findings/{finding_id}/suppression", tags=["findings"])
    def unsuppress(finding_id: FindingId, request: Request) -> dict[str, Any]:
        """Lift a finding's suppression: it shows again at once (the next run confirms it)."""
        return taken_back(request, finding_id, store.unsuppress, "not suppressed through the API")

    @app.post("/api/v1/findings/{finding_id}/pull-request", tags=["findings"])
    def fix_pull_request(finding_id: FindingId, request: Request) -> JSONResponse:
        """Open (or bring up to date) the fix pull request of the finding's workload, as `auditor pr`
        does: one pull request however often it is asked. The target needs a github section."""
        from auditor.gitops.pulls import PullRequestsDeferred

        caller, found = writable_finding(request, finding_id)
        try:
            outcomes = runner.fix_pull_request(found.target, found.fingerprint)
        except (ValueError, ConfigError) as exc:
            audit(request, caller.actor, "refused", f"{what(found)}: {exc}")
            raise HTTPException(409, str(exc)) from None
        except PullRequestsDeferred as exc:
            audit(request, caller.actor, "failed", f"{what(found)}: {exc}")
            wait = max(1, int((exc.until - store.clock()).total_seconds()))
            return JSONResponse(
                {"error": f"GitHub's rate limit: {exc.reason}"},
                status_code=503,
                headers={"Retry-After": str(wait)},
            )
        except Exception as exc:  # GitHub or git answered with an error: say so, as a gateway
            log.error("fix pull request of finding %s: %s: %s", finding_id, type(exc).__name__, exc)
            audit(request, caller.actor, "failed", f"{what(found)}: {type(exc).__name__}")
            raise HTTPException(502, f"opening the pull request failed: {type(exc).__name__}") from None
        items = [
            {
                "workload": o.workload,
                "branch": o.branch,
                "action": o.action,
                "number": o.number,
                "detail": o.detail,
            }
            for o in outcomes
        ]
        shown = (
            ", ".join(f"{o.action}{f' #{o.number}' if o.number else ''}" for o in outcomes)
            or "nothing to fix"
        )
        audit(request, caller.actor, "done", f"{what(found)}: {shown}")
        return JSONResponse({"items": items})

    def changed_schedule(request: Request, caller: Principal, name: str, cron: str | None) -> dict[str, Any]:
        try:
            runner.settings.target(name)
            changed = store.set_schedule(name, cron, caller.actor)
        except (UnknownTarget, ConfigError):
            audit(request, caller.actor, "refused", "no such target")
            raise HTTPException(404, "no such target") from None
        audit(request, caller.actor, "done", f"schedule {changed.schedule!r}")
        scheduler.refresh_schedules()
        return wire.record_json(changed)

    @app.put("/api/v1/targets/{name}/schedule", tags=["targets"])
    def set_schedule(name: TargetName, body: ScheduleBody, request: Request) -> dict[str, Any]:
        """Audit the target on this cron schedule instead of the config's (a write role over the
        target), until DELETE: every replica's scheduler follows within its recover tick."""
        caller = target_writer(request, name, "change this target's schedule")
        problem = validate_cron(body.schedule)
        if problem is not None:
            audit(request, caller.actor, "refused", f"schedule {body.schedule!r} {problem}")
            raise HTTPException(422, f"schedule {problem}")
        return changed_schedule(request, caller, name, " ".join(body.schedule.split()))

    @app.delete("/api/v1/targets/{name}/schedule", tags=["targets"])
    def reset_schedule(name: TargetName, request: Request) -> dict[str, Any]:
        """Put the config's schedule back in force."""
        return changed_schedule(
            request, target_writer(request, name, "change this target's schedule"), name, None
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
