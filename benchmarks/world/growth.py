"""Growth exponents: run a measure at 1×, 2×, 4× of its input and fit seconds ≈ c · size^k.

k is the least-squares slope of log(seconds) over log(size); 1 is linear, 2 quadratic. Shared by
every benchmark (bench_scan may use it too) so they all print the same line.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence

FACTORS = (1, 2, 4)


def exponent(sizes: Sequence[float], seconds: Sequence[float]) -> float:
    """The fitted k of seconds ≈ c · size^k (needs two or more distinct sizes, positive values)."""
    if len(sizes) != len(seconds) or len(set(sizes)) < 2:
        raise ValueError("an exponent needs two or more distinct sizes, one time each")
    if min(sizes) <= 0 or min(seconds) <= 0:
        raise ValueError(f"sizes and times must be positive: {list(sizes)}, {list(seconds)}")
    xs = [math.log(s) for s in sizes]
    ys = [math.log(t) for t in seconds]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def measure(
    name: str, base: int, run: Callable[[int], float], factors: Sequence[int] = FACTORS
) -> tuple[list[int], list[float], float]:
    """Run `run(size)` (returns seconds) at base × each factor; print one line; return the figures."""
    sizes = [base * f for f in factors]
    times = [run(size) for size in sizes]
    k = exponent(sizes, times)
    print(
        f"growth {name}: "
        + ", ".join(f"{s}: {t:.2f}s" for s, t in zip(sizes, times, strict=True))
        + f" → exponent {k:.2f}",
        flush=True,
    )
    return sizes, times, k


def machine_load() -> str:
    """One line for the report: the load averages and CPU count when the benchmark ran."""
    one, five, fifteen = os.getloadavg()
    return f"machine load: {one:.2f} {five:.2f} {fifteen:.2f} (1/5/15 min) on {os.cpu_count()} CPUs"
