"""Scan benchmark: a generated repository of about 20,000 objects (2,000 training jobs of mixed
kinds, 5,000 policies, 500 nodes over three zones; see gen_repo.py), measured in one run:

(a) parse only: read every YAML file and `list(yaml.load_all(text, Loader=yaml.CSafeLoader))`;
(b) our full cold scan: `auditor scan DIR --format json --output FILE --fail-on none --no-cache`, in
    process through `auditor.cli.main` (imports done before the clock starts), as users run it
    (automatic workers: one per idle CPU, none on a busy machine) and with `--jobs 1` (one process);
    the two reports must be identical;
(b2) with `--base TREE` (another checkout, e.g. `git worktree add --detach /work/base bcbab5b`), the
    same scan by that tree's code (PYTHONPATH), alternated with ours, for an A/B in one run;
(b3) incremental: the cache filled once, then a re-scan of the unchanged tree, a re-scan after
    changing one file (a workload's replica count) and one after changing a namespace's policy (the
    label it selects), each compared byte for byte with a cold `--no-cache` scan of the same tree;
    target: the one-file re-scan ≤ 15% of the cold scan;
(b4) growth: the parse floor and a `--jobs 1` scan of generated repositories at a quarter, half and
    the whole of the size asked for (1×, 2×, 4×), with the fitted exponent of each (world/growth.py);
(c) Checkov's Kubernetes scan of the same directory, once (installed into benchmarks/.venv-checkov
    by checkov_baseline.py), or of a subset of it with `--checkov-subset N`.

(a) and (b) are medians of several runs, alternated, each in its own child process so that the
peak RSS and CPU time (from wait4) are that measurement's own. Targets: scan ≤ 1.0× parse (issue
17; was < 2×), the default mode never slower than `--jobs 1`, peak RSS < 1 GiB, Checkov ≥ 20× our
time (both as whole processes). `--busy N` keeps N other processes spinning for the whole run (a
busy machine). Prints figures; never fails on time; exits 1 when a report differs from its
reference.

    python benchmarks/bench_scan.py                          # everything
    python benchmarks/bench_scan.py --skip-checkov --runs 5
    python benchmarks/bench_scan.py --checkov-subset 4000    # Checkov on ~4,000 objects only
    python benchmarks/bench_scan.py --dir /tmp/repo20k --skip-checkov --base /work/base --busy 1
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import checkov_baseline  # noqa: E402
import gen_repo  # noqa: E402
from scan_child import yaml_files  # noqa: E402
from world import growth  # noqa: E402

CHILD = HERE / "scan_child.py"

GIB = 2**30
MIB = 2**20


# --- parent side ---------------------------------------------------------------------------------


@dataclass
class Measured:
    seconds: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)  # whole child process, interpreter start included
    rss: list[int] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # user + system of the whole child process
    workers: list[int | None] = field(default_factory=list)  # worker processes a scan chose
    last: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def peak_rss(self) -> int:
        return max(self.rss)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu)

    def line(self) -> str:
        runs = ", ".join(f"{s:.2f}" for s in self.seconds)
        return (
            f"median {self.median:.2f} s of {len(self.seconds)} [{runs}]; "
            f"process wall median {statistics.median(self.wall):.2f} s; "
            f"process CPU median {self.cpu_median:.2f} s; "
            f"peak RSS {self.peak_rss / MIB:,.0f} MiB"
        )


# Children run as an installed program runs: with Python's bytecode cache. These machines set
# PYTHONDONTWRITEBYTECODE=1, which made every child compile the auditor's modules from source
# (0.1 s a process, a sixth of a re-scan); compile_sources() writes the cache once beforehand.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def compile_sources(*trees: Path | None) -> None:
    """Byte-compile the auditor package of each tree (ours, and --base's) for the children, and
    import its commands once, which writes the code cache of its dataclass methods (as the image
    build does: auditor/codecache.py)."""
    for tree in trees:
        if tree is not None:
            subprocess.run(
                [sys.executable, "-m", "compileall", "-q", str(tree / "auditor")],
                env=CHILD_ENV,
                check=True,
                stdout=subprocess.DEVNULL,
            )
            subprocess.run(
                [sys.executable, "-c", "import auditor.cli, auditor.sources.incremental"],
                env={**CHILD_ENV, "PYTHONPATH": str(tree)},
                check=True,
            )


def run_child(args: list[str], into: Measured, env: dict[str, str] | None = None) -> None:
    """Run a measured child (scan_child.py); record its timing and its own peak RSS (wait4).
    `env`: variables added to the child's environment."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, str(CHILD), *args],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env={**CHILD_ENV, **(env or {})},
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
    into.cpu.append(usage.ru_utime + usage.ru_stime)
    into.workers.append(result.get("workers"))
    into.last = result


PURE = {"AUDITOR_PURE_PYTHON": "1"}
"""The environment that runs the auditor from its Python sources where it is compiled (auditor/native.py)."""


def build_mode() -> tuple[str, str]:
    """("compiled" or "pure", why) of the auditor the children run (a child's `auditor.native`)."""
    code = "import auditor.native as n; print(*n.mode(), sep='\\n')"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=CHILD_ENV,
        capture_output=True,
        text=True,
        check=True,
        cwd=HERE.parent,
    )
    mode, why = out.stdout.strip().split("\n", 1)
    return mode, why


