"""The service's part of the config file: `database`, `service` and `targets`.

    database:
      url: postgresql://auditor@db/auditor   # or sqlite:///auditor.db; AUDITOR_DATABASE_URL wins
    service:
      host: 127.0.0.1             # where `auditor serve` listens
      port: 8080
      api_token_env: AUDITOR_API_TOKEN  # environment variable holding the bearer token for writes
      read_token_required: false  # true: reading the API and the pages needs the token too
      timezone: UTC               # cron schedules are read in this zone
      misfire_grace_seconds: 3600 # a daily run missed during a restart still runs within this time
      catch_up: true              # on start, run a slot that fired while no service was up (within the grace)
      run_on_start: false         # on start, audit every target once, whatever the schedule says
      heartbeat_seconds: 15       # a running audit proves it is alive this often
      stale_after_seconds: 300    # a `running` run without a heartbeat this long is `interrupted`
      git_cache_dir: .auditor-cache/git
      git_timeout_seconds: 300
      broker:                     # fleet mode (docs/scale.md); absent: everything in-process
        url_env: AUDITOR_BROKER_URL   # redis://… (default) or amqp://… (RabbitMQ)
      github_app:                 # the GitHub App receiving webhooks at /hooks/github
        app_id: 12345
        private_key_file: app.pem
        webhook_secret_env: AUDITOR_WEBHOOK_SECRET
    targets:
      - name: infra
        schedule: "0 6 * * *"     # cron, five fields
        git:
          url: https://github.com/acme/infra.git   # https, ssh, git@host:path, file:// or a path
          branch: main            # default: the remote's default branch
          token_env: INFRA_GIT_TOKEN   # HTTPS token from the environment (never printed)
          username: x-access-token
        paths: [clusters/prod]    # inside the checkout; default: all of it
        nodes: [nodes/prod.yaml]  # `kubectl get nodes -o yaml` dumps inside the checkout
        policies: []              # extra policy packs inside the checkout
      - name: lab
        directory: ./manifests    # a plain directory, audited in place (no commit recorded)
      - name: prod
        cluster: {context: prod}  # a live cluster (kubeconfig context, or in_cluster: true)

Relative paths are read from the config file's directory. Unknown keys, bad cron expressions and
bad URLs are rejected with the key's path (`targets[1].schedule`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from auditor import yamlio

DEFAULT_SCHEDULE = "0 6 * * *"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
# Transports git may use for a target. Not `ext::` (runs a command) nor `fd::`.
_GIT_URL_RE = re.compile(r"^(https?|ssh|git|file)://[^\s]+$|^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s]+$")


class ServiceConfigError(ValueError):
    def __init__(self, file: str, line: int, key: str, message: str) -> None:
        super().__init__(message)
        self.file, self.line, self.key, self.message = file, line, key, message


@dataclass(frozen=True, slots=True)
class DatabaseSettings:
    url: str = field(default="", repr=False)  # may carry a password


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    """Fleet mode: audits, PR checks and webhook work run as Celery tasks on `auditor worker`s.

    Without a `service.broker` section the service runs everything in its own process (the
    embedded default)."""

    url: str = field(default="", repr=False)  # redis://host:6379/0 or amqp://…; may carry a password
    url_env: str = "AUDITOR_BROKER_URL"  # the URL from the environment (wins when set)
    # Seconds a delivered, unacknowledged task stays invisible to other workers (Redis and SQS
    # transports). Tasks are acknowledged late, so this is how long a task of a worker that died
    # without a goodbye (kill -9, node lost) waits before another worker gets it. Longer than the
    # longest audit, or a slow audit is delivered twice (harmless — tasks are idempotent — but
    # wasted work). RabbitMQ redelivers when the connection drops and ignores this.
    visibility_timeout_seconds: int = 3600
    # Seconds a worker's lease on a target lasts without renewal (one run per target across the
    # fleet); renewed every heartbeat_seconds. A killed worker's target is free after this.
    lease_seconds: int = 60
    # Seconds a task waits before trying again when its target is leased by another worker.
    busy_retry_seconds: int = 5
    queue: str = "auditor"  # the Celery queue every task goes to (KEDA scales on its length)
    # Port of the worker's Prometheus endpoint (task latency, failures, queue depth); 0: none.
    # Only the worker's own process records: run `--pool solo` (one process per pod) to see all.
    metrics_port: int = 9109

    def resolved_url(self, environ: Mapping[str, str]) -> str:
        return environ.get(self.url_env, "") if self.url_env and environ.get(self.url_env) else self.url


@dataclass(frozen=True, slots=True)
class GitHubAppSettings:
    """The GitHub App: webhooks at POST /hooks/github, check runs on pull requests."""

    app_id: int
    private_key_file: str  # the App's PEM private key (signs the JWT)
    base_url: str = "https://api.github.com"  # GitHub Enterprise: https://HOST/api/v3
    webhook_secret: str = field(default="", repr=False)
    webhook_secret_env: str = "AUDITOR_WEBHOOK_SECRET"
    # A delivery whose event time (pull_request.updated_at, repository.pushed_at,
    # installation.updated_at) is older than this many seconds is rejected as stale (GitHub sends
    # no timestamp header; see docs/service.md). Also how long delivery ids are remembered.
    max_delivery_age_seconds: int = 3600
    max_body_bytes: int = 25 * 1024 * 1024  # GitHub caps webhook payloads at 25 MB
    # How App repositories are fetched; {full_name} is owner/name.
    clone_url: str = "https://github.com/{full_name}.git"
    check_name: str = "placement-audit"
    fail_on: str = "high"  # the exit-code contract's threshold, applied to the introduced findings
    paths: tuple[str, ...] = ()  # inside each App repository; default: all of it
    nodes: tuple[str, ...] = ()
    # Seconds PyGithub waits between two writes of one client (a check run's create and updates):
    # GitHub asks integrators to pace writes (secondary rate limits). It bounds a check's wall time
    # (docs/scale.md); 0 turns it off.
    seconds_between_writes: float = 1.0

    def secret(self, environ: Mapping[str, str]) -> str:
        return self.webhook_secret or (
            environ.get(self.webhook_secret_env, "") if self.webhook_secret_env else ""
        )


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    host: str = "127.0.0.1"
    port: int = 8080
    api_token: str = field(default="", repr=False)
    api_token_env: str = "AUDITOR_API_TOKEN"
    # True: GET /api/v1/* and the web pages need the bearer token as writes do (findings name
    # workloads, namespaces and files). /healthz, /readyz and /metrics stay open: probes and
    # Prometheus scrape them without a token, and they carry counts, not names.
    read_token_required: bool = False
    timezone: str = "UTC"
    misfire_grace_seconds: int = 3600
    # On start, run each target's slot that fired while no service was up, if within the grace.
    catch_up: bool = True
    # On start, audit every target once (the bundled example does, so a first look shows findings).
    run_on_start: bool = False
    heartbeat_seconds: int = 15
    stale_after_seconds: int = 300
    git_cache_dir: str = ".auditor-cache/git"
    git_timeout_seconds: int = 300
    broker: BrokerSettings | None = None  # fleet mode; None: the embedded default
    github_app: GitHubAppSettings | None = None


@dataclass(frozen=True, slots=True)
class GitSource:
    url: str
    branch: str | None = None
    username: str = "x-access-token"
    token: str = field(default="", repr=False)
    token_env: str = ""


@dataclass(frozen=True, slots=True)
class ClusterSource:
    context: str = ""  # kubeconfig context; "" = the current one
    kubeconfig: str = ""  # "" = $KUBECONFIG or ~/.kube/config
    in_cluster: bool = False  # the service account of the pod the service runs in


@dataclass(frozen=True, slots=True)
class GitHubSettings:
    """Where fix pull requests go (the target's repository on GitHub or GitHub Enterprise)."""

    repository: str  # owner/name
    base_url: str = "https://api.github.com"  # GitHub Enterprise: https://HOST/api/v3
    token: str = field(default="", repr=False)
    token_env: str = ""  # a token (PAT or installation token) from the environment
    app_id: int = 0  # GitHub App authentication (instead of a token)
    installation_id: int = 0
    private_key_file: str = ""
    labels: tuple[str, ...] = ("placement-auditor",)
    max_open_prs: int = 10  # never more open fix PRs than this in the repository
    max_new_prs_per_hour: int = 3
    after_run: bool = False  # the service opens/updates PRs after each successful run
    seconds_between_writes: float = 1.0  # GitHub asks integrators to pace writes
    commit_name: str = "placement-auditor"
    commit_email: str = "placement-auditor@users.noreply.github.com"
    # Seconds a rate limit may hold the PR step inside a run; a reset further away defers the
    # step to a later job (GitHub's primary limit resets hourly: sleeping for it blocks a worker).
    max_rate_limit_wait_seconds: float = 60.0


@dataclass(frozen=True, slots=True)
class TargetSettings:
    name: str
    schedule: str = DEFAULT_SCHEDULE
    git: GitSource | None = None
    directory: str = ""
    paths: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    policies: tuple[str, ...] = ()
    cluster: ClusterSource | None = None
    github: GitHubSettings | None = None

    @property
    def kind(self) -> str:
        if self.cluster is not None:
            return "cluster"
        return "git" if self.git is not None else "directory"

    @property
    def location(self) -> str:
        if self.cluster is not None:
            return (
                "in-cluster" if self.cluster.in_cluster else f"context {self.cluster.context or '(current)'}"
            )
        return self.git.url if self.git is not None else self.directory


_SERVICE_KEYS: dict[str, type | tuple[type, ...]] = {
    "host": str,
    "port": int,
    "api_token": str,
    "api_token_env": str,
    "read_token_required": bool,
    "timezone": str,
    "misfire_grace_seconds": int,
    "catch_up": bool,
    "run_on_start": bool,
    "heartbeat_seconds": int,
    "stale_after_seconds": int,
    "git_cache_dir": str,
    "git_timeout_seconds": int,
    "broker": dict,
    "github_app": dict,
}
_BROKER_KEYS: dict[str, type | tuple[type, ...]] = {
    "url": str,
    "url_env": str,
    "visibility_timeout_seconds": int,
    "lease_seconds": int,
    "busy_retry_seconds": int,
    "queue": str,
    "metrics_port": int,
}
_APP_KEYS: dict[str, type | tuple[type, ...]] = {
    "app_id": int,
    "private_key_file": str,
    "base_url": str,
    "webhook_secret": str,
    "webhook_secret_env": str,
    "max_delivery_age_seconds": int,
    "max_body_bytes": int,
    "clone_url": str,
    "check_name": str,
    "fail_on": str,
    "paths": list,
    "nodes": list,
    "seconds_between_writes": (int, float),
}
_TARGET_KEYS: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "schedule": str,
    "git": dict,
    "directory": str,
    "paths": list,
    "nodes": list,
    "policies": list,
    "cluster": dict,
    "github": dict,
}
_GITHUB_KEYS: dict[str, type | tuple[type, ...]] = {
    "repository": str,
    "base_url": str,
    "token": str,
    "token_env": str,
    "app_id": int,
    "installation_id": int,
    "private_key_file": str,
    "labels": list,
    "max_open_prs": int,
    "max_new_prs_per_hour": int,
    "after_run": bool,
    "seconds_between_writes": (int, float),
    "max_rate_limit_wait_seconds": (int, float),
    "commit_name": str,
    "commit_email": str,
}
_CLUSTER_KEYS: dict[str, type | tuple[type, ...]] = {"context": str, "kubeconfig": str, "in_cluster": bool}
_GIT_KEYS: dict[str, type | tuple[type, ...]] = {
    "url": str,
    "branch": str,
    "username": str,
    "token": str,
    "token_env": str,
}


