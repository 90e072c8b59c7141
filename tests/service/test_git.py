"""Git targets fetched with the real git CLI: local bare origins and a smart-HTTP server."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from gitsupport import Origin, http_git_server

from auditor.gitops import git


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_fetch_a_branch_then_follow_new_commits(tmp_path: Path) -> None:
    origin = Origin(tmp_path)
    first = origin.commit({"a.yaml": "kind: Namespace\n"})
    out = git.fetch(str(origin.bare), "main", tmp_path / "cache")
    assert out.commit == first and (out.path / "a.yaml").read_text() == "kind: Namespace\n"
    (out.path / "stray.yaml").write_text("left behind by someone\n")
    second = origin.commit({"b.yaml": "kind: Service\n"}, remove=("a.yaml",))
    again = git.fetch(str(origin.bare), "main", tmp_path / "cache")
    assert again.path == out.path and again.commit == second
    assert sorted(p.name for p in again.path.iterdir() if p.name != ".git") == ["b.yaml"]


def test_default_branch_and_shallow_over_file_url(tmp_path: Path) -> None:
    origin = Origin(tmp_path, branch="trunk")
    origin.commit({"a.yaml": "x: 1\n"})
    head = origin.commit({"a.yaml": "x: 2\n"})
    out = git.fetch(f"file://{origin.bare}", None, tmp_path / "cache")
    assert out.commit == head
    assert (out.path / ".git" / "shallow").exists()  # one commit deep


def test_token_over_https_reaches_git_but_never_the_messages(tmp_path: Path) -> None:
    origin = Origin(tmp_path)
    head = origin.commit({"a.yaml": "x: 1\n"})
    secret = "s3cr3t-token-value"
    with http_git_server(tmp_path, token=secret) as base:
        url = f"{base}/origin.git"
        with pytest.raises(git.GitError) as missing:
            git.fetch(url, "main", tmp_path / "cache", timeout=30)
        assert "asks for credentials" in str(missing.value)
        with pytest.raises(git.GitError) as wrong:
            git.fetch(url, "main", tmp_path / "cache", git.Credentials(token="wrong-" + secret), timeout=30)
        assert secret not in str(wrong.value) and "asks for credentials" in str(wrong.value)
        out = git.fetch(url, "main", tmp_path / "cache", git.Credentials(token=secret), timeout=30)
        assert out.commit == head
        # The token is not written into the cached repository's config either.
        assert secret not in (out.path / ".git" / "config").read_text()


def test_unreachable_remote_and_missing_branch(tmp_path: Path) -> None:
    with pytest.raises(git.GitError, match="cannot be reached"):
        git.fetch(f"http://127.0.0.1:{_closed_port()}/x.git", "main", tmp_path / "cache", timeout=30)
    origin = Origin(tmp_path)
    origin.commit({"a.yaml": "x: 1\n"})
    with pytest.raises(git.GitError, match="branch does not exist"):
        git.fetch(str(origin.bare), "no-such-branch", tmp_path / "cache")


@pytest.mark.parametrize("url", ["ext::sh -c touch% /tmp/pwned", "--upload-pack=touch /tmp/pwned", "-x"])
def test_command_running_urls_are_refused(tmp_path: Path, url: str) -> None:
    with pytest.raises(git.GitError, match="refusing"):
        git.fetch(url, "main", tmp_path / "cache")
    assert not Path("/tmp/pwned").exists()
