"""The service's audits go through snapshots in the cache in its data directory: a re-audit of an
unchanged directory parses and audits nothing, and stores the same findings as one without a
cache."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from dbsupport import Clock
from seedrepo import seed_files
from sqlalchemy import Engine

from auditor import bootstrap
from auditor.cache import DocumentCache
from auditor.resources import examples_dir
from auditor.settings.config import load_settings
from auditor.store.repository import FindingFilter, Store, TargetSpec


def test_reaudit_reads_through_the_data_directory_cache(tmp_path: Path, engine: Engine, clock: Clock) -> None:
    repo = tmp_path / "repo"
    for name, source in seed_files("before").items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, repo / name)
    config = tmp_path / "auditor.yaml"
    config.write_text(
        f"service:\n  git_cache_dir: data/git\ntargets:\n  - name: lab\n    directory: '{repo}'\n"
    )
    settings = load_settings(config)
    store = Store(engine, clock)
    store.sync_targets(
        TargetSpec(t.name, t.kind, t.location, None, t.paths, t.nodes, t.schedule) for t in settings.targets
    )
    runner = bootstrap.build_runner(settings, store)
    assert isinstance(runner.cache, DocumentCache)
    assert runner.cache.directory == tmp_path / "data" / "documents"
    first = runner.run("lab")
    assert first is not None and first.status == "succeeded"
    files = len(list(repo.rglob("*.yaml")))
    assert runner.last_scan is not None
    assert runner.last_scan.mode == "full" and runner.last_scan.files_parsed == files
    entries = len(list((tmp_path / "data" / "documents").glob("??/*")))
    assert entries == runner.cache.stats.writes > 0
    clock.advance(days=1)
    second = runner.run("lab")
    assert second is not None and second.status == "succeeded"
    assert runner.last_scan.mode == "unchanged" and runner.last_scan.files_parsed == 0
    # Nothing new to keep (the snapshot itself is written again: the files were too new to trust
    # their times the first time, as git's index does with racy files).
    assert len(list((tmp_path / "data" / "documents").glob("??/*"))) == entries
    found = store.findings(FindingFilter(target="lab"), 100).items
    assert sorted((f.rule, f.status) for f in found) == [("cross-zone-blocked", "open")]


def test_the_bundled_config_keeps_its_cache_out_of_the_package(
    tmp_path: Path, engine: Engine, clock: Clock
) -> None:
    settings = load_settings(examples_dir() / "service.yaml")
    runner = bootstrap.build_runner(settings, Store(engine, clock))
    assert isinstance(runner.cache, DocumentCache)
    assert runner.cache.directory == Path(os.environ["AUDITOR_CACHE_DIR"])  # the user cache directory
