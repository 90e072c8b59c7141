"""Reading large trees with worker processes: same results, in order, and nothing lost when a
worker cannot start or dies."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from support import DATA

from auditor import parallel, yamlio
from auditor.cli import main


def _pid_and(item: tuple[int, int]) -> tuple[int, int]:
    return os.getpid(), item[1] * 10


def _dies_in_a_worker(item: tuple[int, int]) -> int:
    parent, value = item
    if os.getpid() != parent and value == 3:
        os._exit(1)  # a worker killed mid-run (OOM killer, signal)
    return value * 10


def _fails(item: int) -> int:
    if item == 2:
        raise ValueError("bad chunk 2")
    return item


def test_results_come_back_in_order_from_workers() -> None:
    me = os.getpid()
    out = list(parallel.ordered_map(_pid_and, [(me, i) for i in range(12)], 2))
    assert [v for _, v in out] == [i * 10 for i in range(12)]
    assert any(pid != me for pid, _ in out)  # really ran elsewhere


def test_a_dead_worker_costs_time_not_results() -> None:
    me = os.getpid()
    out = list(parallel.ordered_map(_dies_in_a_worker, [(me, i) for i in range(8)], 2))
    assert out == [i * 10 for i in range(8)]


def test_an_error_in_the_work_itself_is_raised() -> None:
    with pytest.raises(ValueError, match="bad chunk 2"):
        list(parallel.ordered_map(_fails, [0, 1, 2, 3], 2))


def test_no_fork_while_other_threads_run() -> None:
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        me = os.getpid()
        out = list(parallel.ordered_map(_pid_and, [(me, i) for i in range(4)], 2))
    finally:
        stop.set()
        other.join()
    assert {pid for pid, _ in out} == {me}


@pytest.mark.parametrize(
    ("cpu_max", "expected"),
    [("max 100000\n", None), ("150000 100000\n", 1), ("50000 100000\n", 1), ("garbage", None), ("", None)],
)
def test_cpu_quota_caps_the_workers(tmp_path: Path, cpu_max: str, expected: int | None) -> None:
    path = tmp_path / "cpu.max"
    path.write_text(cpu_max)
    affinity = len(os.sched_getaffinity(0))
    assert parallel.available_cpus(path) == (expected if expected is not None else affinity)
    assert parallel.available_cpus(tmp_path / "absent") == affinity


def test_quota_above_the_affinity_keeps_the_affinity(tmp_path: Path) -> None:
    path = tmp_path / "cpu.max"
    path.write_text(f"{1000 * 100000} 100000")
    assert parallel.available_cpus(path) == len(os.sched_getaffinity(0))


def test_workers_for_jobs() -> None:
    assert parallel.workers_for(1) == 1
    assert parallel.workers_for(3) == 3
    assert 1 <= parallel.workers_for(0) <= parallel.MAX_WORKERS
    assert parallel.workers_for(None, cpus=4, load=0.5) == parallel.workers_for(0, cpus=4, load=0.5) == 4


def test_automatic_workers_follow_the_idle_cpus() -> None:
    # our own process is one runnable task of the load average
    assert parallel.workers_for(0, cpus=2, load=1.0) == 1  # two CPUs: workers do not pay
    assert parallel.workers_for(0, cpus=3, load=1.0) == 3
    assert parallel.workers_for(0, cpus=4, load=2.0) == 3
    assert parallel.workers_for(0, cpus=4, load=3.0) == 1  # two idle: no workers
    assert parallel.workers_for(0, cpus=2, load=5.0) == 1
    assert parallel.workers_for(0, cpus=8, load=3.0) == 6
    assert parallel.workers_for(0, cpus=64, load=0.0) == parallel.MAX_WORKERS
    assert parallel.workers_for(2, cpus=2, load=9.0) == 2  # --jobs N is taken as given


def _tree(tmp_path: Path) -> list[tuple[Path, str]]:
    (tmp_path / "broken.yaml").write_text("a: [1, 2\n---\nkind: Pod\napiVersion: v1\nmetadata: {name: x}\n")
    (tmp_path / "dup.yaml").write_text("a: 1\na: 2\n")
    (tmp_path / "binary.yaml").write_bytes(b"\x00\x01")
    files, errors = yamlio.discover_files([DATA, tmp_path])
    assert not errors
    return files


def test_loading_with_workers_equals_loading_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = _tree(tmp_path)
    here = list(yamlio.load_files(files, jobs=1))
    monkeypatch.setattr(yamlio, "PARALLEL_MIN_BYTES", 1)
    spread = list(yamlio.load_files(files, jobs=2))
    assert len(spread) == len(files)
    assert spread == here  # documents (data, source) and errors, file by file, in order
    # Where things were written survives the trip back from a worker, at every depth.
    assert [_locations(d.data) for docs, _ in spread for d in docs] == [
        _locations(d.data) for docs, _ in here for d in docs
    ]
    assert any(errs for _, errs in spread)


def _locations(data: object) -> object:
    if isinstance(data, yamlio.YamlMap):
        return (data.line, dict(data.key_lines), [_locations(v) for v in data.values()])
    if isinstance(data, yamlio.YamlSeq):
        return (data.line, list(data.item_lines), [_locations(v) for v in data])
    return None


def test_scan_output_does_not_depend_on_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(yamlio, "PARALLEL_MIN_BYTES", 1)
    outputs = []
    for jobs in ("1", "2"):
        out = tmp_path / f"report-{jobs}.json"
        args = ["scan", str(DATA / "workloads"), str(DATA / "seed-lab" / "before"), "--format", "json"]
        main([*args, "--output", str(out), "--fail-on", "none", "--jobs", jobs])
        outputs.append(out.read_text())
    assert outputs[0] == outputs[1]


def test_jobs_must_be_a_whole_number(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["scan", "--example", "seed-lab/before", "--jobs", "-1"])
    assert exc.value.code == 2
    assert "--jobs: must be a whole number" in capsys.readouterr().err
