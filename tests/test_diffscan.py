"""`auditor scan --diff-base REF` on real git repositories: what a change introduces and resolves
against the merge base, the exit code on introduced findings only, the user's repository left
exactly as it was."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from gitrepos import commit, git, make_repo
from jsonschema import Draft202012Validator
from seedrepo import SEED, seed_files

from auditor import cli
from auditor.reports.findings_schema import document_schema

BEFORE = SEED / "before" / "workload.yaml"  # the broken placement: one cross-zone-blocked finding
AFTER = SEED / "after" / "workload.yaml"  # the fixed one


def _diff(capsys: pytest.CaptureFixture[str], repo: Path, ref: str, *more: str) -> tuple[int, dict]:
    code = cli.main(["scan", str(repo), "--diff-base", ref, "--format", "json", *more])
    out = capsys.readouterr().out
    doc = json.loads(out) if out else {}
    if doc:  # the diff report is still the findings/v1 contract, with its diff fields declared
        errors = list(Draft202012Validator(document_schema()).iter_errors(doc))
        assert errors == [], [e.message for e in errors]
    return code, doc


def _state(repo: Path) -> tuple[str, ...]:
    """Everything a read-only command must leave alone."""
    index = repo / ".git" / "index"
    return (
        git(repo, "status", "--porcelain", "--untracked-files=all"),
        git(repo, "for-each-ref"),
        git(repo, "worktree", "list", "--porcelain"),
        git(repo, "stash", "list"),
        hashlib.sha256(index.read_bytes()).hexdigest(),
        git(repo, "rev-parse", "HEAD"),
    )


@pytest.fixture
def fixed_main(tmp_path: Path) -> Path:
    """main holds the fixed placement; the branch `change` is checked out from it."""
    repo = make_repo(tmp_path / "repo", seed_files("after"))
    git(repo, "checkout", "--quiet", "-b", "change")
    return repo


def test_a_change_that_breaks_a_group_is_introduced(
    fixed_main: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    commit(fixed_main, {"training/workload.yaml": BEFORE}, "move the coordinator")
    before = _state(fixed_main)
    code, doc = _diff(capsys, fixed_main, "main")
    assert code == 1
    assert [(f["rule"], f["change"], f["side"]) for f in doc["findings"]] == [
        ("cross-zone-blocked", "introduced", "head")
    ]
    assert doc["findings"][0]["workload"]["file"] == f"{fixed_main}/training/workload.yaml"
    diff = doc["diff"]
    assert diff["merge_base"] == git(fixed_main, "rev-parse", "main").strip()
    assert (diff["introduced"], diff["resolved"], diff["unchanged"]) == (1, 0, 0)
    assert doc["summary"]["findings"] == 1 and doc["summary"]["complete"] is True
    assert _state(fixed_main) == before  # nothing written to the user's repository


def test_a_fix_is_resolved_and_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = make_repo(tmp_path / "repo", seed_files("before"))
    git(repo, "checkout", "--quiet", "-b", "fix")
    commit(repo, {"training/workload.yaml": AFTER}, "fix it")
    code, doc = _diff(capsys, repo, "main")
    assert code == 0
    (resolved,) = doc["findings"]
    assert (resolved["rule"], resolved["change"], resolved["side"]) == (
        "cross-zone-blocked",
        "resolved",
        "base",
    )
    # The base side's file names are the user's, never the temporary directory's.
    assert resolved["workload"]["file"] == f"{repo}/training/workload.yaml"
    assert resolved["policies"][0]["file"].startswith(f"{repo}/policies/")
    assert doc["diff"]["resolved"] == 1 and doc["summary"]["resolved"] == 1


def test_a_finding_on_both_sides_is_unchanged_even_when_its_file_moves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Identity is the fingerprint (rule, target, workload identity, edge), not the file: an
    existing finding does not fail the change that merely moves or touches its manifest."""
    repo = make_repo(tmp_path / "repo", seed_files("before"))
    git(repo, "checkout", "--quiet", "-b", "move")
    git(repo, "mv", "training", "jobs")
    commit(repo, {"README.md": "moved\n"}, "move")
    code, doc = _diff(capsys, repo, "main")
    assert code == 0 and doc["findings"] == []
    assert doc["diff"]["unchanged"] == 1
    # The same tree scanned plainly still has the finding (so 0 above is the diff, not a miss).
    assert cli.main(["scan", str(repo), "--format", "json"]) == 1
    capsys.readouterr()


def test_the_working_tree_is_audited_not_head(fixed_main: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (fixed_main / "training" / "workload.yaml").write_text(BEFORE.read_text())  # not committed
    code, doc = _diff(capsys, fixed_main, "main")
    assert code == 1 and doc["diff"]["introduced"] == 1
    assert doc["diff"]["head"] == git(fixed_main, "rev-parse", "HEAD").strip()


def test_the_merge_base_not_the_tip_of_ref(fixed_main: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """main moves on after the branch point (it breaks the placement itself): the change did not
    resolve that, and does not introduce it either."""
    branch_point = git(fixed_main, "rev-parse", "HEAD").strip()
    commit(fixed_main, {"docs.md": "unrelated\n"}, "a change on the branch")
    git(fixed_main, "checkout", "--quiet", "main")
    commit(fixed_main, {"training/workload.yaml": BEFORE}, "main breaks it")
    git(fixed_main, "checkout", "--quiet", "change")
    code, doc = _diff(capsys, fixed_main, "main")
    assert code == 0 and doc["findings"] == []
    assert doc["diff"]["merge_base"] == branch_point


def test_fail_on_applies_to_introduced_findings(fixed_main: Path, capsys: pytest.CaptureFixture[str]) -> None:
    commit(fixed_main, {"training/workload.yaml": BEFORE}, "break")
    assert _diff(capsys, fixed_main, "main", "--fail-on", "none")[0] == 0
    assert cli.main(["scan", str(fixed_main), "--diff-base", "main", "--format", "markdown"]) == 1
    text = capsys.readouterr().out
    assert "**1 introduced**" in text and "Introduced by this change" in text and "cross-zone-blocked" in text


def test_a_path_the_change_adds_has_nothing_at_the_base(
    fixed_main: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    git(fixed_main, "rm", "--quiet", "training/workload.yaml")
    commit(fixed_main, {"team-b/workload.yaml": BEFORE}, "a new team directory")
    code = cli.main(
        [
            "scan",
            str(fixed_main / "team-b"),
            str(fixed_main / "policies"),
            "--nodes",
            str(fixed_main / "nodes" / "nodes.yaml"),
            "--diff-base",
            "main",
            "--format",
            "json",
        ]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 1
    assert [(f["rule"], f["change"]) for f in doc["findings"]] == [("cross-zone-blocked", "introduced")]
    assert doc["summary"]["complete"] is True  # a path absent at the base is not "not audited"


def test_bad_refs_and_non_repositories_are_usage_errors(
    fixed_main: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["scan", str(fixed_main), "--diff-base", "no-such-branch"]) == 2
    assert "no merge base of 'no-such-branch' and HEAD" in capsys.readouterr().err
    assert cli.main(["scan", str(fixed_main), "--diff-base=--upload-pack=evil"]) == 2
    assert "not a git revision" in capsys.readouterr().err
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "x.yaml").write_text(BEFORE.read_text())
    assert cli.main(["scan", str(plain), "--diff-base", "main"]) == 2
    assert "--diff-base" in capsys.readouterr().err
