"""Real git repositories for service tests: a bare `origin` filled from a directory, and a
smart-HTTP git server (git's own `git http-backend` behind a local HTTP server) that can demand
a token."""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from world.httpserve import handler_serving

ENV = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "PATH": "/usr/bin:/bin",
}


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, env=ENV, capture_output=True, text=True, check=True)
    return done.stdout.strip()


class Origin:
    """A bare repository and a work tree that pushes to it."""

    def __init__(self, root: Path, branch: str = "main") -> None:
        self.bare = root / "origin.git"
        self.work = root / "work"
        self.branch = branch
        git("init", "--quiet", "--bare", "-b", branch, str(self.bare), cwd=root)
        git("init", "--quiet", "-b", branch, str(self.work), cwd=root)
        git("remote", "add", "origin", str(self.bare), cwd=self.work)

    def commit(
        self, files: dict[str, str | Path], message: str = "change", remove: tuple[str, ...] = ()
    ) -> str:
        for name, content in files.items():
            path = self.work / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, Path):
                shutil.copyfile(content, path)
            else:
                path.write_text(content)
        for name in remove:
            (self.work / name).unlink()
        git("add", "--all", cwd=self.work)
        git("commit", "--quiet", "-m", message, cwd=self.work)
        git("push", "--quiet", "origin", self.branch, cwd=self.work)
        return git("rev-parse", "HEAD", cwd=self.work)


class _GitHTTP(BaseHTTPRequestHandler):
    root: Path
    token: str | None

    def log_message(self, *args: object) -> None:
        pass

    def _authorised(self) -> bool:
        if self.token is None:
            return True
        expected = "Basic " + base64.b64encode(f"x-access-token:{self.token}".encode()).decode()
        return self.headers.get("Authorization") == expected

    def _serve(self) -> None:
        if not self._authorised():
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path, _, query = self.path.partition("?")
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        env = {
            **ENV,
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "REQUEST_METHOD": self.command,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
        }
        out = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
        ).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        status = 200
        headers = []
        for line in head.decode().split("\r\n"):
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            elif key:
                headers.append((key, value.strip()))
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = _serve
    do_POST = _serve


@contextmanager
def http_git_server(root: Path, token: str | None = None) -> Iterator[str]:
    """Serve the bare repositories under `root` over smart HTTP; yields the base URL."""
    with handler_serving(type("Handler", (_GitHTTP,), {"root": root, "token": token})) as base:
        yield base
