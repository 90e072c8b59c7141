"""GitHub webhooks: signature, replay and staleness checks, and the events the App acts on (pure).

A delivery is accepted when, in this order:
1. `X-Hub-Signature-256` is `sha256=` + the hex HMAC-SHA256 of the raw body under the App's
   webhook secret, compared in constant time (`hmac.compare_digest`), as GitHub documents in
   "Validating webhook deliveries". No secret configured: every delivery is refused.
2. the payload is a JSON object whose fields the event needs are present and typed;
3. its *event time* is not older than `max_delivery_age_seconds` (and not more than 5 minutes in
   the future): GitHub sends no timestamp header, and `X-GitHub-Delivery` is not covered by the
   signature, so a captured, signed body could be replayed under a new delivery id. The body's own
   time is signed: `pull_request.updated_at` (`pull_request`), `repository.pushed_at` (`push`),
   `installation.updated_at` (`installation`, `installation_repositories`). A replay is therefore
   possible only within that window, and then it repeats an audit of the same head SHA, which
   updates the same check run (idempotent), never a second one. GitHub's own "Redeliver" of an
   event older than the window is refused as stale too: that is the price of the window;
4. its `X-GitHub-Delivery` id was not seen in that window (the store remembers ids as long).

`check_run` (`rerequested`: the "Re-run" button; `requested_action`: a button the check run
offers, such as "Open fix PR") and `check_suite` (`rerequested`: "Re-run all checks") are acted on
for the App's own check runs (`check_run.name` is the configured check name). A re-request carries
no signed time of the request (`check_run.completed_at` is the old run's), so its staleness is not
checked; it needs none: its work is keyed by the check run id (a check suite's: id and
`updated_at`), so a replayed body re-runs nothing and presses no button twice. Other events
(`ping`, …) are acknowledged and ignored.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

DELIVERY_RE = re.compile(r"^[A-Za-z0-9-]{1,100}$")
FUTURE_SKEW = timedelta(minutes=5)
PR_ACTIONS = frozenset({"opened", "synchronize", "reopened"})


class WebhookRejected(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def signature(secret: str, body: bytes) -> str:
    """The `X-Hub-Signature-256` value GitHub sends for `body`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify_signature(secret: str, body: bytes, header: str | None) -> None:
    if not secret:
        raise WebhookRejected(403, "no webhook secret is configured; webhooks are refused")
    if not header or not header.startswith("sha256="):
        raise WebhookRejected(401, "missing or malformed X-Hub-Signature-256")
    if not hmac.compare_digest(signature(secret, body).encode(), header.strip().encode()):
        raise WebhookRejected(401, "X-Hub-Signature-256 does not match the body")


@dataclass(frozen=True, slots=True)
class PullRequestEvent:
    repository: str  # owner/name
    installation_id: int
    number: int
    head_sha: str
    head_ref: str
    base_sha: str
    base_ref: str


@dataclass(frozen=True, slots=True)
class PushEvent:
    repository: str
    installation_id: int
    ref: str  # refs/heads/main
    after: str


@dataclass(frozen=True, slots=True)
class InstallationEvent:
    installation_id: int
    action: str
    added: tuple[str, ...]
    removed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CheckRequestEvent:
    """A user asked, on GitHub, for a check to be run again or pressed one of its buttons."""

    repository: str
    installation_id: int
    action: str  # rerequested | requested_action
    head_sha: str
    request: str  # what the request is about: `run-<check run id>` or `suite-<id>-<updated_at>`
    identifier: str  # the button's (requested_action); "" for a re-run
    number: int  # the pull request (0: the payload names none, e.g. a fork's)
    head_ref: str
    base_sha: str
    base_ref: str


Event = PullRequestEvent | PushEvent | InstallationEvent | CheckRequestEvent


def _field(data: Any, path: str, kind: type | tuple[type, ...]) -> Any:
    value = data
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            raise WebhookRejected(400, f"payload field {path} is missing")
        value = value[part]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise WebhookRejected(400, f"payload field {path} has the wrong type")
    return value


def _time(data: Any, path: str) -> datetime:
    """GitHub's times: ISO 8601 strings, or (push's repository.pushed_at) epoch seconds."""
    value = _field(data, path, (str, int))
    if isinstance(value, int):
        return datetime.fromtimestamp(value, UTC)
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise WebhookRejected(400, f"payload field {path} is not a time") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


def _repo(data: Any, path: str) -> str:
    name = str(_field(data, path, str))
    if not _REPO.match(name) or any(part in (".", "..") for part in name.split("/")):
        raise WebhookRejected(400, f"payload field {path} is not owner/name")
    return name


def _sha(data: Any, path: str) -> str:
    sha = str(_field(data, path, str))
    if not _SHA.match(sha):
        raise WebhookRejected(400, f"payload field {path} is not a commit SHA")
    return sha


