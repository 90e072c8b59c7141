"""Fix pull requests through PyGithub against a local GitHub API server, with a real bare
repository as `origin`: one PR per workload, idempotent, never reopened, never force-pushed over
a human, rate limits honoured."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from dbsupport import Clock, engine_for
from fakegithub import TOKEN, FakeGitHub, serve
from gitsupport import ENV, Origin, git
from seedrepo import seed_files

from auditor.config import Settings, load_settings
from auditor.gitops.pulls import MARKER, sync_pull_requests
from auditor.resources import examples_dir
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


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    origin = Origin(tmp_path)
    origin.commit(_files())
    hub = FakeGitHub(origin.bare)
    with serve(hub) as base, engine_for("sqlite", tmp_path) as engine:
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
    assert "re-audit: the finding is gone" in pr["body"] and MARKER.search(pr["body"])
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
    assert [p["state"] for p in lab.store.pull_requests("infra")] == ["open"]


def test_a_pr_closed_by_a_human_is_not_reopened(lab: Lab) -> None:
    [opened] = lab.sync()
    lab.hub.close(opened.number)
    [first] = lab.sync()
    assert first.action == "skipped" and "closed unmerged by a human" in first.detail
    [second] = lab.sync()
    assert second.action == "skipped" and "a human closed" in second.detail
    assert len(lab.hub.pulls) == 1 and lab.store.pull_requests("infra")[0]["closed_by_human"]


def test_a_branch_with_someone_elses_commit_is_never_force_pushed(lab: Lab, tmp_path: Path) -> None:
    lab.sync()
    branch = lab.hub.pulls[0]["head"]
    human = tmp_path / "human"
    git("clone", "--quiet", "-b", branch, str(lab.hub.bare), str(human), cwd=tmp_path)
    (human / "NOTES.md").write_text("a reviewer's note\n")
    env = {**ENV, "GIT_AUTHOR_EMAIL": "reviewer@acme.example", "GIT_COMMITTER_EMAIL": "reviewer@acme.example"}
    subprocess.run(["git", "add", "NOTES.md"], cwd=human, env=env, check=True)
    subprocess.run(["git", "commit", "-qm", "note"], cwd=human, env=env, check=True)
    subprocess.run(["git", "push", "-q", "origin", branch], cwd=human, env=env, check=True)
    tip = lab.hub.branch_sha(branch)
    # main moves so that the fix would change (the coordinator asks for more memory).
    text = (
        (SEED / "before" / "workload.yaml")
        .read_text()
        .replace("memory: 64Mi}\n---\napiVersion: v1", "memory: 128Mi}\n---\napiVersion: v1", 1)
    )
    lab.origin.commit({"training/workload.yaml": text})  # type: ignore[attr-defined]
    [outcome] = lab.sync()
    assert outcome.action == "skipped" and "reviewer@acme.example" in outcome.detail
    assert lab.hub.branch_sha(branch) == tip  # untouched


def test_the_pr_is_updated_when_the_fix_changes(lab: Lab) -> None:
    [opened] = lab.sync()
    old_sha = lab.hub.branch_sha(lab.hub.pulls[0]["head"])
    text = (
        (SEED / "before" / "workload.yaml")
        .read_text()
        .replace("memory: 64Mi}\n---\napiVersion: v1", "memory: 128Mi}\n---\napiVersion: v1", 1)
    )
    lab.origin.commit({"training/workload.yaml": text})  # type: ignore[attr-defined]
    [updated] = lab.sync()
    assert updated.action == "updated" and updated.number == opened.number and len(lab.hub.pulls) == 1
    assert lab.hub.branch_sha(lab.hub.pulls[0]["head"]) != old_sha


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
    hub = FakeGitHub(origin.bare, app_id=4242, tokens=set())
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
