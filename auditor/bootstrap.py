"""The composition root: engines, the store, the runner, the scheduler and the web app are built
here from one Settings object, and nowhere else. Nothing connects at import time."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI

from auditor.cache import DocumentCache, user_cache_dir
from auditor.clock import Clock, system_clock
from auditor.resources import examples_dir
from auditor.service.api import create_app
from auditor.service.hooks import GitHubHook
from auditor.service.leader import FleetScheduler, Leadership
from auditor.service.runner import AuditRunner
from auditor.service.scheduler import Scheduler
from auditor.service.tasks import (
    Dispatch,
    InProcess,
    ToBroker,
    WorkerContext,
    celery_app,
    set_context_factory,
)
from auditor.settings.config import Settings
from auditor.sources.manifests import Tools
from auditor.store import database
from auditor.store.fleet import FleetStore
from auditor.store.repository import Store, TargetSpec


def database_url(settings: Settings) -> str:
    return database.resolve_url(settings.database.url)


def build_store(settings: Settings, migrate: bool = True, clock: Clock = system_clock) -> Store:
    engine = database.make_engine(database_url(settings))
    if migrate:
        database.upgrade(engine)
    store = Store(engine, clock)
    store.sync_targets(
        TargetSpec(t.name, t.kind, t.location, t.git.branch if t.git else None, t.paths, t.nodes, t.schedule)
        for t in settings.targets
    )
    return store


def build_runner(settings: Settings, store: Store) -> AuditRunner:
    # The service's cache of loaded files lives in its data directory, beside its git checkouts;
    # with the bundled example config that would be inside the installed package, so there it
    # is the user cache directory, as for the CLI.
    data = Path(settings.service.git_cache_dir).parent
    inside_package = data.resolve().is_relative_to(examples_dir().resolve())
    cache = DocumentCache(user_cache_dir() if inside_package else data / "documents")
    return AuditRunner(settings, store, Tools.detect(), cache=cache)


@dataclass
class Service:
    store: Store
    runner: AuditRunner
    scheduler: Scheduler
    app: FastAPI


def build_service(
    settings: Settings, clock: Clock = system_clock, environ: dict[str, str] | None = None
) -> Service:
    """The service. Embedded (no `service.broker`): everything runs in this process, as it always
    did. Fleet mode: the schedule fires only on the leader and enqueues tasks for `auditor worker`s;
    webhooks and API triggers enqueue too."""
    environ = dict(os.environ) if environ is None else environ
    store = build_store(settings, clock=clock)
    runner = build_runner(settings, store)
    fleet = FleetStore(store.engine, store.clock)
    scheduler: Scheduler
    dispatch: Dispatch
    if settings.service.broker is not None:
        to_broker = ToBroker(celery_app(settings, environ))
        dispatch = to_broker
        scheduler = FleetScheduler(settings, runner, store.clock, Leadership(store.engine), to_broker)
    else:
        scheduler = Scheduler(settings, runner, store.clock)
        jobs = scheduler.scheduler
        dispatch = InProcess(
            WorkerContext(settings, runner, fleet), lambda work: jobs.add_job(work, misfire_grace_time=None)
        )
    hook = None
    app_settings = settings.service.github_app
    if app_settings is not None:
        branches = {
            t.github.repository: t.git.branch
            for t in settings.targets
            if t.github is not None and t.git is not None and t.git.branch
        }
        hook = GitHubHook(app_settings, app_settings.secret(environ), fleet, dispatch, store.clock, branches)
    token = settings.service.api_token or environ.get(settings.service.api_token_env, "")
    app = create_app(
        store,
        runner,
        scheduler,
        token,
        read_token_required=settings.service.read_token_required,
        bind_host=settings.service.host,
        github_hook=hook,
    )
    return Service(store, runner, scheduler, app)


def build_worker_context(settings: Settings, clock: Clock = system_clock) -> WorkerContext:
    store = build_store(settings, clock=clock)
    return WorkerContext(settings, build_runner(settings, store), FleetStore(store.engine, store.clock))


def work(settings: Settings, concurrency: int, pool: str, hostname: str | None) -> None:
    """`auditor worker`: a Celery worker on the configured queue."""
    from auditor.service import workermetrics

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    broker = settings.service.broker
    assert broker is not None
    app = celery_app(settings, dict(os.environ))
    set_context_factory(lambda: build_worker_context(settings))
    build_store(settings).engine.dispose()  # migrate once, before any task
    workermetrics.install(app, broker.queue, broker.metrics_port)
    argv = ["worker", f"--concurrency={concurrency}", f"--pool={pool}", "--loglevel=INFO", "-Q", broker.queue]
    if hostname:
        argv.append(f"--hostname={hostname}")
    app.worker_main(argv)


def serve(settings: Settings, host: str, port: int) -> None:
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    service = build_service(settings)
    service.scheduler.start()
    try:
        uvicorn.run(service.app, host=host, port=port, log_level="info", access_log=False)
    finally:
        service.scheduler.shutdown()
        service.store.engine.dispose()
