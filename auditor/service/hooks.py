"""POST /hooks/github: a verified delivery becomes queued work (see webhooks.py for the checks).

The answer is fast: the handler verifies, refuses a delivery id already received (a replay),
enqueues, and only then remembers the id; the audit runs on a worker (fleet mode) or on the
service's thread pool (embedded). In that order a process killed between the two steps, or a
broker or database that is away, never loses a delivery: it is answered 503 (or the process is
gone) and GitHub's redelivery is not refused as a replay. Enqueuing twice is harmless: every task
is idempotent by its key (tasks.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from auditor.clock import Clock
from auditor.service import webhooks
from auditor.service.githubapp import FIX_ACTION
from auditor.service.tasks import AuditTask, Dispatch, FixTask, pr_task_key, push_task_key
from auditor.settings.service import GitHubAppSettings
from auditor.store.fleet import FleetStore

log = logging.getLogger("auditor.hooks")


class GitHubHook:
    def __init__(
        self,
        app: GitHubAppSettings,
        secret: str,
        fleet: FleetStore,
        dispatch: Dispatch,
        clock: Clock,
        branches: Mapping[str, str] | None = None,
    ) -> None:
        self.app, self.secret, self.fleet, self.dispatch, self.clock = app, secret, fleet, dispatch, clock
        # repository → the branch whose pushes are audited (configured targets); App repositories
        # without an entry: their default branch, as the push payload names it.
        self.branches = dict(branches or {})

    def handle(
        self, event: str, delivery: str | None, signature: str | None, body: bytes
    ) -> tuple[int, dict[str, Any]]:
        try:
            webhooks.verify_signature(self.secret, body, signature)
            delivery_id = webhooks.delivery_id(delivery)
            parsed, _at = webhooks.parse_event(
                event, body, self.clock(), self.app.max_delivery_age_seconds, self.app.check_name
            )
        except webhooks.WebhookRejected as exc:
            log.warning("webhook %s refused: %s", event, exc.reason)
            return exc.status, {"error": exc.reason}
        try:
            if self.fleet.delivery_seen(delivery_id):
                log.warning(
                    "webhook %s refused: delivery %s was already received (replay)", event, delivery_id
                )
                return 409, {"error": f"delivery {delivery_id} was already received (replay)"}
            queued = self._enqueue(parsed, body)
            self.fleet.remember_delivery(delivery_id, event, self.app.max_delivery_age_seconds)
        except Exception as exc:
            log.error(
                "webhook %s %s: could not be queued: %s: %s", event, delivery_id, type(exc).__name__, exc
            )
            return 503, {"error": "the work could not be queued; redeliver later"}
        return 202, {"delivery": delivery_id, "queued": queued}

    def _enqueue(self, parsed: webhooks.Event | None, body: bytes) -> list[str]:
        if isinstance(parsed, webhooks.PullRequestEvent):
            key = pr_task_key(parsed)
            self.dispatch.pr_check(parsed, key)
            return [key]
        if isinstance(parsed, webhooks.PushEvent):
            import json

            default = json.loads(body).get("repository", {}).get("default_branch", "")
            branch = self.branches.get(parsed.repository, default)
            if parsed.ref != f"refs/heads/{branch}":
                return []
            key = push_task_key(parsed)
            self.dispatch.audit(AuditTask("", key, None, "push", parsed.repository, parsed.installation_id))
            return [key]
        if isinstance(parsed, webhooks.InstallationEvent):
            self.dispatch.installation(parsed)
            return [f"installation:{parsed.installation_id}:{parsed.action}"]
        if isinstance(parsed, webhooks.CheckRequestEvent):
            return self._check_request(parsed)
        return []

    def _check_request(self, event: webhooks.CheckRequestEvent) -> list[str]:
        """ "Re-run" (a check run of its own for that commit, once per request) and the check run's
        "Open fix PR" button (the fix pull request onto the pull request's branch, once)."""
        if event.action == "rerequested":
            key = f"rerun:{event.repository}:{event.head_sha}:{event.request}"
            pull = webhooks.PullRequestEvent(
                event.repository,
                event.installation_id,
                event.number,
                event.head_sha,
                event.head_ref,
                event.base_sha,
                event.base_ref,
            )
            self.dispatch.pr_check(pull, key, event.request)
            return [key]
        if event.identifier == FIX_ACTION["identifier"] and self.app.fix_button:
            key = f"fix:{event.repository}:{event.request}"
            self.dispatch.fix_pr(FixTask(event.repository, event.installation_id, event.head_ref, key))
            return [key]
        log.info("check run button %r of %s: not one of ours; ignored", event.identifier, event.repository)
        return []
