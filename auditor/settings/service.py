"""The service's part of the config file: `database`, `service`, `targets`, `digest` and `reports`
(a commented example: docs/config.md; every key: docs/config-reference.md).

Relative paths are read from the config file's directory. Unknown keys, bad cron expressions and
bad URLs are rejected with the key's path (`targets[1].schedule`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from auditor import yamlio
from auditor.settings.schema import Invalid, Where, non_empty, setting
from auditor.store.url import DatabaseURLError, check_url

DEFAULT_SCHEDULE = "0 6 * * *"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
# Transports git may use for a target. Not `ext::` (runs a command) nor `fd::`.
_GIT_URL_RE = re.compile(r"^(https?|ssh|git|file)://[^\s]+$|^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s]+$")
HTTP_URL = r"https?://[^\s/]+.*"  # what a URL setting for an HTTP endpoint must look like


def name_setting(doc: str) -> Any:
    """A required name of NAME_RE's form (a target, a team, a machine token)."""
    return setting(
        doc=doc,
        pattern=NAME_RE.pattern.strip("^$"),
        pattern_text="letters, digits, '.', '_' or '-' (at most 100)",
    )


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


def _database_url(url: str) -> str | None:
    if not url:
        return None
    try:
        check_url(url)
    except DatabaseURLError as exc:
        return str(exc)
    return None


def _timezone(name: str) -> str | None:
    from zoneinfo import ZoneInfo

    try:
        ZoneInfo(name)
    except (KeyError, ValueError):
        return "unknown time zone"
    return None


def _relative_paths(paths: tuple[str, ...]) -> str | None:
    for v in paths:
        if not v:
            return "must be a list of non-empty strings"
        if Path(v).is_absolute() or ".." in Path(v).parts:
            return f"{v!r} must be a relative path inside the target"
    return None


def _non_empty_strings(values: tuple[str, ...]) -> str | None:
    return None if all(values) else "a list of non-empty strings"


@dataclass(frozen=True, slots=True)
class DatabaseSettings:
    """Where the service keeps findings and runs."""

    url: str = setting(
        "",
        doc="sqlite:///FILE or postgresql://USER@HOST/DB; AUDITOR_DATABASE_URL wins; empty: a SQLite file "
        "in the working directory.",
        why="one file needs no setup; PostgreSQL serves a team and many workers.",
        check=_database_url,
        secret=True,  # may carry a password
    )


def _broker_url(url: str) -> str | None:
    if url and not re.match(r"^(redis|rediss|amqp|amqps|sentinel)://", url):
        return "a redis://, rediss:// or amqp:// URL"
    return None


def _queue_name(name: str) -> str | None:
    return None if NAME_RE.match(name) else "a queue name"


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    """Fleet mode: audits, PR checks and webhook work run as Celery tasks on `auditor worker`s.

    Without a `service.broker` section the service runs everything in its own process (the
    embedded default)."""

    url: str = setting(
        "",
        doc="redis://host:6379/0 or amqp://… (RabbitMQ); url_env wins when set.",
        check=_broker_url,
        secret=True,
    )
    url_env: str = setting("AUDITOR_BROKER_URL", doc="Environment variable holding the broker URL.")
    visibility_timeout_seconds: int = setting(
        3600,
        doc="A delivered, unacknowledged task stays invisible to other workers this long (Redis, SQS).",
        unit="seconds",
        why="tasks are acknowledged late: a worker that died without a goodbye (kill -9) has its task "
        "redelivered after this; longer than the longest audit, or a slow audit is delivered twice "
        "(harmless, tasks are idempotent, but wasted). RabbitMQ redelivers on connection loss instead.",
        exclusive_minimum=0,
    )
    lease_seconds: int = setting(
        60,
        doc="A worker's lease on a target lasts this long without renewal (renewed every heartbeat).",
        unit="seconds",
        why="one run per target across the fleet; a killed worker's target is free after this.",
        exclusive_minimum=0,
    )
    busy_retry_seconds: int = setting(
        5,
        doc="A task whose target is leased by another worker retries after this.",
        unit="seconds",
        exclusive_minimum=0,
    )
    database_wait_seconds: int = setting(
        900,
        doc=(
            "A task whose database is away (refused or dropped connections, a restart, a full disk) "
            "waits for it this long, trying again with a growing pause up to 15 s, its message "
            "unacknowledged; then it is put back on the queue to try later. Nothing is lost either way."
        ),
        unit="seconds",
        exclusive_minimum=0,
    )
    queue: str = setting(
        "auditor", doc="The Celery queue every task goes to (KEDA scales on its length).", check=_queue_name
    )
    metrics_port: int = setting(
        9109,
        doc="Port of the worker's Prometheus endpoint (task latency, failures, queue depth); 0: none.",
        why="only the worker's own process records: run `--pool solo` (one process per pod) to see all.",
        minimum=0,
        maximum=65535,
    )

    def resolved_url(self, environ: Mapping[str, str]) -> str:
        return environ.get(self.url_env, "") if self.url_env and environ.get(self.url_env) else self.url


