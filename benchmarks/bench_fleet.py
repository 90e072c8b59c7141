"""Fleet benchmark: pull-request checks of generated repositories on 1, 2 and 4 Celery workers.

Parts, all real: N (default 200) small repositories generated with git (the seed lab with its own
namespace per repository; `main` without policies, a `feature` branch adding the zone-isolating
CiliumNetworkPolicies), each a bare repository behind the local GitHub (App JWT, installation
tokens, check runs); PostgreSQL on 127.0.0.1:5432 (a fresh schema per worker count); a
redis-server of its own on a free port; the service (`build_service`, uvicorn) taking webhooks
signed as GitHub signs them; `auditor worker --pool solo` processes.

For each worker count W in --workers: start W workers, send one `pull_request` `opened` webhook per
repository as fast as the service answers, and wait until every head SHA has a completed check run.
Figures: throughput (check runs per second, first webhook to last check run), p50/p95 time from a
repository's webhook to its check run, worker CPU-seconds per check (utime+stime of each worker and
the git processes it waited for, from /proc) and peak RSS; ratios to W=1. Then, once with the
largest W, a `push` webhook per repository (a stored audit of the App target): database rows per
run by table. Answers are checked: every check run must be `failure` with exactly one annotation,
`cross-zone-blocked` on training/workload.yaml line 38, one check run per head SHA; every stored
run `succeeded` with one finding — the benchmark exits 1 otherwise. Never fails on time.

    .venv/bin/python benchmarks/bench_fleet.py                 # 200 repositories, 1, 2, 4 workers
    .venv/bin/python benchmarks/bench_fleet.py --repos 40 --workers 1,2
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, text
from world import growth
from world.fakegithub import FakeGitHub, MultiHub, serve
from world.github import APP_ID, SECRET, app_key, deliver, pull_request_event, push_event
from world.httpserve import serving
from world.postgres import pg_schema, pg_url
from world.processes import redis_server, start_worker, stop

from auditor.bootstrap import build_service
from auditor.resources import examples_dir
from auditor.settings.config import load_settings

SEED = examples_dir() / "seed-lab"
PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "PATH": "/usr/bin:/bin",
}


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True, text=True, check=True
    ).stdout.strip()


def generate(root: Path, count: int) -> list[tuple[str, Path, str, str]]:
    """(full_name, bare, main SHA, feature SHA) per generated repository."""
    workload = (SEED / "before" / "workload.yaml").read_text()
    nodes = (SEED / "nodes.yaml").read_text()
    policies = (SEED / "policies.yaml").read_text()
    out = []
    (root / "acme").mkdir(parents=True)
    for i in range(count):
        name = f"r{i:03d}"
        ns = f"ml-{i:03d}"
        work = root / "work" / name
        (work / "training").mkdir(parents=True)
        (work / "nodes").mkdir()
        (work / "training" / "workload.yaml").write_text(workload.replace("ml-demo", ns))
        (work / "nodes" / "nodes.yaml").write_text(nodes)
        git("init", "--quiet", "-b", "main", cwd=work)
        git("add", "--all", cwd=work)
        git("commit", "--quiet", "-m", "training job", cwd=work)
        main = git("rev-parse", "HEAD", cwd=work)
        git("checkout", "--quiet", "-b", "feature", cwd=work)
        (work / "policies").mkdir()
        (work / "policies" / "cilium.yaml").write_text(policies.replace("ml-demo", ns))
        git("add", "--all", cwd=work)
        git("commit", "--quiet", "-m", "zone isolation", cwd=work)
        head = git("rev-parse", "HEAD", cwd=work)
        git("checkout", "--quiet", "main", cwd=work)  # the bare repository's HEAD: main
        bare = root / "acme" / f"{name}.git"
        git("clone", "--quiet", "--bare", str(work), str(bare), cwd=root)
        out.append((f"acme/{name}", bare, main, head))
    return out


def proc_cpu(pid: int) -> tuple[float, int]:
    """CPU seconds of the process and its waited-for children, and peak RSS (kB)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = sum(int(fields[i]) for i in (11, 12, 13, 14)) / ticks  # utime stime cutime cstime
    hwm = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
    return cpu, hwm


