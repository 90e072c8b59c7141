"""The composition root: engines, the store, the runner, the scheduler and the web app are built
here from one Settings object, and nowhere else. Nothing connects at import time."""

from __future__ import annotations

import logging
import os
import secrets
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fastapi import FastAPI

from auditor import gcpause
from auditor.cache import DocumentCache, user_cache_dir
from auditor.clock import Clock, system_clock
from auditor.errors import ConfigError
from auditor.resources import examples_dir
from auditor.service.access import Authenticator
from auditor.service.api import create_app
from auditor.service.hooks import GitHubHook
from auditor.service.leader import FleetScheduler, Leadership
from auditor.service.runner import AuditRunner
from auditor.service.scheduler import Scheduler
from auditor.service.signin import SignIn
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

if TYPE_CHECKING:
    from auditor.admission.check import Checker
    from auditor.admission.server import Running
    from auditor.admission.warm import WarmModel
    from auditor.rules.packs import PolicyPack
    from auditor.sources.informer import Informer

log = logging.getLogger(__name__)


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
    authenticator = Authenticator(settings.service.auth, token, store.clock)
    app = create_app(
        store,
        runner,
        scheduler,
        token,
        read_token_required=settings.service.read_token_required,
        bind_host=settings.service.host,
        github_hook=hook,
        authenticator=authenticator,
        signin=_signin(authenticator, environ, store.clock),
    )
    return Service(store, runner, scheduler, app)


def build_worker_context(settings: Settings, clock: Clock = system_clock) -> WorkerContext:
    store = build_store(settings, clock=clock)
    runner = build_runner(settings, store)
    runner.raise_transient = True  # a database away is waited out by the task, not a failed run
    return WorkerContext(settings, runner, FleetStore(store.engine, store.clock))


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


def _signin(auth: Authenticator, environ: Mapping[str, str], clock: Clock) -> SignIn | None:
    """The web pages' OIDC sign-in, when service.auth names a client."""
    settings = auth.auth
    if settings is None or not settings.client_id:
        return None
    key = environ.get(settings.session_secret_env, "").encode()
    if not key:
        log.warning(
            "$%s is not set: session cookies are signed with a key of this process only "
            "(sign-ins end at a restart and are not shared by replicas)",
            settings.session_secret_env,
        )
        key = secrets.token_bytes(32)
    secret = environ.get(settings.client_secret_env, "") if settings.client_secret_env else ""
    return SignIn(auth, key, secret, clock)


def access_mode(settings: Settings, environ: Mapping[str, str] = os.environ) -> str:
    """One line: how callers are identified (`auditor serve` prints it first)."""
    auth = settings.service.auth
    token = bool(settings.service.api_token or environ.get(settings.service.api_token_env, ""))
    if auth is None:
        if not token:
            return (
                "access: single-user mode, no identity provider and no API token: reads are open, "
                "writes are refused (set $" + settings.service.api_token_env + " for the one local admin)"
            )
        reads = "need the token" if settings.service.read_token_required else "are open"
        return (
            f"access: single-user mode, no identity provider: one local admin (the API token); reads {reads}"
        )
    parts = [f"{len(auth.teams)} team(s)", f"{len(auth.tokens)} machine token(s)"]
    if auth.issuer:
        parts.insert(0, f"JWTs of {auth.issuer}")
    admin = "; the API token is the local admin" if token else ""
    return f"access: per team ({', '.join(parts)}): every read is authenticated and scoped{admin}"


def serve(settings: Settings, host: str, port: int) -> None:
    import uvicorn

    print(access_mode(settings), flush=True)  # the first line: who may see and do what
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    service = build_service(settings)
    service.scheduler.start()
    try:
        uvicorn.run(service.app, host=host, port=port, log_level="info", access_log=False)
    finally:
        service.scheduler.shutdown()
        service.store.engine.dispose()


# -- the admission webhook (`auditor admit`) -------------------------------------------------


@dataclass
class AdmissionService:
    """The webhook's parts, started and stopped together: the informer feeding the warm model,
    and the HTTPS server answering reviews from it (with its metrics server and recorder)."""

    model: WarmModel
    informer: Informer
    running: Running
    store: Store | None
    checker: Checker
    warmed: bool = False

    def start(self) -> AdmissionService:
        self.running.start()  # /readyz answers 503 until the informer's first lists are in
        self.informer.start()
        return self

    def warm_when_synced(self) -> None:
        """Once the model has synced: parse what every answer reads (Checker.warm), once; then
        take the model out of the cyclic garbage collector's full passes (gcpause.freeze)."""
        if self.warmed or not self.model.health().synced:
            return
        self.warmed = True
        started = time.perf_counter()
        count = self.checker.warm()
        gcpause.freeze(collect=True)
        log.info(
            "admission webhook: model synced, %d objects parsed in %.1f s",
            count,
            time.perf_counter() - started,
        )

    def stop(self, drain_seconds: float = 0.0) -> None:
        self.running.drain(drain_seconds)
        self.running.stop()  # flushes the recorder: the answers given are stored
        self.informer.stop()
        if self.store is not None:
            self.store.engine.dispose()


