"""Scan benchmark: a generated repository of about 20,000 objects (2,000 training jobs of mixed
kinds, 5,000 policies, 500 nodes over three zones; see gen_repo.py), measured in one run:

(a) parse only: read every YAML file and `list(yaml.load_all(text, Loader=yaml.CSafeLoader))`;
(b) our full scan: `auditor scan DIR --format json --output FILE --fail-on none`, in process
    through `auditor.cli.main` (imports done before the clock starts), as users run it (files read by
    one worker process per CPU) and with `--jobs 1` (one process); the two reports must be identical;
(c) Checkov's Kubernetes scan of the same directory, once (installed into benchmarks/.venv-checkov
    by checkov_baseline.py), or of a subset of it with `--checkov-subset N`.

(a) and (b) are medians of several runs, alternated, each in its own child process so that the
peak RSS (from wait4) is that measurement's own. Targets: scan < 2× parse, peak RSS < 1 GiB,
Checkov ≥ 20× our time (both as whole processes). Prints figures; never fails on time.

    python benchmarks/bench_scan.py                          # everything
    python benchmarks/bench_scan.py --skip-checkov --runs 5
    python benchmarks/bench_scan.py --checkov-subset 4000    # Checkov on ~4,000 objects only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import checkov_baseline  # noqa: E402
import gen_repo  # noqa: E402

SUFFIXES = (".yaml", ".yml", ".json")
GIB = 2**30
MIB = 2**20


# --- child side ----------------------------------------------------------------------------------


def yaml_files(directory: Path) -> Iterator[Path]:
    """Files a scan of `directory` reads: by suffix, hidden directories skipped, sorted."""
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.endswith(SUFFIXES):
                yield Path(root) / name


def child_parse(directory: Path) -> dict[str, Any]:
    import yaml

    t0 = time.perf_counter()
    files = docs = 0
    for path in yaml_files(directory):
        text = path.read_text(encoding="utf-8")
        docs += len(list(yaml.load_all(text, Loader=yaml.CSafeLoader)))
        files += 1
    return {"seconds": time.perf_counter() - t0, "files": files, "documents": docs}


def child_scan(directory: Path, output: str, jobs: str = "0") -> dict[str, Any]:
    from auditor import cli

    argv = ["scan", str(directory), "--format", "json", "--output", output, "--fail-on", "none"]
    t0 = time.perf_counter()
    code = cli.main([*argv, "--jobs", jobs], one_shot=True)
    return {"seconds": time.perf_counter() - t0, "exit": code}


# --- parent side ---------------------------------------------------------------------------------


@dataclass
class Measured:
    seconds: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)  # whole child process, interpreter start included
    rss: list[int] = field(default_factory=list)
    last: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def peak_rss(self) -> int:
        return max(self.rss)

    def line(self) -> str:
        runs = ", ".join(f"{s:.2f}" for s in self.seconds)
        return (
            f"median {self.median:.2f} s of {len(self.seconds)} [{runs}]; "
            f"process wall median {statistics.median(self.wall):.2f} s; "
            f"peak RSS {self.peak_rss / MIB:,.0f} MiB"
        )


def run_child(args: list[str], into: Measured) -> None:
    """Run this script as a child; record its timing and its own peak RSS (wait4)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, __file__, *args], stdout=out, stderr=err, stdin=subprocess.DEVNULL
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"child {args} failed (exit {proc.returncode}):\n{stderr[-3000:]}")
    result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    into.seconds.append(float(result["seconds"]))
    into.wall.append(wall)
    into.rss.append(usage.ru_maxrss * 1024)
    into.last = result


def measure(directory: Path, runs: int, report: Path) -> tuple[Measured, Measured, Measured]:
    """Parse-only runs, scan runs (default: files read by one worker per CPU) and single-process
    scan runs (`--jobs 1`), alternated so that machine noise falls on all alike."""
    parse, scan, single = Measured(), Measured(), Measured()
    single_report = report.with_name("scan-jobs1.json")
    for i in range(runs):
        run_child(["--child", "parse", str(directory)], parse)
        run_child(["--child", "scan", str(directory), str(report if i == 0 else os.devnull)], scan)
        out = str(single_report if i == 0 else os.devnull)
        run_child(["--child", "scan", str(directory), out, "1"], single)
        print(
            f"  run {i + 1}/{runs}: parse {parse.seconds[-1]:.2f} s, scan {scan.seconds[-1]:.2f} s, "
            f"scan --jobs 1 {single.seconds[-1]:.2f} s",
            flush=True,
        )
    if single_report.read_text() != report.read_text():
        raise RuntimeError("the report with --jobs 1 differs from the default one")
    return parse, scan, single


def _objects_in(path: Path) -> int:
    import yaml

    docs = yaml.load_all(path.read_text(encoding="utf-8"), Loader=yaml.CSafeLoader)
    return sum(1 for d in docs if isinstance(d, dict))


