"""The CLI where people run it: `scan -` in a pipe, `version`, shell completion, help with
examples and exit codes, config discovery (AUDITOR_CONFIG, .placement-auditor.yaml), the service
commands that need a config, `explain --nodes`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gitrepos import make_repo
from seedrepo import SEED, seed_files

from auditor import __version__, cli

# A config under which nothing blocks the seed lab (Cilium enforcing nothing): no critical finding.
NO_ENFORCEMENT = "network:\n  cilium:\n    enforcement_mode: never\n"


def _auditor(
    args: list[str], cwd: Path, stdin: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("AUDITOR_CONFIG", "AUDITOR_DATABASE_URL")}
    return subprocess.run(
        [sys.executable, "-m", "auditor", *args],
        input=stdin if stdin is not None else "",
        cwd=cwd,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _stream(*files: Path) -> str:
    """What `helm template` or `kustomize build` prints: documents joined by `---`."""
    return "".join(f"---\n# Source: chart/templates/{f.name}\n{f.read_text()}" for f in files)


def test_scan_reads_a_multi_document_stream_from_stdin(tmp_path: Path) -> None:
    stream = _stream(SEED / "before/workload.yaml", SEED / "policies.yaml", SEED / "nodes.yaml")
    done = _auditor(["scan", "-", "--format", "json"], tmp_path, stream)
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    (finding,) = doc["findings"]
    assert finding["workload"]["file"] == "<stdin>" and finding["workload"]["line"] > 3
    assert {p["file"] for p in finding["policies"]} == {"<stdin>"}
    # Lines count from the top of the stream: the workload's line is where its document starts.
    lines = stream.splitlines()
    assert lines[finding["workload"]["line"] - 1].startswith(("apiVersion", "kind", "metadata"))


def test_stdin_mixes_with_paths_and_reports_its_errors(tmp_path: Path) -> None:
    done = _auditor(
        ["scan", "-", str(SEED / "policies.yaml"), "--nodes", str(SEED / "nodes.yaml")],
        tmp_path,
        (SEED / "before/workload.yaml").read_text(),
    )
    assert done.returncode == 1 and "cross-zone-blocked" in done.stdout
    broken = _auditor(["scan", "-", "--format", "json"], tmp_path, "kind: [unclosed\n")
    assert broken.returncode == 3 and "not audited: <stdin>" in broken.stderr
    empty = _auditor(["scan", "-"], tmp_path, "")
    assert empty.returncode == 3 and "no Kubernetes objects on stdin" in empty.stdout + empty.stderr
    twice = _auditor(["scan", "-", "-"], tmp_path, "")
    assert twice.returncode == 2 and "may be given once" in twice.stderr


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["version"]) == 0
    assert capsys.readouterr().out.startswith(f"placement-auditor {__version__} (Python ")
    assert cli.main(["version", "--format", "json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["version"] == __version__ and info["schemas"]["findings"] == "placement-auditor/findings/v1"


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_script_and_real_completions(shell: str, tmp_path: Path) -> None:
    script = _auditor(["completion", shell], tmp_path)
    assert script.returncode == 0 and "auditor" in script.stdout and "_ARGCOMPLETE" in script.stdout
    # What the script does on <TAB>: run auditor with the argcomplete protocol variables.
    out = tmp_path / "completions"
    line = "auditor scan --fo"
    done = _auditor(
        [],
        tmp_path,
        _ARGCOMPLETE="1",
        _ARGCOMPLETE_SHELL=shell,
        _ARGCOMPLETE_IFS="\n",
        COMP_LINE=line,
        COMP_POINT=str(len(line)),
        _ARGCOMPLETE_STDOUT_FILENAME=str(out),
    )
    assert done.returncode == 0, done.stderr
    assert "--format" in out.read_text()
    line = "auditor sc"
    _auditor(
        [],
        tmp_path,
        _ARGCOMPLETE="1",
        _ARGCOMPLETE_IFS="\n",
        COMP_LINE=line,
        COMP_POINT=str(len(line)),
        _ARGCOMPLETE_STDOUT_FILENAME=str(out),
    )
    assert out.read_text().split() == ["scan"]


def test_every_command_help_has_the_exit_codes_and_the_main_ones_examples(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    for name, sub in commands.items():
        text = sub.format_help()
        assert "exit codes:" in text and "3    the audit failed or was partial" in text, name
    for name in ("scan", "explain", "cluster", "report", "run", "serve"):
        assert "examples:" in commands[name].format_help(), name
    assert "helm template my-chart | auditor scan -" in parser.format_help()


def test_config_is_discovered_from_the_scanned_repository_upward(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "org" / "infra", seed_files("before"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert (
        _auditor(["scan", str(repo), "--fail-on", "critical"], elsewhere).returncode == 1
    )  # no config: the finding
    (tmp_path / "org" / ".placement-auditor.yaml").write_text(NO_ENFORCEMENT)  # above the repository
    found = _auditor(["scan", str(repo), "--format", "json", "--fail-on", "critical"], elsewhere)
    doc = json.loads(found.stdout)
    assert found.returncode == 0 and "policy enforcement never" in doc["network"]
    assert "cross-zone-blocked" not in {f["rule"] for f in doc["findings"]}  # nothing is enforced
    # AUDITOR_CONFIG wins over the file; a missing one is an error, not a silent default.
    (tmp_path / "strict.yaml").write_text("network: {cni: cilium}\n")
    assert (
        _auditor(
            ["scan", str(repo), "--fail-on", "critical"],
            elsewhere,
            AUDITOR_CONFIG=str(tmp_path / "strict.yaml"),
        ).returncode
        == 1
    )
    missing = _auditor(
        ["scan", str(repo), "--fail-on", "critical"], elsewhere, AUDITOR_CONFIG=str(tmp_path / "nope.yaml")
    )
    assert missing.returncode == 2 and "AUDITOR_CONFIG" in missing.stderr and "nope.yaml" in missing.stderr
    # A bad discovered file is named in the error.
    (repo / ".placement-auditor.yaml").write_text("networks: {}\n")
    bad = _auditor(["scan", str(repo), "--fail-on", "critical"], elsewhere)
    assert bad.returncode == 2 and ".placement-auditor.yaml" in bad.stderr and "networks" in bad.stderr
    # --config still wins over everything.
    assert (
        _auditor(
            ["scan", str(repo), "--fail-on", "critical", "--config", str(tmp_path / "strict.yaml")], elsewhere
        ).returncode
        == 1
    )


def test_service_commands_say_they_need_a_config(tmp_path: Path) -> None:
    for args in (
        ["run", "--target", "seed-lab"],
        ["report", "--format", "json"],
        ["digest", "--dry-run"],
        ["pr", "--target", "x"],
    ):
        done = _auditor(args, tmp_path)
        assert done.returncode == 2, args
        assert "needs a config" in done.stderr and "AUDITOR_CONFIG" in done.stderr, args
    findings = _auditor(["findings", "--format", "json"], tmp_path)  # the store alone: defaults do
    assert findings.returncode == 0 and json.loads(findings.stdout)["items"] == []
    service = (
        (Path(cli.examples_dir()) / "service.yaml")
        .read_text()
        .replace("directory: seed-lab", f"directory: '{SEED}'")
    )
    (tmp_path / ".placement-auditor.yaml").write_text(service)
    run = _auditor(["run", "--target", "seed-lab"], tmp_path)
    assert run.returncode == 1 and "note: using the config" in run.stderr and "1 finding" in run.stdout


def test_serve_without_config_says_it_serves_the_demo(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AUDITOR_CONFIG", raising=False)
    args = cli.build_parser().parse_args(["serve"])
    settings = cli._service_settings(args, "demo")
    assert [t.name for t in settings.targets] == ["seed-lab"]
    assert "serving the bundled DEMO config" in capsys.readouterr().err


def test_explain_takes_nodes_apart(capsys: pytest.CaptureFixture[str]) -> None:
    question = [
        "--from",
        "ml-demo/trainer-workers",
        "--to",
        "ml-demo/trainer-coordinator",
        "--port",
        "9999",
        "--format",
        "json",
    ]
    code = cli.main(
        [
            "explain",
            str(SEED / "before"),
            str(SEED / "policies.yaml"),
            "--nodes",
            str(SEED / "nodes.yaml"),
            *question,
        ]
    )
    with_nodes = json.loads(capsys.readouterr().out)
    assert code == 1 and with_nodes["verdict"] == "deny"
    assert (with_nodes["from"]["zone"], with_nodes["to"]["zone"]) == ("zone-a", "zone-b")
    code = cli.main(["explain", str(SEED / "before"), str(SEED / "policies.yaml"), *question])
    without = json.loads(capsys.readouterr().out)
    assert without["from"].get("zone") != "zone-a"  # without nodes the zones are unknown
