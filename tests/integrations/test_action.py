"""The composite GitHub Action (action.yml). No GitHub runner is here, so the test checks its
structure and runs its own shell steps with bash the way the runner does: the step's `env:` with
`${{ inputs.* }}` and `${{ github.* }}` filled in, GITHUB_OUTPUT and GITHUB_STEP_SUMMARY files,
in a real git checkout (with an `origin` for the pull-request case)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from gitrepos import ENV, commit, git, make_repo
from schemas import sarif_problems
from seedrepo import seed_files

ROOT = Path(__file__).resolve().parents[2]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def _step(step_id_or_name: str) -> dict:
    return next(s for s in ACTION["runs"]["steps"] if step_id_or_name in (s.get("id"), s.get("name")))


def test_structure_and_no_expression_in_scripts() -> None:
    assert ACTION["runs"]["using"] == "composite"
    uses = [s["uses"] for s in ACTION["runs"]["steps"] if "uses" in s]
    assert uses == ["actions/setup-python@v5", "github/codeql-action/upload-sarif@v3"]
    for step in ACTION["runs"]["steps"]:
        if "run" in step:
            assert step["shell"] == "bash"
            # Inputs are data: spliced into a script, `paths: "$(curl …)"` would run.
            assert "${{" not in step["run"], step.get("name")
        for value in [
            *(step.get("env") or {}).values(),
            *(step.get("with") or {}).values(),
            step.get("if", ""),
        ]:
            for expr in EXPRESSION.findall(str(value)):
                for name in re.findall(r"inputs\.([\w-]+)", expr):
                    assert name in ACTION["inputs"], name
    for output in ACTION["outputs"].values():
        assert output["value"].startswith("${{ steps.scan.outputs.")


def _run_step(
    step: dict, cwd: Path, tmp: Path, inputs: dict[str, str], github: dict[str, str]
) -> tuple[int, dict, str]:
    values = {k: str(v.get("default", "")) for k, v in ACTION["inputs"].items()} | inputs

    def fill(text: str) -> str:
        def one(m: re.Match[str]) -> str:
            scope, _, name = m.group(1).partition(".")
            assert scope in ("inputs", "github"), m.group(0)
            return values[name] if scope == "inputs" else github.get(name, "")

        return EXPRESSION.sub(one, text)

    output, summary = tmp / "github_output", tmp / "step_summary"
    output.write_text("")
    env = {k: fill(str(v)) for k, v in (step.get("env") or {}).items()}
    env |= {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "GITHUB_OUTPUT": str(output),
        "GITHUB_STEP_SUMMARY": str(summary),
        "HOME": str(tmp),
        **{k: ENV[k] for k in ENV if k.startswith("GIT_")},
    }
    done = subprocess.run(
        ["bash", "-e", "-c", step["run"]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
    return done.returncode, outputs, summary.read_text() if summary.exists() else ""


def test_push_a_full_scan_with_sarif_and_summary(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", seed_files("before"))
    inputs = {"paths": "training\npolicies", "nodes": "nodes/nodes.yaml"}
    code, outputs, summary = _run_step(_step("scan"), repo, tmp_path, inputs, {"base_ref": ""})
    assert code == 0 and outputs["exit-code"] == "1"  # the step records the verdict; the last step acts
    sarif = json.loads((repo / outputs["sarif-file"]).read_text())
    assert sarif_problems(sarif) == []
    (result,) = sarif["runs"][0]["results"]
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "training/workload.yaml"
    assert summary.startswith("## Placement Auditor") and "cross-zone-blocked" in summary
    verdict = _step("Verdict")
    for exit_code, expected in (("0", 0), ("1", 1), ("3", 3)):
        done = subprocess.run(
            ["bash", "-e", "-c", verdict["run"]],
            env={"AUDITOR_EXIT": exit_code, "PATH": os.environ["PATH"]},
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == expected


def test_pull_request_counts_only_what_the_change_introduces(tmp_path: Path) -> None:
    origin = make_repo(tmp_path / "origin", seed_files("before"))  # main is already broken
    clone = tmp_path / "checkout"
    subprocess.run(["git", "clone", "--quiet", str(origin), str(clone)], env=ENV, check=True)
    git(clone, "checkout", "--quiet", "-b", "feature")
    commit(clone, {"README.md": "docs only\n"}, "an unrelated change")
    inputs = {"paths": ".", "sarif-file": "out/a.sarif"}
    (clone / "out").mkdir()
    code, outputs, summary = _run_step(_step("scan"), clone, tmp_path, inputs, {"base_ref": "main"})
    assert code == 0 and outputs["exit-code"] == "0", summary
    sarif = json.loads((clone / "out/a.sarif").read_text())
    assert sarif_problems(sarif) == [] and sarif["runs"][0]["results"] == []
    assert "**0 introduced**" in summary
    # The same step, told to scan everything, sees the old finding.
    code, outputs, _ = _run_step(
        _step("scan"), clone, tmp_path, {**inputs, "diff-base": "none"}, {"base_ref": "main"}
    )
    assert outputs["exit-code"] == "1"


@pytest.mark.parametrize("hostile", ["$(touch pwned)", "`touch pwned`; touch pwned"])
def test_inputs_are_never_executed(tmp_path: Path, hostile: str) -> None:
    repo = make_repo(tmp_path / "repo", seed_files("before"))
    _, outputs, _ = _run_step(_step("scan"), repo, tmp_path, {"paths": hostile, "fail-on": "high"}, {})
    assert not (repo / "pwned").exists() and not (tmp_path / "pwned").exists()
    assert outputs["exit-code"] in ("2", "3")  # no such path: the audit fails, nothing ran
