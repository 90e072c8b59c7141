"""GitHub's side of the App: an App key pair, webhook deliveries signed as GitHub signs them,
and event payloads shaped as GitHub sends them. The fleet benchmark and the fleet tests send
their webhooks with these (tests/fleetsupport.py re-exports them)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from auditor.service.webhooks import signature

SECRET = "webhook-secret-for-tests"
APP_ID = 4242
INSTALLATION = 7


def app_key(directory: Path) -> tuple[Path, str]:
    """A fresh RSA key: the private PEM file (the App's) and the public PEM (the server's)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path = directory / "app.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return path, public.decode()


def deliver(
    base: str,
    event: str,
    payload: dict[str, Any] | bytes,
    secret: str = SECRET,
    delivery: str | None = None,
    sign: str | None = None,
) -> tuple[int, dict[str, Any]]:
    """POST a delivery the way GitHub does: JSON body, X-GitHub-Event, X-GitHub-Delivery (a GUID),
    X-Hub-Signature-256 = sha256=HMAC-SHA256(secret, raw body), User-Agent GitHub-Hookshot/…"""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    request = urllib.request.Request(f"{base}/hooks/github", data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    request.add_header("User-Agent", "GitHub-Hookshot/5a7b3c1")
    request.add_header("X-GitHub-Event", event)
    request.add_header("X-GitHub-Delivery", delivery or str(uuid.uuid4()))
    request.add_header("X-GitHub-Hook-ID", "123456")
    request.add_header("X-Hub-Signature-256", sign if sign is not None else signature(secret, body))
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def repository(full_name: str = "acme/infra", pushed_at: datetime | None = None) -> dict[str, Any]:
    owner, name = full_name.split("/")
    out: dict[str, Any] = {
        "id": 1296269,
        "name": name,
        "full_name": full_name,
        "private": True,
        "owner": {"login": owner, "id": 1, "type": "Organization"},
        "default_branch": "main",
    }
    if pushed_at is not None:
        out["pushed_at"] = int(pushed_at.timestamp())
    return out


def pull_request_event(
    action: str, number: int, head: str, base: str, at: datetime, full_name: str = "acme/infra"
) -> dict[str, Any]:
    return {
        "action": action,
        "number": number,
        "pull_request": {
            "number": number,
            "state": "open",
            "updated_at": stamp(at),
            "head": {"ref": "feature", "sha": head, "repo": repository(full_name)},
            "base": {"ref": "main", "sha": base, "repo": repository(full_name)},
        },
        "repository": repository(full_name),
        "installation": {"id": INSTALLATION, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uNw=="},
        "sender": {"login": "dev", "id": 3, "type": "User"},
    }


def push_event(
    after: str, at: datetime, ref: str = "refs/heads/main", full_name: str = "acme/infra"
) -> dict[str, Any]:
    return {
        "ref": ref,
        "before": "0" * 40,
        "after": after,
        "created": False,
        "deleted": False,
        "forced": False,
        "commits": [],
        "repository": repository(full_name, pushed_at=at),
        "installation": {"id": INSTALLATION},
        "sender": {"login": "dev", "id": 3, "type": "User"},
    }


def installation_repositories_event(added: list[str], removed: list[str], at: datetime) -> dict[str, Any]:
    def repo(n: str) -> dict[str, Any]:
        return {"id": abs(hash(n)) % 10**6, "name": n.split("/")[1], "full_name": n, "private": True}

    return {
        "action": "added" if added else "removed",
        "installation": {"id": INSTALLATION, "account": {"login": "acme"}, "updated_at": stamp(at)},
        "repository_selection": "selected",
        "repositories_added": [repo(n) for n in added],
        "repositories_removed": [repo(n) for n in removed],
        "sender": {"login": "admin", "id": 4, "type": "User"},
    }


def _pull_ref(number: int, head: str, base: str, full_name: str) -> dict[str, Any]:
    """A pull request as check_run / check_suite payloads name it (docs.github.com, "Webhook events
    and payloads": number, url, head and base with ref, sha and a minimal repo)."""
    repo = {
        "id": 1296269,
        "url": f"https://api.github.example/repos/{full_name}",
        "name": full_name.split("/")[1],
    }
    return {
        "id": 900 + number,
        "number": number,
        "url": f"https://api.github.example/repos/{full_name}/pulls/{number}",
        "head": {"ref": "feature", "sha": head, "repo": repo},
        "base": {"ref": "main", "sha": base, "repo": repo},
    }


def check_run_event(
    action: str,
    run: dict[str, Any],
    *,
    number: int = 0,
    base: str = "",
    identifier: str = "",
    full_name: str = "acme/infra",
) -> dict[str, Any]:
    """A `check_run` event (`rerequested`, `requested_action`) about the check run `run` as the
    local GitHub holds it; `number`/`base`: the pull request the payload names (0: none, as for a
    fork's)."""
    check = {
        "id": run["id"],
        "name": run["name"],
        "head_sha": run["head_sha"],
        "external_id": run.get("external_id", ""),
        "status": run["status"],
        "conclusion": run.get("conclusion"),
        "started_at": "2026-12-01T06:00:00Z",
        "completed_at": "2026-12-01T06:01:00Z",
        "check_suite": {"id": 7000 + run["id"], "head_sha": run["head_sha"], "head_branch": "feature"},
        "app": {"id": APP_ID, "slug": "placement-auditor"},
        "pull_requests": [_pull_ref(number, run["head_sha"], base, full_name)] if number else [],
    }
    out: dict[str, Any] = {
        "action": action,
        "check_run": check,
        "repository": repository(full_name),
        "installation": {"id": INSTALLATION},
        "sender": {"login": "dev", "id": 3, "type": "User"},
    }
    if action == "requested_action":
        out["requested_action"] = {"identifier": identifier}
    return out


def check_suite_event(
    suite_id: int, head: str, at: datetime, *, number: int = 0, base: str = "", full_name: str = "acme/infra"
) -> dict[str, Any]:
    """A `check_suite` `rerequested` event ("Re-run all checks")."""
    return {
        "action": "rerequested",
        "check_suite": {
            "id": suite_id,
            "head_branch": "feature",
            "head_sha": head,
            "status": "queued",
            "conclusion": None,
            "updated_at": stamp(at),
            "app": {"id": APP_ID, "slug": "placement-auditor"},
            "pull_requests": [_pull_ref(number, head, base, full_name)] if number else [],
        },
        "repository": repository(full_name),
        "installation": {"id": INSTALLATION},
        "sender": {"login": "dev", "id": 3, "type": "User"},
    }
