"""Fleet test parts: GitHub's side (App key, signed deliveries, event payloads) and the
redis-server launcher live in benchmarks/world (the fleet benchmark uses them too); here, the
redis-server of a test: the one .ci/run started (AUDITOR_TEST_REDIS_URL), flushed first, else one of
its own, and a skip where redis-server is not installed."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from world import processes
from world.github import (
    APP_ID,
    INSTALLATION,
    SECRET,
    app_key,
    check_run_event,
    check_suite_event,
    deliver,
    installation_repositories_event,
    pull_request_event,
    push_event,
    repository,
    stamp,
)

__all__ = [
    "APP_ID",
    "INSTALLATION",
    "SECRET",
    "app_key",
    "check_run_event",
    "check_suite_event",
    "deliver",
    "installation_repositories_event",
    "pull_request_event",
    "push_event",
    "redis_server",
    "repository",
    "stamp",
]


@contextmanager
def redis_server(directory: Path) -> Iterator[str]:
    """The redis-server of a test (see the module docstring); yields its URL."""
    given = os.environ.get("AUDITOR_TEST_REDIS_URL")
    if given:
        import redis

        redis.Redis.from_url(given).flushdb()
        yield given
        return
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (Debian package redis-server; .ci/run installs it)")
    with processes.redis_server(directory) as url:
        yield url
