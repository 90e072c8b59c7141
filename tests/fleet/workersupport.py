"""Fleet test parts around the real `auditor worker` processes (started, stopped and killed by
benchmarks/world/processes.py, which the fleet benchmark uses too): a git that waits at a file
barrier while a test holds it (so an audit can be caught mid-run without sleeping), and a wait."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from world.processes import kill9, start_worker, stop

__all__ = ["barrier_git", "kill9", "start_worker", "stop", "wait_for"]


def barrier_git(directory: Path, hold: Path, reached: Path) -> Path:
    """A `git` on PATH that, while `hold` exists, touches `reached` and waits before a fetch."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "git"
    script.write_text(
        "#!/bin/sh\n"
        'case " $* " in *" fetch "*)\n'
        f'  if [ -e "{hold}" ]; then echo $$ > "{reached}"; while [ -e "{hold}" ]; do sleep 0.05; done; fi;;\n'
        "esac\n"
        'exec /usr/bin/git "$@"\n'
    )
    script.chmod(0o755)
    return directory


def wait_for(predicate, timeout: float, what: str, interval: float = 0.1):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")
