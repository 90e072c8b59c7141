"""Work as Celery tasks, for a fleet of `auditor worker`s (fleet mode: `service.broker` is set).

Tasks: `auditor.audit` (a scheduled, API, push or start-up audit of one target), `auditor.pr_check`
(a pull request's check run, or its re-run when someone presses "Re-run"), `auditor.fix_pr` (the
check run's "Open fix PR" button), `auditor.installation` (App repositories appear and disappear),
`auditor.reconcile` (the same, from GitHub's lists, for events that never came) and
`auditor.digest`. Every task is

- acknowledged late (`task_acks_late`) and given back when its worker process dies
  (`task_reject_on_worker_lost`), with one message prefetched per process
  (`worker_prefetch_multiplier=1`) and the broker's `visibility_timeout` configured, so a task of
  a worker that vanished is delivered again — never lost;
- idempotent by its key: an audit claims its run by `task_key` (unique in `runs`), a PR check
  its check run by (repository, head SHA, kind); a second delivery of a finished task does
  nothing, one of an unfinished task takes over the same run and finishes it once — never doubled,
  never a second check run;
- serialised per target across the fleet by a lease row (`target_leases`): a task whose target is
  leased elsewhere is retried after `busy_retry_seconds`;
- patient with a database that is away (`patiently`): a refused or dropped connection, a server
  restarting, a full disk is waited out (up to `database_wait_seconds`, its message still
  unacknowledged), then the task is put back on the queue — a failure of the store is never
  recorded as a failed audit, and never acknowledged as done.

The embedded default (no broker) never imports Celery: `InProcess` runs the same work on the
scheduler's thread pool.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple, Protocol, TypeVar

from auditor.service.runner import AuditRunner, process_owner
from auditor.service.webhooks import InstallationEvent, PullRequestEvent, PushEvent
from auditor.settings.config import Settings
from auditor.settings.service import TargetSettings
from auditor.store.database import is_transient
from auditor.store.fleet import FleetStore

T = TypeVar("T")

log = logging.getLogger("auditor.tasks")


class AuditTask(NamedTuple):
    """One audit of `target`, recorded once under `task_key`; a push to a GitHub App repository
    names it by `repository` and `installation_id` (the target is then made from them)."""

    target: str
    task_key: str
    slot: str | None
    trigger: str
    repository: str = ""
    installation_id: int = 0


class FixTask(NamedTuple):
    """The fix pull request onto `branch` of an App repository ("" : its default branch), asked
    for by the "Open fix PR" button of a check run; once per `task_key` (the check run pressed)."""

    repository: str
    installation_id: int
    branch: str
    task_key: str


class Dispatch(Protocol):
    """Where work goes: the broker (fleet) or this process (embedded)."""

    def audit(self, task: AuditTask) -> None: ...

    def pr_check(self, event: PullRequestEvent, task_key: str, attempt: str = "") -> None: ...

    def fix_pr(self, task: FixTask) -> None: ...

    def reconcile(self) -> None: ...

    def installation(self, event: InstallationEvent) -> None: ...


@dataclass
class WorkerContext:
    """What a task needs, built once per worker process by the composition root."""

    settings: Settings
    runner: AuditRunner
    fleet: FleetStore


class _Holder:
    """The worker process's context, built on first use (after Celery forked its pool)."""

    factory: Callable[[], WorkerContext] | None = None
    built: WorkerContext | None = None


def set_context_factory(factory: Callable[[], WorkerContext]) -> None:
    _Holder.factory, _Holder.built = factory, None


def context() -> WorkerContext:
    if _Holder.built is None:
        if _Holder.factory is None:
            raise RuntimeError("no worker context: start workers with `auditor worker`")
        _Holder.built = _Holder.factory()
    return _Holder.built


class LeaseBusy(Exception):
    """Another worker holds the lease; try again later."""


@contextmanager
def leased(fleet: FleetStore, name: str, seconds: float, task_key: str) -> Iterator[None]:
    """Hold the lease `name` while the block runs, renewing it every third of its length."""
    owner = process_owner()
    if not fleet.acquire_lease(name, owner, seconds, task_key):
        raise LeaseBusy(name)
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(max(0.5, seconds / 3)):
            try:
                if not fleet.renew_lease(name, owner, seconds):
                    log.error("lease %s lost", name)
            except Exception as exc:  # the database away: the next renewal tries again
                log.warning("renewing lease %s failed: %s", name, exc)

    thread = threading.Thread(target=renew, daemon=True, name=f"lease {name}")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
        fleet.release_lease(name, owner)