PACE = {"writes": 1.0}  # service.github_app.seconds_between_writes (--seconds-between-writes)


def config(path: Path, db: str, broker: str, gh: str, root: Path, key: Path, cache: str) -> Path:
    path.write_text(
        f"database: {{url: '{db}'}}\n"
        "service:\n  catch_up: false\n"
        f"  git_cache_dir: '{root / cache}'\n"
        "  broker:\n"
        f"    url: '{broker}'\n    url_env: ''\n    visibility_timeout_seconds: 600\n    lease_seconds: 60\n"
        "    busy_retry_seconds: 1\n    metrics_port: 0\n"
        "  github_app:\n"
        f"    app_id: {APP_ID}\n    private_key_file: '{key}'\n    base_url: '{gh}'\n"
        f"    webhook_secret: '{SECRET}'\n    clone_url: '{root}/{{full_name}}.git'\n"
        f"    seconds_between_writes: {PACE['writes']}\n"
    )
    return path


def wait_ready(logs: list[Path], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(p.exists() and " ready." in p.read_text(errors="replace") for p in logs):
            return
        time.sleep(0.2)
    raise RuntimeError("workers did not become ready")


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run_prs(
    workers: int,
    repos: list[tuple[str, Path, str, str]],
    hub: MultiHub,
    gh: str,
    broker: str,
    root: Path,
    key: Path,
) -> dict[str, Any]:
    import redis

    redis.Redis.from_url(broker).flushdb()
    for h in hub.hubs.values():
        h.check_runs.clear()
    with pg_schema(PG_URL, "bench_fleet") as schema:
        db = pg_url(PG_URL, schema)
        server_cfg = config(root / f"server-{workers}.yaml", db, broker, gh, root, key, "cache-server")
        service = build_service(load_settings(server_cfg), environ={})
        procs, logs = [], []
        try:
            for k in range(workers):
                cfg = config(root / f"w{workers}-{k}.yaml", db, broker, gh, root, key, f"cache-{workers}-{k}")
                log = root / f"w{workers}-{k}.log"
                logs.append(log)
                procs.append(start_worker(cfg, f"w{workers}-{k}", log))
            wait_ready(logs)
            before = [proc_cpu(p.pid) for p in procs]
            sent: dict[str, float] = {}
            with serving(service.app) as base:
                now = service.store.clock()
                first = time.monotonic()
                for full, _bare, main, head in repos:
                    sent[head] = time.monotonic()
                    status, body = deliver(
                        base, "pull_request", pull_request_event("opened", 1, head, main, now, full)
                    )
                    if status != 202:
                        raise RuntimeError(f"webhook for {full}: {status} {body}")
                accepted = time.monotonic() - first
                deadline = time.monotonic() + 3600
                while time.monotonic() < deadline:
                    done = sum(
                        1 for h in hub.hubs.values() for r in h.check_runs if r["status"] == "completed"
                    )
                    if done >= len(repos):
                        break
                    if any(p.poll() is not None for p in procs):
                        raise RuntimeError("a worker exited; see " + " ".join(map(str, logs)))
                    time.sleep(0.2)
            after = [proc_cpu(p.pid) for p in procs]
            errors = []
            latencies = []
            last = 0.0
            for full, _bare, _main, head in repos:
                runs = [r for r in hub.hubs[full].check_runs if r["head_sha"] == head]
                if len(runs) != 1:
                    errors.append(f"{full}: {len(runs)} check runs")
                    continue
                r = runs[0]
                titles = [a["title"].split(" ")[0] for a in r["annotations"]]
                lines = [(a["path"], a["start_line"]) for a in r["annotations"]]
                if (
                    r.get("conclusion") != "failure"
                    or titles != ["cross-zone-blocked"]
                    or lines != [("training/workload.yaml", 38)]
                ):
                    errors.append(f"{full}: {r.get('conclusion')} {titles} {lines}")
                    continue
                latencies.append(r["completed_monotonic"] - sent[head])
                last = max(last, r["completed_monotonic"])
            with service.store.sessions() as session:
                rows = {
                    t: session.scalar(select(func.count()).select_from(text(t)))
                    for t in ("check_runs", "webhook_deliveries", "runs", "target_leases")
                }
        finally:
            for p in procs:
                stop(p)
            service.store.engine.dispose()
    cpu = sum(a[0] - b[0] for a, b in zip(after, before, strict=True))
    return {
        "workers": workers,
        "errors": errors,
        "accept_seconds": accepted,
        "elapsed": last - first,
        "throughput": len(latencies) / (last - first) if latencies else 0.0,
        "p50": quantile(latencies, 0.5) if latencies else float("nan"),
        "p95": quantile(latencies, 0.95) if latencies else float("nan"),
        "cpu_per_check": cpu / max(1, len(latencies)),
        "rss_mb": max(a[1] for a in after) / 1024,
        "rows": rows,
    }


def run_pushes(
    workers: int, repos: list[tuple[str, Path, str, str]], gh: str, broker: str, root: Path, key: Path
) -> dict[str, Any]:
    import redis

    redis.Redis.from_url(broker).flushdb()
    tables = (
        "targets",
        "runs",
        "findings",
        "observations",
        "cost_estimates",
        "waivers",
        "webhook_deliveries",
        "target_leases",
    )
    with pg_schema(PG_URL, "bench_fleet") as schema:
        db = pg_url(PG_URL, schema)
        service = build_service(
            load_settings(config(root / "server-push.yaml", db, broker, gh, root, key, "cache-push")),
            environ={},
        )
        procs, logs = [], []
        try:
            for k in range(workers):
                cfg = config(root / f"p{k}.yaml", db, broker, gh, root, key, f"cache-p{k}")
                logs.append(root / f"p{k}.log")
                procs.append(start_worker(cfg, f"p{k}", logs[-1]))
            wait_ready(logs)
            before = [proc_cpu(p.pid) for p in procs]
            with serving(service.app) as base:
                now = service.store.clock()
                first = time.monotonic()
                for full, _bare, main, _head in repos:
                    status, body = deliver(base, "push", push_event(main, now, full_name=full))
                    if status != 202:
                        raise RuntimeError(f"push webhook for {full}: {status} {body}")
                while True:
                    with service.store.sessions() as session:
                        finished = session.scalar(text("SELECT count(*) FROM runs WHERE status <> 'running'"))
                    if finished >= len(repos):
                        break
                    time.sleep(0.25)
                elapsed = time.monotonic() - first
            after = [proc_cpu(p.pid) for p in procs]
            with service.store.sessions() as session:
                rows = {t: session.scalar(select(func.count()).select_from(text(t))) for t in tables}
                statuses = dict(
                    session.execute(text("SELECT status, count(*) FROM runs GROUP BY status")).all()
                )
                sizes = dict(
                    session.execute(
                        text(
                            "SELECT relname, pg_total_relation_size(c.oid) FROM pg_class c "
                            "JOIN pg_namespace n ON n.oid = c.relnamespace "
                            "WHERE n.nspname = current_schema() AND c.relkind = 'r'"
                        )
                    ).all()
                )
        finally:
            for p in procs:
                stop(p)
            service.store.engine.dispose()
    cpu = sum(a[0] - b[0] for a, b in zip(after, before, strict=True))
    errors = (
        []
        if statuses == {"succeeded": len(repos)} and rows["findings"] == len(repos)
        else [f"runs {statuses}, findings {rows['findings']}"]
    )
    return {
        "workers": workers,
        "audits": len(repos),
        "errors": errors,
        "elapsed": elapsed,
        "throughput": len(repos) / elapsed,
        "cpu_per_audit": cpu / len(repos),
        "rows": rows,
        "bytes": sizes,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repos", type=int, default=200)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument(
        "--no-growth",
        action="store_true",
        help="skip the stored audits of a quarter and half of the repositories",
    )
    parser.add_argument(
        "--seconds-between-writes",
        type=float,
        default=1.0,
        help="the App client's write pacing (default 1.0, GitHub's guidance; 0: CPU-bound checks)",
    )
    args = parser.parse_args()
    PACE["writes"] = args.seconds_between_writes
    counts = [int(x) for x in args.workers.split(",")]
    root = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    try:
        t = time.monotonic()
        repos = generate(root, args.repos)
        print(f"generated {len(repos)} repositories in {time.monotonic() - t:.1f} s ({root})")
        key, public = app_key(root)
        hubs = [
            FakeGitHub(
                bare,
                owner="acme",
                name=full.split("/")[1],
                app_id=APP_ID,
                tokens=set(),
                app_public_key=public,
                installation_ids=(7,),
            )
            for full, bare, _m, _h in repos
        ]
        hub = MultiHub(hubs)
        results = []
        with serve(hub) as gh, redis_server(root) as broker:
            for w in counts:
                r = run_prs(w, repos, hub, gh, broker, root, key)
                results.append(r)
                print(
                    f"workers={w}: {args.repos} PR checks in {r['elapsed']:.1f} s, "
                    f"{r['throughput']:.2f} checks/s, webhook→check run p50 {r['p50']:.1f} s "
                    f"p95 {r['p95']:.1f} s; webhooks accepted in {r['accept_seconds']:.2f} s; "
                    f"worker CPU {r['cpu_per_check']:.2f} s/check, peak RSS {r['rss_mb']:.0f} MiB; "
                    f"rows {r['rows']}" + (f"; ERRORS {r['errors'][:5]}" if r["errors"] else "")
                )
            push = run_pushes(max(counts), repos, gh, broker, root, key)
            # Growth of stored audits over the input: a quarter and half of the repositories, each
            # in a schema of its own (the full run above is the 4× point).
            grown = (
                []
                if args.no_growth
                else [
                    run_pushes(max(counts), repos[: max(1, len(repos) * f // 4)], gh, broker, root, key)
                    for f in growth.FACTORS[:-1]
                ]
            )
        base = results[0]
        print("\nratios to 1 worker (same run):")
        for r in results:
            print(
                f"  {r['workers']} worker(s): throughput ×{r['throughput'] / base['throughput']:.2f}, "
                f"p95 ×{r['p95'] / base['p95']:.2f}, "
                f"CPU per check ×{r['cpu_per_check'] / base['cpu_per_check']:.2f}"
            )
        if len(results) > 1:
            # Same input, more workers: elapsed ≈ c · workers^k, k = -1 for perfect scaling.
            k = growth.exponent([r["workers"] for r in results], [r["elapsed"] for r in results])
            print(f"  scaling exponent of the elapsed time over workers: {k:.2f} (-1 is linear scaling)")
        n = args.repos
        print(
            f"\nstored audits (push webhooks, {push['workers']} workers): {n} in {push['elapsed']:.1f} s, "
            f"{push['throughput']:.2f}/s, worker CPU {push['cpu_per_audit']:.2f} s/audit"
        )
        print("  rows per run: " + ", ".join(f"{t} {c / n:.2f}" for t, c in push["rows"].items()))
        print(
            "  bytes per row (table+indexes; 8 kB pages: an upper bound at this size): "
            + ", ".join(
                f"{t} {b / push['rows'][t]:.0f}"
                for t, b in sorted(push["bytes"].items())
                if push["rows"].get(t)
            )
        )
        if grown:
            sizes = [r["audits"] for r in [*grown, push]]
            times = [r["elapsed"] for r in [*grown, push]]
            print(
                "  growth stored audits: "
                + ", ".join(f"{n} repositories {t:.1f} s" for n, t in zip(sizes, times, strict=True))
                + f" → exponent {growth.exponent(sizes, times):.2f}"
            )
        print(f"\npacing: {PACE['writes']} s between writes; cpus: {os.cpu_count()}, load {os.getloadavg()}")
        bad = [e for r in [*results, push, *grown] for e in r["errors"]]
        if bad:
            print(f"WRONG ANSWERS: {bad[:10]}")
            return 1
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
