"""Live-cluster audit benchmark. Prints figures; never fails on time.

Generates a cluster as the API server would report it — 5,000 Nodes over three zones (CPU pools,
A100 and H100 GPU pools behind the `nvidia.com/gpu=present:NoSchedule` taint, H100 in two zones
only, a few cordoned nodes), 150,000 Pods and 10,000 policies — serves it from the local list-API
server (world/apiserver.py, which the cluster tests use too) in this process, and runs
`auditor cluster --format json` end to end in a child process, so that the peak RSS measured is the
audit's own (os.wait4 on that child).

The pods are owned as in a real cluster: Deployments → ReplicaSets (the current one plus old ones
scaled to zero, a few rollouts in progress) → Pods carrying the template labels plus
pod-template-hash; a few hundred Kubeflow PyTorchJobs (Master ×1 and Workers, pods labelled by the
training operator and owned by the job, some split across zones, some Pending with the
scheduler's message, some finished); DaemonSets on every node (kube-proxy, node-exporter) and on
the GPU nodes (nvidia-device-plugin). Pods are bound to nodes with pod IPs from the node's podCIDR,
full defaulted specs, status with conditions and containerStatuses, and managedFields (the reader
drops those on arrival). Services: one per Deployment (apps name each other's Services in their
env, which gives the audit its edges), and the headless per-replica Services the training
operator creates. Policies: NetworkPolicies of the shapes in synth.py, a share of
CiliumNetworkPolicies (with kube-system/cilium-config, as a Cilium cluster has it), and in the
training namespaces default-deny, per-job allow and zone-boundary policies.

    python benchmarks/bench_cluster.py                                  # full size
    python benchmarks/bench_cluster.py --nodes 500 --pods 15000 --policies 1000
    python benchmarks/bench_cluster.py --profile                        # and a cProfile run

Targets on the 2-core machine (issue 17): audit ≤ 20 s wall, ≤ 1.5 GiB peak RSS. The child leaves as the
`auditor` program does after a one-shot audit (os._exit, the heap not freed); the --steps run frees
it, and its breakdown shows that as "interpreter exit".
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar
from urllib.parse import urlsplit

from world import growth
from world.apiserver import PLURALS, FakeCluster, kubeconfig, serve
from world.cluster import CRDS, generate

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

Obj = dict[str, Any]
P = ParamSpec("P")
R = TypeVar("R")

TARGET_SECONDS = 20.0  # issue 17
TARGET_RSS_MIB = 1.5 * 1024.0

# -- serving -----------------------------------------------------------------------------------


class TimedCluster(FakeCluster):
    """FakeCluster that also counts, per path, the seconds spent answering and the bytes sent:
    the list API's own share of the audit's wall time (a real API server has one too)."""

    def __init__(self, objects: list[Obj], crds: set[str]) -> None:
        super().__init__(objects, crds)
        self.preserialize()  # a real API server serves lists from its watch cache
        self.seconds: dict[str, float] = defaultdict(float)
        self.sent: dict[str, int] = defaultdict(int)
        self.pages: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()

    def answer(self, raw_path: str, headers: Any) -> tuple[int, dict[str, str], bytes]:
        t0 = time.perf_counter()
        code, head, body = super().answer(raw_path, headers)
        spent = time.perf_counter() - t0
        path = urlsplit(raw_path).path
        with self._lock:
            self.seconds[path] += spent
            self.sent[path] += len(body)
            self.pages[path] += 1
        return code, head, body

    def reset(self) -> None:
        self.seconds.clear()
        self.sent.clear()
        self.pages.clear()


# -- the child: the audit, with a phase breakdown ----------------------------------------------


def _rss_mib() -> float:
    with Path("/proc/self/statm").open() as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_mib() -> float:
    """This program's own peak RSS (VmHWM). Not getrusage's ru_maxrss: a child spawned by a
    parent holding the generated cluster inherits the parent's high-water mark across exec."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child(config: str, report: str, result: str, profile_out: str | None, steps: bool, spawned: float) -> int:
    """The audit in this process. Default: `auditor cluster` exactly as users run it (cli.main).
    With `steps`: the same sequence cmd_cluster runs, through the same public functions, each
    timed (the phase breakdown); the parent checks that both give the same report."""
    t0 = time.time()
    from auditor import cli
    from auditor.audit.scan import scan
    from auditor.clock import system_clock, utc_date
    from auditor.model.source import NotAudited
    from auditor.reports import json_report
    from auditor.rules.packs import load_packs
    from auditor.sources import cluster, prometheus
    from auditor.sources.kubeapi import ReadOptions

    phases: list[dict[str, Any]] = [{"name": "process start + imports", "seconds": time.time() - spawned}]
    argv = ["cluster", "--kubeconfig", config, "--format", "json", "--output", report, "--fail-on", "none"]
    code = 0
    t1 = time.perf_counter()
    if profile_out is not None:
        profiler = cProfile.Profile()
        code = profiler.runcall(cli.main, argv)
        profiler.dump_stats(profile_out)
    elif not steps:
        code = cli.main(argv, one_shot=True)
    else:
        gc.disable()  # as cmd_cluster does (gcpause.paused)

        def step(name: str, fn: Callable[[], R]) -> R:
            w0, c0 = time.perf_counter(), _cpu()
            out = fn()
            phases.append(
                {
                    "name": name,
                    "seconds": time.perf_counter() - w0,
                    "cpu_seconds": _cpu() - c0,
                    "rss_after": _rss_mib(),
                    "peak_after": _peak_mib(),
                }
            )
            return out

        settings, pack = step("settings and policy packs", lambda: (cli.load_settings(None), load_packs([])))
        read = step(
            "read_cluster (list API: all resources, concurrent)",
            lambda: cluster.read_cluster(None, config, False, ReadOptions.from_settings(settings)),
        )
        inv = step(
            "inventory_from_read (typed objects, policies)",
            lambda: cluster.inventory_from_read(read, settings),
        )
        res = step(
            "scan (placement, edges, verdicts, rules)", lambda: scan(inv, pack, utc_date(system_clock))
        )
        res.findings = step(
            "prometheus.enrich",
            lambda: prometheus.enrich(res.findings, inv, settings, os.environ, res.observation),
        )
        res.not_audited += [
            NotAudited(f"cluster:{read.context}/{p.what}", f"{p.problem}: {p.message}")
            for p in read.incomplete
        ]
        text = step("JSON report", lambda: json_report.render(res))
        step("write report", lambda: Path(report).write_text(text, encoding="utf-8"))
    main_s = time.perf_counter() - t1
    Path(result).write_text(
        json.dumps(
            {
                "exit_code": code,
                "import_s": t1 - t0 + (t0 - spawned),
                "main_s": main_s,
                "phases": phases,
                "peak_mib": _peak_mib(),
                "cpu_seconds": _cpu(),
                "ended": time.time(),
            }
        )
    )
    if getattr(cli, "_KEPT", None):
        # Leave as the `auditor` program does after a one-shot audit (cli.entry: os._exit, without
        # freeing what the audit built), so the wall and CPU measured are the program's.
        leave = getattr(cli, "leave", None)  # (a --before tree may predate it)
        if leave is not None:
            leave(0)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