def _accepts(expected: type | tuple[type, ...], value: Any) -> bool:
    """isinstance, except that YAML's true/false is not a number (bool subclasses int in Python)."""
    if isinstance(value, bool):
        return expected is bool or (isinstance(expected, tuple) and bool in expected)
    return isinstance(value, expected)


def mapping(raw: Any, key: str, schema: Mapping[str, type | tuple[type, ...]], file: str) -> dict[str, Any]:
    """A config section checked against `schema` (key → accepted types): unknown keys and wrong
    types are errors naming the key's path and line. Shared by every section of the config file."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ServiceConfigError(file, yamlio.line_of(raw), key, "must be a mapping")
    out: dict[str, Any] = {}
    for name, value in raw.items():
        line = yamlio.key_line(raw, str(name))
        path = f"{key}.{name}"
        if name not in schema:
            raise ServiceConfigError(file, line, path, f"unknown key (known: {', '.join(sorted(schema))})")
        if not _accepts(schema[name], value):
            raise ServiceConfigError(file, line, path, f"has the wrong type ({type(value).__name__})")
        out[str(name)] = value
    return out


def parse_database(raw: Any, file: str) -> DatabaseSettings:
    from auditor.store.database import DatabaseURLError, parse_url

    section = mapping(raw, "database", {"url": str}, file)
    url = section.get("url", "")
    if url:
        try:
            parse_url(url)
        except DatabaseURLError as exc:
            raise ServiceConfigError(file, yamlio.key_line(raw, "url"), "database.url", str(exc)) from None
    return DatabaseSettings(url)


def parse_service(raw: Any, file: str, base: Path) -> ServiceSettings:
    section = mapping(raw, "service", _SERVICE_KEYS, file)
    for key in ("port",):
        if key in section and not 0 <= section[key] <= 65535:
            raise ServiceConfigError(file, yamlio.key_line(raw, key), f"service.{key}", "must be 0–65535")
    for key in ("misfire_grace_seconds", "heartbeat_seconds", "stale_after_seconds", "git_timeout_seconds"):
        if key in section and section[key] <= 0:
            raise ServiceConfigError(file, yamlio.key_line(raw, key), f"service.{key}", "must be positive")
    if "timezone" in section:
        try:
            from zoneinfo import ZoneInfo

            ZoneInfo(section["timezone"])
        except (KeyError, ValueError):
            raise ServiceConfigError(
                file, yamlio.key_line(raw, "timezone"), "service.timezone", "unknown time zone"
            ) from None
    broker = _broker(raw.get("broker"), file) if "broker" in section else None
    app = _github_app(raw.get("github_app"), file, base) if "github_app" in section else None
    section.pop("broker", None)
    section.pop("github_app", None)
    settings = ServiceSettings(**section, broker=broker, github_app=app)
    return replace(settings, git_cache_dir=str(base / settings.git_cache_dir))


def _broker(raw: Any, file: str) -> BrokerSettings:
    b = mapping(raw, "service.broker", _BROKER_KEYS, file)
    for key in ("visibility_timeout_seconds", "lease_seconds", "busy_retry_seconds"):
        if key in b and b[key] <= 0:
            raise ServiceConfigError(
                file, yamlio.key_line(raw, key), f"service.broker.{key}", "must be positive"
            )
    url = b.get("url", "")
    if url and not re.match(r"^(redis|rediss|amqp|amqps|sentinel)://", url):
        raise ServiceConfigError(
            file, yamlio.key_line(raw, "url"), "service.broker.url", "a redis://, rediss:// or amqp:// URL"
        )
    if "metrics_port" in b and not 0 <= b["metrics_port"] <= 65535:
        raise ServiceConfigError(
            file, yamlio.key_line(raw, "metrics_port"), "service.broker.metrics_port", "must be 0–65535"
        )
    if "queue" in b and not NAME_RE.match(b["queue"]):
        raise ServiceConfigError(file, yamlio.key_line(raw, "queue"), "service.broker.queue", "a queue name")
    return BrokerSettings(**b)


def _github_app(raw: Any, file: str, base: Path) -> GitHubAppSettings:
    a = mapping(raw, "service.github_app", _APP_KEYS, file)
    line = yamlio.line_of(raw)
    if not a.get("app_id") or a["app_id"] <= 0 or not a.get("private_key_file"):
        raise ServiceConfigError(file, line, "service.github_app", "needs app_id and private_key_file")
    if a.get("seconds_between_writes", 0) < 0:
        raise ServiceConfigError(
            file,
            yamlio.key_line(raw, "seconds_between_writes"),
            "service.github_app.seconds_between_writes",
            "must be 0 or more",
        )
    if "seconds_between_writes" in a:
        a["seconds_between_writes"] = float(a["seconds_between_writes"])
    for key in ("max_delivery_age_seconds", "max_body_bytes"):
        if key in a and a[key] <= 0:
            raise ServiceConfigError(
                file, yamlio.key_line(raw, key), f"service.github_app.{key}", "must be positive"
            )
    if a.get("fail_on", "high") not in ("critical", "high", "medium", "low", "none"):
        raise ServiceConfigError(
            file,
            yamlio.key_line(raw, "fail_on"),
            "service.github_app.fail_on",
            "critical, high, medium, low or none",
        )
    if "{full_name}" not in a.get("clone_url", "{full_name}"):
        raise ServiceConfigError(
            file,
            yamlio.key_line(raw, "clone_url"),
            "service.github_app.clone_url",
            "must contain {full_name}",
        )
    url = a.get("base_url", "https://api.github.com")
    if not re.match(r"^https?://[^\s/]+", url):
        raise ServiceConfigError(
            file, yamlio.key_line(raw, "base_url"), "service.github_app.base_url", f"not a URL: {url!r}"
        )
    keyfile = a["private_key_file"]
    if not Path(keyfile).is_absolute():
        keyfile = str(base / keyfile)
    a["private_key_file"], a["base_url"] = keyfile, url.rstrip("/")
    a["paths"] = _strings(raw, a.get("paths", []), "paths", "service.github_app.paths", file)
    a["nodes"] = _strings(raw, a.get("nodes", []), "nodes", "service.github_app.nodes", file)
    return GitHubAppSettings(**a)


def validate_cron(expr: str) -> str | None:
    """None when `expr` is a valid five-field cron expression, else the reason."""
    from apscheduler.triggers.cron import CronTrigger

    if len(expr.split()) != 5:
        return f"must have five fields (minute hour day month weekday), got {expr!r}"
    try:
        CronTrigger.from_crontab(expr, timezone="UTC")
    except ValueError as exc:
        return f"not a valid cron expression ({exc})"
    return None


def _strings(raw: Any, value: Any, key: str, path: str, file: str) -> tuple[str, ...]:
    if not all(isinstance(v, str) and v for v in value):
        raise ServiceConfigError(file, yamlio.key_line(raw, key), path, "must be a list of non-empty strings")
    for v in value:
        if Path(v).is_absolute() or ".." in Path(v).parts:
            raise ServiceConfigError(
                file, yamlio.key_line(raw, key), path, f"{v!r} must be a relative path inside the target"
            )
    return tuple(value)


def parse_targets(raw: Any, file: str, base: Path) -> tuple[TargetSettings, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ServiceConfigError(file, yamlio.line_of(raw), "targets", "must be a list")
    out: list[TargetSettings] = []
    names: set[str] = set()
    for index, item in enumerate(raw):
        key = f"targets[{index}]"
        line = yamlio.line_of(item) or (raw.item_lines[index] if isinstance(raw, yamlio.YamlSeq) else 0)
        section = mapping(item, key, _TARGET_KEYS, file)
        if not isinstance(item, Mapping):
            raise ServiceConfigError(file, line, key, "must be a mapping")
        name = section.get("name")
        if not name or not NAME_RE.match(name):
            raise ServiceConfigError(
                file, line, f"{key}.name", "required: letters, digits, '.', '_' or '-' (at most 100)"
            )
        if name in names:
            raise ServiceConfigError(file, line, f"{key}.name", f"duplicate target name {name!r}")
        names.add(name)
        schedule = section.get("schedule", DEFAULT_SCHEDULE)
        problem = validate_cron(schedule)
        if problem:
            raise ServiceConfigError(file, yamlio.key_line(item, "schedule"), f"{key}.schedule", problem)
        if sum(k in section for k in ("git", "directory", "cluster")) != 1:
            raise ServiceConfigError(file, line, key, "give exactly one of git, directory or cluster")
        git = None
        directory = ""
        cluster = None
        if "cluster" in section:
            c = mapping(section["cluster"], f"{key}.cluster", _CLUSTER_KEYS, file)
            if c.get("in_cluster") and (c.get("context") or c.get("kubeconfig")):
                raise ServiceConfigError(
                    file, line, f"{key}.cluster", "in_cluster: true takes no context or kubeconfig"
                )
            kubeconfig = c.get("kubeconfig", "")
            if kubeconfig and not Path(kubeconfig).is_absolute():
                kubeconfig = str(base / kubeconfig)
            cluster = ClusterSource(c.get("context", ""), kubeconfig, bool(c.get("in_cluster", False)))
        elif "git" in section:
            g = mapping(section["git"], f"{key}.git", _GIT_KEYS, file)
            url = g.get("url", "")
            gline = yamlio.key_line(section["git"], "url") or line
            if not url:
                raise ServiceConfigError(file, gline, f"{key}.git.url", "required")
            if not _GIT_URL_RE.match(url):
                local = (base / url) if not Path(url).is_absolute() else Path(url)
                if url.startswith("-") or "::" in url or not url.strip():
                    raise ServiceConfigError(
                        file, gline, f"{key}.git.url", f"not a git URL this tool fetches: {url!r}"
                    )
                url = str(local)
            try:
                password = urlsplit(url).password if "://" in url else None
            except ValueError as exc:  # urllib's own complaint, e.g. "Invalid IPv6 URL"
                raise ServiceConfigError(file, gline, f"{key}.git.url", f"not a URL: {exc}") from None
            if password:
                raise ServiceConfigError(
                    file, gline, f"{key}.git.url", "do not put a password in the URL; use token_env"
                )
            branch = g.get("branch")
            if branch is not None and (branch.startswith("-") or not re.match(r"^[\w./-]+$", branch)):
                raise ServiceConfigError(file, gline, f"{key}.git.branch", f"not a branch name: {branch!r}")
            git = GitSource(
                url,
                branch,
                g.get("username", "x-access-token"),
                g.get("token", ""),
                g.get("token_env", ""),
            )
        elif "directory" in section:
            given = section["directory"]
            directory = str(Path(given) if Path(given).is_absolute() else base / given)
        github = None
        if "github" in section:
            github = _github(section["github"], f"{key}.github", file, base, git is not None)
        out.append(
            TargetSettings(
                name,
                schedule,
                git,
                directory,
                _strings(item, section.get("paths", []), "paths", f"{key}.paths", file),
                _strings(item, section.get("nodes", []), "nodes", f"{key}.nodes", file),
                _strings(item, section.get("policies", []), "policies", f"{key}.policies", file),
                cluster,
                github,
            )
        )
    return tuple(out)


def _github(raw: Any, key: str, file: str, base: Path, is_git: bool) -> GitHubSettings:
    g = mapping(raw, key, _GITHUB_KEYS, file)
    line = yamlio.line_of(raw)
    if not is_git:
        raise ServiceConfigError(file, line, key, "pull requests need a git target")
    repo = g.get("repository", "")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repo):
        raise ServiceConfigError(
            file, yamlio.key_line(raw, "repository") or line, f"{key}.repository", "owner/name"
        )
    url = g.get("base_url", "https://api.github.com")
    if not re.match(r"^https?://[^\s/]+", url):
        raise ServiceConfigError(
            file, yamlio.key_line(raw, "base_url"), f"{key}.base_url", f"not a URL: {url!r}"
        )
    if g.get("app_id") and not (g.get("installation_id") and g.get("private_key_file")):
        raise ServiceConfigError(
            file, line, key, "a GitHub App needs app_id, installation_id and private_key_file"
        )
    labels = g.get("labels", ["placement-auditor"])
    if not all(isinstance(x, str) and x for x in labels):
        raise ServiceConfigError(
            file, yamlio.key_line(raw, "labels"), f"{key}.labels", "a list of label names"
        )
    keyfile = g.get("private_key_file", "")
    if keyfile and not Path(keyfile).is_absolute():
        keyfile = str(base / keyfile)
    return GitHubSettings(
        repo,
        url.rstrip("/"),
        g.get("token", ""),
        g.get("token_env", ""),
        g.get("app_id", 0),
        g.get("installation_id", 0),
        keyfile,
        tuple(labels),
        g.get("max_open_prs", 10),
        g.get("max_new_prs_per_hour", 3),
        g.get("after_run", False),
        float(g.get("seconds_between_writes", 1.0)),
        g.get("commit_name", "placement-auditor"),
        g.get("commit_email", "placement-auditor@users.noreply.github.com"),
        float(g.get("max_rate_limit_wait_seconds", 60.0)),
    )


MESSAGE_ID_DOMAIN = "placement-auditor.invalid"


@dataclass(frozen=True, slots=True)
class SmtpSettings:
    host: str = "localhost"
    port: int = 587
    security: str = "starttls"  # starttls | tls | none
    username: str = ""
    password_env: str = ""  # the password comes from the environment, never the file
    sender: str = "placement-auditor@localhost"
    timeout_seconds: float = 30.0
    # The right-hand side of each digest's Message-ID (`<digest-TEAM-DAY-HASH@DOMAIN>`): a domain
    # you control, or the reserved `.invalid` default, so an ID never collides with another sender's.
    message_id_domain: str = MESSAGE_ID_DOMAIN


@dataclass(frozen=True, slots=True)
class Team:
    name: str
    to: tuple[str, ...]
    targets: tuple[str, ...] = ()  # empty: every target
    namespaces: tuple[str, ...] = ()  # glob patterns; empty: every namespace
    # The workload's metadata.labels must have every key, with a value matching the glob pattern.
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class DigestSettings:
    schedule: str = "0 7 * * *"
    stale_after_hours: int = 26  # a target whose last successful run is older is "stale"
    expiring_within_days: int = 14  # waivers expiring this soon are listed
    base_url: str = ""  # links to the web pages in the mail
    smtp: SmtpSettings = field(default_factory=SmtpSettings)
    teams: tuple[Team, ...] = ()


# Rule → control ids of a compliance framework (override in `reports.controls`).
DEFAULT_CONTROLS: dict[str, tuple[str, ...]] = {
    "cross-zone-blocked": ("CC7.1", "A1.2"),
    "traffic-blocked": ("CC7.1", "A1.2"),
    "cross-zone-traffic": ("A1.1",),
    "role-unschedulable": ("A1.2",),
    "zone-label-mismatch": ("CC6.6", "CC8.1"),
    "ineffective-policy-selector": ("CC6.6",),
}


DEFAULT_FRAMEWORK = "SOC 2 (Trust Services Criteria 2017)"


@dataclass(frozen=True, slots=True)
class ReportSettings:
    framework: str = DEFAULT_FRAMEWORK
    controls: tuple[tuple[str, tuple[str, ...]], ...] = tuple(DEFAULT_CONTROLS.items())

    def controls_of(self, rule: str) -> tuple[str, ...]:
        return dict(self.controls).get(rule, ())


# Addresses as SMTP takes them in RCPT TO and headers take them unquoted: a dot-atom local part and
# a host name (RFC 5321 §4.1.2, without quoted local parts or address literals). Anything else —
# a comma, angle brackets, a line break — is a second recipient or a header injected.
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LOCAL = rf"{_ATOM}(?:\.{_ATOM})*"
_DOMAIN = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
_EMAIL = re.compile(rf"{_LOCAL}@{_DOMAIN}")
_DOMAIN_RE = re.compile(_DOMAIN)
# A team name goes into a Subject header and a Message-ID: printable, one line.
_TEAM_NAME = re.compile(r"[^\x00-\x1f\x7f-\x9f\u2028\u2029]{1,200}")


def address_problem(address: object) -> str | None:
    """Why `address` is not a plain e-mail address (None when it is). Used by the config and by the
    mailer for rows already queued."""
    if not isinstance(address, str) or not address:
        return "an e-mail address (a non-empty string)"
    if len(address) > 254 or not _EMAIL.fullmatch(address):
        return f"not a plain e-mail address: {address!r}"
    return None


def team_name_problem(name: object) -> str | None:
    """Why `name` cannot name a digest team (None when it can)."""
    if not isinstance(name, str) or not name.strip():
        return "required"
    if not _TEAM_NAME.fullmatch(name) or name != name.strip():
        return f"one line of printable text, at most 200 characters, no surrounding spaces: {name!r}"
    return None


def parse_digest(raw: Any, file: str) -> DigestSettings | None:
    if raw is None:
        return None
    keys: dict[str, type | tuple[type, ...]] = {
        "schedule": str,
        "stale_after_hours": int,
        "expiring_within_days": int,
        "base_url": str,
        "smtp": dict,
        "teams": list,
    }
    d = mapping(raw, "digest", keys, file)
    problem = validate_cron(d.get("schedule", "0 7 * * *"))
    if problem:
        raise ServiceConfigError(file, yamlio.key_line(raw, "schedule"), "digest.schedule", problem)
    smtp_keys: dict[str, type | tuple[type, ...]] = {
        "host": str,
        "port": int,
        "security": str,
        "username": str,
        "password_env": str,
        "from": str,
        "timeout_seconds": (int, float),
        "message_id_domain": str,
    }
    s = mapping(d.get("smtp"), "digest.smtp", smtp_keys, file)
    if s.get("security", "starttls") not in ("starttls", "tls", "none"):
        raise ServiceConfigError(
            file, yamlio.key_line(d.get("smtp"), "security"), "digest.smtp.security", "starttls, tls or none"
        )
    sender = s.pop("from", "placement-auditor@localhost")
    problem = address_problem(sender)
    if problem:
        raise ServiceConfigError(file, yamlio.key_line(d.get("smtp"), "from"), "digest.smtp.from", problem)
    domain = s.get("message_id_domain", MESSAGE_ID_DOMAIN)
    if len(domain) > 253 or not _DOMAIN_RE.fullmatch(domain):
        raise ServiceConfigError(
            file,
            yamlio.key_line(d.get("smtp"), "message_id_domain"),
            "digest.smtp.message_id_domain",
            f"a domain name: {domain!r}",
        )
    smtp = SmtpSettings(sender=sender, **s)
    teams = []
    names: set[str] = set()
    for i, item in enumerate(d.get("teams") or []):
        key = f"digest.teams[{i}]"
        t = mapping(
            item, key, {"name": str, "to": list, "targets": list, "namespaces": list, "labels": dict}, file
        )
        line = yamlio.line_of(item)
        problem = team_name_problem(t.get("name"))
        if problem:
            raise ServiceConfigError(file, yamlio.key_line(item, "name", line), f"{key}.name", problem)
        if t["name"] in names:
            raise ServiceConfigError(
                file, yamlio.key_line(item, "name", line), f"{key}.name", f"duplicate team name {t['name']!r}"
            )
        names.add(t["name"])
        to = t.get("to") or []
        if not to:
            raise ServiceConfigError(
                file, yamlio.key_line(item, "to", line), f"{key}.to", "a list of e-mail addresses"
            )
        raw_to = item.get("to")
        for j, address in enumerate(to):
            problem = address_problem(address)
            if problem:
                lines = getattr(raw_to, "item_lines", [])
                where = lines[j] if j < len(lines) and lines[j] else yamlio.key_line(item, "to", line)
                raise ServiceConfigError(file, where, f"{key}.to[{j}]", problem)
        labels = t.get("labels") or {}
        for name, value in labels.items():
            if not isinstance(value, str):
                raise ServiceConfigError(
                    file,
                    yamlio.key_line(labels, str(name)),
                    f"{key}.labels.{name}",
                    f"label values are strings (quote {value!r})",
                )
        teams.append(
            Team(
                t["name"],
                tuple(to),
                tuple(str(x) for x in t.get("targets") or []),
                tuple(str(x) for x in t.get("namespaces") or []),
                tuple(sorted((str(k), v) for k, v in labels.items())),
            )
        )
    return DigestSettings(
        d.get("schedule", "0 7 * * *"),
        d.get("stale_after_hours", 26),
        d.get("expiring_within_days", 14),
        d.get("base_url", "").rstrip("/"),
        smtp,
        tuple(teams),
    )


def warnings_for(
    targets: tuple[TargetSettings, ...], digest: DigestSettings | None, file: str
) -> tuple[str, ...]:
    """Settings that work but expose a secret on the network: a git token sent to an http:// URL,
    an SMTP login without TLS. Warnings, not errors: a lab or a local relay may mean it."""
    out: list[str] = []
    for i, t in enumerate(targets):
        if t.git is not None and (t.git.token or t.git.token_env) and t.git.url.lower().startswith("http://"):
            out.append(
                f"{file}: targets[{i}].git.url: the token is sent unencrypted to {t.git.url} (http://); "
                "anyone on the network path can read it: use an https:// URL"
            )
    if digest is not None and digest.smtp.username and digest.smtp.security == "none":
        out.append(
            f"{file}: digest.smtp.security: none: the SMTP login ({digest.smtp.username}) and its "
            f"password go to {digest.smtp.host}:{digest.smtp.port} unencrypted; use starttls or tls"
        )
    return tuple(out)


def parse_reports(raw: Any, file: str) -> ReportSettings:
    r = mapping(raw, "reports", {"framework": str, "controls": dict}, file)
    controls = dict(DEFAULT_CONTROLS)
    for rule, ids in (r.get("controls") or {}).items():
        if not isinstance(ids, list) or not all(isinstance(x, str) for x in ids):
            raise ServiceConfigError(
                file,
                yamlio.key_line(r.get("controls"), str(rule)),
                f"reports.controls.{rule}",
                "a list of control ids",
            )
        controls[str(rule)] = tuple(ids)
    return ReportSettings(r.get("framework", DEFAULT_FRAMEWORK), tuple(sorted(controls.items())))
