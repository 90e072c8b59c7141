"""Nothing depends on the hour a test runs: the time-sensitive suites again, with the wall clock
faked (libfaketime, Debian `faketime`: every process of the run, subprocesses and threads included)
and the tests' injected clocks (`dbsupport.Clock`) pinned to the same instant.

- 06:30 UTC, inside the bundled `0 6 * * *` schedule's catch-up grace (a CI run at that hour once
  collided with the API tests' own runs);
- 23:59:59 UTC on the last day of a month and year, with the process's local time zone 14 hours
  ahead (Pacific/Kiritimati), where the local date is already the next day, month and year: anything
  that reads a local date instead of the injected clock's UTC date shows.

They run on SQLite only (the PostgreSQL twins run in the main suite; the hour does not depend on the
backend). `.ci/run` installs faketime; without it these tests fail in CI and skip elsewhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SUITES = [
    "tests/service",
    "tests/store",
    "tests/gitops",
    "tests/reports",
    "tests/cluster/test_service_target.py",
]


@pytest.mark.parametrize(
    ("instant", "tz"),
    [("2026-12-03 06:30:00", "UTC"), ("2026-12-31 23:59:59", "Pacific/Kiritimati")],
    ids=["0630-utc", "month-end-utc+14"],
)
def test_time_sensitive_suites_pass_at(instant: str, tz: str, tmp_path: Path) -> None:
    faketime = shutil.which("faketime")
    if faketime is None:
        if os.environ.get("CI"):
            pytest.fail("faketime is not installed (.ci/run installs the Debian package)")
        pytest.skip("faketime is not installed (Debian package faketime)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(TZ=tz, AUDITOR_TEST_NOW=instant.replace(" ", "T") + "+00:00")
    # faketime reads the instant in the local zone of its own process: give it UTC.
    command = ["env", "TZ=UTC", faketime, instant, "env", f"TZ={tz}", sys.executable, "-m", "pytest"]
    command += [
        "-q",
        "-p",
        "no:cacheprovider",
        "-k",
        "not postgresql",
        "--basetemp",
        str(tmp_path / "t"),
        *SUITES,
    ]
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200, check=False
    )
    tail = "\n".join((done.stdout + done.stderr).splitlines()[-40:])
    assert done.returncode == 0, f"the suites fail at {instant} ({tz}):\n{tail}"
    assert " passed" in tail and "failed" not in tail
