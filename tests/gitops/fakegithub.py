"""A local server speaking the parts of GitHub's REST API the PR step uses, with GitHub's response
shapes and status codes, keeping state: repository, pulls, labels, installation tokens; refs and
commits come from a real bare repository on disk. Faults can be queued: 403/429 rate limits with
Retry-After, 5xx, and 422 "already exists" on create."""

from __future__ import annotations

import json
import re
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

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
        if method == "POST" and re.fullmatch(r"/app/installations/\d+/access_tokens", path):
            if not auth.startswith("Bearer ") or not self.app_id:
                return (
                    401,
                    {},
                    {
                        "message": "A JSON web token could not be decoded",
                        "documentation_url": "https://docs.github.com/rest",
                    },
                )
            self.tokens.add(INSTALLATION_TOKEN)
            return (
                201,
                {},
                {
                    "token": INSTALLATION_TOKEN,
                    "expires_at": "2099-01-01T00:00:00Z",
                    "permissions": {"pull_requests": "write", "contents": "write"},
                    "repository_selection": "selected",
                },
            )
        scheme, _, token = auth.partition(" ")
        if scheme.lower() not in ("token", "bearer") or token not in self.tokens:
            return (
                401,
                {},
                {"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"},
            )
        full = f"/repos/{self.owner}/{self.name}"
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
                    "html_url": f"https://github.example/{self.owner}/{self.name}/pull/{pr['number']}#issuecomment-{5000 + n}",
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


@contextmanager
def serve(hub: FakeGitHub) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, *args: object) -> None:
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            status, extra, payload = hub.answer(self.command, self.path, self.headers, body)
            data = json.dumps(payload).encode()
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

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    hub.base = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield hub.base
    finally:
        server.shutdown()
        server.server_close()