def _github_api_url() -> Any:
    """The REST API root setting of the GitHub App and of a target's fix pull requests."""
    return setting(
        "https://api.github.com",
        doc="REST API root; GitHub Enterprise: https://HOST/api/v3.",
        pattern=HTTP_URL,
        pattern_text="not a URL",
    )


def _clone_url(url: str) -> str | None:
    return None if "{full_name}" in url else "must contain {full_name}"


@dataclass(frozen=True, slots=True)
class GitHubAppSettings:
    """The GitHub App: webhooks at POST /hooks/github, check runs on pull requests."""

    app_id: int = setting(doc="The App's id.", exclusive_minimum=0)
    private_key_file: str = setting(
        doc="The App's PEM private key (signs the JWT).", path="resolve", check=non_empty
    )
    base_url: str = _github_api_url()
    webhook_secret: str = setting("", doc="The webhook secret (prefer webhook_secret_env).", secret=True)
    webhook_secret_env: str = setting(
        "AUDITOR_WEBHOOK_SECRET", doc="Environment variable holding the webhook secret."
    )
    max_delivery_age_seconds: int = setting(
        3600,
        doc="A delivery whose event time (pull_request.updated_at, repository.pushed_at, "
        "installation.updated_at) is older is rejected as stale; also how long delivery ids are remembered.",
        unit="seconds",
        why="GitHub sends no timestamp header (docs/service.md).",
        exclusive_minimum=0,
    )
    max_body_bytes: int = setting(
        25 * 1024 * 1024,
        doc="Largest webhook body accepted.",
        unit="bytes",
        why="GitHub caps webhook payloads at 25 MB.",
        exclusive_minimum=0,
    )
    clone_url: str = setting(
        "https://github.com/{full_name}.git",
        doc="How App repositories are fetched; {full_name} is owner/name.",
        check=_clone_url,
    )
    check_name: str = setting("placement-audit", doc="Name of the check run on pull requests.")
    audit_every_hours: int = setting(
        24,
        doc="Every repository the App is installed on has its default branch audited this often, each "
        "at its own time within the period (0: only on pushes and pull requests).",
        why="policies and clusters change under a repository that gets no push; spread over the period, "
        "a thousand repositories do not all start at midnight.",
        unit="hours",
        minimum=0,
        maximum=24 * 31,
    )
    reconcile_schedule: str = setting(
        "17 */6 * * *",
        doc="When the installations' repositories are listed through GitHub's API (fleet mode), for "
        "`installation` events that never arrived.",
        check=validate_cron,
    )
    fix_button: bool = setting(
        True,
        doc='A failing check run with findings offers an "Open fix PR" button: pressed, it opens the fix '
        "pull request onto the pull request's branch (once, however often it is pressed).",
    )
    fail_on: str = setting(
        "high",
        doc="The exit-code contract's threshold, applied to the findings a pull request introduces.",
        choices=("critical", "high", "medium", "low", "none"),
    )
    paths: tuple[str, ...] = setting(
        (), doc="Inside each App repository; default: all of it.", check=_relative_paths
    )
    nodes: tuple[str, ...] = setting((), doc="Node dumps inside each App repository.", check=_relative_paths)
    seconds_between_writes: float = setting(
        1.0,
        doc="PyGithub waits this long between two writes of one client (a check run's create and updates); "
        "0 turns it off.",
        unit="seconds",
        why="GitHub asks integrators to pace writes (secondary rate limits); it bounds a check's wall time "
        "(docs/scale.md).",
        minimum=0,
    )

    def validated(self, raw: Any, where: Where, path: str, line: int) -> GitHubAppSettings:
        return replace(self, base_url=self.base_url.rstrip("/"))

    def secret(self, environ: Mapping[str, str]) -> str:
        return self.webhook_secret or environ.get(self.webhook_secret_env, "")


