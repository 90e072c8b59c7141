"""A GitHub rate limit whose reset is an hour away defers the PR step instead of sleeping in
the run (the injected clock judges the reset, an injected sleep records every wait); the
service keeps the deferral and retries the step in a later job."""

from __future__ import annotations

from pathlib import Path

import pytest
from dbsupport import Clock, engine_for
from fakegithub import TOKEN, FakeGitHub, serve
from gitsupport import Origin
from seedrepo import seed_files

from auditor.gitops.pulls import PullRequestsDeferred, sync_pull_requests
from auditor.service.runner import AuditRunner
from auditor.settings.config import load_settings
from auditor.sources.manifests import Tools
from auditor.store.repository import Store, TargetSpec

ENV = {"GH_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"}


def _rate_limited(reset: int) -> tuple[str, str, int, dict[str, str], dict[str, str]]:
    return (
        "GET",
        "/repos/acme/infra",
        403,
        {"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset)},
        {
            "message": "API rate limit exceeded for user ID 1.",
            "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api",
        },
    )


def test_a_reset_an_hour_away_defers_instead_of_sleeping(tmp_path: Path) -> None:
    origin = Origin(tmp_path)
    origin.commit(seed_files())
    hub = FakeGitHub(origin.bare)
    with serve(hub) as base, engine_for("sqlite", tmp_path) as engine:
        config = tmp_path / "auditor.yaml"
        config.write_text(
            "service: {git_cache_dir: cache}\n"
            f"targets:\n  - name: infra\n    git: {{url: '{hub.bare}', branch: main}}\n"
            "    paths: [training, policies]\n    nodes: [nodes/nodes.yaml]\n"
            f"    github: {{repository: acme/infra, base_url: '{base}', token_env: GH_TOKEN,"
            " seconds_between_writes: 0, max_rate_limit_wait_seconds: 60}\n"
        )
        settings = load_settings(config)
        clock = Clock()
        store = Store(engine, clock)
        store.sync_targets([TargetSpec("infra", "git", str(hub.bare))])
        reset = int(clock().timestamp()) + 3600
        hub.faults.append(_rate_limited(reset))
        sleeps: list[float] = []
        with pytest.raises(PullRequestsDeferred) as deferred:
            sync_pull_requests(settings.targets[0], settings, store, ENV, sleep=sleeps.append)
        assert int(deferred.value.until.timestamp()) == reset
        assert sum(sleeps) < 60  # it never waited for the reset (~3600 s)
        assert hub.pulls == []
        # In the service: the step is recorded as deferred, and a later job after the reset runs it.
        runner = AuditRunner(settings, store, Tools(None, None), owner="test:1", environ=ENV)
        hub.faults.append(_rate_limited(reset))
        runner._pull_requests(settings.targets[0])
        assert runner.deferred_pull_requests == {"infra": deferred.value.until}
        runner.recover()  # before the reset: nothing is retried
        assert hub.pulls == [] and "infra" in runner.deferred_pull_requests
        clock.advance(seconds=3601)
        runner.recover()
        assert len(hub.pulls) == 1 and runner.deferred_pull_requests == {}
