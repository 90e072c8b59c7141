"""A local server speaking the parts of GitHub's REST API the PR step uses, with GitHub's response
shapes and status codes, keeping state: repository, pulls, labels, installation tokens; refs and
commits come from a real bare repository on disk. Faults can be queued: 403/429 rate limits with
Retry-After, 5xx, and 422 "already exists" on create.

GitHub App parts: POST /app/installations/{id}/access_tokens verifies the App's RS256 JWT (iss =
the App id, signed by the App key: 401 otherwise) and issues a new installation token each time,
with a configurable `expires_at` (an expired token is refused with 401 like GitHub's); GET
/app/installations; check runs (create, update, get, list per commit) with GitHub's shapes, 422
for more than 50 annotations in one request, an unknown head SHA or a missing conclusion."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from world.httpserve import handler_serving

TOKEN = "ghp_test_token"
INSTALLATION_TOKEN = "ghs_installation_token"


@dataclass
class FakeGitHub:
    bare: Path
    owner: str = "acme"
    name: str = "infra"
    default_branch: str = "main"
    pulls: list[dict[str, Any]] = field(default_factory=list)
    faults: list[tuple[str, str, int, dict[str, str], dict[str, Any]]] = field(
        default_factory=list
    )  # (method, path regex, status, headers, body)
    requests: list[str] = field(default_factory=list)
    base: str = ""
    tokens: set[str] = field(default_factory=lambda: {TOKEN})
    app_id: int = 0
    exists_on_create: int = 0  # answer 422 after creating (a retried create that had succeeded)
    # GitHub App: the public key that verifies the App's JWTs; None = no App (401 for JWT routes).
    app_public_key: str | None = None
    installation_ids: tuple[int, ...] = (1,)
    token_lifetime: Any = None  # a datetime the issued tokens expire at; None: an hour after issue
    issued: list[tuple[str, Any]] = field(default_factory=list)  # (token, expires_at)
    check_runs: list[dict[str, Any]] = field(default_factory=list)
    lock: Any = field(default_factory=threading.Lock)
    branch_requests: int = 0  # GET …/branches/{branch}, conditional or not
    installed: bool = True  # GET /installation/repositories lists this repository

    # -- state helpers for tests ----------------------------------------------------------------

    def branch_sha(self, branch: str) -> str | None:
        done = subprocess.run(
            ["git", "rev-parse", "--verify", "-q", f"refs/heads/{branch}"],
            check=False,
            cwd=self.bare,
            capture_output=True,
            text=True,
        )
        return done.stdout.strip() or None

    def close(self, number: int) -> None:
        self._pull(number)["state"] = "closed"

    def _pull(self, number: int) -> dict[str, Any]:
        return next(p for p in self.pulls if p["number"] == number)

    # -- shapes ----------------------------------------------------------------------------------

    def _repo(self) -> dict[str, Any]:
        full = f"{self.owner}/{self.name}"
        return {
            "id": 1296269,
            "name": self.name,
            "full_name": full,
            "private": False,
            "owner": {
                "login": self.owner,
                "id": 1,
                "type": "Organization",
                "url": f"{self.base}/users/{self.owner}",
            },
            "html_url": f"https://github.example/{full}",
            "url": f"{self.base}/repos/{full}",
            "default_branch": self.default_branch,
        }

    def _pr_json(self, pr: dict[str, Any]) -> dict[str, Any]:
        full = f"{self.owner}/{self.name}"
        n = pr["number"]
        return {
            "id": 1000 + n,
            "number": n,
            "state": pr["state"],
            "title": pr["title"],
            "body": pr["body"],
            "url": f"{self.base}/repos/{full}/pulls/{n}",
            "html_url": f"https://github.example/{full}/pull/{n}",
            "issue_url": f"{self.base}/repos/{full}/issues/{n}",
            "merged": pr.get("merged", False),
            "user": {"login": "placement-auditor[bot]", "id": 2, "type": "Bot"},
            "labels": [
                {"id": i, "name": name, "color": "ededed", "url": f"{self.base}/repos/{full}/labels/{name}"}
                for i, name in enumerate(pr["labels"])
            ],
            "head": {
                "ref": pr["head"],
                "sha": self.branch_sha(pr["head"]) or "",
                "label": f"{self.owner}:{pr['head']}",
                "repo": self._repo(),
            },
            "base": {
                "ref": pr["base"],
                "sha": self.branch_sha(pr["base"]) or "",
                "label": f"{self.owner}:{pr['base']}",
                "repo": self._repo(),
            },
        }

    def _compare(self, base: str, head: str) -> dict[str, Any]:
        out = subprocess.run(
            ["git", "log", "--format=%H%x00%an%x00%ae%x00%aI%x00%s", f"{base}..{head}"],
            cwd=self.bare,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        commits = []
        for line in reversed(out.splitlines()):
            sha, name, email, date, subject = line.split("\x00")
            person = {"name": name, "email": email, "date": date}
            commits.append(
                {
                    "sha": sha,
                    "url": f"{self.base}/repos/{self.owner}/{self.name}/commits/{sha}",
                    "commit": {"author": person, "committer": person, "message": subject},
                    "author": None,
                    "committer": None,
                    "parents": [],
                }
            )
        full = f"{self.owner}/{self.name}"
        return {
            "url": f"{self.base}/repos/{full}/compare/{base}...{head}",
            "html_url": f"https://github.example/{full}/compare/{base}...{head}",
            "status": "ahead" if commits else "identical",
            "ahead_by": len(commits),
            "behind_by": 0,
            "total_commits": len(commits),
            "commits": commits,
            "files": [],
        }

    # -- the protocol ----------------------------------------------------------------------------

    def answer(self, method: str, raw: str, headers: Any, body: bytes) -> tuple[int, dict[str, str], Any]:
        parts = urlsplit(raw)
        path, query = parts.path, parse_qs(parts.query)
        self.requests.append(f"{method} {raw}")
        for i, (m, pattern, status, extra, payload) in enumerate(self.faults):
            if m == method and re.fullmatch(pattern, path):
                del self.faults[i]
                return status, extra, payload
        auth = headers.get("Authorization", "")
        if path.startswith("/app/") or path == "/app":
            return self._app_route(method, path, auth)
        scheme, _, token = auth.partition(" ")
        if scheme.lower() not in ("token", "bearer") or not self._token_valid(token):
            return (
                401,
                {},
                {"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"},
            )
        full = f"/repos/{self.owner}/{self.name}"
        if method == "GET" and path == "/installation/repositories":
            # The installation token's repositories (this server holds one; `installed` says whether
            # the installation still includes it).
            repos = [self._repo()] if self.installed else []
            return (
                200,
                {},
                {"total_count": len(repos), "repository_selection": "selected", "repositories": repos},
            )
        if method == "GET" and path == full:
            return 200, {}, self._repo()
        if method == "GET" and path == f"{full}/pulls":
            state = query.get("state", ["open"])[0]
            head = query.get("head", [""])[0]
            found = [
                p
                for p in self.pulls
                if (state == "all" or p["state"] == state)
                and (not head or f"{self.owner}:{p['head']}" == head)
            ]
            return 200, {}, [self._pr_json(p) for p in sorted(found, key=lambda p: -p["number"])]
        if method == "POST" and path == f"{full}/pulls":
            data = json.loads(body)
            if not self.branch_sha(data["head"]):
                return (
                    422,
                    {},
                    {
                        "message": "Validation Failed",
                        "errors": [{"resource": "PullRequest", "field": "head", "code": "invalid"}],
                        "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request",
                    },
                )
            if any(p["head"] == data["head"] and p["state"] == "open" for p in self.pulls):
                return (
                    422,
                    {},
                    {
                        "message": "Validation Failed",
                        "errors": [
                            {
                                "resource": "PullRequest",
                                "code": "custom",
                                "message": f"A pull request already exists for {self.owner}:{data['head']}.",
                            }
                        ],
                        "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request",
                    },
                )
            pr = {
                "number": len(self.pulls) + 1,
                "state": "open",
                "title": data["title"],
                "body": data.get("body", ""),
                "head": data["head"],
                "base": data["base"],
                "labels": [],
            }
            self.pulls.append(pr)
            if self.exists_on_create:
                self.exists_on_create -= 1
                return (
                    422,
                    {},
                    {
                        "message": "Validation Failed",
                        "errors": [
                            {
                                "resource": "PullRequest",
                                "code": "custom",
                                "message": f"A pull request already exists for {self.owner}:{data['head']}.",
                            }
                        ],
                    },
                )
            return 201, {}, self._pr_json(pr)
        if path.startswith(f"{full}/check-runs") or re.fullmatch(
            rf"{full}/commits/[^/]+(/check-runs)?", path
        ):
            return self._checks_route(method, path[len(full) :], query, body)
        m = re.fullmatch(rf"{full}/branches/(.+)", path)
        if m and method == "GET":
            # Conditional requests as GitHub answers them: a weak ETag of the representation, and
            # 304 with no body when If-None-Match names it.
            name = unquote(m.group(1))
            sha = self.branch_sha(name)
            if not sha:
                return (
                    404,
                    {},
                    {"message": "Branch not found", "documentation_url": "https://docs.github.com/rest"},
                )
            branch = {
                "name": name,
                "commit": {"sha": sha, "url": f"{self.base}{full}/commits/{sha}"},
                "protected": False,
            }
            etag = 'W/"' + hashlib.sha256(json.dumps(branch, sort_keys=True).encode()).hexdigest()[:40] + '"'
            self.branch_requests += 1
            if headers.get("If-None-Match") == etag:
                return 304, {"ETag": etag}, None
            return 200, {"ETag": etag}, branch
        m = re.fullmatch(rf"{full}/compare/(.+)\.\.\.(.+)", path)
        if m and method == "GET":
            return 200, {}, self._compare(m.group(1), m.group(2))
        m = re.fullmatch(rf"{full}/pulls/(\d+)", path)
        if m and method in ("GET", "PATCH"):
            pr = self._pull(int(m.group(1)))
            if method == "PATCH":
                data = json.loads(body)
                for key in ("title", "body", "state"):
                    if key in data:
                        pr[key] = data[key]
            return 200, {}, self._pr_json(pr)
        m = re.fullmatch(rf"{full}/issues/(\d+)/comments", path)
        if m and method == "POST":
            pr = self._pull(int(m.group(1)))
            text = json.loads(body)["body"]
            pr.setdefault("comments", []).append(text)
            n = len(pr["comments"])
            return (
                201,
                {},
                {
                    "id": 5000 + n,
                    "body": text,
                    "user": {"login": "placement-auditor[bot]", "id": 2, "type": "Bot"},
                    "url": f"{self.base}/repos/{self.owner}/{self.name}/issues/comments/{5000 + n}",
                    "html_url": (
                        f"https://github.example/{self.owner}/{self.name}/pull/{pr['number']}"
                        f"#issuecomment-{5000 + n}"
                    ),
                    "issue_url": f"{self.base}/repos/{self.owner}/{self.name}/issues/{pr['number']}",
                    "created_at": "2026-12-01T06:00:00Z",
                    "updated_at": "2026-12-01T06:00:00Z",
                },
            )
        m = re.fullmatch(rf"{full}/issues/(\d+)/labels", path)
        if m and method == "POST":
            pr = self._pull(int(m.group(1)))
            for name in json.loads(body):
                if name not in pr["labels"]:
                    pr["labels"].append(name)
            return 200, {}, self._pr_json(pr)["labels"]
        return 404, {}, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}


def _app_route(self: FakeGitHub, method: str, path: str, auth: str) -> tuple[int, dict[str, str], Any]:
    import jwt

    unauthorized = (
        401,
        {},
        {
            "message": "A JSON web token could not be decoded",
            "documentation_url": "https://docs.github.com/rest",
        },
    )
    scheme, _, token = auth.partition(" ")
    if scheme.lower() != "bearer" or not self.app_public_key:
        return unauthorized
    try:
        claims = jwt.decode(
            token, self.app_public_key, algorithms=["RS256"], options={"require": ["iat", "exp", "iss"]}
        )
    except jwt.PyJWTError:
        return unauthorized
    if str(claims["iss"]) != str(self.app_id):
        return unauthorized
    if method == "GET" and path == "/app/installations":
        return 200, {}, [self._installation(i) for i in self.installation_ids]
    m = re.fullmatch(r"/app/installations/(\d+)/access_tokens", path)
    if m and method == "POST":
        if int(m.group(1)) not in self.installation_ids:
            return 404, {}, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}
        from datetime import UTC, datetime, timedelta

        with self.lock:
            expires = self.token_lifetime or datetime.now(UTC) + timedelta(hours=1)
            value = f"ghs_inst_{len(self.issued) + 1:04d}"
            self.issued.append((value, expires))
        return (
            201,
            {},
            {
                "token": value,
                "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "permissions": {"checks": "write", "pull_requests": "write", "contents": "write"},
                "repository_selection": "selected",
            },
        )
    return 404, {}, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}


def _token_valid(self: FakeGitHub, token: str) -> bool:
    if token in self.tokens:
        return True
    from datetime import UTC, datetime

    # An installation token is accepted until its expires_at (GitHub's rule), by the server's clock.
    return any(value == token and datetime.now(UTC) < expires for value, expires in self.issued)


def _installation(self: FakeGitHub, installation_id: int) -> dict[str, Any]:
    return {
        "id": installation_id,
        "account": {"login": self.owner, "id": 1, "type": "Organization"},
        "app_id": self.app_id,
        "target_type": "Organization",
        "repository_selection": "selected",
        "access_tokens_url": f"{self.base}/app/installations/{installation_id}/access_tokens",
        "repositories_url": f"{self.base}/installation/repositories",
        "html_url": f"https://github.example/organizations/{self.owner}/settings/installations/{installation_id}",
        "permissions": {"checks": "write", "pull_requests": "write", "contents": "write"},
        "events": ["pull_request", "push"],
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    }


def _check_json(self: FakeGitHub, run: dict[str, Any]) -> dict[str, Any]:
    full = f"{self.owner}/{self.name}"
    return {
        "id": run["id"],
        "head_sha": run["head_sha"],
        "node_id": f"CR_{run['id']}",
        "external_id": run.get("external_id", ""),
        "url": f"{self.base}/repos/{full}/check-runs/{run['id']}",
        "html_url": f"https://github.example/{full}/runs/{run['id']}",
        "details_url": run.get("details_url"),
        "status": run["status"],
        "conclusion": run.get("conclusion"),
        "started_at": "2026-12-01T06:00:00Z",
        "completed_at": "2026-12-01T06:01:00Z" if run["status"] == "completed" else None,
        "output": {
            "title": run["output"].get("title"),
            "summary": run["output"].get("summary"),
            "text": run["output"].get("text"),
            "annotations_count": len(run["annotations"]),
            "annotations_url": f"{self.base}/repos/{full}/check-runs/{run['id']}/annotations",
        },
        "name": run["name"],
        "check_suite": {"id": 7000 + run["id"]},
        "app": {"id": self.app_id, "slug": "placement-auditor", "name": "Placement Auditor"},
        "pull_requests": [],
    }


_CHECK_STATUSES = ("queued", "in_progress", "completed", "waiting", "requested", "pending")
_CONCLUSIONS = (
    "action_required",
    "cancelled",
    "failure",
    "neutral",
    "success",
    "skipped",
    "stale",
    "timed_out",
)


def _invalid(message: str) -> tuple[int, dict[str, str], Any]:
    return (
        422,
        {},
        {
            "message": message,
            "documentation_url": "https://docs.github.com/rest/checks/runs",
            "status": "422",
        },
    )


def _apply_check(
    self: FakeGitHub, run: dict[str, Any], data: dict[str, Any]
) -> tuple[int, dict[str, str], Any] | None:
    status = data.get("status", run.get("status", "queued"))
    conclusion = data.get("conclusion", run.get("conclusion"))
    if status not in _CHECK_STATUSES:
        return _invalid(f"Invalid request.\n\n{status!r} is not a member of {list(_CHECK_STATUSES)}.")
    if conclusion is not None and conclusion not in _CONCLUSIONS:
        return _invalid(f"Invalid request.\n\n{conclusion!r} is not a valid conclusion.")
    if "conclusion" in data and "status" not in data:
        status = "completed"  # GitHub: providing a conclusion sets status completed
    if status == "completed" and conclusion is None:
        return _invalid(
            'Invalid request.\n\nNo subschema in "anyOf" matched: '
            "conclusion is required when status is completed."
        )
    output = data.get("output")
    if output is not None:
        annotations = output.get("annotations") or []
        if len(annotations) > 50:
            return _invalid("Invalid request.\n\nOnly 50 annotations are allowed per request.")
        for a in annotations:
            missing = [
                k for k in ("path", "start_line", "end_line", "annotation_level", "message") if k not in a
            ]
            if missing or a.get("annotation_level") not in ("notice", "warning", "failure"):
                return _invalid(
                    "Invalid request.\n\nannotation is missing or invalid: "
                    f"{missing or a.get('annotation_level')}"
                )
        if "title" not in output or "summary" not in output:
            return _invalid("Invalid request.\n\nFor 'properties/output', title and summary are required.")
        run["output"] = {k: output.get(k) for k in ("title", "summary", "text")}
        run["annotations"].extend(annotations)  # GitHub appends annotations on every update
        run["output_updates"] = run.get("output_updates", 0) + 1
    actions = data.get("actions")
    if actions is not None:
        # GitHub: at most 3 actions; label ≤ 20, description ≤ 40, identifier ≤ 20 characters.
        if len(actions) > 3 or any(
            not (0 < len(a.get("label", "")) <= 20)
            or not (0 < len(a.get("description", "")) <= 40)
            or not (0 < len(a.get("identifier", "")) <= 20)
            for a in actions
        ):
            return _invalid(
                "Invalid request.\n\nactions: at most 3, label 20, description 40, identifier 20."
            )
        run["actions"] = actions
    run["status"], run["conclusion"] = status, conclusion if status == "completed" else None
    if status == "completed":
        import time

        run["completed_monotonic"] = time.monotonic()  # benchmarks: webhook → check run
    return None


def _checks_route(
    self: FakeGitHub, method: str, path: str, query: dict[str, list[str]], body: bytes
) -> tuple[int, dict[str, str], Any]:
    not_found = (404, {}, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"})
    m = re.fullmatch(r"/commits/([^/]+)", path)
    if m and method == "GET":
        sha = subprocess.run(
            ["git", "rev-parse", "--verify", "-q", f"{m.group(1)}^{{commit}}"],
            cwd=self.bare,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        if not sha:
            return (
                422,
                {},
                {
                    "message": f"No commit found for SHA: {m.group(1)}",
                    "documentation_url": "https://docs.github.com/rest",
                },
            )
        full = f"{self.owner}/{self.name}"
        person = {"name": "dev", "email": "dev@example.com", "date": "2026-12-01T06:00:00Z"}
        return (
            200,
            {},
            {
                "sha": sha,
                "url": f"{self.base}/repos/{full}/commits/{sha}",
                "html_url": f"https://github.example/{full}/commit/{sha}",
                "commit": {"author": person, "committer": person, "message": "commit"},
                "author": None,
                "committer": None,
                "parents": [],
                "files": [],
            },
        )
    m = re.fullmatch(r"/commits/([^/]+)/check-runs", path)
    if m and method == "GET":
        name = query.get("check_name", [None])[0]
        found = [
            r for r in self.check_runs if r["head_sha"] == m.group(1) and (name is None or r["name"] == name)
        ]
        return 200, {}, {"total_count": len(found), "check_runs": [self._check_json(r) for r in found]}
    if path == "/check-runs" and method == "POST":
        data = json.loads(body)
        if not data.get("name") or not data.get("head_sha"):
            return _invalid('Invalid request.\n\n"name" and "head_sha" are required.')
        if self.branch_sha(data["head_sha"]) is None:
            exists = (
                subprocess.run(
                    ["git", "cat-file", "-e", f"{data['head_sha']}^{{commit}}"],
                    cwd=self.bare,
                    capture_output=True,
                    check=False,
                ).returncode
                == 0
            )
            if not exists:
                return _invalid("No commit found for SHA: " + data["head_sha"])
        with self.lock:
            run = {
                "id": 9000 + len(self.check_runs) + 1,
                "name": data["name"],
                "head_sha": data["head_sha"],
                "external_id": data.get("external_id", ""),
                "details_url": data.get("details_url"),
                "status": "queued",
                "conclusion": None,
                "output": {},
                "annotations": [],
            }
            problem = self._apply_check(run, data)
            if problem is not None:
                return problem
            self.check_runs.append(run)
        return 201, {}, self._check_json(run)
    m = re.fullmatch(r"/check-runs/(\d+)", path)
    if m and method in ("GET", "PATCH"):
        run = next((r for r in self.check_runs if r["id"] == int(m.group(1))), None)
        if run is None:
            return not_found
        if method == "PATCH":
            with self.lock:
                problem = self._apply_check(run, json.loads(body))
                if problem is not None:
                    return problem
        return 200, {}, self._check_json(run)
    return not_found


class MultiHub:
    """Many repositories behind one server: /repos/OWNER/NAME/… goes to that repository's
    FakeGitHub, /app/… to the first; installation tokens are shared (one App, one installation)."""

    def __init__(self, hubs: list[FakeGitHub]) -> None:
        self.hubs = {f"{h.owner}/{h.name}": h for h in hubs}
        self.first = hubs[0]
        for h in hubs[1:]:
            h.issued = self.first.issued
        self._base = ""

    @property
    def base(self) -> str:
        return self._base

    @base.setter
    def base(self, value: str) -> None:
        self._base = value
        for h in self.hubs.values():
            h.base = value

    def answer(self, method: str, raw: str, headers: Any, body: bytes) -> tuple[int, dict[str, str], Any]:
        m = re.match(r"/repos/([^/]+/[^/?]+)", raw)
        hub = self.hubs.get(m.group(1)) if m else self.first
        if hub is None:
            return 404, {}, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}
        return hub.answer(method, raw, headers, body)


FakeGitHub._app_route = _app_route  # type: ignore[attr-defined]
FakeGitHub._token_valid = _token_valid  # type: ignore[attr-defined]
FakeGitHub._installation = _installation  # type: ignore[attr-defined]
FakeGitHub._check_json = _check_json  # type: ignore[attr-defined]
FakeGitHub._apply_check = _apply_check  # type: ignore[attr-defined]
FakeGitHub._checks_route = _checks_route  # type: ignore[attr-defined]


@contextmanager
def serve(hub: FakeGitHub | MultiHub) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, *args: object) -> None:
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            status, extra, payload = hub.answer(self.command, self.path, self.headers, body)
            data = json.dumps(payload).encode() if status != 304 else b""  # 304: no body
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            # GitHub sends each rate-limit header once: a fault's own values replace these.
            for k, v in {"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "4999"}.items():
                if k not in extra:
                    self.send_header(k, v)
            for k, v in extra.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = _serve
        do_POST = _serve
        do_PATCH = _serve

    with handler_serving(Handler) as base:
        hub.base = base
        yield base