def _iso_date(text: str) -> str | None:
    from datetime import date

    try:
        date.fromisoformat(text)
    except ValueError:
        return "not an ISO date (YYYY-MM-DD)"
    return None


def _sha256_hex(text: str) -> str | None:
    return None if re.fullmatch(r"[0-9a-fA-F]{64}", text) else "not a SHA-256 in hex (64 hex digits)"


def _scope_token(text: str) -> str | None:
    # RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E )
    return None if re.fullmatch(r"[\x21\x23-\x5b\x5d-\x7e]{1,100}", text) else "not an OAuth scope token"


def _algorithm(name: str) -> str | None:
    from auditor.service.access import ALGORITHMS

    if name in ALGORITHMS:
        return None
    return f"not an asymmetric JWT algorithm ({', '.join(ALGORITHMS)}); none and HS* are never accepted"


@dataclass(frozen=True, slots=True)
class TeamSettings:
    """A team: who is in it (values of the group claim) and what it sees and may do."""

    name: str = name_setting("Team name (letters, digits, '.', '_' or '-').")
    groups: tuple[str, ...] = setting((), doc="Values of the group claim whose holders are members.")
    targets: tuple[str, ...] = setting(
        (), doc="Targets (repositories, clusters) whose findings and runs it sees."
    )
    namespaces: tuple[str, ...] = setting(
        (),
        doc="Namespaces whose findings it sees: names, or patterns with `*` and `?` (`ml-*`).",
        item_check=lambda p: "only * and ? are patterns here, not [...]" if "[" in p or "]" in p else None,
    )
    role: str = setting(
        "read",
        doc="read: see; write: also start runs of its targets; admin: everything, the audit log too.",
        choices=("read", "write", "admin"),
    )


