"""Git targets: fetch a branch into a cache with the real `git` CLI, audited at a recorded commit.

Shallow fetches into one cache directory per URL; HTTPS credentials reach git through `GIT_CONFIG_*`
environment variables, never the command line or the URL (so not in `ps` or any message); git never
prompts (docs/service.md, "Targets"). Errors are `GitError` with git's own message, secrets redacted.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from auditor.errors import RemoteError
from auditor.settings.service import GitSource

log = logging.getLogger("auditor.gitops")

# A remote that cannot be reached or took too long may answer later: retry after this long.
RETRY_AFTER_SECONDS = 300.0


class GitError(RemoteError, RuntimeError):
    """git failed; `retry_after` is set when the remote could not be reached or timed out."""


@dataclass(frozen=True, slots=True)
class Checkout:
    path: Path
    commit: str


@dataclass(frozen=True, slots=True)
class Credentials:
    username: str = "x-access-token"
    token: str = field(default="", repr=False)

    def header(self) -> str:
        raw = f"{self.username}:{self.token}".encode()
        return "Authorization: Basic " + base64.b64encode(raw).decode()


def relative_to(file: str, root: Path) -> str:
    """`file` relative to the checkout `root` (unchanged when it lies outside)."""
    path, top = Path(file).resolve(), root.resolve()
    return str(path.relative_to(top)) if path.is_relative_to(top) else file


def credentials(source: GitSource, environ: Mapping[str, str]) -> Credentials | None:
    """The HTTPS user and token of a git target (None without a token)."""
    token = source.token or environ.get(source.token_env, "")
    return Credentials(source.username, token) if token else None


def environment(credentials: Credentials | None, base: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in base.items() if not k.startswith("GIT_CONFIG_")}
    env.update(
        GIT_TERMINAL_PROMPT="0",
        GIT_ASKPASS="",
        SSH_ASKPASS="",
        GIT_SSH_COMMAND="ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new",
        # Keep user and system config (proxies, CA bundles) but never run a credential helper
        # that could prompt or leak.
        GIT_CONFIG_COUNT="2",
        GIT_CONFIG_KEY_0="credential.helper",
        GIT_CONFIG_VALUE_0="",
        GIT_CONFIG_KEY_1="protocol.ext.allow",
        GIT_CONFIG_VALUE_1="never",
        LC_ALL="C",
    )
    if credentials is not None and credentials.token:
        env["GIT_CONFIG_COUNT"] = "3"
        env["GIT_CONFIG_KEY_2"] = "http.extraHeader"
        env["GIT_CONFIG_VALUE_2"] = credentials.header()
    return env


def _redact(text: str, credentials: Credentials | None, env: Mapping[str, str]) -> str:
    if credentials is not None and credentials.token:
        text = text.replace(credentials.token, "***").replace(credentials.header(), "Authorization: ***")
    for key, value in env.items():  # a header passed through the environment (see environment())
        if key.startswith("GIT_CONFIG_VALUE_") and value.startswith("Authorization:"):
            text = text.replace(value, "Authorization: ***")
    return text


_NEEDS_CREDENTIALS = ("could not read username", "authentication failed", "terminal prompts disabled")


def _explain(stderr: str) -> str:
    lowered = stderr.lower()
    if any(s in lowered for s in _NEEDS_CREDENTIALS):
        return "the remote asks for credentials (set token_env for the target, or check the token)"
    if "permission denied (publickey" in lowered:
        return "the SSH key was refused"
    if any(s in lowered for s in ("could not resolve host", "connection refused", "failed to connect")):
        return "the remote cannot be reached"
    if ("remote branch" in lowered and "not found" in lowered) or "couldn't find remote ref" in lowered:
        return "the branch does not exist on the remote"
    if "does not appear to be a git repository" in lowered or "not found" in lowered:
        return "no repository at that URL"
    return "git failed"


def run(
    args: Sequence[str],
    cwd: Path,
    env: Mapping[str, str],
    timeout: float = 300.0,
    credentials: Credentials | None = None,
) -> str:
    """Run git; its stdout, or a GitError with git's own message (secrets redacted)."""
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise GitError(
            f"git {args[0]} took longer than {timeout:.0f} s and was stopped", retry_after=RETRY_AFTER_SECONDS
        ) from None
    except FileNotFoundError:
        raise GitError("git is not installed") from None
    if done.returncode != 0:
        detail = _redact(" ".join(done.stderr.split())[:800], credentials, env)
        why = _explain(done.stderr)
        raise GitError(
            f"{why}: git {args[0]} exited {done.returncode}: {detail}",
            retry_after=RETRY_AFTER_SECONDS if why == "the remote cannot be reached" else None,
        )
    return done.stdout


def cache_dir_for(cache_root: Path, url: str) -> Path:
    return cache_root / hashlib.sha256(url.encode()).hexdigest()[:20]


@contextmanager
def checkout_lock(cache_root: Path, url: str) -> Iterator[None]:
    """Hold the cache directory of `url` (across threads and processes) while it is fetched and
    read: two targets on one repository must not check out under each other's audit."""
    cache_root.mkdir(parents=True, exist_ok=True)
    lock_path = cache_root / (cache_dir_for(cache_root, url).name + ".lock")
    with _THREAD_LOCKS_GUARD:
        thread_lock = _THREAD_LOCKS.setdefault(str(lock_path), threading.Lock())
    with thread_lock, lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


_THREAD_LOCKS: dict[str, threading.Lock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


def fetch(
    url: str,
    branch: str | None,
    cache_root: Path,
    credentials: Credentials | None = None,
    timeout: float = 300.0,
    environ: Mapping[str, str] = os.environ,
) -> Checkout:
    """Bring `branch` (default: the remote's HEAD) of `url` into the cache; return its commit.

    The work tree is reset to exactly that commit (local changes and stray files removed).
    """
    if url.startswith("-") or "::" in url or (branch is not None and branch.startswith("-")):
        raise GitError(f"refusing to fetch {url!r} {branch or ''}: not a plain URL and branch")
    if credentials is not None and credentials.token and url.lower().startswith("http://"):
        log.warning(
            "the git token for %s is sent unencrypted (http://): anyone on the network path can read it; "
            "use an https:// URL",
            url,
        )
    directory = cache_dir_for(cache_root, url)
    env = environment(credentials, environ)

    def git(*args: str) -> str:
        return run(args, directory, env, timeout, credentials)

    if not (directory / ".git").is_dir():
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        git("init", "--quiet")
        git("remote", "add", "origin", url)
    else:
        git("remote", "set-url", "origin", url)
    ref = branch or "HEAD"
    try:
        git("fetch", "--quiet", "--depth", "1", "--no-tags", "origin", ref)
    except GitError as exc:
        if "shallow" not in str(exc).lower():
            raise
        # Some servers (dumb HTTP) cannot serve shallow fetches: fetch the branch whole.
        git("fetch", "--quiet", "--no-tags", "origin", ref)
    git("checkout", "--quiet", "--force", "--detach", "FETCH_HEAD")
    git("clean", "--quiet", "-ffdx")
    return Checkout(directory, git("rev-parse", "HEAD").strip())