def measure(
    directory: Path, runs: int, report: Path, base: Path | None = None, pure: Measured | None = None
) -> tuple[Measured, Measured, Measured, Measured | None]:
    """Parse-only runs, cold scan runs (automatic workers), single-process cold scan runs (`--jobs
    1`), with `base` the base tree's scan and with `pure` the same tree's `--jobs 1` scan from its
    Python sources (where it is compiled: its report must be the compiled one's), alternated so
    that machine noise falls on all alike."""
    parse, scan, single = Measured(), Measured(), Measured()
    other = Measured() if base is not None else None
    single_report = report.with_name("scan-jobs1.json")
    base_report = report.with_name("scan-base.json")
    pure_report = report.with_name("scan-pure.json")
    # Cold, as ours: a base tree that has the cache is told not to use it (one from before the
    # cache has no such flag). Without it the base's runs after the first were re-scans.
    base_flags = ["--no-cache"] if base is not None and _knows_no_cache(base) else []
    for i in range(runs):
        run_child(["parse", str(directory)], parse)
        run_child(
            ["scan", str(directory), str(report if i == 0 else os.devnull), "0", "--no-cache"],
            scan,
        )
        out = str(single_report if i == 0 else os.devnull)
        run_child(["scan", str(directory), out, "1", "--no-cache"], single)
        line = (
            f"  run {i + 1}/{runs}: parse {parse.cpu[-1]:.2f} s CPU, scan {scan.cpu[-1]:.2f} s CPU, "
            f"scan --jobs 1 {single.cpu[-1]:.2f} s CPU"
        )
        if other is not None:
            out = str(base_report if i == 0 else os.devnull)
            run_child(["scan", str(directory), out, "1", "--base", str(base), *base_flags], other)
            line += f", base --jobs 1 {other.cpu[-1]:.2f} s CPU"
        if pure is not None:
            run_child(
                ["scan", str(directory), str(pure_report if i == 0 else os.devnull), "1", "--no-cache"],
                pure,
                PURE,
            )
            line += f", from source --jobs 1 {pure.cpu[-1]:.2f} s CPU"
        print(line, flush=True)
    if single_report.read_text() != report.read_text():
        raise WrongAnswer("the report with --jobs 1 differs from the default one")
    if pure is not None and pure_report.read_text() != report.read_text():
        raise WrongAnswer("the report of the scan from the Python sources differs from the compiled one's")
    if other is not None and base_report.read_text() != report.read_text():
        print("  note: the base tree's report differs from ours (expected when findings changed since)")
    return parse, scan, single, other


def _knows_no_cache(tree: Path) -> bool:
    """Whether the checkout at `tree` has the cache (and so `auditor scan --no-cache`)."""
    cli = tree / "auditor" / "cli.py"
    return cli.is_file() and '"--no-cache"' in cli.read_text(encoding="utf-8")


class WrongAnswer(Exception):
    """A report differs from its reference: the benchmark exits 1."""


