"""The pre-commit hooks (.pre-commit-hooks.yaml), run by the real `pre-commit` on a temporary git
repository whose .pre-commit-config.yaml uses them the way users do — `repo: <URL>` and `rev:
<tag>` — with the URL a local clone (file://) of a commit of this project, since no GitHub is
reachable here. pre-commit clones it, builds its `language: python` environment (pip installs this
project into a fresh virtualenv) and runs the hook.

To keep the test short, the environment pip builds gets this project only (PIP_NO_DEPS) and finds
its dependencies on PYTHONPATH (this interpreter's site-packages, the same Python); the `auditor`
it runs is the copy pre-commit installed (an editable install is not importable from PYTHONPATH).
AUDITOR_TEST_PRECOMMIT_FULL=1 lets pip install every dependency from the index instead."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from gitrepos import ENV, commit, git, make_repo
from seedrepo import SEED, seed_files

ROOT = Path(__file__).resolve().parents[2]
HOOKS = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())


@pytest.fixture(scope="module")
def project_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A commit of this project (the files git tracks, as they are in the work tree), tagged."""
    tracked = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True
    ).stdout.decode()
    copy = tmp_path_factory.mktemp("project") / "placement-auditor"
    for name in filter(None, tracked.split("\0")):
        src = ROOT / name
        if src.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, copy / name)
    make_repo(copy, {})
    git(copy, "tag", "v0.1.0")
    return copy.as_uri()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pre-commit's cache, shared by the tests: the hook's environment is built once."""
    return tmp_path_factory.mktemp("pre-commit-home")


def _env(home: Path) -> dict[str, str]:
    env = {**ENV, "PRE_COMMIT_HOME": str(home), "PRE_COMMIT_COLOR": "never"}
    env.pop("AUDITOR_CONFIG", None)
    if not os.environ.get("AUDITOR_TEST_PRECOMMIT_FULL"):
        env["PIP_NO_DEPS"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(site.getsitepackages())
        # The hook's behaviour, not the build: its install skips mypyc's two minutes (setup.py;
        # tests/test_native.py compares the compiled build with the sources).
        env["AUDITOR_PURE_PYTHON_BUILD"] = "1"
    return env


def _pre_commit(repo: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", *args],
        cwd=repo,
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _config(url: str, hook: str, args: list[str]) -> str:
    return yaml.safe_dump({"repos": [{"repo": url, "rev": "v0.1.0", "hooks": [{"id": hook, "args": args}]}]})


def test_the_hooks_are_declared_for_the_whole_tree() -> None:
    assert [h["id"] for h in HOOKS] == ["placement-auditor", "placement-auditor-diff"]
    for hook in HOOKS:
        assert hook["language"] == "python" and hook["pass_filenames"] is False
        assert hook["entry"].startswith("auditor scan")


def test_the_hook_fails_on_a_blocked_group_and_passes_once_fixed(
    project_url: str, home: Path, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "infra", seed_files("before"))
    args = ["training", "policies", "--nodes", "nodes/nodes.yaml"]
    commit(repo, {".pre-commit-config.yaml": _config(project_url, "placement-auditor", args)}, "hooks")
    failed = _pre_commit(repo, home, "run", "placement-auditor", "--all-files")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "cross-zone-blocked" in failed.stdout and "Failed" in failed.stdout
    # pre-commit really built an environment with this project in it.
    assert list(home.glob("repo*/py_env-*/bin/auditor"))
    commit(repo, {"training/workload.yaml": SEED / "after" / "workload.yaml"}, "fix")
    passed = _pre_commit(repo, home, "run", "placement-auditor", "--all-files")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "Passed" in passed.stdout


def test_the_diff_hook_fails_only_on_what_the_commit_introduces(
    project_url: str, home: Path, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "infra", seed_files("before"))  # already broken on HEAD
    commit(repo, {".pre-commit-config.yaml": _config(project_url, "placement-auditor-diff", ["."])}, "hooks")
    (repo / "notes.yaml").write_text("kind: ConfigMap\napiVersion: v1\nmetadata: {name: notes}\n")
    git(repo, "add", "notes.yaml")
    unrelated = _pre_commit(repo, home, "run", "placement-auditor-diff")
    assert unrelated.returncode == 0, unrelated.stdout + unrelated.stderr  # the old finding is not new
    git(repo, "commit", "--quiet", "-m", "notes")
    commit(repo, {"training/workload.yaml": SEED / "after" / "workload.yaml"}, "fix")
    (repo / "training" / "workload.yaml").write_text((SEED / "before" / "workload.yaml").read_text())
    git(repo, "add", "training/workload.yaml")
    broken = _pre_commit(repo, home, "run", "placement-auditor-diff")
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "cross-zone-blocked" in broken.stdout