class DatabaseAway(Exception):
    """The database stayed away longer than the task waits; the task goes back on the queue."""


def patiently(
    work: Callable[[], T],
    wait_seconds: float,
    what: str,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
) -> T:
    """`work()`, run again while it fails because the database is away (`is_transient`), pausing
    1, 2, 4 … up to 15 s between tries, for at most `wait_seconds`; then DatabaseAway. Every other
    exception (LeaseBusy included) passes. The work must be idempotent: it is (keyed runs, check runs
    adopted by their external id)."""
    deadline = monotonic() + wait_seconds
    pause = 1.0
    while True:
        try:
            return work()
        except Exception as exc:
            if not is_transient(exc):
                raise
            if monotonic() + pause > deadline:
                raise DatabaseAway(f"{what}: the database stayed away: {type(exc).__name__}") from exc
            log.warning(
                "%s: the database is away (%s); trying again in %.0f s", what, type(exc).__name__, pause
            )
            sleep(pause)
            pause = min(15.0, pause * 2)


# -- the work itself (shared by Celery tasks and the in-process dispatcher) ----------------------


def run_audit(ctx: WorkerContext, task: AuditTask) -> str:
    """One audit of the task's target under its lease, recorded once under its key."""
    from auditor.service import githubapp

    settings, runner = ctx.settings, ctx.runner
    target, task_key = task.target, task.task_key
    if task.repository:
        app_target = githubapp.target_for(settings, task.repository, task.installation_id)
        target = app_target.name
        if not any(t.name == target for t in settings.targets):
            settings = githubapp.with_target(settings, app_target)
            runner = AuditRunner(settings, ctx.runner.store, ctx.runner.tools, environ=ctx.runner.environ)
            runner.raise_transient = ctx.runner.raise_transient
            _sync_target(ctx, app_target)
    sweep = task.trigger == "sweep" and bool(task.repository)
    if sweep and _unchanged(ctx, task):
        return "unchanged"
    broker = settings.service.broker
    seconds = broker.lease_seconds if broker else 300
    with leased(ctx.fleet, f"target:{target}", seconds, task_key):
        keyed = ctx.fleet.claim_keyed_run(target, task_key, task.slot, task.trigger, runner.owner)
        if keyed.state == "done":
            log.info("task %s: run %s already %s", task_key, keyed.run_id, keyed.status)
            return keyed.status
        if keyed.state == "resume":
            log.warning("task %s: taking over run %s (its worker stopped)", task_key, keyed.run_id)
        result = runner.execute(keyed.run_id, target)
    if task.repository and result.status == "succeeded":
        done = ctx.runner.store.run(keyed.run_id)
        if done is not None and done.revision:
            ctx.fleet.record_branch(task.repository, audited_sha=done.revision)
    return result.status


def _unchanged(ctx: WorkerContext, task: AuditTask) -> bool:
    """A scheduled audit of an App repository whose default branch is where it was at its last
    successful audit: one conditional request, no clone, no run (True). Else False, and the
    branch's new ETag kept for the next time."""
    from auditor.service import githubapp

    app = ctx.settings.service.github_app
    if app is None:
        return False
    known = ctx.fleet.branch_state(task.repository)
    if known is None:  # no longer an App repository (removed meanwhile): nothing to audit
        log.info("task %s: %s is not installed any more; skipped", task.task_key, task.repository)
        return True
    client = githubapp.installation_client(app, task.installation_id)
    head = githubapp.branch_head(client, task.repository, known.default_branch, known.etag)
    if head.unchanged and known.audited_sha:
        ctx.fleet.record_branch(task.repository)
        log.info("task %s: %s unchanged since %s", task.task_key, task.repository, known.audited_sha[:12])
        return True
    ctx.fleet.record_branch(task.repository, default_branch=head.branch, branch_etag=head.etag)
    # A new ETag (the branch's protection changed, say) on the same commit is unchanged too.
    return head.sha is not None and head.sha == known.audited_sha


def _sync_target(ctx: WorkerContext, t: TargetSettings) -> None:
    from auditor.store.repository import TargetSpec

    branch = t.git.branch if t.git else None
    ctx.runner.store.sync_targets(
        [TargetSpec(t.name, t.kind, t.location, branch, t.paths, t.nodes, t.schedule)]
    )