def incremental(directory: Path, runs: int, tmp: Path) -> dict[str, Any]:
    """Fill a cache, then time a re-scan of the unchanged tree and re-scans after changing one
    file; every report must equal a cold `--no-cache` scan of the same tree. Works on a hard-linked
    copy of `directory` (the changed file is replaced, never written through the link)."""
    tree = tmp / "incremental"
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(directory, tree, copy_function=os.link)
    cache = tmp / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    fill, warm, one, cold, policy = Measured(), Measured(), Measured(), Measured(), Measured()
    cache_flags = ["--cache-dir", str(cache)]
    reference = tmp / "cold-reference.json"
    out = tmp / "incremental.json"
    run_child(["scan", str(tree), str(out), "1", *cache_flags], fill)
    run_child(["scan", str(tree), str(reference), "1", "--no-cache"], cold)
    if out.read_text() != reference.read_text():
        raise WrongAnswer("the report of the scan that filled the cache differs from a cold scan")
    victims = [p for p in yaml_files(tree) if "kind: PyTorchJob" in p.read_text(encoding="utf-8")]
    policies = [
        p
        for p in yaml_files(tree)
        if "kind: NetworkPolicy" in (text := p.read_text(encoding="utf-8")) and "\n    matchLabels:\n" in text
    ]
    for i in range(runs):
        run_child(["scan", str(tree), str(out), "1", *cache_flags], warm)
        if out.read_text() != reference.read_text():
            raise WrongAnswer("the re-scan of the unchanged tree differs from a cold scan")
        victim = victims[i % len(victims)]
        text = victim.read_text(encoding="utf-8")
        victim.unlink()  # a hard link: replace the file, never write through to the original
        # One replica fewer (or two where there is one: the file must change), so the audit's own
        # work stays about the same.
        edited = re.sub(
            r"replicas: (\d+)",
            lambda m: f"replicas: {int(m.group(1)) - 1 if int(m.group(1)) > 1 else 2}",
            text,
            count=1,
        )
        if edited == text:
            raise WrongAnswer(f"the edit of {victim} changed nothing")
        victim.write_text(edited, encoding="utf-8")
        run_child(["scan", str(tree), str(out), "1", *cache_flags], one)
        run_child(["scan", str(tree), str(reference), "1", "--no-cache"], cold)
        if out.read_text() != reference.read_text():
            raise WrongAnswer(f"the re-scan after changing {victim} differs from a cold scan")
        # A namespace's policy selects other pods: its namespace, and those naming its Services, again.
        target = policies[i % len(policies)]
        text = target.read_text(encoding="utf-8")
        target.unlink()
        target.write_text(
            re.sub(r"(\n    matchLabels:\n\s+\S+: )(\S+)", r"\1\2-x", text, count=1), encoding="utf-8"
        )
        run_child(["scan", str(tree), str(out), "1", *cache_flags], policy)
        run_child(["scan", str(tree), str(reference), "1", "--no-cache"], cold)
        if out.read_text() != reference.read_text():
            raise WrongAnswer(f"the re-scan after changing {target} differs from a cold scan")
        print(
            f"  incremental {i + 1}/{runs}: unchanged {warm.cpu[-1]:.2f} s CPU, "
            f"one workload file changed {one.cpu[-1]:.2f} s CPU, one policy file changed "
            f"{policy.cpu[-1]:.2f} s CPU (reports = cold scans')",
            flush=True,
        )
    size = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
    return {
        "fill": fill,
        "unchanged": warm,
        "one_file": one,
        "policy_file": policy,
        "cold": cold,
        "cache_bytes": size,
    }