def parse_event(
    event: str, body: bytes, now: datetime, max_age_seconds: float, check_name: str = ""
) -> tuple[Event | None, datetime | None]:
    """The event the App acts on (None: acknowledged, ignored) and its event time."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise WebhookRejected(400, "the body is not JSON") from None
    if not isinstance(data, dict):
        raise WebhookRejected(400, "the body is not a JSON object")
    parsed: Event | None
    if event == "pull_request":
        action = _field(data, "action", str)
        at = _time(data, "pull_request.updated_at")
        if action not in PR_ACTIONS:
            return None, at
        parsed = PullRequestEvent(
            _repo(data, "repository.full_name"),
            int(_field(data, "installation.id", int)),
            int(_field(data, "pull_request.number", int)),
            _sha(data, "pull_request.head.sha"),
            str(_field(data, "pull_request.head.ref", str)),
            _sha(data, "pull_request.base.sha"),
            str(_field(data, "pull_request.base.ref", str)),
        )
    elif event == "push":
        at = _time(data, "repository.pushed_at")
        after = _field(data, "after", str)
        if data.get("deleted") is True or set(after) == {"0"}:
            return None, at
        parsed = PushEvent(
            _repo(data, "repository.full_name"),
            int(_field(data, "installation.id", int)),
            str(_field(data, "ref", str)),
            _sha(data, "after"),
        )
    elif event in ("installation", "installation_repositories"):
        at = _time(data, "installation.updated_at")
        action = str(_field(data, "action", str))
        installation = int(_field(data, "installation.id", int))
        if event == "installation":
            repos = data.get("repositories") or []
            added = tuple(_repo(r, "full_name") for r in repos) if action in ("created", "unsuspend") else ()
            removed = tuple(_repo(r, "full_name") for r in repos) if action in ("deleted", "suspend") else ()
        else:
            added = tuple(_repo(r, "full_name") for r in data.get("repositories_added") or [])
            removed = tuple(_repo(r, "full_name") for r in data.get("repositories_removed") or [])
        parsed = InstallationEvent(installation, action, added, removed)
    elif event in ("check_run", "check_suite"):
        return _check_request(event, data, now, max_age_seconds, check_name), None
    else:
        return None, None
    check_age(at, now, max_age_seconds)
    return parsed, at


_IDENTIFIER = re.compile(r"^[A-Za-z0-9_-]{1,20}$")


def _check_request(
    event: str, data: dict[str, Any], now: datetime, max_age_seconds: float, check_name: str
) -> CheckRequestEvent | None:
    action = str(_field(data, "action", str))
    wanted = ("rerequested", "requested_action") if event == "check_run" else ("rerequested",)
    if action not in wanted:
        return None
    if event == "check_run":
        if check_name and _field(data, "check_run.name", str) != check_name:
            return None  # another App's or another check's
        head_sha = _sha(data, "check_run.head_sha")
        request = f"run-{int(_field(data, 'check_run.id', int))}"
        pulls = _field(data, "check_run.pull_requests", list)
    else:
        head_sha = _sha(data, "check_suite.head_sha")
        # "Re-run all checks" keeps the suite's id: its updated_at (signed) tells the presses apart.
        updated = _time(data, "check_suite.updated_at")
        check_age(updated, now, max_age_seconds)
        stamp = updated.astimezone(UTC).strftime("%Y%m%dT%H%M%S")
        request = f"suite-{int(_field(data, 'check_suite.id', int))}-{stamp}"
        pulls = _field(data, "check_suite.pull_requests", list)
    identifier = ""
    if action == "requested_action":
        identifier = str(_field(data, "requested_action.identifier", str))
        if not _IDENTIFIER.match(identifier):
            raise WebhookRejected(400, "payload field requested_action.identifier is not an identifier")
    number, head_ref, base_sha, base_ref = 0, "", "", ""
    for pull in pulls:  # the pull request of this head, when the payload names it
        if isinstance(pull, dict) and _field(pull, "head.sha", str) == head_sha:
            number = int(_field(pull, "number", int))
            head_ref = str(_field(pull, "head.ref", str))
            base_sha = _sha(pull, "base.sha")
            base_ref = str(_field(pull, "base.ref", str))
            break
    return CheckRequestEvent(
        _repo(data, "repository.full_name"),
        int(_field(data, "installation.id", int)),
        action,
        head_sha,
        request,
        identifier,
        number,
        head_ref,
        base_sha,
        base_ref,
    )


def check_age(at: datetime, now: datetime, max_age_seconds: float) -> None:
    if at < now - timedelta(seconds=max_age_seconds):
        raise WebhookRejected(
            409, f"stale delivery: its event time {at.isoformat()} is older than {int(max_age_seconds)} s"
        )
    if at > now + FUTURE_SKEW:
        raise WebhookRejected(409, f"delivery from the future: event time {at.isoformat()}")


def delivery_id(header: str | None) -> str:
    if not header or not DELIVERY_RE.match(header):
        raise WebhookRejected(400, "missing or malformed X-GitHub-Delivery")
    return header
