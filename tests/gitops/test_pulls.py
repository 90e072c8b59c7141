"""Fix pull requests through PyGithub against a local GitHub API server, with a real bare
repository as `origin`, on SQLite and PostgreSQL: one PR per fix, idempotent, never reopened after a
human closed it (whatever else changes in the file), never force-pushed over a human, hostile names
escaped, rate limits honoured."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from dbsupport import Clock, engine_for
from fakegithub import TOKEN, FakeGitHub, serve
from github import GithubException
from gitsupport import ENV, Origin, git
from seedrepo import seed_files

from auditor.gitops.pulls import MARKER, sync_pull_requests
from auditor.resources import examples_dir
from auditor.settings.config import Settings, load_settings
from auditor.store.repository import Store, TargetSpec

SEED = examples_dir() / "seed-lab"
_files = seed_files


class Lab:
    def __init__(self, tmp_path: Path, hub: FakeGitHub, base: str, store: Store, extra: str = "") -> None:
        self.tmp, self.hub, self.store = tmp_path, hub, store
        config = tmp_path / "auditor.yaml"
        config.write_text(
            "service: {git_cache_dir: cache}\n"
            f"targets:\n  - name: infra\n    git: {{url: '{hub.bare}', branch: main}}\n"
            "    paths: [training, policies]\n    nodes: [nodes/nodes.yaml]\n"
            f"    github: {{repository: acme/infra, base_url: '{base}', token_env: GH_TOKEN, seconds_between_writes: 0{extra}}}\n"
        )
        self.settings: Settings = load_settings(config)
        store.sync_targets([TargetSpec("infra", "git", str(hub.bare))])

    def sync(self) -> list:
        return sync_pull_requests(
            self.settings.targets[0], self.settings, self.store, {"GH_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"}
        )


@pytest.fixture(params=["sqlite", "postgresql"])
def lab(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Lab]:
    origin = Origin(tmp_path)
    origin.commit(_files())
    hub = FakeGitHub(origin.bare)
    with serve(hub) as base, engine_for(request.param, tmp_path) as engine:
        lab = Lab(tmp_path, hub, base, Store(engine, Clock()))
        lab.origin = origin  # type: ignore[attr-defined]
        yield lab


def test_one_pr_per_workload_and_running_twice_leaves_one(lab: Lab) -> None:
    [first] = lab.sync()
    assert first.action == "opened" and first.number == 1
    [pr] = lab.hub.pulls
    assert pr["head"].startswith("placement-auditor/job-ml-demo-trainer-workers-") and pr["base"] == "main"
    assert pr["labels"] == ["placement-auditor"]
    assert "```mermaid" in pr["body"] and "TCP/9999 denied" in pr["body"] and "zone-a-only" in pr["body"]
    assert "re-audit: the finding is gone" in pr["body"]
    # The branch and the store name the fix; the body's marker only repeats it for humans.
    [row] = lab.store.pull_requests("infra")
    assert pr["head"] == f"placement-auditor/job-ml-demo-trainer-workers-{row.fix_id}"
    assert MARKER.findall(pr["body"]) == [row.fix_id]
    # The branch holds one commit by the bot on top of main, with the fix.
    log = git("log", "--format=%ae %s", f"main..{pr['head']}", cwd=lab.hub.bare)
    assert log.startswith(
        "placement-auditor@users.noreply.github.com placement-auditor: keep Job ml-demo/trainer-workers in zone-a"
    )
    fixed = git("show", f"{pr['head']}:training/workload.yaml", cwd=lab.hub.bare)
    assert "zone: zone-a}" in fixed and "nodeAffinity:" in fixed
    before = len(lab.hub.requests)
    [again] = lab.sync()
    assert again.action == "up-to-date" and len(lab.hub.pulls) == 1
    assert [r for r in lab.hub.requests[before:] if not r.startswith("GET")] == []
    assert [p.state for p in lab.store.pull_requests("infra")] == ["open"]


def test_a_pr_closed_by_a_human_is_not_reopened(lab: Lab) -> None:
    [opened] = lab.sync()
    lab.hub.close(opened.number)
    [first] = lab.sync()
    assert first.action == "skipped" and "closed unmerged by a human" in first.detail
    [second] = lab.sync()
    assert second.action == "skipped" and "a human closed" in second.detail
    assert len(lab.hub.pulls) == 1 and lab.store.pull_requests("infra")[0].closed_by_human


def _workload(**replace: str) -> str:
    text = (SEED / "before" / "workload.yaml").read_text()
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    return text


def _zones_swapped() -> dict[str, str]:
    """The seed with zone-a and zone-b swapped (nodes and the manifests' zone labels): the GPU nodes
    are in zone-b, so the fix is pinning the coordinator to zone-b."""

    def swap(text: str) -> str:
        return text.replace("zone-a", "zone-X").replace("zone-b", "zone-a").replace("zone-X", "zone-b")

    return {
        "nodes/nodes.yaml": swap((SEED / "nodes.yaml").read_text()),
        "training/workload.yaml": swap(_workload()),
    }


def _zones_back() -> dict[str, str | Path]:
    return {
        "nodes/nodes.yaml": SEED / "nodes.yaml",
        "training/workload.yaml": SEED / "before" / "workload.yaml",
    }


# Edits to the fixed file that do not touch what the fix means: another image, another key.
UNRELATED = {
    "image: busybox:1.36\n        env:": "image: busybox:1.37\n        env:",
    "  name: trainer-workers\n  namespace: ml-demo\n": (
        "  name: trainer-workers\n  namespace: ml-demo\n  annotations: {team: vision}\n"
    ),
    "memory: 64Mi}\n---\napiVersion: v1": "memory: 128Mi}\n---\napiVersion: v1",
}


def _writes(lab: Lab, since: int) -> list[str]:
    return [r for r in lab.hub.requests[since:] if not r.startswith("GET")]


def test_a_human_closed_pr_stays_closed_until_the_fix_itself_changes(lab: Lab) -> None:
    [opened] = lab.sync()
    first_branch = lab.hub.pulls[0]["head"]
    lab.hub.close(opened.number)
    lab.origin.commit({"training/workload.yaml": _workload(**UNRELATED)})  # type: ignore[attr-defined]
    before = len(lab.hub.requests)
    [again] = lab.sync()
    assert again.action == "skipped" and again.branch == first_branch and "closed unmerged" in again.detail
    assert len(lab.hub.pulls) == 1 and _writes(lab, before) == []
    [row] = lab.store.pull_requests("infra")
    assert row.closed_by_human and row.number == opened.number
    # The fix itself changes (the GPU nodes moved to zone-b): a new fix, a new branch, a new PR.
    lab.origin.commit(_zones_swapped())  # type: ignore[attr-defined]
    [new] = lab.sync()
    assert new.action == "opened" and new.number == 2 and new.branch != first_branch
    assert lab.hub.pulls[1]["title"].endswith(" in zone-b") and lab.hub.pulls[0]["state"] == "closed"
    assert [r.state for r in lab.store.pull_requests("infra")] == ["closed", "open"]


def test_the_pr_body_is_never_read_back_as_state(lab: Lab) -> None:
    """A human editing the body (dropping the marker, or writing another fix's) changes nothing."""
    [opened] = lab.sync()
    lab.hub.pulls[0]["body"] = "LGTM <!-- placement-auditor fix: 0000000000000000 -->"
    before = len(lab.hub.requests)
    [again] = lab.sync()
    assert again.action == "up-to-date" and again.number == opened.number and _writes(lab, before) == []
    lab.hub.close(opened.number)
    lab.hub.pulls[0]["body"] = ""
    [closed] = lab.sync()
    assert closed.action == "skipped" and len(lab.hub.pulls) == 1


def test_a_changed_fix_replaces_the_open_pr(lab: Lab) -> None:
    [opened] = lab.sync()
    first_branch = lab.hub.pulls[0]["head"]
    lab.origin.commit({"training/workload.yaml": _workload(**UNRELATED)})  # type: ignore[attr-defined]
    [same] = lab.sync()
    assert same.action == "up-to-date" and same.number == opened.number
    lab.origin.commit(_zones_swapped())  # type: ignore[attr-defined]
    [replaced] = lab.sync()
    assert replaced.action == "replaced" and replaced.number == 2 and replaced.detail == "supersedes #1"
    old, new = lab.hub.pulls
    assert old["state"] == "closed" and old["comments"] == [
        "Superseded by #2: the fix for this workload changed."
    ]
    assert new["state"] == "open" and new["head"] != first_branch
    rows = lab.store.pull_requests("infra")
    assert [(r.number, r.state, r.closed_by_human) for r in rows] == [
        (1, "superseded", False),
        (2, "open", False),
    ]
    [again] = lab.sync()
    assert again.action == "up-to-date" and len(lab.hub.pulls) == 2
    # Back to the first fix: the tool closed #1 itself, so that fix was never refused.
    lab.origin.commit(_zones_back())  # type: ignore[attr-defined]
    [back] = lab.sync()
    assert back.action == "replaced" and back.branch == first_branch and back.detail == "supersedes #2"
    assert [p["state"] for p in lab.hub.pulls] == ["closed", "closed", "open"]


def test_a_branch_with_someone_elses_commit_is_never_force_pushed(lab: Lab, tmp_path: Path) -> None:
    # The branch is pushed, then creating the PR fails (a token without pull-request permission).
    lab.hub.faults.append(
        (
            "POST",
            "/repos/acme/infra/pulls",
            403,
            {},
            {
                "message": "Resource not accessible by personal access token",
                "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request",
            },
        )
    )
    with pytest.raises(GithubException):
        lab.sync()
    [branch] = [
        b for b in git("branch", "--format=%(refname:short)", cwd=lab.hub.bare).split() if b != "main"
    ]
    # Meanwhile a human commits to that branch.
    human = tmp_path / "human"
    git("clone", "--quiet", "-b", branch, str(lab.hub.bare), str(human), cwd=tmp_path)
    (human / "NOTES.md").write_text("a reviewer's note\n")
    env = {**ENV, "GIT_AUTHOR_EMAIL": "reviewer@acme.example", "GIT_COMMITTER_EMAIL": "reviewer@acme.example"}
    subprocess.run(["git", "add", "NOTES.md"], cwd=human, env=env, check=True)
    subprocess.run(["git", "commit", "-qm", "note"], cwd=human, env=env, check=True)
    subprocess.run(["git", "push", "-q", "origin", branch], cwd=human, env=env, check=True)
    tip = lab.hub.branch_sha(branch)
    [outcome] = lab.sync()
    assert outcome.action == "skipped" and "reviewer@acme.example" in outcome.detail
    assert lab.hub.branch_sha(branch) == tip and lab.hub.pulls == []  # untouched


HOSTILE_NAME = (
    "evil `x` <img src=x onerror=alert(1)> @org/admins #12 [a](javascript:alert(1)) "
    "<!-- placement-auditor fix: 0123456789abcdef -->"
)
HOSTILE_FILE = "policies/@org/admins/`p` [x](javascript:alert(1)) <b>#12.yaml"


def test_hostile_names_labels_and_paths_are_escaped(tmp_path: Path) -> None:
    origin = Origin(tmp_path)
    workload = _workload(
        **{
            "name: trainer-workers": f"name: '{HOSTILE_NAME}'",
            "role: gpu-worker,": "role: '@org/admins`<b>x</b>',",
        }
    )
    origin.commit(
        {
            "training/workload.yaml": workload,
            HOSTILE_FILE: SEED / "policies.yaml",
            "nodes/nodes.yaml": SEED / "nodes.yaml",
        }
    )
    hub = FakeGitHub(origin.bare)
    with serve(hub) as base, engine_for("sqlite", tmp_path) as engine:
        lab = Lab(tmp_path, hub, base, Store(engine, Clock()))
        [opened] = lab.sync()
        assert opened.action == "opened"
        [pr] = hub.pulls
        [row] = lab.store.pull_requests("infra")
    title, body = pr["title"], pr["body"]
    assert title.startswith("placement-auditor: keep Job ml-demo/evil 'x' <img")
    for text in (title, body):
        assert "@org" not in text and "#12" not in text  # no mention, no issue reference
        assert "@\u200borg/admins" in text and "#\u200b12" in text
    assert "`" not in title
    # The body: the one marker is the tool's; no tag, comment, link or code span from a name or path.
    assert MARKER.findall(body) == [row.fix_id] and body.count("<!--") == 1
    assert "<img" not in body and "<b>" not in body and "&lt;img src=x onerror=alert\\(1\\)&gt;" in body
    assert "](javascript" not in body and "\\]\\(javascript" in body
    prose = re.sub(r"```mermaid\n.*?\n```", "", body, flags=re.S)
    assert re.findall(r"(?<!\\)`", prose) == []
    assert (
        "policies/@\u200borg/admins/\\`p\\` \\[x\\]\\(javascript:alert\\(1\\)\\) &lt;b&gt;#\u200b12.yaml:4"
        in body
    )
    # Inside the mermaid fence: node labels keep no quote, bracket, backtick, tag or mention.
    fence = re.search(r"```mermaid\n(.*?)\n```", body, flags=re.S)
    assert fence is not None
    for label in re.findall(r'\["([^"]*)"\]', fence.group(1)):
        assert not set(label) & set('`<>@#[]"')


def test_rate_limits_and_server_errors_are_retried(lab: Lab) -> None:
    full = "/repos/acme/infra"
    lab.hub.faults += [
        (
            "GET",
            full,
            403,
            {"Retry-After": "1"},
            {
                "message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
                "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api",
            },
        ),
        ("GET", f"{full}/pulls", 502, {}, {"message": "Server Error"}),
        ("POST", f"{full}/pulls", 429, {"Retry-After": "1"}, {"message": "API rate limit exceeded"}),
    ]
    [opened] = lab.sync()
    assert opened.action == "opened" and len(lab.hub.pulls) == 1 and lab.hub.faults == []


def test_an_existing_pr_answer_422_is_found_and_updated(lab: Lab) -> None:
    lab.hub.exists_on_create = 1
    [opened] = lab.sync()
    assert opened.action == "opened" and len(lab.hub.pulls) == 1 and opened.number == 1
    assert MARKER.search(lab.hub.pulls[0]["body"])


def test_limits_on_open_and_new_prs(tmp_path: Path) -> None:
    origin = Origin(tmp_path)
    origin.commit(_files())
    hub = FakeGitHub(origin.bare)
    with serve(hub) as base, engine_for("sqlite", tmp_path) as engine:
        lab = Lab(tmp_path, hub, base, Store(engine, Clock()), ", max_open_prs: 0")
        [outcome] = lab.sync()
        assert outcome.action == "skipped" and "max_open_prs" in outcome.detail and hub.pulls == []


def test_github_app_installation_token(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (tmp_path / "app.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    origin = Origin(tmp_path)
    origin.commit(_files())
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    hub = FakeGitHub(
        origin.bare, app_id=4242, tokens=set(), app_public_key=public.decode(), installation_ids=(7,)
    )
    with serve(hub) as base, engine_for("sqlite", tmp_path) as engine:
        lab = Lab(
            tmp_path,
            hub,
            base,
            Store(engine, Clock()),
            ", app_id: 4242, installation_id: 7, private_key_file: app.pem",
        )
        [opened] = lab.sync()
        assert opened.action == "opened"
        assert any(r.startswith("POST /app/installations/7/access_tokens") for r in hub.requests)