def run_pr_check(ctx: WorkerContext, event: PullRequestEvent, task_key: str, attempt: str = "") -> str:
    """A pull request's check run (`attempt`: a re-run's, a check run of its own)."""
    from auditor.service import githubapp

    broker = ctx.settings.service.broker
    seconds = broker.lease_seconds if broker else 300
    # A re-run is a check run of its own: its own lease (the work tree is shared under the checkout lock).
    lease = f"check:{event.repository}:{event.head_sha}" + (f":{attempt}" if attempt else "")
    with leased(ctx.fleet, lease, seconds, task_key):
        return githubapp.audit_pull_request(
            ctx.settings, ctx.runner, ctx.fleet, event, task_key, attempt=attempt
        ).conclusion


def run_fix_pr(ctx: WorkerContext, task: FixTask) -> list[str]:
    """The fix pull request of the button: `auditor pr`'s step onto the branch, under a lease per
    repository and branch; the store's fix id makes a second press (or a redelivery) `up-to-date`."""
    from auditor.gitops.pulls import sync_pull_requests
    from auditor.service import githubapp

    target = githubapp.target_for(ctx.settings, task.repository, task.installation_id)
    _sync_target(ctx, target)
    broker = ctx.settings.service.broker
    seconds = broker.lease_seconds if broker else 300
    runner = ctx.runner
    with leased(ctx.fleet, f"fix:{task.repository}:{task.branch}", seconds, task.task_key):
        outcomes = sync_pull_requests(
            target,
            githubapp.with_target(ctx.settings, target),
            runner.store,
            runner.environ,
            tools=runner.tools,
            onto=task.branch or None,
        )
    shown = [f"{o.action}{f' #{o.number}' if o.number else ''}: {o.workload}" for o in outcomes]
    for line in shown:
        log.info("%s: fix pull request %s", task.repository, line)
    return shown


def run_installation(ctx: WorkerContext, event: InstallationEvent) -> None:
    """Repositories appear (audited from now on) and disappear (no longer audited; their targets
    marked retired, their findings kept)."""
    from auditor.service.githubapp import target_name

    removed = list(event.removed)
    if event.action == "deleted":
        removed += ctx.fleet.installation_repositories(event.installation_id)
        ctx.fleet.drop_installation(event.installation_id)
    ctx.fleet.set_app_repositories(event.installation_id, list(event.added), list(event.removed))
    ctx.fleet.retire_targets([target_name(n) for n in removed if n not in event.added], True)
    ctx.fleet.retire_targets([target_name(n) for n in event.added], False)


def run_reconcile(ctx: WorkerContext) -> tuple[list[str], list[str]]:
    """The App repositories as GitHub lists them now, for `installation` events that never came:
    missing ones are added (and swept), gone ones removed (their targets retired)."""
    from auditor.service import githubapp

    app = ctx.settings.service.github_app
    if app is None:
        return [], []
    added, removed = ctx.fleet.reconcile_app_repositories(githubapp.installed_repositories(app))
    ctx.fleet.retire_targets([githubapp.target_name(n) for n in removed], True)
    ctx.fleet.retire_targets([githubapp.target_name(n) for n in added], False)
    if added or removed:
        log.warning(
            "App repositories reconciled: %d added, %d removed (missed events)", len(added), len(removed)
        )
    return added, removed


def push_task_key(event: PushEvent) -> str:
    return f"push:{event.repository}:{event.after}"


def pr_task_key(event: PullRequestEvent) -> str:
    return f"check:{event.repository}:{event.head_sha}"


# -- Celery -------------------------------------------------------------------------------------


