"""The GitHub App at fleet scale, on real Celery workers (two `auditor worker` processes, a real
redis-server, PostgreSQL) behind the real service over HTTP, against the local GitHub (PyGithub,
App JWT, installation tokens, conditional requests): a repository added to an installation is
audited on its schedule without a restart and one removed stops; an unchanged branch costs one
request; a re-requested check is re-run once; the "Open fix PR" button pressed twice opens one pull
request."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from appsupport import app_repo
from dbsupport import Clock, pg_schema, pg_url
from fakegithub import FakeGitHub, serve
from fleetsupport import (
    APP_ID,
    SECRET,
    check_run_event,
    deliver,
    installation_repositories_event,
    pull_request_event,
    redis_server,
)
from gitsupport import git
from httpsupport import serving
from seedrepo import SEED
from workersupport import start_worker, stop, wait_for

from auditor.bootstrap import build_service
from auditor.service.leader import FleetScheduler, sweep_slot
from auditor.settings.config import load_settings
from auditor.store.fleet import FleetStore
from auditor.store.repository import FindingFilter


@pytest.fixture
def pg() -> Iterator[str]:
    with pg_schema() as schema:
        yield pg_url(schema)


def _completed(hub: FakeGitHub, sha: str) -> list[dict]:
    return [r for r in hub.check_runs if r["head_sha"] == sha and r["status"] == "completed"]


def test_app_repositories_on_celery_workers(tmp_path: Path, pg: str) -> None:
    key_file, origin, main_sha, hub = app_repo(tmp_path)
    clock = Clock()
    with serve(hub) as gh_base, redis_server(tmp_path) as broker:
        config = tmp_path / "auditor.yaml"
        config.write_text(
            f"database: {{url: '{pg}'}}\n"
            "service:\n  catch_up: false\n  heartbeat_seconds: 1\n"
            f"  git_cache_dir: '{tmp_path / 'cache'}'\n"
            "  broker:\n"
            f"    url: '{broker}'\n    url_env: ''\n    visibility_timeout_seconds: 30\n"
            "    lease_seconds: 10\n    busy_retry_seconds: 1\n    metrics_port: 0\n"
            "  github_app:\n"
            f"    app_id: {APP_ID}\n    private_key_file: '{key_file}'\n"
            f"    base_url: '{gh_base}'\n    webhook_secret: '{SECRET}'\n"
            f"    clone_url: '{tmp_path}/{{full_name}}.git'\n"
            "    audit_every_hours: 1\n"
        )
        settings = load_settings(config)
        service = build_service(settings, clock=clock, environ={})
        scheduler = service.scheduler
        assert isinstance(scheduler, FleetScheduler)
        store, fleet = service.store, FleetStore(service.store.engine, clock)
        workers = [start_worker(config, n, tmp_path / f"{n}.log") for n in ("a", "b")]
        logs = [tmp_path / f"{n}.log" for n in ("a", "b")]

        def logged(text: str) -> int:
            return sum(p.read_text(errors="replace").count(text) for p in logs if p.exists())

        try:
            with serving(service.app) as base:
                # Added to the installation: swept at its slot, no restart.
                added = installation_repositories_event(["acme/infra"], [], clock())
                assert deliver(base, "installation_repositories", added)[0] == 202
                wait_for(lambda: fleet.app_repositories() == {"acme/infra": 7}, 60, "the repository added")
                slot = sweep_slot("acme/infra", clock(), 3600)
                clock.now = slot + timedelta(seconds=5)
                assert scheduler.sweep_app_repositories() == [f"sweep:acme/infra:{slot:%Y-%m-%dT%H:%M:%SZ}"]

                def runs() -> list[tuple[str, str]]:
                    return [(r.trigger, r.status) for r in store.runs("acme.infra", 20).items]

                wait_for(lambda: runs() == [("sweep", "succeeded")], 90, "the sweep to audit it", 0.25)
                # The next slot, nothing pushed: one conditional request, no run.
                before = hub.branch_requests
                clock.now = slot + timedelta(hours=1, seconds=5)
                assert len(scheduler.sweep_app_repositories()) == 1
                wait_for(lambda: logged("unchanged since") >= 1, 60, "the unchanged sweep")
                assert hub.branch_requests == before + 1 and len(runs()) == 1

                # A pull request's failing check, re-run twice by one request: one more check run.
                git("checkout", "--quiet", "-b", "feature", cwd=origin.work)
                (origin.work / "policies").mkdir()
                (origin.work / "policies" / "cilium.yaml").write_bytes((SEED / "policies.yaml").read_bytes())
                git("add", "--all", cwd=origin.work)
                git("commit", "--quiet", "-m", "zone isolation", cwd=origin.work)
                git("push", "--quiet", "origin", "HEAD:refs/heads/feature", cwd=origin.work)
                head = git("rev-parse", "HEAD", cwd=origin.work)
                opened = pull_request_event("opened", 12, head, main_sha, clock())
                assert deliver(base, "pull_request", opened)[0] == 202
                wait_for(lambda: len(_completed(hub, head)) == 1, 90, "the check run", 0.25)
                [first] = _completed(hub, head)
                assert first["conclusion"] == "failure" and first["actions"][0]["identifier"] == "open-fix-pr"
                rerun = check_run_event("rerequested", first, number=12, base=main_sha)
                assert deliver(base, "check_run", rerun)[0] == 202
                assert deliver(base, "check_run", rerun)[0] == 202  # the same request again
                wait_for(lambda: len(_completed(hub, head)) == 2, 90, "the re-run", 0.25)
                wait_for(
                    lambda: logged("its check run is complete; nothing to do") >= 1,
                    60,
                    "the repeated request to find its check run done",
                )

                # The button pressed twice: one pull request onto the branch.
                second = _completed(hub, head)[1]
                press = check_run_event(
                    "requested_action", second, number=12, base=main_sha, identifier="open-fix-pr"
                )
                assert deliver(base, "check_run", press)[0] == 202
                wait_for(lambda: len(hub.pulls) == 1, 90, "the fix pull request", 0.25)
                assert deliver(base, "check_run", press)[0] == 202
                wait_for(lambda: logged("fix pull request up-to-date") >= 1, 90, "the second press")
                assert len(hub.pulls) == 1 and hub.pulls[0]["base"] == "feature"

                # Removed: not swept any more, its target retired, its findings kept.
                removed = installation_repositories_event([], ["acme/infra"], clock())
                assert deliver(base, "installation_repositories", removed)[0] == 202
                wait_for(lambda: fleet.app_repositories() == {}, 60, "the repository removed")
                clock.now = slot + timedelta(hours=2, seconds=5)
                assert scheduler.sweep_app_repositories() == []
                [target] = [t for t in store.targets() if t.name == "acme.infra"]
                assert target.retired_at is not None
                assert len(store.findings(FindingFilter(target="acme.infra"), 10).items) == 1
                assert len(_completed(hub, head)) == 2
        finally:
            for w in workers:
                stop(w)
            scheduler.shutdown()
            scheduler.leader.resign()  # the advisory lock is the server's: never left to the next test
            store.engine.dispose()