def make_subset(directory: Path, objects: int, into: Path) -> tuple[int, int]:
    """Copy (hard-link where possible) a self-contained subset of about `objects` objects: all of
    `clusters/platform` (nodes, runtimes, cluster-wide policies), then whole namespace directories
    in sorted order until the count is reached. Returns (objects, files)."""
    platform = directory / "clusters" / "platform"
    groups: list[list[Path]] = [list(yaml_files(platform))]
    for team in sorted(p for p in (directory / "clusters").iterdir() if p.is_dir() and p != platform):
        groups.extend(list(yaml_files(ns)) for ns in sorted(p for p in team.iterdir() if p.is_dir()))
    total = files = 0
    for group in groups:
        if total >= objects:
            break
        for path in group:
            target = into / path.relative_to(directory)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(path, target)
            except OSError:
                shutil.copyfile(path, target)
            total += _objects_in(path)
            files += 1
    return total, files


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3, help="runs per measurement (median reported)")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--policies", type=int, default=5000)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", type=Path, help="scan this existing directory instead of generating one")
    parser.add_argument("--keep", action="store_true", help="keep the generated repository (path printed)")
    parser.add_argument("--skip-checkov", action="store_true")
    parser.add_argument(
        "--checkov-subset",
        type=int,
        metavar="N",
        help="run Checkov on a subset of about N objects (and our scan on the same subset)",
    )
    parser.add_argument("--checkov-timeout", type=float, default=3600)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        kind, directory = args.child[0], Path(args.child[1])
        result = child_parse(directory) if kind == "parse" else child_scan(directory, *args.child[2:4])
        print(json.dumps(result))
        return 0

    tmp = Path(tempfile.mkdtemp(prefix="bench-scan-"))
    figures: dict[str, Any] = {}
    try:
        if args.dir:
            directory = args.dir
            print(f"repository: {directory} (given)")
        else:
            directory = tmp / "repo"
            t0 = time.perf_counter()
            counts = gen_repo.generate_repo(directory, args.jobs, args.policies, args.nodes, args.seed)
            figures["repository"] = counts
            print(
                f"repository: {counts['objects']:,} objects in {counts['files']:,} files "
                f"({counts['jobs']:,} training jobs, {counts['policies']:,} policies, "
                f"{counts['nodes']:,} nodes), "
                f"generated in {time.perf_counter() - t0:.1f} s at {directory}",
                flush=True,
            )
        report = tmp / "scan.json"
        parse, scan, single = measure(directory, args.runs, report)
        ratio = scan.median / parse.median
        single_ratio = single.median / parse.median
        doc = json.loads(report.read_text())
        summary = doc.get("summary", {})
        print(f"parse only (PyYAML CSafeLoader, {parse.last['documents']:,} documents): {parse.line()}")
        print(f"auditor scan: {scan.line()}")
        print(f"auditor scan --jobs 1 (one process): {single.line()}")
        print(f"ratio scan/parse: {ratio:.2f}× (target < 2×: {_verdict(ratio < 2)}; {os.cpu_count()} CPUs)")
        print(f"ratio scan --jobs 1/parse: {single_ratio:.2f}× (one process; same report)")
        print(
            f"peak RSS of the scan: {scan.peak_rss / GIB:.2f} GiB "
            f"(target < 1 GiB: {_verdict(scan.peak_rss < GIB)})"
        )
        print(
            f"scan reported: {summary.get('audited_objects', 0):,} audited objects, "
            f"{summary.get('findings', 0):,} findings {summary.get('by_severity', {})}, "
            f"{summary.get('errors', 0):,} errors; skipped kinds {summary.get('skipped_kinds', {})}"
        )
        for e in doc.get("errors", [])[:10]:
            print(f"  error: {e}")
        figures.update(
            parse_seconds=parse.seconds,
            parse_peak_rss=parse.peak_rss,
            scan_seconds=scan.seconds,
            scan_wall_seconds=scan.wall,
            scan_peak_rss=scan.peak_rss,
            ratio_scan_parse=ratio,
            single_process_scan_seconds=single.seconds,
            ratio_single_process_scan_parse=single_ratio,
            scan_summary=summary,
        )
        if not args.skip_checkov:
            checkov = checkov_baseline.ensure_checkov()
            # Checkov is timed as a whole process (interpreter start and imports included), so
            # ours is too: the child's process wall, not the in-process median.
            target, ours, scope = directory, statistics.median(scan.wall), "the full directory"
            if args.checkov_subset:
                target = tmp / "subset"
                objects, files = make_subset(directory, args.checkov_subset, target)
                sub = Measured()
                sub_report = tmp / "subset-scan.json"
                for i in range(args.runs):
                    run_child(
                        ["--child", "scan", str(target), str(sub_report if i == 0 else os.devnull)], sub
                    )
                ours = statistics.median(sub.wall)
                sub_summary = json.loads(sub_report.read_text()).get("summary", {})
                scope = f"a SUBSET of {objects:,} objects in {files:,} files"
                print(
                    f"auditor scan of the subset: {sub.line()}; "
                    f"{sub_summary.get('findings', 0):,} findings, {sub_summary.get('errors', 0):,} errors"
                )
                figures["checkov_subset"] = {"objects": objects, "files": files, "our_seconds": sub.seconds}
            print(f"checkov on {scope} ...", flush=True)
            run = checkov_baseline.run_checkov(checkov, target, args.checkov_timeout)
            cratio = run.seconds / ours
            print(
                f"checkov {run.version} (kubernetes framework, one run) on {scope}: "
                f"{checkov_baseline.describe(run)}"
            )
            print(
                f"ratio checkov/ours on {scope}: {cratio:.2f}× "
                f"(ours {ours:.2f} s, whole process like Checkov's; target ≥ 20×: {_verdict(cratio >= 20)})"
            )
            figures.update(
                checkov_seconds=run.seconds, checkov_peak_rss=run.peak_rss_bytes, ratio_checkov_ours=cratio
            )
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2))
    finally:
        if args.keep and not args.dir:
            print(f"kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
