"""Real `auditor worker` processes (Celery, --pool solo) for fleet tests, and a git that waits at
a file barrier while a test holds it (so an audit can be caught mid-run without sleeping)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent


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


def start_worker(
    config: Path, name: str, log: Path, path_prefix: Path | None = None
) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PATH"] = (f"{path_prefix}:" if path_prefix else "") + f"{BIN}:/usr/bin:/bin"
    env.pop("AUDITOR_DATABASE_URL", None)
    handle = log.open("ab")
    return subprocess.Popen(
        [
            str(BIN / "auditor"),
            "worker",
            "--config",
            str(config),
            "--pool",
            "solo",
            "--hostname",
            f"{name}@%h",
        ],
        stdout=handle,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,  # its own process group: kill -9 takes the whole worker
    )


def kill9(process: subprocess.Popen[bytes]) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            kill9(process)


def wait_for(predicate, timeout: float, what: str, interval: float = 0.1):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")
