"""Links from a finding to its file and line in the repository, at the audited revision: GitHub and
GitLab remotes (https, ssh or scp-like; user names and tokens dropped), as docs/reports.md, "Web
pages", describes; other hosts, local paths and files outside the checkout have no link. Pure."""

from __future__ import annotations

import re
import urllib.parse

_SCP = re.compile(r"^(?:[A-Za-z0-9._-]+@)?(?P<host>[A-Za-z0-9.-]+):(?P<path>[^/].*)$")
_REV = re.compile(r"^[0-9a-fA-F]{7,64}$")


def repository_web_url(remote: str) -> tuple[str, str] | None:
    """(host kind `github` or `gitlab`, https base URL of the repository) or None."""
    remote = remote.strip()
    if "://" in remote:
        parts = urllib.parse.urlsplit(remote)
        if parts.scheme not in ("https", "http", "ssh", "git"):
            return None
        host, path = (parts.hostname or ""), parts.path
    else:
        m = _SCP.match(remote)
        if m is None:
            return None
        host, path = m["host"], "/" + m["path"]
    host = host.lower()
    path = path.rstrip("/").removesuffix(".git")
    segments = [s for s in path.split("/") if s]
    if not host or len(segments) < 2 or any(s in (".", "..") for s in segments):
        return None
    first = host.split(".")[0]
    kind = "github" if first == "github" else "gitlab" if first == "gitlab" else None
    if kind is None or (kind == "github" and len(segments) != 2):
        return None
    quoted = "/".join(urllib.parse.quote(s, safe="") for s in segments)
    return kind, f"https://{host}/{quoted}"


def file_url(remote: str, revision: str | None, file: str, line: int | None = None) -> str | None:
    """The web URL of `file` (relative to the repository root) at `revision`, or None."""
    if not revision or not _REV.match(revision) or not file:
        return None
    if file.startswith("/") or "\\" in file or any(s == ".." for s in file.split("/")):
        return None
    repo = repository_web_url(remote)
    if repo is None:
        return None
    kind, base = repo
    path = "/".join(urllib.parse.quote(s) for s in file.split("/") if s not in ("", "."))
    blob = "blob" if kind == "github" else "-/blob"
    anchor = f"#L{line}" if line else ""
    return f"{base}/{blob}/{revision}/{path}{anchor}"