@dataclass(frozen=True, slots=True)
class MachineTokenSettings:
    """A token for CI or a script: stored as its SHA-256 only, with scopes, teams and an expiry."""

    name: str = name_setting("Its name in the audit log (`machine:<name>`).")
    sha256: str = setting(doc="SHA-256 of the token, hex (`printf %s TOKEN | sha256sum`).", check=_sha256_hex)
    expires: str = setting(doc="Last day it is accepted (YYYY-MM-DD, UTC).", check=_iso_date)
    scopes: tuple[str, ...] = setting(
        ("read",),
        doc="read, write (start runs of its teams' targets).",
        item_check=lambda s: None if s in ("read", "write") else "read or write",
    )
    teams: tuple[str, ...] = setting((), doc="The teams whose scope it has (names of service.auth.teams).")

    @property
    def expires_on(self) -> Any:
        from datetime import date

        return date.fromisoformat(self.expires)


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """Who may see and do what (docs/service.md#access): JWTs of an OIDC issuer, machine tokens, teams.
    With it, every read of the API is authenticated and scoped to the caller's teams."""

    issuer: str = setting(
        "", doc="The issuer (`iss`) of the bearer JWTs; empty: no JWTs, machine tokens only."
    )
    audience: str = setting("placement-auditor", doc="The audience (`aud`) they must carry.")
    jwks_url: str = setting("", doc="The issuer's JWKS (its signing keys); required with issuer.")
    algorithms: tuple[str, ...] = setting(
        ("RS256", "ES256"), doc="Signature algorithms accepted (asymmetric only).", item_check=_algorithm
    )
    groups_claim: str = setting("groups", doc="The claim listing the caller's groups.")
    leeway_seconds: int = setting(
        30, doc="Clock skew allowed on exp and nbf.", unit="seconds", minimum=0, maximum=300
    )
    jwks_refresh_cooldown_seconds: float = setting(
        30.0,
        doc="A token naming an unknown key makes the JWKS be fetched again at most this often.",
        unit="seconds",
        why="a key rotation is picked up without a restart, but tokens with made-up key ids cannot make "
        "the service hammer the issuer.",
        minimum=0,
    )
    timeout_seconds: float = setting(
        5.0, doc="One JWKS fetch may take this long.", unit="seconds", exclusive_minimum=0
    )
    teams: tuple[TeamSettings, ...] = setting((), doc="The teams.")
    tokens: tuple[MachineTokenSettings, ...] = setting((), doc="Machine tokens.")
    # The web pages' sign-in: OpenID Connect authorization code flow with PKCE (service/signin.py).
    client_id: str = setting("", doc="OIDC client of the web pages' sign-in; empty: no sign-in.")
    client_secret_env: str = setting(
        "", doc="Environment variable holding the client secret (a confidential client); empty: PKCE only."
    )
    authorization_endpoint: str = setting("", doc="The issuer's authorization endpoint (with client_id).")
    token_endpoint: str = setting("", doc="The issuer's token endpoint (with client_id).")
    redirect_url: str = setting(
        "", doc="This service's /auth/callback as registered with the issuer (https:// outside a lab)."
    )
    session_secret_env: str = setting(
        "AUDITOR_SESSION_SECRET",
        doc="Environment variable holding the key that signs session cookies (shared by replicas); "
        "unset: a key per process (sign-ins do not survive a restart).",
    )
    scopes: tuple[str, ...] = setting(
        ("openid", "profile", "email"),
        doc="Scopes the sign-in asks for (`openid` is always sent); Dex needs `groups` for the group claim.",
        item_check=_scope_token,
    )
    session_hours: int = setting(8, doc="A sign-in lasts this long.", unit="hours", minimum=1, maximum=168)

    def validated(self, raw: Any, where: Where, path: str, line: int) -> AuthSettings:
        if self.issuer and not self.jwks_url:
            raise where.error(f"{path}.jwks_url", line, "required with issuer")
        if self.jwks_url and not re.fullmatch(HTTP_URL, self.jwks_url):
            raise where.error(f"{path}.jwks_url", line, "not an http(s) URL")
        if self.client_id:
            if not self.issuer:
                raise where.error(f"{path}.issuer", line, "required with client_id (the ID token's issuer)")
            for key in ("authorization_endpoint", "token_endpoint", "redirect_url"):
                value = getattr(self, key)
                if not value:
                    raise where.error(f"{path}.{key}", line, "required with client_id")
                if not re.fullmatch(HTTP_URL, value):
                    raise where.error(f"{path}.{key}", line, "not an http(s) URL")
        names = [t.name for t in self.teams]
        for i, token in enumerate(self.tokens):
            unknown = [n for n in token.teams if n not in names]
            if unknown:
                raise where.error(f"{path}.tokens[{i}].teams", line, f"no team named {unknown[0]!r}")
        return self


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    """`auditor serve`: the HTTP API, the scheduler and its runs."""

    host: str = setting("127.0.0.1", doc="Address `auditor serve` listens on.")
    port: int = setting(8080, doc="TCP port `auditor serve` listens on.", minimum=0, maximum=65535)
    api_token: str = setting("", doc="Bearer token for writes (prefer api_token_env).", secret=True)
    api_token_env: str = setting(
        "AUDITOR_API_TOKEN", doc="Environment variable holding the bearer token for writes."
    )
    auth: AuthSettings | None = setting(
        None,
        doc="Per-team access: bearer JWTs of an OIDC issuer, machine tokens, teams (docs/service.md#access); "
        "absent: the one local admin (api_token).",
    )
    read_token_required: bool = setting(
        False,
        doc="True: GET /api/v1/* and the web pages need the token as writes do.",
        why="findings name workloads, namespaces and files; /healthz, /readyz and /metrics stay open "
        "(probes and Prometheus carry counts, not names).",
    )
    timezone: str = setting("UTC", doc="Time zone cron schedules are read in.", check=_timezone)
    max_suppression_days: int = setting(
        90,
        doc="A finding suppressed through the API (PUT /api/v1/findings/{id}/suppression) stays "
        "suppressed at most this many days.",
        why="a suppression nobody renews ends and the finding shows again, as a pack waiver's expiry does.",
        unit="days",
        minimum=1,
        maximum=3650,
    )
    misfire_grace_seconds: int = setting(
        3600,
        doc="A scheduled run missed during a restart still runs within this time.",
        unit="seconds",
        exclusive_minimum=0,
    )
    catch_up: bool = setting(
        True, doc="On start, run each target's slot that fired while no service was up, within the grace."
    )
    run_on_start: bool = setting(
        False,
        doc="On start, audit every target once, whatever the schedule says.",
        why="the bundled example does, so a first look shows findings.",
    )
    heartbeat_seconds: int = setting(
        15, doc="A running audit proves it is alive this often.", unit="seconds", exclusive_minimum=0
    )
    stale_after_seconds: int = setting(
        300,
        doc="A `running` run without a heartbeat this long is `interrupted`.",
        unit="seconds",
        exclusive_minimum=0,
    )
    # Resolved against the config file's directory by Settings.validated, also when not given.
    git_cache_dir: str = setting(
        ".auditor-cache/git", doc="Checkouts of git targets (relative to the config file)."
    )
    git_timeout_seconds: int = setting(
        300, doc="One git clone or fetch may take this long.", unit="seconds", exclusive_minimum=0
    )
    broker: BrokerSettings | None = setting(
        None, doc="Fleet mode (docs/scale.md): Celery workers run the audits; absent: everything in-process."
    )
    github_app: GitHubAppSettings | None = setting(
        None, doc="The GitHub App receiving webhooks at /hooks/github (check runs on pull requests)."
    )


