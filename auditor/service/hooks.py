"""POST /hooks/github: a verified delivery becomes queued work (see webhooks.py for the checks).

The answer is fast: the handler verifies, remembers the delivery id and enqueues; the audit runs
on a worker (fleet mode) or on the service's thread pool (embedded). A delivery whose work could
not be enqueued (the broker away) is forgotten again and answered 503, so GitHub's redelivery is
not refused as a replay.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from auditor.clock import Clock
from auditor.service import webhooks
from auditor.service.tasks import AuditTask, Dispatch, pr_task_key, push_task_key
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
            parsed, _at = webhooks.parse_event(event, body, self.clock(), self.app.max_delivery_age_seconds)
            if not self.fleet.remember_delivery(delivery_id, event, self.app.max_delivery_age_seconds):
                raise webhooks.WebhookRejected(409, f"delivery {delivery_id} was already received (replay)")
        except webhooks.WebhookRejected as exc:
            log.warning("webhook %s refused: %s", event, exc.reason)
            return exc.status, {"error": exc.reason}
        try:
            queued = self._enqueue(parsed, body)
        except Exception as exc:
            self.fleet.forget_delivery(delivery_id)
            log.error("webhook %s %s: could not enqueue: %s", event, delivery_id, exc)
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
        return []
