"""Real processes the fleet benchmark and the fleet tests run: a redis-server of its own on a
free loopback port, and `auditor worker` (Celery, --pool solo) processes in their own process
groups."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def redis_server(directory: Path) -> Iterator[str]:
    """A redis-server of its own on a free loopback port (never the machine's 6379), no persistence,
    its files under `directory`; yields its URL. RuntimeError when redis-server is not installed
    (Debian package redis-server) or does not start within 10 s."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (Debian package redis-server)")
    port = free_port()
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(directory),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(timeout=10)


def start_worker(
    config: Path, name: str, log: Path, path_prefix: Path | None = None
) -> subprocess.Popen[bytes]:
    """`auditor worker --pool solo` of this venv with `config`, output appended to `log`, in a
    process group of its own; `path_prefix` goes first on its PATH (a wrapped git, say)."""
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
    """SIGKILL to the worker's whole process group."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the worker's process group (a warm shutdown), SIGKILL after 20 s."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            kill9(process)
