"""Faults: a service killed mid-run, a database that goes away and comes back."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dbsupport import Clock, pg_schema, pg_url
from gitsupport import Origin
from proxy import TcpProxy
from seedrepo import seed_files
from sqlalchemy import create_engine, text

from auditor.service.runner import AuditRunner
from auditor.service.scheduler import Scheduler
from auditor.settings.config import load_settings
from auditor.sources.manifests import Tools
from auditor.store import database
from auditor.store.repository import FindingFilter, Store, TargetSpec


def _auditor(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "auditor", *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _config(path: Path, url: str) -> Path:
    path.write_text(
        "service: {git_cache_dir: cache, git_timeout_seconds: 600}\n"
        f"targets:\n  - name: lab\n    git: {{url: '{url}', branch: main}}\n"
        "    paths: [training, policies]\n    nodes: [nodes/nodes.yaml]\n"
    )
    return path


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_sigkill_mid_run_leaves_no_half_run_and_loses_nothing(tmp_path: Path, backend: str) -> None:
    origin = Origin(tmp_path)
    origin.commit(seed_files("before"))
    ok = _config(tmp_path / "ok.yaml", str(origin.bare))
    # A remote that accepts the connection and never answers: the run hangs mid-fetch.
    stall = socket.socket()
    stall.bind(("127.0.0.1", 0))
    stall.listen(8)
    stalled = _config(tmp_path / "stall.yaml", f"http://127.0.0.1:{stall.getsockname()[1]}/x.git")
    with pg_schema() as schema:
        url = f"sqlite:///{tmp_path / 'store.db'}" if backend == "sqlite" else pg_url(schema)
        env = {**os.environ, "AUDITOR_DATABASE_URL": url}
        first = _auditor(["run", "--target", "lab", "--config", str(ok)], env, tmp_path)
        assert first.wait(120) == 1, first.stderr.read() if first.stderr else ""
        victim = _auditor(["run", "--target", "lab", "--config", str(stalled)], env, tmp_path)
        engine = database.make_engine(url)
        store = Store(engine, Clock())
        deadline = time.monotonic() + 60
        while not [r for r in store.runs("lab", 5).items if r.status == "running"]:
            assert time.monotonic() < deadline and victim.poll() is None, "the run never started"
            time.sleep(0.05)
        time.sleep(0.3)
        victim.send_signal(signal.SIGKILL)
        victim.wait(30)
        runs = store.runs("lab", 5).items
        assert [r.status for r in runs] == ["running", "succeeded"]
        [finding] = store.findings(FindingFilter(target="lab"), 10).items
        assert finding.status == "new"
        # Restart: the killed run is marked interrupted; the next run goes on from the stored state.
        again = _auditor(["run", "--target", "lab", "--config", str(ok)], env, tmp_path)
        assert again.wait(120) == 1
        runs = store.runs("lab", 5).items
        assert [r.status for r in runs] == ["succeeded", "interrupted", "succeeded"]
        assert "stopped before it finished" in runs[1].error
        [finding] = store.findings(FindingFilter(target="lab"), 10).items
        assert finding.status == "open"
        detail = store.finding(finding.id)
        assert detail is not None and [h.status for h in detail.history] == ["new", "open"]
        engine.dispose()
    stall.close()


def test_database_away_and_back_during_serve(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    for name, src in seed_files().items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(Path(src).read_bytes())
    config = tmp_path / "auditor.yaml"
    config.write_text(f"targets:\n  - name: lab\n    schedule: '0 * * * *'\n    directory: '{repo}'\n")
    settings = load_settings(config)
    with pg_schema() as schema:
        database.upgrade(database.make_engine(pg_url(schema)))
        proxy = TcpProxy(("127.0.0.1", 5432))
        proxy.start()
        url = pg_url(schema).replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
        engine = database.make_engine(url, connect_args={"connect_timeout": 3})
        store = Store(engine, Clock())
        store.sync_targets([TargetSpec("lab", "directory", str(repo))])
        runner = AuditRunner(settings, store, Tools(None, None))
        scheduler = Scheduler(settings, runner, store.clock)
        first = runner.run("lab")
        assert first is not None and first.status == "succeeded"

        # The database goes away in the middle of a run (after it was claimed).
        run_id = runner.start("lab", None, "api")
        proxy.stop()
        failed = runner.execute(run_id, "lab")
        # (It fails where the run first reads the store: its target's suppressions, or storing.)
        assert failed.status == "failed" and "OperationalError" in (failed.error or "")
        # A scheduled run while it is away fails cleanly too (nothing raised into the scheduler).
        scheduler.run_scheduled("lab")
        scheduler.recover()

        proxy.start()  # back
        runner.recover()  # the failure that could not be written is written now
        after = runner.run("lab")
        assert after is not None and after.status == "succeeded"
        statuses = [(r.id, r.status) for r in store.runs("lab", 10).items]
        assert statuses == [(after.run_id, "succeeded"), (run_id, "failed"), (first.run_id, "succeeded")]
        [finding] = store.findings(FindingFilter(target="lab"), 10).items
        assert finding.status == "open"
        engine.dispose()
        proxy.stop()
        check = create_engine(pg_url(schema))
        with check.connect() as c:
            assert c.execute(text("SELECT count(*) FROM runs WHERE status = 'running'")).scalar() == 0
        check.dispose()