# -- the parent --------------------------------------------------------------------------------


@dataclass
class ChildRun:
    wall: float
    cpu: float  # user + system of the child (os.wait4)
    peak_mib: float  # the child's own VmHWM
    exit_code: int
    result: dict[str, Any]
    stderr: str


def run_child(
    config: Path,
    work: Path,
    tag: str,
    profile_out: Path | None = None,
    steps: bool = False,
    product: str | None = None,
) -> ChildRun:
    """One audit in a child process; `product`: a checkout of the product to run instead (PYTHONPATH)."""
    report, result, err = work / f"{tag}.json", work / f"{tag}.result.json", work / f"{tag}.stderr"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(config), str(report), str(result)]
    if profile_out is not None:
        cmd += ["--profile-out", str(profile_out)]
    if steps:
        cmd.append("--steps")
    with err.open("wb") as errf:
        spawned = time.time()
        t0 = time.perf_counter()
        env = dict(os.environ)
        if product:
            env["PYTHONPATH"] = product + os.pathsep + env.get("PYTHONPATH", "")
        proc = subprocess.Popen(
            [*cmd, "--spawned", repr(spawned)], stdout=subprocess.DEVNULL, stderr=errf, cwd=ROOT, env=env
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    ended = spawned + wall
    proc.returncode = os.waitstatus_to_exitcode(status)
    data = json.loads(result.read_text()) if result.exists() else {}
    if data.get("phases") and "ended" in data:
        data["phases"].append(
            {"name": "interpreter exit (freeing the heap)", "seconds": ended - data["ended"]}
        )
    return ChildRun(
        wall,
        usage.ru_utime + usage.ru_stime,
        float(data.get("peak_mib", 0.0)),
        proc.returncode,
        data,
        err.read_text(errors="replace"),
    )


def _mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB"


def _short(path: str) -> str:
    for prefix in (str(ROOT) + "/", *(p + "/" for p in sys.path if p.endswith("site-packages"))):
        if path.startswith(prefix):
            return path[len(prefix) :]
    return path


def print_profile(path: Path, top: int = 25) -> None:
    stats = pstats.Stats(str(path))
    table: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    rows = sorted(table.items(), key=lambda kv: kv[1][3], reverse=True)
    total = max((v[3] for _, v in rows), default=0.0)
    print(f"  cProfile (profiled run: {total:.1f} s under the profiler), top {top} by cumulative time:")
    print(f"  {'cumul s':>8} {'own s':>7} {'calls':>10}  function")
    for (file, line, func), (_, ncalls, tottime, cumtime, _) in rows[:top]:
        where = f"{_short(file)}:{line}({func})" if line else func
        print(f"  {cumtime:8.2f} {tottime:7.2f} {ncalls:10,}  {where}")
    print("  top 15 by own time (own time includes GC pauses triggered by the function's allocations):")
    for (file, line, func), (_, ncalls, tottime, cumtime, _) in sorted(
        rows, key=lambda kv: kv[1][2], reverse=True
    )[:15]:
        where = f"{_short(file)}:{line}({func})" if line else func
        print(f"  {cumtime:8.2f} {tottime:7.2f} {ncalls:10,}  {where}")


def report_findings(path: Path) -> None:
    if not path.exists():
        print("  no report written")
        return
    doc = json.loads(path.read_text())
    findings = doc.get("findings", [])
    by = Counter((f["rule"], f["certainty"]) for f in findings)
    sev = Counter(f["severity"] for f in findings)
    print(
        f"findings: {len(findings):,} ({', '.join(f'{s} {n:,}' for s, n in sev.most_common())}); "
        f"errors: {len(doc.get('errors', [])):,}"
    )
    print(f"  {'rule':<30} {'certainty':<10} {'count':>7}")
    for (rule, certainty), n in sorted(by.items()):
        print(f"  {rule:<30} {certainty:<10} {n:>7,}")
    notes = doc.get("notes", [])
    if notes:
        print(f"  notes ({len(notes)}):")
        for note in notes[:8]:
            print(f"    {note[:160]}")
    for e in doc.get("errors", [])[:5]:
        print(f"  error: {e}")


def print_phases(run: ChildRun) -> float:
    """The step run's phases; returns the share of its wall time they account for."""
    phases = run.result.get("phases") or []
    print(
        f"  {'phase (the --steps run)':<52} {'seconds':>8} {'share':>6} {'cpu s':>7} "
        f"{'RSS after':>10} {'peak':>8}"
    )
    for p in phases:
        memory = f"{p['rss_after']:8,.0f}Mi {p['peak_after']:6,.0f}Mi" if "rss_after" in p else ""
        cpu = f"{p['cpu_seconds']:7.2f}" if "cpu_seconds" in p else " " * 7
        print(f"  {p['name']:<52} {p['seconds']:8.2f} {p['seconds'] / run.wall:6.0%} {cpu} {memory}")
    covered = sum(p["seconds"] for p in phases) / run.wall if run.wall else 0.0
    print(f"  the phases account for {covered:.1%} of the step run's {run.wall:.1f}s wall (target ≥ 95%)")
    return covered


def findings_key(path: Path) -> tuple[Any, ...]:
    doc = json.loads(path.read_text())
    return (doc.get("summary"), doc.get("findings"), doc.get("errors"))


def counts_by_rule(path: Path) -> dict[str, int]:
    doc = json.loads(path.read_text())
    by = Counter(f"{f['rule']}/{f['certainty']}" for f in doc.get("findings", []))
    return dict(sorted(by.items()))


# Findings by rule/certainty of the default world (seed 1, default sizes), from the reference run
# of 2026-12-03 (before this change: the same counts). A different count is a wrong answer.
EXPECTED_DEFAULT: dict[str, int] = {
    "cross-zone-blocked/always": 21,
    "cross-zone-blocked/observed": 168,
    "cross-zone-traffic/likely": 119,
    "cross-zone-traffic/observed": 33,
    "role-unschedulable/observed": 28,
    "traffic-blocked/observed": 2079,
}


def audit(
    args: argparse.Namespace, nodes: int, pods: int, policies: int, *, breakdown: bool
) -> tuple[int, float, float]:
    """Generate, serve and audit one cluster; returns (status, audit wall seconds, its CPU seconds)."""
    t0 = time.perf_counter()
    objects, stats = generate(
        nodes, pods, policies, args.cilium_share, args.jobs, args.deployments, args.seed
    )
    gen_s = time.perf_counter() - t0
    kinds = Counter(o["kind"] for o in objects)
    missing = {(o["apiVersion"], o["kind"]) for o in objects} - set(PLURALS)
    if missing:
        print(f"error: the fake API server does not serve {sorted(missing)}", file=sys.stderr)
        return 2, 0.0, 0.0
    gc.collect()
    gc.freeze()  # the generated cluster is permanent: keep the collector off it while serving
    print(
        f"generation: {gen_s:.1f}s, {len(objects):,} objects "
        f"({nodes:,} nodes, {pods:,} pods, {policies:,} policies)"
    )
    if breakdown:
        print("  " + ", ".join(f"{k} {n:,}" for k, n in kinds.most_common()))
        print(
            f"  pods: {stats.deployment_pods:,} of {stats.deployments:,} Deployments "
            f"({stats.replicasets:,} ReplicaSets, {stats.rollouts} rollouts in progress), "
            f"{stats.daemonset_pods:,} of {stats.daemonsets} DaemonSets, {stats.job_pods:,} of {stats.jobs} "
            f"PyTorchJobs ({stats.split_jobs} split across zones, {stats.pending_jobs} with Pending pods, "
            f"{stats.finished_jobs} finished, {stats.fenced_jobs} in zone-fenced namespaces of which "
            f"{stats.stray_masters} with the master in another zone); {stats.pending_pods:,} Pending pods"
        )
    status = 0
    cluster = TimedCluster(objects, CRDS)
    with tempfile.TemporaryDirectory() as tmp, serve(cluster) as url:
        work = Path(args.keep) / f"p{pods}" if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        config = kubeconfig(work / "kubeconfig", url)
        before = run_child(config, work, "before", product=args.before) if args.before else None
        run = run_child(config, work, "audit")
        served_s, sent, pages = (
            sum(cluster.seconds.values()),
            sum(cluster.sent.values()),
            sum(cluster.pages.values()),
        )
        met = run.wall <= TARGET_SECONDS and run.peak_mib <= TARGET_RSS_MIB
        print(
            f"audit (`auditor cluster --format json`, child process): wall {run.wall:.1f}s, "
            f"cpu {run.cpu:.1f}s, "
            f"peak RSS {run.peak_mib:,.0f} MiB, exit code {run.exit_code} (targets ≤ {TARGET_SECONDS:.0f} s, "
            f"≤ {TARGET_RSS_MIB:,.0f} MiB: {'met' if met else 'OVER'})"
        )
        print(
            f"  fake API server (this process): {pages:,} requests, {_mb(sent)} of JSON, "
            f"{served_s:.1f}s answering"
        )
        if run.exit_code != 0 or run.result.get("exit_code") != 0:
            status = 1
            print("WRONG: the audit failed; child stderr (tail):", file=sys.stderr)
            for line in run.stderr.strip().splitlines()[-15:]:
                print(f"    {line}", file=sys.stderr)
            return status, run.wall, run.cpu
        if before is not None:
            print(
                f"  before ({args.before}, run just before in the same sitting): wall {before.wall:.1f}s, "
                f"cpu {before.cpu:.1f}s, peak RSS {before.peak_mib:,.0f} MiB → after/before "
                f"{run.wall / before.wall:.2f}× wall, {run.cpu / before.cpu:.2f}× cpu"
            )
            if not (work / "before.json").exists() or findings_key(work / "before.json") != findings_key(
                work / "audit.json"
            ):
                print("WRONG: the findings differ from the before run's", file=sys.stderr)
                status = 1
        counts = counts_by_rule(work / "audit.json")
        print(f"  findings by rule/certainty: {counts}")
        default = (nodes, pods, policies, args.seed, args.cilium_share, args.jobs, args.deployments) == (
            5_000,
            150_000,
            10_000,
            1,
            0.1,
            None,
            None,
        )
        if default and counts != EXPECTED_DEFAULT:
            print(f"WRONG: findings differ from the reference run: {EXPECTED_DEFAULT}", file=sys.stderr)
            status = 1
        if breakdown:
            steps = run_child(config, work, "steps", steps=True)
            if steps.exit_code != 0 or not (work / "steps.json").exists():
                print(f"WRONG: the step run failed:\n{steps.stderr[-2000:]}", file=sys.stderr)
                return 1, run.wall, run.cpu
            print(
                f"step run (the same public functions cmd_cluster calls, each timed): "
                f"wall {steps.wall:.1f}s, "
                f"peak RSS {steps.peak_mib:,.0f} MiB"
            )
            covered = print_phases(steps)
            if findings_key(work / "steps.json") != findings_key(work / "audit.json"):
                print("WRONG: the step run's report differs from `auditor cluster`'s", file=sys.stderr)
                status = 1
            if covered < 0.95:
                print(f"note: the breakdown covers only {covered:.0%} of the wall time", file=sys.stderr)
            report_findings(work / "audit.json")
        if args.profile and breakdown:
            cluster.reset()
            prof = work / "audit.prof"
            prun = run_child(config, work, "profiled", prof)
            print(
                f"profiled run: wall {prun.wall:.1f}s, fake API server {sum(cluster.seconds.values()):.1f}s"
            )
            if prof.exists():
                print_profile(prof)
    gc.unfreeze()
    del objects, cluster
    gc.collect()
    return status, run.wall, run.cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=5_000)
    ap.add_argument("--pods", type=int, default=150_000)
    ap.add_argument("--policies", type=int, default=10_000)
    ap.add_argument(
        "--cilium-share", type=float, default=0.1, help="share of the app policies that are Cilium's"
    )
    ap.add_argument("--jobs", type=int, help="PyTorchJobs (default: pods / 500)")
    ap.add_argument("--deployments", type=int, help="Deployments (default: pods / 60)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--profile", action="store_true", help="also run the audit once under cProfile")
    ap.add_argument("--keep", metavar="DIR", help="keep the reports and the profile in DIR")
    ap.add_argument(
        "--no-growth", action="store_true", help="skip the 1×/2×/4× runs (a quarter, half and the full size)"
    )
    ap.add_argument("--before", metavar="DIR", help="also audit with the product checked out in DIR")
    ap.add_argument("--child", nargs=3, metavar=("KUBECONFIG", "REPORT", "RESULT"), help=argparse.SUPPRESS)
    ap.add_argument("--profile-out", help=argparse.SUPPRESS)
    ap.add_argument("--steps", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--spawned", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(*args.child, args.profile_out, args.steps, args.spawned or time.time())
    print(growth.machine_load())
    status, wall, cpu = audit(args, args.nodes, args.pods, args.policies, breakdown=True)
    if not args.no_growth and status == 0:
        # The full size is the 4× point; a quarter and a half of every count are 1× and 2×.
        sizes, times, cpus = [], [], []
        for f in (1, 2):
            st, w, c = audit(
                args, args.nodes * f // 4, args.pods * f // 4, args.policies * f // 4, breakdown=False
            )
            status |= st
            sizes.append(args.pods * f // 4)
            times.append(w)
            cpus.append(c)
        sizes.append(args.pods)
        times.append(wall)
        cpus.append(cpu)
        print(
            "growth live audit: "
            + ", ".join(f"{n:,} pods {t:.1f}s" for n, t in zip(sizes, times, strict=True))
            + f" → exponent {growth.exponent(sizes, times):.2f} (wall), "
            + f"{growth.exponent(sizes, cpus):.2f} (cpu: "
            + ", ".join(f"{c:.1f}s" for c in cpus)
            + ")"
        )
    return status


if __name__ == "__main__":
    sys.exit(main())
