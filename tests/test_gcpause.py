"""The garbage collector paused for an audit: resumed after it, except in a one-shot process."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator

import pytest

from auditor import gcpause
from auditor.cli import main


@pytest.fixture(autouse=True)
def _collector_restored() -> Iterator[None]:
    was = gc.isenabled()
    yield
    if was:
        gc.enable()


def test_paused_resumes_by_default_and_after_an_error() -> None:
    gc.enable()
    with gcpause.paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), gcpause.paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_paused_without_resume_leaves_the_collector_off() -> None:
    gc.enable()
    with gcpause.paused(resume=False):
        pass
    assert not gc.isenabled()


def test_an_embedded_scan_leaves_the_collector_on(capsys: pytest.CaptureFixture[str]) -> None:
    gc.enable()
    main(["scan", "--example", "seed-lab/before", "--format", "json"])
    capsys.readouterr()
    assert gc.isenabled()


def test_the_program_is_one_shot() -> None:
    code = (
        "import gc, sys\n"
        "from auditor import cli\n"
        "sys.argv = ['auditor', 'scan', '--example', 'seed-lab/before', '--format', 'json']\n"
        "try:\n"
        "    cli.entry()\n"
        "except SystemExit as exc:\n"
        "    print('exit', exc.code, 'gc', gc.isenabled(), file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120
    )
    assert "exit 1 gc False" in proc.stderr, proc.stderr  # 1: findings at or above --fail-on