def celery_app(settings: Settings, environ: dict[str, str]) -> Any:
    """The Celery app of `settings.service.broker` (tasks registered here, not on import)."""
    from celery import Celery

    broker = settings.service.broker
    if broker is None:
        raise ValueError("service.broker is not configured")
    url = broker.resolved_url(environ)
    if not url:
        raise ValueError(f"no broker URL: set service.broker.url or ${broker.url_env}")
    app = Celery("placement-auditor", broker=url, set_as_current=False)
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_transport_options={
            "visibility_timeout": broker.visibility_timeout_seconds,
            # Redis: how often a worker sweeps the unacknowledged messages for ones past their
            # visibility timeout (kombu's default sweep is 10 s × every 10th call = 100 s; a dead
            # worker's task should wait the visibility timeout, not that).
            "unacked_restore_interval": max(1, min(10, broker.visibility_timeout_seconds // 4)),
            "unacked_restore_throttle": 1,
        },
        task_default_queue=broker.queue,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_send_task_events=True,
        task_send_sent_event=True,
        enable_utc=True,
    )
    busy, wait = broker.busy_retry_seconds, broker.database_wait_seconds

    def keep_trying(task: Any, work: Callable[[], Any], what: str) -> Any:
        try:
            return patiently(work, wait, what)
        except LeaseBusy:
            raise task.retry(countdown=busy) from None
        except DatabaseAway as exc:
            log.error("%s; back on the queue", exc)
            raise task.retry(countdown=busy) from None

    @app.task(name="auditor.audit", bind=True, max_retries=None)  # type: ignore[untyped-decorator]
    def audit(self: Any, *args: Any) -> str:  # the fields of an AuditTask
        task = AuditTask(*args)
        return str(keep_trying(self, lambda: run_audit(context(), task), f"task {task.task_key}"))

    @app.task(name="auditor.pr_check", bind=True, max_retries=None)  # type: ignore[untyped-decorator]
    def pr_check(self: Any, event: dict[str, Any], task_key: str, attempt: str = "") -> str:
        parsed = PullRequestEvent(**event)
        return str(
            keep_trying(self, lambda: run_pr_check(context(), parsed, task_key, attempt), f"task {task_key}")
        )

    @app.task(name="auditor.fix_pr", bind=True, max_retries=None)  # type: ignore[untyped-decorator]
    def fix_pr(self: Any, *args: Any) -> list[str]:  # the fields of a FixTask
        task = FixTask(*args)
        return list(keep_trying(self, lambda: run_fix_pr(context(), task), f"task {task.task_key}"))

    @app.task(name="auditor.installation", bind=True, max_retries=None)  # type: ignore[untyped-decorator]
    def installation(self: Any, event: dict[str, Any]) -> None:
        event["added"], event["removed"] = tuple(event["added"]), tuple(event["removed"])
        parsed = InstallationEvent(**event)
        keep_trying(
            self, lambda: run_installation(context(), parsed), f"installation {parsed.installation_id}"
        )

    @app.task(name="auditor.reconcile", bind=True, max_retries=None)  # type: ignore[untyped-decorator]
    def reconcile(self: Any) -> None:
        keep_trying(self, lambda: run_reconcile(context()), "reconcile")

    @app.task(name="auditor.digest", bind=True, max_retries=None)  # type: ignore[untyped-decorator]
    def digest(self: Any) -> None:
        from auditor.service import digests

        def send() -> None:
            ctx = context()
            digests.run(ctx.settings, ctx.runner.store, ctx.runner.environ)

        keep_trying(self, send, "digest")

    return app


class ToBroker:
    """Dispatch to the Celery queue."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def audit(self, task: AuditTask) -> None:
        self.app.send_task("auditor.audit", args=list(task))

    def pr_check(self, event: PullRequestEvent, task_key: str, attempt: str = "") -> None:
        self.app.send_task("auditor.pr_check", args=[asdict(event), task_key, attempt])

    def fix_pr(self, task: FixTask) -> None:
        self.app.send_task("auditor.fix_pr", args=list(task))

    def reconcile(self) -> None:
        self.app.send_task("auditor.reconcile")

    def installation(self, event: InstallationEvent) -> None:
        self.app.send_task("auditor.installation", args=[asdict(event)])

    def digest(self) -> None:
        self.app.send_task("auditor.digest")


class InProcess:
    """The embedded default: the same work on a thread of this process (`submit` runs a callable)."""

    def __init__(self, ctx: WorkerContext, submit: Callable[[Callable[[], Any]], None]) -> None:
        self.ctx, self.submit = ctx, submit

    def audit(self, task: AuditTask) -> None:
        self.submit(lambda: self._quiet(lambda: run_audit(self.ctx, task)))

    def pr_check(self, event: PullRequestEvent, task_key: str, attempt: str = "") -> None:
        self.submit(lambda: self._quiet(lambda: run_pr_check(self.ctx, event, task_key, attempt)))

    def fix_pr(self, task: FixTask) -> None:
        self.submit(lambda: self._quiet(lambda: run_fix_pr(self.ctx, task)))

    def reconcile(self) -> None:
        self.submit(lambda: self._quiet(lambda: run_reconcile(self.ctx)))

    def installation(self, event: InstallationEvent) -> None:
        run_installation(self.ctx, event)

    @staticmethod
    def _quiet(work: Callable[[], Any]) -> None:
        try:
            work()
        except LeaseBusy as exc:
            log.info("skipped: %s is being audited", exc)
        except Exception as exc:
            log.error("background work failed: %s: %s", type(exc).__name__, exc)
