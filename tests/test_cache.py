"""The cache of loaded files (auditor/cache.py): a re-scan through it reports exactly what a cold
scan reports, whatever changed in the tree; entries of another version, torn, corrupt or hostile
entries are ignored without being executed; concurrent writers leave whole entries; the size
stays under its cap."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from auditor import yamlio
from auditor.audit.scan import ScanResult
from auditor.cache import MAGIC, DocumentCache
from auditor.cli import main
from auditor.reports import json_report
from auditor.rules.packs import load_packs
from auditor.settings.config import Settings
from auditor.sources.incremental import TreeAuditor
from auditor.sources.manifests import Tools, collect


def report(paths: list[Path], out: Path, *flags: str) -> tuple[int, str]:
    code = main(
        ["scan", *map(str, paths), "--format", "json", "--output", str(out), "--fail-on", "none", *flags]
    )
    return code, out.read_text(encoding="utf-8")


def report_of(result: object) -> str:
    assert isinstance(result, ScanResult)
    return json_report.render(result)


def cold_and_cached(repo: Path, cache: Path, tmp_path: Path) -> tuple[tuple[int, str], tuple[int, str]]:
    cold = report([repo], tmp_path / "cold.json", "--no-cache")
    cached = report([repo], tmp_path / "cached.json", "--cache-dir", str(cache))
    return cold, cached


def loaded(repo: Path, cache: DocumentCache | None, jobs: int = 1) -> list[object]:
    out = collect([repo], Tools(), jobs=jobs, cache=cache)
    return [(d.data, d.source) for d in out.documents] + list(out.errors)


def test_rescan_after_each_kind_of_change_equals_a_cold_scan(repo: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cold, first = cold_and_cached(repo, cache, tmp_path)
    assert first == cold and cold[1].count('"rule"') > 0  # the tree has findings
    files = sorted(p for p in repo.rglob("*.yaml"))
    # entries hold runs of files: a few hundred files, a handful of entries
    assert 0 < len(list(cache.glob("??/*"))) < len(files) / 8
    workload = next(p for p in files if "PyTorchJob" in p.read_text())
    policy = next(p for p in files if "kind: NetworkPolicy" in p.read_text())
    changes = {
        # an edit that changes what is found: the job's workers no longer tolerate anything
        "edit": lambda: workload.write_text(workload.read_text().replace("replicas: ", "replicas: 1")),
        "add": lambda: (repo / "clusters" / "extra.yaml").write_text(
            policy.read_text().replace("name: ", "name: x")
        ),
        "delete": policy.unlink,
        "rename": lambda: files[-1].rename(files[-1].with_name("renamed-" + files[-1].name)),
        "invalid": lambda: files[-2].write_text(files[-2].read_text() + "\n  bad: [unclosed\n"),
        "valid again": lambda: files[-2].write_text(
            files[-2].read_text().replace("\n  bad: [unclosed\n", "\n")
        ),
    }
    previous = cold[1]
    for name, change in changes.items():
        change()
        cold, cached = cold_and_cached(repo, cache, tmp_path)
        assert cached == cold, name
        assert cold[1] != previous or name in ("rename", "valid again"), f"{name} changed nothing"
        previous = cold[1]
    # The loader's own entries (what load_inventory reads through the cache; `auditor scan` keeps
    # snapshots instead, tests/test_incremental.py): filled once, then every file is a hit.
    files_now = sorted(p for p in repo.rglob("*.yaml"))
    loaded(repo, DocumentCache(cache))
    store = DocumentCache(cache)
    assert loaded(repo, store) == loaded(repo, None)
    assert store.stats.hits == len(files_now) and store.stats.misses == 0


def test_renamed_and_copied_files_carry_their_new_names(repo: Path, tmp_path: Path) -> None:
    store = DocumentCache(tmp_path / "cache")
    files = sorted(repo.rglob("*.yaml"))
    loaded(repo, store)
    shutil.copyfile(files[0], repo / "copy-of-first.yaml")
    files[1].rename(repo / "moved.yaml")
    again = DocumentCache(tmp_path / "cache")
    docs = collect([repo], Tools(), jobs=1, cache=again).documents
    assert again.stats.hits > again.stats.misses > 0  # only the runs around the two changes
    assert {d.source.file for d in docs} >= {str(repo / "copy-of-first.yaml"), str(repo / "moved.yaml")}
    assert not any(d.source.file == str(files[1]) for d in docs)
    assert loaded(repo, DocumentCache(tmp_path / "cache")) == loaded(repo, None)


def test_parallel_workers_fill_and_use_the_same_cache(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(yamlio, "PARALLEL_MIN_BYTES", 0)
    cache = tmp_path / "cache"
    cold = loaded(repo, None, jobs=1)
    assert loaded(repo, DocumentCache(cache), jobs=2) == cold
    warm = DocumentCache(cache)
    assert loaded(repo, warm, jobs=1) == cold
    assert warm.stats.misses == 0
    # some files changed: the hits are read here, the rest parsed by workers, all in file order
    files = sorted(repo.rglob("*.yaml"))
    for path in files[3:9]:
        path.write_text(path.read_text() + "\n# touched\n")
    mixed = DocumentCache(cache)
    assert loaded(repo, mixed, jobs=2) == loaded(repo, None, jobs=1)
    assert mixed.stats.hits > 0 and 6 <= mixed.stats.misses < len(files)


def test_entries_of_another_loader_version_are_never_used(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded(repo, DocumentCache(tmp_path / "cache"))
    monkeypatch.setattr(yamlio, "LOADER_VERSION", yamlio.LOADER_VERSION + "-next")
    store = DocumentCache(tmp_path / "cache")
    loaded(repo, store)
    assert store.stats.hits == 0 and store.stats.misses > 0
    other_limits = DocumentCache(tmp_path / "cache")
    collect([repo], Tools(), jobs=1, cache=other_limits)
    assert other_limits.stats.hits == store.stats.misses  # the same version again: all found


def test_torn_corrupt_moved_and_hostile_entries_are_ignored(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(yamlio, "_RUN_BOUNDARY", 4)  # more, shorter runs: more entries to damage
    cache = tmp_path / "cache"
    cold = loaded(repo, None)
    loaded(repo, DocumentCache(cache))
    entries = sorted(p for p in cache.glob("??/*"))
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"touch {marker}",))

    hostile = pickle.dumps(Exploit())
    entries[0].write_bytes(entries[0].read_bytes()[:40])  # torn
    blob = bytearray(entries[1].read_bytes())
    blob[-5] ^= 0xFF  # one flipped byte in the payload
    entries[1].write_bytes(bytes(blob))
    entries[2].write_bytes(MAGIC + b"\0" * 32 + hostile)  # a pickle that runs a command, no valid MAC
    entries[3].write_bytes(entries[4].read_bytes())  # a valid entry under another key's name
    entries[5].write_bytes(b"")
    store = DocumentCache(cache)
    assert loaded(repo, store) == cold
    assert store.stats.rejected == 5 and not marker.exists()
    # A pickle that does carry a valid MAC (only someone holding the secret could write it) is
    # still refused by the unpickler's allow-list.
    key = entries[6].parent.name + entries[6].name
    secret = (cache / "secret").read_bytes()
    entries[6].write_bytes(MAGIC + store._mac(secret, key, hostile) + hostile)
    again = DocumentCache(cache)
    assert loaded(repo, again) == cold
    assert again.stats.rejected == 1 and not marker.exists()


def test_a_damaged_secret_is_replaced_and_old_entries_ignored(repo: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cold = loaded(repo, None)
    loaded(repo, DocumentCache(cache))
    (cache / "secret").write_bytes(b"short")
    store = DocumentCache(cache)
    assert loaded(repo, store) == cold
    assert store.stats.hits == 0 and len((cache / "secret").read_bytes()) == 32


def test_concurrent_scans_share_one_cache(repo: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = {**os.environ, "AUDITOR_CACHE_DIR": str(cache)}
    outs = [tmp_path / f"r{i}.json" for i in range(4)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "auditor",
                "scan",
                str(repo),
                "--format",
                "json",
                "--output",
                str(o),
                "--fail-on",
                "none",
            ],
            env=env,
            stderr=subprocess.PIPE,
        )
        for o in outs
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    cold = report([repo], tmp_path / "cold.json", "--no-cache")[1]
    assert all(o.read_text() == cold for o in outs)
    assert not list(cache.rglob(".tmp-*")) and not list(cache.glob(".secret-*"))
    # What they left is whole: the next scan finds the snapshot and every fragment.
    store = DocumentCache(cache)
    tree = TreeAuditor(store, Settings(), load_packs([]))
    result = tree.scan([repo], None)
    assert result is not None and report_of(result) == cold
    assert tree.stats.mode == "unchanged" and store.stats.rejected == 0, (tree.stats, store.stats)


def test_size_stays_under_the_cap_and_recent_entries_stay(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(yamlio, "_RUN_BOUNDARY", 4)
    cache = tmp_path / "cache"
    full = DocumentCache(cache)
    loaded(repo, full)
    size = full.size()
    entries = sorted(cache.glob("??/*"))
    old = 1_000_000_000
    for n, path in enumerate(entries):
        os.utime(path, (old + n, old + n))
    capped = DocumentCache(cache, max_bytes=size // 2)
    total = len(list(repo.rglob("*.yaml")))
    subs = [d for d in repo.rglob("*") if d.is_dir() and 10 <= len(list(d.rglob("*.yaml"))) <= total // 2]
    sub = max(subs, key=lambda d: len(list(d.rglob("*.yaml"))))
    loaded(sub, capped)  # reads (and so refreshes) some entries, writes the runs cut at its edges
    assert capped.stats.hits > 0 and capped.stats.writes > 0
    before = sorted((p.stat().st_mtime, p) for p in cache.glob("??/*"))
    capped.finish()
    assert capped.size() <= size // 2 and capped.stats.evicted > 0
    gone = [p for _, p in before if not p.exists()]
    assert gone == [p for _, p in before[: len(gone)]]  # the least recently used went first
    used = [p for mtime, p in before if mtime > old + len(entries)]
    assert used and all(p.exists() for p in used)


def test_no_cache_writes_nothing_and_an_unusable_directory_is_no_error(repo: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert report([repo], tmp_path / "a.json", "--no-cache", "--cache-dir", str(cache))[0] == 0
    assert not cache.exists()
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    code, text = report([repo], tmp_path / "b.json", "--cache-dir", str(blocked / "cache"))
    assert (code, text) == report([repo], tmp_path / "c.json", "--no-cache")


def test_a_directory_others_may_write_is_not_used(repo: Path, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    store = DocumentCache(shared)
    assert loaded(repo, store) == loaded(repo, None)
    assert not store.ready() and store.stats.writes == 0 and list(shared.iterdir()) == []


def test_default_directory_follows_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from auditor.cache import user_cache_dir

    assert user_cache_dir({"AUDITOR_CACHE_DIR": "/x"}) == Path("/x")
    assert user_cache_dir({"XDG_CACHE_HOME": "/c"}) == Path("/c/placement-auditor/documents")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert user_cache_dir({}) == tmp_path / ".cache" / "placement-auditor" / "documents"


def test_bad_cap_is_a_usage_error(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUDITOR_CACHE_MAX_MB", "lots")
    assert main(["scan", str(repo), "--format", "json", "--output", str(tmp_path / "o.json")]) == 2