@dataclass(frozen=True, slots=True)
class GitSource:
    """A git repository audited at its branch's head."""

    url: str = setting(
        doc="https, ssh, git@host:path, file:// or a local path (relative to the config file)."
    )
    branch: str | None = setting(
        None,
        doc="Branch to audit; default: the remote's default branch.",
        pattern=r"(?!-)[\w./-]+",
        pattern_text="not a branch name",
    )
    username: str = setting("x-access-token", doc="HTTPS user name sent with the token.")
    token: str = setting("", doc="HTTPS token (prefer token_env).", secret=True)
    token_env: str = setting("", doc="Environment variable holding the HTTPS token (never printed).")

    def validated(self, raw: Any, where: Where, path: str, line: int) -> GitSource:
        url = self.url
        at = yamlio.key_line(raw, "url", line)
        if not url:
            raise where.error(f"{path}.url", at, "required")
        if not _GIT_URL_RE.match(url):
            if url.startswith("-") or "::" in url or not url.strip():
                raise where.error(f"{path}.url", at, f"not a git URL this tool fetches: {url!r}")
            url = str(Path(url) if Path(url).is_absolute() else where.base / url)
        try:
            password = urlsplit(url).password if "://" in url else None
        except ValueError as exc:  # urllib's own complaint, e.g. "Invalid IPv6 URL"
            raise where.error(f"{path}.url", at, f"not a URL: {exc}") from None
        if password:
            raise where.error(f"{path}.url", at, "do not put a password in the URL; use token_env")
        return replace(self, url=url)


@dataclass(frozen=True, slots=True)
class ClusterSource:
    """A live cluster read through the Kubernetes API."""

    context: str = setting("", doc="kubeconfig context; empty: the current one.")
    kubeconfig: str = setting(
        "", doc="kubeconfig file; empty: $KUBECONFIG or ~/.kube/config.", path="resolve"
    )
    in_cluster: bool = setting(False, doc="Use the service account of the pod the service runs in.")


