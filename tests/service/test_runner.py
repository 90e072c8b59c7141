"""Stored audits of real targets: a git repository (bare origin) and plain directories."""

from __future__ import annotations

import socket
from pathlib import Path

from dbsupport import Clock
from gitsupport import Origin
from seedrepo import seed_files
from sqlalchemy import Engine

from auditor.service.runner import AuditRunner
from auditor.settings.config import Settings, load_settings
from auditor.sources.manifests import Tools
from auditor.store.repository import FindingFilter, Store, TargetSpec


def _settings(tmp_path: Path, targets_yaml: str) -> Settings:
    config = tmp_path / "auditor.yaml"
    config.write_text(f"service:\n  git_cache_dir: cache\n  heartbeat_seconds: 1\ntargets:\n{targets_yaml}")
    return load_settings(config)


def _runner(settings: Settings, engine: Engine, clock: Clock) -> tuple[AuditRunner, Store]:
    store = Store(engine, clock)
    store.sync_targets(
        TargetSpec(t.name, t.kind, t.location, None, t.paths, t.nodes, t.schedule) for t in settings.targets
    )
    return AuditRunner(settings, store, Tools(None, None), owner="test:1"), store


def _findings(store: Store, target: str) -> list[tuple[str, str]]:
    return sorted((f.rule, f.status) for f in store.findings(FindingFilter(target=target), 100).items)


def test_git_target_from_blocked_to_fixed(tmp_path: Path, engine: Engine, clock: Clock) -> None:
    origin = Origin(tmp_path)
    before = origin.commit(seed_files("before"), "training group")
    settings = _settings(
        tmp_path,
        f"  - name: lab\n    git: {{url: '{origin.bare}', branch: main}}\n"
        "    paths: [training, policies]\n    nodes: [nodes/nodes.yaml]\n",
    )
    runner, store = _runner(settings, engine, clock)
    first = runner.run("lab")
    assert first is not None and first.status == "succeeded", first
    assert _findings(store, "lab") == [("cross-zone-blocked", "new")]
    run = store.run(first.run_id)
    assert run is not None and run.revision == before and run.trigger == "cli"
    fixed = origin.commit(seed_files("after"), "keep the group in zone-a")
    clock.advance(days=1)
    second = runner.run("lab")
    assert second is not None and second.summary is not None and second.summary.resolved == 1
    assert _findings(store, "lab") == [("cross-zone-blocked", "resolved")]
    assert store.run(second.run_id).revision == fixed  # type: ignore[union-attr]


def test_unreadable_file_makes_a_partial_run_that_resolves_nothing(
    tmp_path: Path, engine: Engine, clock: Clock
) -> None:
    repo = tmp_path / "repo"
    for name, src in seed_files("before").items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(Path(src).read_bytes())
    settings = _settings(tmp_path, f"  - name: dir\n    directory: '{repo}'\n")
    runner, store = _runner(settings, engine, clock)
    assert runner.run("dir").status == "succeeded"  # type: ignore[union-attr]
    # The workload's file breaks: the finding is not seen, but the run cannot say it is fixed.
    (repo / "training/workload.yaml").write_text("kind: Job\nmetadata: {name: [\n")
    clock.advance(days=1)
    result = runner.run("dir")
    assert result is not None and result.status == "partial"
    assert _findings(store, "dir") == [("cross-zone-blocked", "new")]
    run = store.run(result.run_id)
    assert run is not None and run.errors == 1 and "nothing was resolved" in run.error
    assert run.load_errors[0]["file"].endswith("training/workload.yaml")


def test_a_failing_target_does_not_stop_the_others(tmp_path: Path, engine: Engine, clock: Clock) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "w.yaml").write_bytes(Path(seed_files()["training/workload.yaml"]).read_bytes())
    settings = _settings(
        tmp_path,
        f"  - name: away\n    git: {{url: 'http://127.0.0.1:{port}/x.git'}}\n"
        f"  - name: here\n    directory: '{repo}'\n"
        "  - name: escapes\n    directory: '" + str(repo) + "'\n    paths: [w.yaml]\n    nodes: [link]\n",
    )
    (repo / "link").symlink_to("/etc/passwd")
    runner, store = _runner(settings, engine, clock)
    away = runner.run("away")
    assert away is not None and away.status == "failed" and "cannot be reached" in (away.error or "")
    here = runner.run("here")
    assert here is not None and here.status == "succeeded"
    escapes = runner.run("escapes")
    assert (
        escapes is not None and escapes.status == "failed" and "outside the target" in (escapes.error or "")
    )
    statuses = {r.target: r.status for r in store.runs(None, 10).items}
    assert statuses == {"away": "failed", "here": "succeeded", "escapes": "failed"}


def test_two_targets_on_one_repository_run_side_by_side(tmp_path: Path, engine: Engine, clock: Clock) -> None:
    import threading

    origin = Origin(tmp_path)
    head = origin.commit(seed_files("before"))
    settings = _settings(
        tmp_path,
        f"  - name: one\n    git: {{url: '{origin.bare}'}}\n    paths: [training, policies]\n    nodes: [nodes/nodes.yaml]\n"
        f"  - name: two\n    git: {{url: '{origin.bare}'}}\n    paths: [training]\n",
    )
    runner, store = _runner(settings, engine, clock)
    results: dict[str, object] = {}
    threads = [
        threading.Thread(target=lambda n=n: results.__setitem__(n, runner.run(n))) for n in ("one", "two")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {n: r.status for n, r in results.items()} == {"one": "succeeded", "two": "succeeded"}  # type: ignore[attr-defined]
    assert {r.revision for r in store.runs(None, 10).items} == {head}
    assert _findings(store, "one") == [("cross-zone-blocked", "new")]
    assert _findings(store, "two") == []  # no nodes, no policies: nothing to say
