"""The one error boundary (auditor.cli.main): every exception becomes its exit code and one line
on stderr; a traceback only with --debug; a closed stdout pipe exits quietly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from auditor import cli
from auditor.audit import scan as scanning
from auditor.errors import (
    EXIT_FAILED,
    EXIT_USAGE,
    AuditFailed,
    ConfigError,
    PermanentRemoteError,
    TemporaryRemoteError,
    UsageError,
    for_http_status,
)
from auditor.gitops.git import GitError
from auditor.resources import examples_dir

ROOT = Path(__file__).resolve().parents[1]
SEED = examples_dir() / "seed-lab"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("AUDITOR_DEBUG", None)
    return env


def _many_findings(tmp: Path, copies: int = 40) -> Path:
    """The seed lab's broken workload and its policies in `copies` namespaces: output far larger
    than a pipe's buffer."""
    workload = (SEED / "before" / "workload.yaml").read_text(encoding="utf-8")
    policies = (SEED / "policies.yaml").read_text(encoding="utf-8")
    for i in range(copies):
        (tmp / f"w{i}.yaml").write_text(workload.replace("ml-demo", f"ml-demo-{i}"), encoding="utf-8")
        (tmp / f"p{i}.yaml").write_text(policies.replace("ml-demo", f"ml-demo-{i}"), encoding="utf-8")
    return tmp


def _into_head(args: list[str], head_args: tuple[str, ...] = ("-1",)) -> tuple[int, str]:
    """`python -m auditor ARGS | head -1`, with real processes and a real pipe."""
    producer = subprocess.Popen(
        [sys.executable, "-m", "auditor", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        cwd=ROOT,
    )
    assert producer.stdout is not None and producer.stderr is not None
    head = subprocess.run(
        ["head", *head_args], stdin=producer.stdout, capture_output=True, timeout=300, check=True
    )
    producer.stdout.close()
    stderr = producer.stderr.read().decode()
    producer.stderr.close()
    code = producer.wait(timeout=300)
    assert head.stdout or head_args == ("-c", "0"), "head saw no output"
    return code, stderr


def test_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    many = _many_findings(tmp_path)
    # `head -c 0` closes the pipe before fix has computed anything: its first write breaks the
    # pipe whatever the machine's load (with `head -1`, 29 KB of diff could all fit in the pipe's
    # buffer before head exits, and fix would end normally).
    code, stderr = _into_head(["fix", "--example", "seed-lab", str(many)], ("-c", "0"))
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr
    assert code == cli.EXIT_BROKEN_PIPE == 141
    # A report written in one piece either fits or breaks the pipe: never a traceback.
    code, stderr = _into_head(["scan", "--example", "seed-lab", "--format", "json", str(many)])
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert code in (cli.EXIT_FINDINGS, cli.EXIT_BROKEN_PIPE)


def _explode(*_args: object, **_kwargs: object) -> None:
    raise RuntimeError("boom\nsecond line")


def test_an_unexpected_error_exits_3_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(scanning, "finish", _explode)  # every scan, cached or not, ends there
    assert cli.main(["scan", "--example", "seed-lab/before"]) == EXIT_FAILED
    err = capsys.readouterr().err
    assert (
        err == "error: internal error: RuntimeError: boom second line (run with --debug for the traceback)\n"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--debug", "scan", "--example", "seed-lab/before"],
        ["scan", "--example", "seed-lab/before", "--debug"],
    ],
)
def test_debug_prints_the_traceback(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(scanning, "finish", _explode)
    assert cli.main(argv) == EXIT_FAILED
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert "_explode" in err
    assert err.splitlines()[-1] == "error: internal error: RuntimeError: boom second line"


def test_an_unexpected_error_in_a_real_process(tmp_path: Path) -> None:
    # An unreadable manifest is an error entry, not an exception; an unexpected exception in a
    # real process: a config the parser never expected (a sitecustomize injects the bug).
    (tmp_path / "sitecustomize.py").write_text(
        "import auditor.audit.scan\n"
        "def finish(*a, **k):\n    raise KeyError('injected')\n"
        "auditor.audit.scan.finish = finish\n",
        encoding="utf-8",
    )
    env = _env()
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env["PYTHONPATH"]
    done = subprocess.run(
        [sys.executable, "-m", "auditor", "scan", "--example", "seed-lab/before"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert done.returncode == EXIT_FAILED, done.stderr
    assert done.stderr == (
        "error: internal error: KeyError: 'injected' (run with --debug for the traceback)\n"
    )


def test_a_config_error_exits_2_with_one_line(tmp_path: Path) -> None:
    # urllib rejects this URL with a bare ValueError: before, a traceback and exit 1 ("findings").
    config = tmp_path / "auditor.yaml"
    config.write_text(
        "targets:\n  - name: infra\n    git:\n      url: 'http://[broken/infra.git'\n", encoding="utf-8"
    )
    done = subprocess.run(
        [sys.executable, "-m", "auditor", "scan", "--example", "seed-lab/before", "--config", str(config)],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert done.returncode == EXIT_USAGE, done.stderr
    assert done.stderr == f"error: {config}:4: targets[0].git.url: not a URL: Invalid IPv6 URL\n"


def test_a_failed_store_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `auditor report` on a database it cannot open: before, a SQLAlchemy traceback and exit 1.
    config = tmp_path / "auditor.yaml"
    config.write_text(f"database:\n  url: sqlite:///{tmp_path}/missing/dir/a.db\n", encoding="utf-8")
    assert cli.main(["report", "--config", str(config), "--format", "json"]) == EXIT_FAILED
    err = capsys.readouterr().err
    assert err.startswith("error: the findings store is not available: OperationalError: ")
    assert err.count("\n") == 1


def test_the_error_types_carry_their_exit_codes() -> None:
    assert ConfigError("f", 3, "k", "bad").exit_code == UsageError("x").exit_code == EXIT_USAGE
    assert isinstance(ConfigError("f", 0, "k", "bad"), ValueError)  # as auditor.settings.config's used to be
    assert AuditFailed("x").exit_code == EXIT_FAILED
    temporary = for_http_status("GitHub: 502", 502)
    assert isinstance(temporary, TemporaryRemoteError) and temporary.retry_after == 60.0
    assert for_http_status("GitHub: 429", 429, 12.0).retry_after == 12.0
    permanent = for_http_status("GitHub: 404", 404)
    assert isinstance(permanent, PermanentRemoteError) and not permanent.temporary
    assert permanent.exit_code == EXIT_FAILED
    assert GitError("x").exit_code == EXIT_FAILED and isinstance(GitError("x"), RuntimeError)