@dataclass(frozen=True, slots=True)
class GitHubSettings:
    """Where fix pull requests go (the target's repository on GitHub or GitHub Enterprise)."""

    repository: str = setting(
        doc="owner/name", pattern=r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", pattern_text="owner/name"
    )
    base_url: str = _github_api_url()
    token: str = setting("", doc="A token (prefer token_env).", secret=True)
    token_env: str = setting("", doc="Environment variable holding a PAT or installation token.")
    app_id: int = setting(0, doc="GitHub App authentication (instead of a token): the App's id.")
    installation_id: int = setting(0, doc="The App's installation on the repository's owner.")
    private_key_file: str = setting("", doc="The App's private key (PEM).", path="resolve")
    labels: tuple[str, ...] = setting(
        ("placement-auditor",), doc="Labels put on fix pull requests.", check=_non_empty_strings
    )
    max_open_prs: int = setting(10, doc="Never more open fix PRs than this in the repository.", minimum=0)
    max_new_prs_per_hour: int = setting(3, doc="New fix PRs per hour at most.", minimum=0)
    after_run: bool = setting(False, doc="The service opens/updates PRs after each successful run.")
    seconds_between_writes: float = setting(
        1.0,
        doc="Pause between write calls.",
        unit="seconds",
        minimum=0,
        why="GitHub asks integrators to pace writes.",
    )
    commit_name: str = setting("placement-auditor", doc="Author name of fix commits.")
    commit_email: str = setting(
        "placement-auditor@users.noreply.github.com", doc="Author e-mail of fix commits."
    )
    max_rate_limit_wait_seconds: float = setting(
        60.0,
        doc="A rate limit may hold the PR step this long inside a run; a reset further away defers the step.",
        unit="seconds",
        minimum=0,
        why="GitHub's primary limit resets hourly: sleeping for it blocks a worker.",
    )

    def validated(self, raw: Any, where: Where, path: str, line: int) -> GitHubSettings:
        if self.app_id and not (self.installation_id and self.private_key_file):
            raise where.error(path, line, "a GitHub App needs app_id, installation_id and private_key_file")
        return replace(self, base_url=self.base_url.rstrip("/"))


@dataclass(frozen=True, slots=True)
class TargetSettings:
    """One thing the service audits on a schedule: a git repository, a directory or a cluster."""

    name: str = name_setting("Unique name (letters, digits, '.', '_' or '-', at most 100).")
    schedule: str = setting(
        DEFAULT_SCHEDULE, doc="Cron, five fields, in service.timezone.", check=validate_cron
    )
    git: GitSource | None = setting(None, doc="A git repository (one of git, directory, cluster).")
    directory: str = setting(
        "", doc="A plain directory, audited in place (no commit recorded).", path="resolve"
    )
    paths: tuple[str, ...] = setting(
        (), doc="Inside the checkout; default: all of it.", check=_relative_paths
    )
    nodes: tuple[str, ...] = setting(
        (), doc="`kubectl get nodes -o yaml` dumps inside the checkout.", check=_relative_paths
    )
    policies: tuple[str, ...] = setting(
        (), doc="Extra policy packs inside the checkout.", check=_relative_paths
    )
    cluster: ClusterSource | None = setting(
        None, doc="A live cluster (kubeconfig context, or in_cluster: true)."
    )
    github: GitHubSettings | None = setting(None, doc="Fix pull requests for a git target.")

    def validated(self, raw: Any, where: Where, path: str, line: int) -> TargetSettings:
        if sum(k in raw for k in ("git", "directory", "cluster")) != 1:
            raise where.error(path, line, "give exactly one of git, directory or cluster")
        c = self.cluster
        if c is not None and c.in_cluster and (c.context or c.kubeconfig):
            raise where.error(f"{path}.cluster", line, "in_cluster: true takes no context or kubeconfig")
        if self.github is not None and self.git is None:
            raise where.error(
                f"{path}.github", yamlio.line_of(raw.get("github"), line), "pull requests need a git target"
            )
        return self

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


MESSAGE_ID_DOMAIN = "placement-auditor.invalid"


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


def _message_id_domain(domain: str) -> str | None:
    return None if len(domain) <= 253 and _DOMAIN_RE.fullmatch(domain) else f"a domain name: {domain!r}"


