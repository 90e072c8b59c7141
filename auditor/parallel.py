"""Spreading independent work over processes, when there is enough of it to pay for them.

Reading YAML is CPU-bound Python and C (the GIL rules out threads), and a large repository is
thousands of independent files, so the loader hands contiguous runs of files to worker processes
and takes the results back in order. Workers are *forked* — they start in milliseconds with
everything already imported, and no main module is re-imported (as spawning would, running an
unguarded script again) — and only while this process runs a single thread: forking a threaded
process can deadlock the child, so in the service (audits run from scheduler threads) the work is
done in-process. If workers cannot be started or one dies, whatever is left is done here, in
this process: nothing is lost, it is only slower.
"""

from __future__ import annotations

import gc
import math
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from concurrent.futures import Future

T = TypeVar("T")
R = TypeVar("R")

MAX_WORKERS = 8
MIN_IDLE_FOR_WORKERS = 3  # see workers_for
_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def available_cpus(cpu_max: Path = _CPU_MAX) -> int:
    """CPUs this process may use: its affinity mask, capped by a cgroup v2 CPU quota (a container
    limited to 2 CPUs on a 64-core node must not start 64 workers)."""
    try:
        count = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        count = os.cpu_count() or 1
    try:
        fields = cpu_max.read_text(encoding="ascii").split()
    except OSError:
        fields = []
    if len(fields) == 2 and fields[0] != "max":
        try:
            quota = int(fields[0]) / int(fields[1])
        except (ValueError, ZeroDivisionError):
            quota = 0.0
        if quota > 0:
            count = min(count, max(1, math.floor(quota)))
    return max(1, count)


def _load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:  # not available on this platform
        return 0.0


def idle_cpus(cpus: int | None = None, load: float | None = None) -> int:
    """CPUs no other process is using: the available ones less the one-minute load average (which
    counts this process too, so one runnable task is taken to be ours)."""
    cpus = available_cpus() if cpus is None else cpus
    busy = max(0.0, (_load_average() if load is None else load) - 1.0)
    return max(1, math.floor(cpus - busy + 0.25))


def workers_for(jobs: int | None, cpus: int | None = None, load: float | None = None) -> int:
    """The number of worker processes for a `--jobs` value: None or 0 means one per *idle* CPU,
    and none at all (work in this process) unless at least MIN_IDLE_FOR_WORKERS are idle. Workers
    compete with each other and with this process, which unpickles their results and then audits
    alone: with two CPUs, even idle, they were measured no faster (0.98× the wall time of one
    process on the 20,000-object repository) for 1.27× the CPU, and slower once the machine is busy.
    `--jobs N` is taken as given."""
    if jobs is None or jobs <= 0:
        idle = min(idle_cpus(cpus, load), MAX_WORKERS)
        return idle if idle >= MIN_IDLE_FOR_WORKERS else 1
    return min(jobs, MAX_WORKERS * 4)


def _can_fork() -> bool:
    """Forking is safe only while this process runs one thread: a lock held by another thread at
    fork time stays locked forever in the child. (The service schedules audits from threads, so
    there the work is done in-process; the CLI is single-threaded.)"""
    import multiprocessing  # here: most runs never start a worker

    return threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods()


def _worker_started() -> None:
    # Workers only build data and hand it back; the cyclic collector would walk it for nothing.
    gc.disable()


def ordered_map(fn: Callable[[T], R], chunks: Sequence[T], workers: int) -> Iterator[R]:
    """`fn` over `chunks`, results in the order of `chunks`.

    With `workers` > 1, more than one chunk and a single-threaded process, chunks run in forked
    worker processes (results must pickle). Results are yielded as soon as
    the next one in order is ready, so the caller consumes while workers go on. If the pool cannot
    start or breaks, the chunks without a result are run in this process. An exception raised by
    `fn` itself is re-raised here, as it would be without workers.
    """
    if workers <= 1 or len(chunks) <= 1 or not _can_fork():
        for chunk in chunks:
            yield fn(chunk)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    done = 0
    try:
        context = multiprocessing.get_context("fork")
        pool = ProcessPoolExecutor(min(workers, len(chunks)), mp_context=context, initializer=_worker_started)
        try:
            futures: list[Future[R]] = [pool.submit(fn, chunk) for chunk in chunks]
            for future in futures:
                result = future.result()
                done += 1
                yield result
        finally:
            # Also when the caller stops early: queued chunks are dropped, not run to the end.
            pool.shutdown(wait=True, cancel_futures=True)
    except (BrokenProcessPool, OSError):
        pass  # the rest is done below, in this process
    for chunk in chunks[done:]:
        yield fn(chunk)
