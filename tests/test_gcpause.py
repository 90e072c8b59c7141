"""The garbage collector paused for an audit: resumed after it, except in a one-shot process."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from auditor import cli, gcpause
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


def test_a_one_shot_scan_leaves_the_collector_off_and_keeps_what_it_built(
    capsys: pytest.CaptureFixture[str],
) -> None:
    gc.enable()
    try:
        main(["scan", "--example", "seed-lab/before", "--format", "json"], one_shot=True)
        capsys.readouterr()
        assert not gc.isenabled()
        assert cli._KEPT, "the inventory and result are left for the process exit"
    finally:
        cli._KEPT.clear()
    main(["scan", "--example", "seed-lab/before", "--format", "json"])
    capsys.readouterr()
    assert not cli._KEPT, "an embedded scan keeps nothing"


def test_the_program_exits_without_teardown_and_loses_no_output() -> None:
    code = (
        "import sys\n"
        "from auditor import cli\n"
        "sys.argv = ['auditor', 'scan', '--example', 'seed-lab/before', '--format', 'json']\n"
        "try:\n"
        "    cli.entry()\n"
        "finally:\n"
        "    print('teardown ran', file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1, proc.stderr  # 1: findings at or above --fail-on
    assert "teardown ran" not in proc.stderr  # left by os._exit, after flushing
    assert json.loads(proc.stdout)["summary"]["findings"] > 0
