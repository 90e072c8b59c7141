"""A progress bar on stderr, only on a terminal and only once work has taken more than a moment."""

from __future__ import annotations

import sys
import time
from typing import Protocol, TextIO


class Progress(Protocol):
    def __call__(self, phase: str, done: int, total: int) -> None: ...


def silent(phase: str, done: int, total: int) -> None:
    """No progress output (pipes, CI logs, tests)."""


class TerminalProgress:
    DELAY_S = 0.5  # below this a scan feels instant: draw nothing
    INTERVAL_S = 0.1

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self.last = 0.0
        self.drawn = False

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.started < self.DELAY_S or (now - self.last < self.INTERVAL_S and done < total):
            return
        self.last = now
        width = 30
        filled = width * done // total if total else width
        self.stream.write(f"\r{phase:<22} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\r" + " " * 70 + "\r")
            self.stream.flush()


def for_stderr() -> TerminalProgress | None:
    return TerminalProgress() if sys.stderr.isatty() else None