@dataclass(frozen=True, slots=True)
class SmtpSettings:
    """The SMTP server digests are sent through."""

    host: str = setting("localhost", doc="SMTP server.")
    port: int = setting(587, doc="SMTP port.", minimum=1, maximum=65535)
    security: str = setting("starttls", doc="Transport security.", choices=("starttls", "tls", "none"))
    username: str = setting("", doc="SMTP login; empty: no login.")
    password_env: str = setting("", doc="Environment variable holding the password (never the file).")
    sender: str = setting(
        "placement-auditor@localhost", doc="From address.", key="from", check=address_problem
    )
    timeout_seconds: float = setting(
        30.0, doc="One SMTP exchange may take this long.", unit="seconds", exclusive_minimum=0
    )
    message_id_domain: str = setting(
        MESSAGE_ID_DOMAIN,
        doc="Right-hand side of each digest's Message-ID (`<digest-TEAM-DAY-HASH@DOMAIN>`).",
        why="a domain you control, or the reserved `.invalid` default, so an ID never collides "
        "with another sender's.",
        check=_message_id_domain,
    )


def _labels(raw: Any) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise Invalid("must be a mapping of label keys to glob patterns")
    for name, value in raw.items():
        if not isinstance(value, str):
            raise Invalid(
                f"label values are strings (quote {value!r})", str(name), yamlio.key_line(raw, str(name))
            )
    return tuple(sorted((str(k), v) for k, v in raw.items()))


def _addresses(to: tuple[str, ...]) -> str | None:
    return None if to else "a list of e-mail addresses"


@dataclass(frozen=True, slots=True)
class Team:
    """Who gets a digest, and of which findings."""

    name: str = setting(doc="The team's name (Subject header, Message-ID).", check=team_name_problem)
    to: tuple[str, ...] = setting(doc="E-mail addresses.", check=_addresses, item_check=address_problem)
    targets: tuple[str, ...] = setting((), doc="Target names; empty: every target.")
    namespaces: tuple[str, ...] = setting((), doc="Namespace glob patterns; empty: every namespace.")
    labels: tuple[tuple[str, str], ...] = setting(
        (),
        doc="The workload's metadata.labels must have every key, with a value matching the glob pattern.",
        parse=_labels,
        json={"type": "object", "additionalProperties": {"type": "string"}},
    )


@dataclass(frozen=True, slots=True)
class DigestSettings:
    """The daily digest e-mail."""

    schedule: str = setting("0 7 * * *", doc="Cron, five fields, in service.timezone.", check=validate_cron)
    stale_after_hours: int = setting(
        26, doc="A target whose last successful run is older is stale.", unit="hours", minimum=1
    )
    expiring_within_days: int = setting(
        14, doc="Waivers expiring this soon are listed.", unit="days", minimum=0
    )
    base_url: str = setting("", doc="Links to the web pages in the mail.")
    smtp: SmtpSettings = setting(doc="The SMTP server.", factory=SmtpSettings)
    teams: tuple[Team, ...] = setting((), doc="Recipients.")

    def validated(self, raw: Any, where: Where, path: str, line: int) -> DigestSettings:
        names: set[str] = set()
        for i, team in enumerate(self.teams):
            if team.name in names:
                item = raw["teams"][i]
                raise where.error(
                    f"{path}.teams[{i}].name",
                    yamlio.key_line(item, "name", yamlio.line_of(item)),
                    f"duplicate team name {team.name!r}",
                )
            names.add(team.name)
        return replace(self, base_url=self.base_url.rstrip("/"))


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


def _controls(raw: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    controls = dict(DEFAULT_CONTROLS)
    if raw is None:
        return tuple(sorted(controls.items()))
    if not isinstance(raw, Mapping):
        raise Invalid("must be a mapping of rule ids to lists of control ids")
    for rule, ids in raw.items():
        if not isinstance(ids, list) or not all(isinstance(x, str) for x in ids):
            raise Invalid("a list of control ids", str(rule), yamlio.key_line(raw, str(rule)))
        controls[str(rule)] = tuple(ids)
    return tuple(sorted(controls.items()))


@dataclass(frozen=True, slots=True)
class ReportSettings:
    """Compliance reports."""

    framework: str = setting(DEFAULT_FRAMEWORK, doc="The compliance framework reports name.")
    controls: tuple[tuple[str, tuple[str, ...]], ...] = setting(
        tuple(DEFAULT_CONTROLS.items()),
        doc="Rule id → control ids, merged over the defaults.",
        parse=_controls,
        json={"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}},
    )

    def controls_of(self, rule: str) -> tuple[str, ...]:
        return dict(self.controls).get(rule, ())


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
