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
from auditor.config import Settings
from auditor.resources import examples_dir
from auditor.service.api import create_app
from auditor.service.runner import AuditRunner
from auditor.service.scheduler import Scheduler
from auditor.sources.manifests import Tools
from auditor.store import database
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


def build_service(settings: Settings, clock: Clock = system_clock) -> Service:
    store = build_store(settings, clock=clock)
    runner = build_runner(settings, store)
    scheduler = Scheduler(settings, runner, store.clock)
    token = settings.service.api_token or os.environ.get(settings.service.api_token_env, "")
    app = create_app(
        store,
        runner,
        scheduler,
        token,
        read_token_required=settings.service.read_token_required,
        bind_host=settings.service.host,
    )
    return Service(store, runner, scheduler, app)


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
