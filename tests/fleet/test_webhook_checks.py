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


def _check_run(action: str, **extra: object) -> bytes:
    payload: dict = {
        "action": action,
        "check_run": {
            "id": 41,
            "name": "placement-audit",
            "head_sha": "a" * 40,
            "pull_requests": [
                {
                    "number": 3,
                    "head": {"ref": "f", "sha": "a" * 40},
                    "base": {"ref": "main", "sha": "b" * 40},
                },
                {
                    "number": 9,
                    "head": {"ref": "g", "sha": "c" * 40},
                    "base": {"ref": "main", "sha": "d" * 40},
                },
            ],
        },
        "repository": {"full_name": "acme/infra"},
        "installation": {"id": 7},
    }
    payload.update(extra)
    return json.dumps(payload).encode()


def test_check_run_and_check_suite_requests() -> None:
    event, _ = parse_event("check_run", _check_run("rerequested"), NOW, 3600, "placement-audit")
    assert event == webhooks.CheckRequestEvent(
        "acme/infra", 7, "rerequested", "a" * 40, "run-41", "", 3, "f", "b" * 40, "main"
    )
    pressed, _ = parse_event(
        "check_run",
        _check_run("requested_action", requested_action={"identifier": "open-fix-pr"}),
        NOW,
        3600,
        "placement-audit",
    )
    assert isinstance(pressed, webhooks.CheckRequestEvent) and pressed.identifier == "open-fix-pr"
    # Not ours (another check's name), not an action we act on: ignored.
    assert parse_event("check_run", _check_run("rerequested"), NOW, 3600, "other-check")[0] is None
    assert parse_event("check_run", _check_run("completed"), NOW, 3600, "placement-audit")[0] is None
    with pytest.raises(WebhookRejected, match=r"requested_action\.identifier"):
        parse_event(
            "check_run",
            _check_run("requested_action", requested_action={"identifier": "x" * 21}),
            NOW,
            3600,
            "placement-audit",
        )
    with pytest.raises(WebhookRejected, match="requested_action"):
        parse_event("check_run", _check_run("requested_action"), NOW, 3600, "placement-audit")
    # A suite's re-run is told apart by its (signed) updated_at, and may be stale.
    suite = {
        "action": "rerequested",
        "check_suite": {
            "id": 5,
            "head_sha": "e" * 40,
            "updated_at": "2026-12-01T05:59:00Z",
            "pull_requests": [],
        },
        "repository": {"full_name": "acme/infra"},
        "installation": {"id": 7},
    }
    event, _ = parse_event("check_suite", json.dumps(suite).encode(), NOW, 3600, "placement-audit")
    assert isinstance(event, webhooks.CheckRequestEvent)
    assert (event.request, event.number, event.base_sha) == ("suite-5-20261201T055900", 0, "")
    suite["check_suite"]["updated_at"] = "2026-12-01T04:00:00Z"  # type: ignore[index]
    with pytest.raises(WebhookRejected, match="stale"):
        parse_event("check_suite", json.dumps(suite).encode(), NOW, 3600, "placement-audit")