def growth_runs(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """The parse floor and a `--jobs 1` cold scan at 1×, 2× and 4× a quarter of the asked size
    (jobs, policies and nodes scaled together), one run each, and their fitted exponents. Each
    scan must audit every object its repository holds and exit 0 (`--fail-on none`)."""
    sizes: list[int] = []
    parse_cpu: list[float] = []
    scan_cpu: list[float] = []
    for factor in growth.FACTORS:
        where = tmp / f"growth-{factor}"
        counts = gen_repo.generate_repo(
            where,
            max(1, args.jobs * factor // 4),
            max(1, args.policies * factor // 4),
            max(3, args.nodes * factor // 4),
            args.seed,
        )
        parse, scan = Measured(), Measured()
        report = tmp / f"growth-{factor}.json"
        run_child(["parse", str(where)], parse)
        run_child(["scan", str(where), str(report), "1", "--no-cache"], scan)
        summary = json.loads(report.read_text()).get("summary", {})
        if scan.last.get("exit") != 0 or not summary.get("audited_objects"):
            raise WrongAnswer(f"the growth scan of {where} audited nothing or failed: {summary}")
        sizes.append(counts["objects"])
        parse_cpu.append(parse.cpu[-1])
        scan_cpu.append(scan.cpu[-1])
        print(
            f"  growth {factor}×: {counts['objects']:,} objects, parse {parse.cpu[-1]:.2f} s CPU, "
            f"scan --jobs 1 {scan.cpu[-1]:.2f} s CPU ({scan.cpu[-1] / parse.cpu[-1]:.2f}× the floor)",
            flush=True,
        )
        shutil.rmtree(where, ignore_errors=True)
    k_scan, k_parse = growth.exponent(sizes, scan_cpu), growth.exponent(sizes, parse_cpu)
    print(f"growth scan --jobs 1 (process CPU): exponent {k_scan:.2f}; parse floor: exponent {k_parse:.2f}")
    return {"growth_objects": sizes, "growth_scan_cpu": scan_cpu, "growth_parse_cpu": parse_cpu}


def busy(count: int) -> list[subprocess.Popen[bytes]]:
    """`count` processes spinning on a CPU each (a machine where other work is running)."""
    spin = "while True: pass"
    return [subprocess.Popen([sys.executable, "-c", spin], stdin=subprocess.DEVNULL) for _ in range(count)]


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
    parser.add_argument("--base", type=Path, help="also time this checkout's scan (A/B), e.g. /work/base")
    parser.add_argument("--busy", type=int, default=0, metavar="N", help="keep N CPU-bound processes running")
    parser.add_argument("--skip-incremental", action="store_true")
    parser.add_argument("--no-growth", action="store_true", help="skip the 1×/2×/4× growth runs (b4)")
    parser.add_argument("--incremental-only", action="store_true", help="only the cache part (b3)")
    args = parser.parse_args(argv)

    burners = busy(args.busy)
    try:
        return _run(args)
    except WrongAnswer as exc:
        print(f"WRONG ANSWER: {exc}", file=sys.stderr)
        return 1
    finally:
        for b in burners:
            b.kill()
            b.wait()


def _run(args: argparse.Namespace) -> int:
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
        compile_sources(HERE.parent, args.base)
        load = os.getloadavg()
        print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {args.busy} busy process(es)")
        mode, why = build_mode()
        print(f"auditor build: {mode} ({why})")
        figures["build"] = {"mode": mode, "why": why}
        if not args.incremental_only:
            pure = Measured() if mode == "compiled" else None
            parse, scan, single, base = measure(directory, args.runs, report, args.base, pure)
            ratio = scan.median / parse.median
            single_ratio = single.median / parse.median
            doc = json.loads(report.read_text())
            summary = doc.get("summary", {})
            print(f"parse only (PyYAML CSafeLoader, {parse.last['documents']:,} documents): {parse.line()}")
            print(f"auditor scan: {scan.line()}")
            print(f"auditor scan --jobs 1 (one process): {single.line()}")
            print(
                f"ratio scan/parse: {ratio:.2f}× "
                f"(target ≤ 1.0×: {_verdict(ratio <= 1)}; {os.cpu_count()} CPUs)"
            )
            print(f"ratio scan --jobs 1/parse: {single_ratio:.2f}× (one process; same report)")
            cpu_ratio = single.cpu_median / parse.cpu_median
            print(f"ratio scan --jobs 1/parse, process CPU: {cpu_ratio:.2f}×")
            if pure is not None:
                print(f"auditor scan --jobs 1 from its Python sources ({PURE}): {pure.line()}")
                print(
                    f"ratio from source/parse: {pure.median / parse.median:.2f}×, process CPU "
                    f"{pure.cpu_median / parse.cpu_median:.2f}×; compiled/from source, process CPU: "
                    f"{single.cpu_median / pure.cpu_median:.2f}× (same report)"
                )
                figures.update(pure_seconds=pure.seconds, pure_cpu=pure.cpu)
            default_vs_single = statistics.median(scan.wall) / statistics.median(single.wall)
            workers = sorted({w for w in scan.workers if w is not None})
            # With one worker the default mode is --jobs 1's code path: the two differ by noise.
            same_path = workers == [1]
            why = "; the default mode chose one process, the --jobs 1 path, in every run" if same_path else ""
            print(
                f"default mode / --jobs 1, process wall: {default_vs_single:.2f}× "
                f"(target ≤ 1.0×: {_verdict(default_vs_single <= 1.0 or same_path)}{why}); "
                f"CPU {scan.cpu_median / single.cpu_median:.2f}×; workers chosen {workers or 'unknown'}"
            )
            if base is not None:
                print(f"base {args.base} --jobs 1: {base.line()}")
                print(
                    f"ratio ours/base (--jobs 1, process CPU): {single.cpu_median / base.cpu_median:.2f}× "
                    f"(ours {single.cpu_median / parse.cpu_median:.2f}×, "
                    f"base {base.cpu_median / parse.cpu_median:.2f}× "
                    f"the parse floor; target ≤ 1.0×: {_verdict(single.cpu_median <= base.cpu_median)})"
                )
                figures.update(base_seconds=base.seconds, base_cpu=base.cpu, base_wall=base.wall)
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
                parse_cpu=parse.cpu,
                scan_cpu=scan.cpu,
                single_process_scan_cpu=single.cpu,
                load_average=load,
                busy=args.busy,
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
                        out = str(sub_report if i == 0 else os.devnull)
                        run_child(["scan", str(target), out, "0", "--no-cache"], sub)
                    ours = statistics.median(sub.wall)
                    sub_summary = json.loads(sub_report.read_text()).get("summary", {})
                    scope = f"a SUBSET of {objects:,} objects in {files:,} files"
                    print(
                        f"auditor scan of the subset: {sub.line()}; "
                        f"{sub_summary.get('findings', 0):,} findings, "
                        f"{sub_summary.get('errors', 0):,} errors"
                    )
                    figures["checkov_subset"] = {
                        "objects": objects,
                        "files": files,
                        "our_seconds": sub.seconds,
                    }
                print(f"checkov on {scope} ...", flush=True)
                run = checkov_baseline.run_checkov(checkov, target, args.checkov_timeout)
                cratio = run.seconds / ours
                print(
                    f"checkov {run.version} (kubernetes framework, one run) on {scope}: "
                    f"{checkov_baseline.describe(run)}"
                )
                print(
                    f"ratio checkov/ours on {scope}: {cratio:.2f}× "
                    f"(ours {ours:.2f} s, whole process like Checkov's; "
                    f"target ≥ 20×: {_verdict(cratio >= 20)})"
                )
                figures.update(
                    checkov_seconds=run.seconds,
                    checkov_peak_rss=run.peak_rss_bytes,
                    ratio_checkov_ours=cratio,
                )
        if not args.skip_incremental:
            inc = incremental(directory, args.runs, tmp)
            fill, warm, one = inc["fill"], inc["unchanged"], inc["one_file"]
            print(f"cold scans alternated with them (--no-cache --jobs 1): {inc['cold'].line()}")
            cold = inc["cold"].cpu_median
            print(f"cache fill (cold scan writing the cache, --jobs 1): {fill.line()}")
            print(f"re-scan, nothing changed: {warm.line()}")
            print(f"re-scan, one workload file changed: {one.line()}")
            print(f"re-scan, one policy file changed: {inc['policy_file'].line()}")
            share = one.cpu_median / cold
            print(
                f"ratio one-file re-scan / cold scan (--jobs 1, process CPU): {share:.3f} "
                f"(target ≤ 0.15: {_verdict(share <= 0.15)}); policy file "
                f"{inc['policy_file'].cpu_median / cold:.3f}; unchanged {warm.cpu_median / cold:.3f}; "
                f"fill {fill.cpu_median / cold:.2f}; cache {inc['cache_bytes'] / MIB:,.0f} MiB; "
                "every report equal to a cold scan's"
            )
            # Each re-scan against the cold scan of the same tree run right after it (the cold
            # runs are: one after the fill, then one after each one-file and each policy re-scan):
            # how far the verdict is from the machine's noise.
            for what, rescans, offset in (
                ("one workload file", one, 1),
                ("one policy file", inc["policy_file"], 2),
            ):
                pairs = [r / inc["cold"].cpu[offset + 2 * i] for i, r in enumerate(rescans.cpu)]
                print(
                    f"  paired ({what} re-scan / the cold scan right after it): median "
                    f"{statistics.median(pairs):.3f}, from {min(pairs):.3f} to {max(pairs):.3f}; "
                    f"≤ 0.15 in {sum(r <= 0.15 for r in pairs)} of {len(pairs)} pairs"
                )
            # The same in-process (without interpreter start and `import auditor.cli`, about 0.15 s
            # of every process), as the scan-to-parse ratio above is measured: printed, not judged.
            print(
                f"ratio one-file re-scan / cold scan, in-process: {one.median / inc['cold'].median:.2f} "
                f"(process start and imports: about {one.cpu_median - one.median:.2f} s of the re-scan's CPU)"
            )
            figures.update(
                cache_fill_cpu=fill.cpu,
                rescan_unchanged_cpu=warm.cpu,
                rescan_one_file_cpu=one.cpu,
                rescan_one_file_wall=one.wall,
                rescan_policy_file_cpu=inc["policy_file"].cpu,
                ratio_one_file_cold=share,
                cache_bytes=inc["cache_bytes"],
            )
        if not args.no_growth and not args.incremental_only:
            figures.update(growth_runs(args, tmp))
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
