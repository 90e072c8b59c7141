"""The soak's real parts that the other benchmarks do not need: a PostgreSQL server of its own
(initdb into a directory, optionally on a small tmpfs so its disk can be filled), a redis-server
that keeps its data (appendonly, as deploy/kustomize/components/fleet-redis runs it) and can be
restarted on the same port, a wall clock that can be stepped for the service's processes
(libfaketime, Debian `faketime`), and an SMTP server (aiosmtpd) that keeps every message."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from email import message_from_bytes
from pathlib import Path
from typing import Any

from world.processes import free_port

FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")

# libfaketime 0.9.10 answers clock_nanosleep on CLOCK_MONOTONIC with EINVAL when monotonic time is
# not faked (FAKETIME_DONT_FAKE_MONOTONIC=1), so every time.sleep() of Python would fail: this
# shim, preloaded first, sends clock_nanosleep straight to the C library.
_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <time.h>
int clock_nanosleep(clockid_t c, int flags, const struct timespec *req, struct timespec *rem) {
    static int (*real)(clockid_t, int, const struct timespec *, struct timespec *);
    if (!real) real = dlsym(dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD), "clock_nanosleep");
    return real(c, flags, req, rem);
}
"""


def without_faketime(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) without the clock-stepping preload: for the database and
    the broker, whose clocks are not the service's to step."""
    out = dict(os.environ if env is None else env)
    for k in ("LD_PRELOAD", "FAKETIME_TIMESTAMP_FILE", "FAKETIME_NO_CACHE", "FAKETIME_DONT_FAKE_MONOTONIC"):
        out.pop(k, None)
    return out


@dataclass
class SteppedClock:
    """The wall clock of every process started with `env()`: the real time plus an offset held in a
    file that libfaketime reads on every call. Monotonic time is never faked (timeouts stay true)."""

    directory: Path
    offset: float = 0.0
    file: Path = field(init=False)
    preload: str = field(init=False)

    def __post_init__(self) -> None:
        """Build the shim and write the offset, or (both there: a process started with `env()`)
        take the offset the file holds."""
        self.file = self.directory / "faketime-offset"
        shim_c, shim = self.directory / "sleepshim.c", self.directory / "sleepshim.so"
        self.preload = f"{shim} {FAKETIME_LIB}"
        if shim.exists() and self.file.exists():
            self.offset = float(self.file.read_text().strip().rstrip("s"))
            return
        shim_c.write_text(_SHIM)
        subprocess.run(
            ["gcc", "-shared", "-fPIC", "-O2", "-o", str(shim), str(shim_c), "-ldl"],
            check=True,
            capture_output=True,
        )
        self.set(self.offset)

    @staticmethod
    def available() -> str | None:
        """None, or why the clock cannot be stepped here."""
        if not FAKETIME_LIB.exists():
            return "libfaketime is not installed (Debian package faketime)"
        if shutil.which("gcc") is None:
            return "gcc is not installed (the sleep shim is compiled at start)"
        return None

    def set(self, offset: float) -> None:
        self.offset = offset
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(f"{offset:+.0f}s\n")
        tmp.replace(self.file)  # atomic: a reader never sees half a line

    def step(self, seconds: float) -> None:
        self.set(self.offset + seconds)

    def env(self) -> dict[str, str]:
        return {
            "LD_PRELOAD": self.preload,
            "FAKETIME_TIMESTAMP_FILE": str(self.file),
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }


def _as_postgres(argv: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run its tools as the `postgres` user then."""
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def _pg_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        raise RuntimeError("PostgreSQL's server binaries are not installed (Debian postgresql)")
    return found[-1].parent


class PostgresServer:
    """A PostgreSQL cluster of its own on a free loopback port; its data directory on a tmpfs of
    `disk_mb` when this process may mount one (root), so `fill_disk` can make it full."""

    def __init__(self, root: Path, disk_mb: int) -> None:
        self.bin = _pg_bin()
        self.mount = root / "pgdisk"
        self.mount.mkdir()
        self.disk_note = ""
        if os.geteuid() == 0:
            done = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={disk_mb}m,mode=0755", "tmpfs", str(self.mount)],
                check=False,
                capture_output=True,
                text=True,
            )
            self.mounted = done.returncode == 0
            if not self.mounted:
                self.disk_note = f"mount refused: {done.stderr.strip()}"
        else:
            self.mounted, self.disk_note = False, "not root: no tmpfs for the store's disk"
        self.data = self.mount / "data"
        self.sockets = root / "pgsock"
        self.sockets.mkdir()
        self.log = root / "postgres.log"
        self.port = free_port()
        if os.geteuid() == 0:
            root.chmod(0o755)  # mkdtemp's 0700 would keep the postgres user out
            shutil.chown(self.mount, "postgres")
            shutil.chown(self.sockets, "postgres")
            self.log.touch()
            shutil.chown(self.log, "postgres")
        subprocess.run(
            _as_postgres(
                [
                    str(self.bin / "initdb"),
                    "-D",
                    str(self.data),
                    "-A",
                    "trust",
                    "-U",
                    "postgres",
                    "--wal-segsize=1",
                ]
            ),
            check=True,
            capture_output=True,
            env=without_faketime(),
        )
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.sockets}'\n"
                "max_wal_size = 24MB\nmin_wal_size = 8MB\nshared_buffers = 32MB\nmax_connections = 60\n"
            )
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            _as_postgres([str(self.bin / "pg_ctl"), "-D", str(self.data), *args]),
            capture_output=True,
            text=True,
            check=check,
            env=without_faketime(),
        )

    def start(self) -> None:
        self._ctl("-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-m", mode, "-w", "-t", "60", "stop", check=False)

    def running(self) -> bool:
        return self._ctl("status", check=False).returncode == 0

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def fill_disk(self) -> Path | None:
        """Write a ballast file until the store's disk is full; its path (None without a tmpfs)."""
        if not self.mounted:
            return None
        ballast = self.mount / "ballast"
        chunk = b"\0" * (1 << 20)
        with ballast.open("wb") as f:
            try:
                while True:
                    f.write(chunk)
                    f.flush()
            except OSError:
                pass
        return ballast

    def close(self) -> None:
        self.stop("immediate")
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.mount)], check=False, capture_output=True)


class RedisServer:
    """redis-server on a port of its own that keeps its data across restarts (appendonly, as the
    shipped fleet-redis component runs it); `restart` stops it (SIGTERM: it writes its file) and
    starts it again on the same port."""

    def __init__(self, directory: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (Debian package redis-server)")
        self.binary, self.directory, self.port = binary, directory, free_port()
        self.directory.mkdir(exist_ok=True)
        self.process: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
                "--dir",
                str(self.directory),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=without_faketime(),
        )
        deadline = time.monotonic() + 15
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class Inbox:
    """aiosmtpd handler keeping (Message-ID, To, Subject) of every message accepted."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, str, str]] = []
        self.lock = threading.Lock()

    async def handle_DATA(self, _server: Any, _session: Any, envelope: Any) -> str:
        msg = message_from_bytes(envelope.original_content or envelope.content)
        with self.lock:
            self.messages.append((str(msg["Message-ID"]), str(msg["To"]), str(msg["Subject"])))
        return "250 OK"