ADMISSION_REFREEZE_SECONDS = 600
"""`auditor admit` freezes the heap again this often (gcpause.freeze), so that the objects watch
events brought in since join the frozen ones."""


@dataclass(frozen=True)
class AdmissionListen:
    host: str
    port: int
    metrics_port: int | None
    tls_cert: Path
    tls_key: Path


def build_admission(
    settings: Settings,
    api_client: object,
    cluster: str,
    pack: PolicyPack,
    listen: AdmissionListen,
    store: Store | None,
    clock: Clock = system_clock,
) -> AdmissionService:
    """The webhook over one API client: its informer reads what the live audit reads (the same
    resources, cilium-config in the namespaces the audit reads it from) into the warm model."""
    from auditor.admission.check import Checker
    from auditor.admission.server import Certificates, Metrics, Recorder, Running, Webhook
    from auditor.admission.warm import WarmModel
    from auditor.sources.informer import Informer, InformerOptions
    from auditor.sources.kubeapi import CILIUM_CONFIG, RESOURCES, KubernetesTransport, ReadOptions

    resources = tuple(RESOURCES)
    read = ReadOptions.from_settings(settings)
    model = WarmModel(cluster)
    model.expect((*resources, CILIUM_CONFIG))
    # One watch connection per resource (and cilium-config namespace) stays open, plus lists.
    pool = len(resources) + len(read.cilium_config_namespaces) + 4
    transport = KubernetesTransport(api_client, (10.0, 60.0), pool_size=pool)
    options = InformerOptions(
        page_size=read.page_size, cilium_config_namespaces=read.cilium_config_namespaces
    )
    informer = Informer(transport, model, resources, options)
    metrics = Metrics()
    checker = Checker(settings, pack, model)
    webhook = Webhook(
        model,
        checker,
        settings.admission,
        clock,
        cluster=cluster,
        recorder=Recorder(store, metrics),
        metrics=metrics,
    )
    try:
        certificates = Certificates(listen.tls_cert, listen.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            str(listen.tls_cert), 0, "--tls-cert", f"the certificate and key do not load: {exc}"
        ) from None
    try:
        running = Running(
            webhook,
            certificates,
            listen.host,
            listen.port,
            listen.metrics_port,
            settings.admission.tls_reload_seconds,
        )
    except OSError as exc:  # the port is taken, or the address is not this host's
        webhook.close()
        ports = f"{listen.port}" + (f" and {listen.metrics_port}" if listen.metrics_port else "")
        raise ConfigError(
            "(arguments)", 0, "--port", f"cannot listen on {listen.host}:{ports}: {exc}"
        ) from None
    return AdmissionService(model, informer, running, store, checker)


def admit(
    settings: Settings,
    connection: tuple[object, str],
    pack: PolicyPack,
    listen: AdmissionListen,
    record: bool,
    drain_seconds: float,
    stop: threading.Event,
) -> None:
    """`auditor admit`: serve until `stop` is set (the CLI sets it on SIGTERM or SIGINT), then
    drain and stop."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    api_client, cluster = connection
    store = build_store(settings) if record else None
    service = build_admission(settings, api_client, cluster, pack, listen, store).start()
    running = service.running
    where = f"https://{listen.host}:{running.port}/validate"
    metrics = f"http://{listen.host}:{running.metrics_port}/metrics" if running.metrics_port else "off"
    recorded = database.redacted(database_url(settings)) if record else "not recorded (--no-record)"
    log.info(
        "admission webhook for cluster %s on %s (metrics %s); default mode %s, budget %d ms; answers: %s",
        cluster,
        where,
        metrics,
        settings.admission.default_mode,
        settings.admission.budget_ms,
        recorded,
    )
    try:
        ticks = 0
        while not stop.wait(1.0):
            service.warm_when_synced()
            ticks += 1
            if service.warmed and ticks % ADMISSION_REFREEZE_SECONDS == 0:
                gcpause.freeze()
        log.info("admission webhook: stopping (draining %.0f s)", drain_seconds)
    finally:
        service.stop(drain_seconds if stop.is_set() else 0.0)
        close = getattr(api_client, "close", None)
        if close is not None:
            close()
