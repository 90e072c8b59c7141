"""The webhook checks as pure functions: GitHub's documented signature test vector, staleness from
the signed event time, payload fields named when missing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from auditor.service import webhooks
from auditor.service.webhooks import WebhookRejected, parse_event, signature, verify_signature

NOW = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)


def test_signature_matches_githubs_documented_example() -> None:
    # docs.github.com, "Validating webhook deliveries": the test values and the expected header.
    secret, body = "It's a Secret to Everybody", b"Hello, World!"
    expected = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert signature(secret, body) == expected
    verify_signature(secret, body, expected)
    with pytest.raises(WebhookRejected) as exc:
        verify_signature(secret, body + b" ", expected)
    assert exc.value.status == 401
    with pytest.raises(WebhookRejected) as exc:
        verify_signature("", body, expected)
    assert exc.value.status == 403
    with pytest.raises(WebhookRejected):
        verify_signature(secret, body, expected.replace("sha256=", "sha1="))


def _pr(at: str, **extra: object) -> bytes:
    sha = "a" * 40
    payload = {
        "action": "opened",
        "pull_request": {
            "number": 3,
            "updated_at": at,
            "head": {"sha": sha, "ref": "f"},
            "base": {"sha": "b" * 40, "ref": "main"},
        },
        "repository": {"full_name": "acme/infra"},
        "installation": {"id": 7},
    }
    payload.update(extra)
    return json.dumps(payload).encode()


def test_staleness_is_the_signed_event_time() -> None:
    event, at = parse_event("pull_request", _pr("2026-12-01T05:30:00Z"), NOW, 3600)
    assert (
        isinstance(event, webhooks.PullRequestEvent)
        and event.number == 3
        and at == NOW - timedelta(minutes=30)
    )
    with pytest.raises(WebhookRejected, match="stale"):
        parse_event("pull_request", _pr("2026-12-01T04:59:59Z"), NOW, 3600)
    with pytest.raises(WebhookRejected, match="future"):
        parse_event("pull_request", _pr("2026-12-01T06:06:00Z"), NOW, 3600)
    # push: repository.pushed_at is epoch seconds in GitHub's push payloads.
    push = {
        "ref": "refs/heads/main",
        "after": "c" * 40,
        "repository": {"full_name": "acme/infra", "pushed_at": int((NOW - timedelta(hours=2)).timestamp())},
        "installation": {"id": 7},
    }
    with pytest.raises(WebhookRejected, match="stale"):
        parse_event("push", json.dumps(push).encode(), NOW, 3600)


def test_ignored_actions_and_events_and_bad_payloads() -> None:
    assert parse_event("pull_request", _pr("2026-12-01T05:59:00Z", action="labeled"), NOW, 3600)[0] is None
    assert parse_event("ping", b"{}", NOW, 3600) == (None, None)
    for body, field in (
        (b"[1]", "not a JSON object"),
        (b"{", "not JSON"),
        (_pr("yesterday"), "pull_request.updated_at"),
        (_pr("2026-12-01T05:59:00Z", repository={"full_name": "../../etc"}), "repository.full_name"),
        (_pr("2026-12-01T05:59:00Z", repository={"full_name": "acme/.."}), "repository.full_name"),
        (_pr("2026-12-01T05:59:00Z", installation={"id": "7"}), "installation.id"),
    ):
        with pytest.raises(WebhookRejected, match=field.replace(".", r"\.")) as exc:
            parse_event("pull_request", body, NOW, 3600)
        assert exc.value.status == 400
    with pytest.raises(WebhookRejected):
        webhooks.delivery_id("x" * 101)
