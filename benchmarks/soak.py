"""Soak with faults: the service with 2 workers on PostgreSQL and Redis under a steady stream of
webhooks and scheduled audits, while faults are injected; at the end, everything is counted.

Parts, all real and all on this machine: a PostgreSQL cluster of its own (initdb; its data on a
small tmpfs so its disk can be filled), a redis-server of its own that keeps its data (appendonly,
as deploy/kustomize/components/fleet-redis runs it), `auditor serve` and 2 `auditor worker`
processes, the local GitHub stand-in (App JWTs, installation tokens, check runs) over bare git
repositories, and an SMTP server (aiosmtpd) for the daily digest. Every process of the service —
and this script, which stamps the events and runs the GitHub stand-in — reads the wall clock through
libfaketime from one offset file, so the clock can be stepped under them; PostgreSQL and Redis keep
the real clock. The fake day starts at 06:59 so the 07:00 digest falls inside the run.

The stream: one webhook every 1/--rate seconds, alternating `pull_request` (a new head commit of a
repository: one check run expected) and `push` to `main` (a new commit: one stored audit expected),
round-robin over --repos repositories; two configured targets are audited every minute by the
schedule. A delivery that is not answered 2xx is delivered again with the same delivery id and body
after a growing pause (GitHub's redelivery of failed deliveries, as its docs suggest scripting it);
a 409 to a redelivery means an earlier attempt was accepted.

Faults, in turn, one every --fault-every seconds: SIGKILL of `serve` and of a worker (restarted
after a second, as the kubelet would), a Redis restart, a PostgreSQL crash (`pg_ctl -m immediate`)
and start, the store's disk filled for 8 s, the clock stepped 10 minutes forward and 7 back. After
each: the time until `/readyz` answers 200 again, and until the next check run completes.

At the end (after a drain of at most --drain seconds): every accepted delivery has its effect exactly
once — one completed `failure` check run per pull-request head with its `cross-zone-blocked`
annotation, one succeeded run per push key; one finding per audited target; no digest e-mail with
the same Message-ID twice and one per team for the day; no pull request opened twice; every fault
recovered within --recovery-limit seconds. One table; exit 1 when anything was lost, doubled or not
recovered. Never fails on time alone.

    .venv/bin/python benchmarks/soak.py --seconds 120          # CI: about two minutes
    .venv/bin/python benchmarks/soak.py --seconds 3600         # offline: one hour
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from world.fakegithub import FakeGitHub, MultiHub, serve
from world.github import APP_ID, SECRET, app_key, pull_request_event, push_event
from world.processes import BIN, free_port, kill9, start_worker, stop
from world.soakparts import Inbox, PostgresServer, RedisServer, SteppedClock, without_faketime

from auditor.resources import examples_dir
from auditor.service.webhooks import signature

SEED = examples_dir() / "seed-lab"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "soak",
    "GIT_AUTHOR_EMAIL": "soak@example.com",
    "GIT_COMMITTER_NAME": "soak",
    "GIT_COMMITTER_EMAIL": "soak@example.com",
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "PATH": "/usr/bin:/bin",
}
TEAMS = ("ml-platform", "lab-owners")
FAULTS = (
    "kill -9 serve",
    "kill -9 worker",
    "restart redis",
    "crash postgres",
    "fill store disk",
    "clock +10 min",
    "kill -9 worker",
    "clock -7 min",
)


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True, text=True, check=True
    ).stdout.strip()


@dataclass
class Repo:
    full_name: str
    bare: Path
    main: list[str]  # commits of main, oldest first (pushes take them in turn)
    heads: list[str]  # feature commits (pull request heads, in turn)


def make_repo(root: Path, name: str, namespace: str, pushes: int, heads: int) -> Repo:
    """A repository with the seed workload on `main` and the zone-isolating policies on `feature`;
    `pushes` more commits on main and `heads` on feature (same trees, new SHAs: `commit-tree`)."""
    work = root / "work" / name
    (work / "training").mkdir(parents=True)
    (work / "nodes").mkdir()
    (work / "training" / "workload.yaml").write_text(
        (SEED / "before" / "workload.yaml").read_text().replace("ml-demo", namespace)
    )
    (work / "nodes" / "nodes.yaml").write_text((SEED / "nodes.yaml").read_text())
    git("init", "--quiet", "-b", "main", cwd=work)
    git("add", "--all", cwd=work)
    git("commit", "--quiet", "-m", "training job", cwd=work)
    git("checkout", "--quiet", "-b", "feature", cwd=work)
    (work / "policies").mkdir()
    (work / "policies" / "cilium.yaml").write_text(
        (SEED / "policies.yaml").read_text().replace("ml-demo", namespace)
    )
    git("add", "--all", cwd=work)
    git("commit", "--quiet", "-m", "zone isolation", cwd=work)
    git("checkout", "--quiet", "main", cwd=work)
    bare = root / "acme" / f"{name}.git"
    git("clone", "--quiet", "--bare", str(work), str(bare), cwd=root)

    def chain(branch: str, count: int) -> list[str]:
        tree = git("rev-parse", f"{branch}^{{tree}}", cwd=bare)
        parent, out = git("rev-parse", branch, cwd=bare), []
        for i in range(count):
            parent = git("commit-tree", tree, "-p", parent, "-m", f"{branch} {i}", cwd=bare)
            out.append(parent)
        git("update-ref", f"refs/heads/{branch}", parent, cwd=bare)
        return out

    return Repo(f"acme/{name}", bare, chain("main", pushes), chain("feature", heads))


# -- the stream of deliveries ----------------------------------------------------------------


@dataclass
class Delivery:
    guid: str
    event: str
    body: bytes
    kind: str  # "pr" or "push"
    repo: str
    key: str  # the head SHA (pr) or the run's task key (push)
    attempts: int = 0
    sent_at: float = 0.0
    statuses: list[str] = field(default_factory=list)
    accepted_at: float | None = None
    refused: str | None = None


class Sender:
    """Delivers as GitHub does, and redelivers what failed (same id, same body) after 0.5, 1, 2 …
    up to 10 s, until it is accepted: on a few threads, so one slow answer does not stop the rest."""

    def __init__(self, base: str, threads: int = 3) -> None:
        self.base = base
        self.heap: list[tuple[float, int, Delivery]] = []
        self.all: list[Delivery] = []
        self.cv = threading.Condition()
        self.stopping = False
        self.seq = 0
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]
        for t in self.threads:
            t.start()

    def submit(self, d: Delivery) -> None:
        with self.cv:
            d.sent_at = time.monotonic()
            self.all.append(d)
            self._push(d.sent_at, d)

    def _push(self, at: float, d: Delivery) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (at, self.seq, d))
        self.cv.notify()

    def pending(self) -> int:
        with self.cv:
            return len(self.heap)

    def close(self) -> None:
        with self.cv:
            self.stopping = True
            self.cv.notify_all()

    def _run(self) -> None:
        while True:
            with self.cv:
                while not self.stopping and (not self.heap or self.heap[0][0] > time.monotonic()):
                    self.cv.wait(0.2 if not self.heap else max(0.01, self.heap[0][0] - time.monotonic()))
                if self.stopping:
                    return
                _, _, d = heapq.heappop(self.heap)
            status = self._attempt(d)
            d.statuses.append(status)
            if status == "202" or (status == "409" and d.attempts > 1):
                d.accepted_at = time.monotonic()
            elif status.startswith("4"):
                d.refused = status  # a 4xx on the first attempt: the service refused it for good
            else:
                with self.cv:
                    self._push(time.monotonic() + min(10.0, 0.5 * 2 ** (d.attempts - 1)), d)

    def _attempt(self, d: Delivery) -> str:
        d.attempts += 1
        request = urllib.request.Request(f"{self.base}/hooks/github", data=d.body, method="POST")
        for k, v in {
            "Content-Type": "application/json",
            "User-Agent": "GitHub-Hookshot/5a7b3c1",
            "X-GitHub-Event": d.event,
            "X-GitHub-Delivery": d.guid,
            "X-Hub-Signature-256": signature(SECRET, d.body),
        }.items():
            request.add_header(k, v)
        try:
            with urllib.request.urlopen(request, timeout=15) as response:
                return str(response.status)
        except urllib.error.HTTPError as exc:
            return str(exc.code)
        except OSError as exc:
            return f"conn:{type(exc).__name__}"


# -- the service's processes, kept running as a kubelet would --------------------------------


class Fleet:
    def __init__(self, root: Path, server_cfg: Path, worker_cfgs: list[Path], port: int, env: dict[str, str]):
        self.root, self.server_cfg, self.worker_cfgs, self.port, self.env = (
            root,
            server_cfg,
            worker_cfgs,
            port,
            env,
        )
        self.serve: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes] | None] = [None] * len(worker_cfgs)
        self.held: set[str] = set()  # parts the soak keeps down for now
        self.restarts: Counter[str] = Counter()
        self.lock = threading.Lock()

    def start_serve(self) -> None:
        log = (self.root / "serve.log").open("ab")
        self.serve = subprocess.Popen(
            [
                str(BIN / "auditor"),
                "serve",
                "--config",
                str(self.server_cfg),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
        )

    def start_worker(self, k: int) -> None:
        self.workers[k] = start_worker(self.worker_cfgs[k], f"w{k}", self.root / f"w{k}.log")

    def supervise(self) -> None:
        with self.lock:
            if "serve" not in self.held and (self.serve is None or self.serve.poll() is not None):
                self.restarts["serve"] += 1
                self.start_serve()
            for k, w in enumerate(self.workers):
                if f"w{k}" not in self.held and (w is None or w.poll() is not None):
                    self.restarts[f"w{k}"] += 1
                    self.start_worker(k)

    def kill(self, name: str) -> None:
        with self.lock:
            self.held.add(name)
            proc = self.serve if name == "serve" else self.workers[int(name[1:])]
            if proc is not None and proc.poll() is None:
                kill9(proc)

    def release(self, name: str) -> None:
        with self.lock:
            self.held.discard(name)

    def close(self) -> None:
        self.held |= {"serve", *(f"w{k}" for k in range(len(self.workers)))}
        for p in [self.serve, *self.workers]:
            if p is not None:
                stop(p)


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            return r.status == 200
    except (OSError, urllib.error.HTTPError):
        return False


def config(
    path: Path,
    root: Path,
    db: str,
    broker: str,
    gh: str,
    key: Path,
    smtp_port: int,
    cache: str,
    scheduled: list[Repo],
) -> Path:
    targets = "".join(
        f"  - name: sched-{i}\n    git: {{url: '{r.bare}', branch: main}}\n"
        "    paths: [training]\n    nodes: [nodes/nodes.yaml]\n    schedule: '* * * * *'\n"
        for i, r in enumerate(scheduled)
    )
    path.write_text(
        f"database: {{url: '{db}'}}\n"
        "service:\n  catch_up: true\n  heartbeat_seconds: 2\n  stale_after_seconds: 1200\n"
        "  misfire_grace_seconds: 900\n"
        f"  git_cache_dir: '{root / cache}'\n"
        "  broker:\n"
        f"    url: '{broker}'\n    url_env: ''\n    visibility_timeout_seconds: 20\n    lease_seconds: 10\n"
        "    busy_retry_seconds: 1\n    metrics_port: 0\n    database_wait_seconds: 900\n"
        "  github_app:\n"
        f"    app_id: {APP_ID}\n    private_key_file: '{key}'\n    base_url: '{gh}'\n"
        f"    webhook_secret: '{SECRET}'\n    clone_url: '{root}/{{full_name}}.git'\n"
        "    seconds_between_writes: 0.2\n"
        f"targets:\n{targets}"
        "digest:\n"
        f"  smtp: {{host: 127.0.0.1, port: {smtp_port}, security: none, from: auditor@example.com, "
        "timeout_seconds: 5}\n"
        "  teams:\n"
        "    - {name: ml-platform, to: [ml@example.com], namespaces: ['ml-*']}\n"
        "    - {name: lab-owners, to: [lab@example.com], targets: [sched-0, sched-1]}\n"
    )
    return path


# -- faults ------------------------------------------------------------------------------------


@dataclass
class FaultRecord:
    name: str
    injected: float
    repaired: float = 0.0
    ready_after: float | None = None  # seconds from injection to /readyz 200 again
    work_after: float | None = None  # seconds from injection to the next completed check run
    note: str = ""


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--rate", type=float, default=0.5, help="webhooks per second (default 0.5)")
    parser.add_argument("--repos", type=int, default=4)
    parser.add_argument(
        "--fault-every",
        type=float,
        default=0,
        help="seconds (default: one per 45 s, 8 in a short run, never under 10 s)",
    )
    parser.add_argument("--drain", type=float, default=300, help="at most this long for the work to finish")
    parser.add_argument("--recovery-limit", type=float, default=60)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--root", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.root is None:  # first, set up the stepped clock and run again under it
        root = Path(tempfile.mkdtemp(prefix="soak-"))
        why = SteppedClock.available()
        env = dict(os.environ)
        if why is None:
            real = datetime.now(UTC)
            fake = real.replace(hour=6, minute=59, second=0, microsecond=0)
            clock = SteppedClock(root, (fake - real).total_seconds())
            env.update(clock.env())
        else:
            print(f"clock steps not injected: {why}")
            env["SOAK_NO_CLOCK"] = why
        argv = [sys.executable, __file__, *sys.argv[1:], "--root", str(root)]
        done = subprocess.run(argv, env=env, check=False)
        cleanup(root)  # whatever the run left behind when it crashed or was killed
        if not args.keep and done.returncode == 0:
            shutil.rmtree(root, ignore_errors=True)
        elif done.returncode != 0:
            print(f"kept {root} for a look")
        return done.returncode
    return soak(args, Path(args.root))


def cleanup(root: Path) -> None:
    """Stop a PostgreSQL and a redis-server the run left, and unmount its tmpfs."""
    data = root / "pgdisk" / "data"
    if (data / "postmaster.pid").exists():
        ctl = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
        if ctl:
            argv = [str(ctl[-1]), "-D", str(data), "-m", "immediate", "stop"]
            if os.geteuid() == 0:
                argv = ["runuser", "-u", "postgres", "--", *argv]
            subprocess.run(argv, check=False, capture_output=True, env=without_faketime())
    subprocess.run(["pkill", "-f", f"redis-server.*{root}"], check=False, capture_output=True)
    if os.path.ismount(root / "pgdisk"):
        subprocess.run(["umount", "-l", str(root / "pgdisk")], check=False, capture_output=True)


def soak(args: argparse.Namespace, root: Path) -> int:
    from aiosmtpd.controller import Controller
    from sqlalchemy import create_engine, text

    no_clock = os.environ.get("SOAK_NO_CLOCK")
    clock = None if no_clock else SteppedClock(root)
    total = int(args.seconds * args.rate) + 10
    per_chain = total // (2 * args.repos) + 4
    t = time.monotonic()
    (root / "acme").mkdir(exist_ok=True)
    repos = [make_repo(root, f"r{i}", f"ml-{i}", per_chain, per_chain) for i in range(args.repos)]
    scheduled = [make_repo(root, f"s{i}", f"lab-{i}", 0, 0) for i in range(2)]
    print(f"generated {len(repos)} + {len(scheduled)} repositories in {time.monotonic() - t:.1f} s ({root})")
    key, public = app_key(root)
    hubs = [
        FakeGitHub(
            r.bare,
            owner="acme",
            name=r.full_name.split("/")[1],
            app_id=APP_ID,
            tokens=set(),
            app_public_key=public,
            installation_ids=(7,),
        )
        for r in repos
    ]
    hub = MultiHub(hubs)
    pg = PostgresServer(root, disk_mb=160)
    pg.start()
    redis = RedisServer(root / "redis")
    redis.start()
    inbox = Inbox()
    smtp_port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=smtp_port)
    controller.start()
    port = free_port()
    faults: list[FaultRecord] = []
    errors: list[str] = []
    fleet: Fleet | None = None
    engine = create_engine(pg.url, pool_pre_ping=True)
    try:
        with serve(hub) as gh:
            server_cfg = config(
                root / "server.yaml", root, pg.url, redis.url, gh, key, smtp_port, "cache-s", scheduled
            )
            worker_cfgs = [
                config(
                    root / f"w{k}.yaml", root, pg.url, redis.url, gh, key, smtp_port, f"cache-w{k}", scheduled
                )
                for k in range(2)
            ]
            env = dict(os.environ)
            env["PATH"] = f"{BIN}:/usr/bin:/bin"
            fleet = Fleet(root, server_cfg, worker_cfgs, port, env)
            fleet.supervise()
            deadline = time.monotonic() + 120
            while not ready(port):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the service did not become ready; see {root / 'serve.log'}")
                time.sleep(0.2)
            sender = Sender(f"http://127.0.0.1:{port}")
            stop_all = threading.Event()

            def supervisor() -> None:
                while not stop_all.wait(0.25):
                    fleet.supervise()
                    if "postgres" not in fleet.held and not pg.answers() and not pg.running():
                        fleet.restarts["postgres"] += 1
                        pg.start()

            threading.Thread(target=supervisor, daemon=True).start()

            def completed_after(moment: float) -> bool:
                return any(
                    r.get("completed_monotonic", 0) > moment for h in hub.hubs.values() for r in h.check_runs
                )

            def watch(f: FaultRecord) -> None:
                while not stop_all.is_set() and (f.ready_after is None or f.work_after is None):
                    now = time.monotonic()
                    if now - f.injected > 600:
                        return
                    if f.ready_after is None and f.repaired and ready(port):
                        f.ready_after = time.monotonic() - f.injected
                    if f.work_after is None and f.repaired and completed_after(f.repaired):
                        f.work_after = time.monotonic() - f.injected
                    time.sleep(0.1)

            def inject(name: str) -> FaultRecord:
                f = FaultRecord(name, time.monotonic())
                if name == "kill -9 serve":
                    fleet.kill("serve")
                    time.sleep(1)
                    fleet.release("serve")
                elif name == "kill -9 worker":
                    w = f"w{len([x for x in faults if x.name == name]) % 2}"
                    f.note = w
                    fleet.kill(w)
                    time.sleep(1)
                    fleet.release(w)
                elif name == "restart redis":
                    redis.stop()
                    time.sleep(3)
                    redis.start()
                elif name == "crash postgres":
                    fleet.held.add("postgres")
                    pg.stop("immediate")
                    time.sleep(3)
                    pg.start()
                    fleet.held.discard("postgres")
                elif name == "fill store disk":
                    fleet.held.add("postgres")  # a PANIC on a full disk is restarted after the repair
                    refusals = pg.log.read_text(errors="replace").count("No space left on device")
                    ballast = pg.fill_disk()
                    if ballast is None:
                        f.note = f"not injected: {pg.disk_note}"
                    else:
                        time.sleep(15)
                        ballast.unlink()
                        refusals = (
                            pg.log.read_text(errors="replace").count("No space left on device") - refusals
                        )
                        f.note = f"{refusals} writes refused (ENOSPC); PostgreSQL " + (
                            "stopped on it" if not pg.answers() else "stayed up"
                        )
                    fleet.held.discard("postgres")
                elif name.startswith("clock"):
                    if clock is None:
                        f.note = f"not injected: {no_clock}"
                    else:
                        clock.step(600 if "+" in name else -420)
                f.repaired = time.monotonic()
                threading.Thread(target=watch, args=(f,), daemon=True).start()
                return f

            every = args.fault_every or min(45.0, max(10.0, (args.seconds - 20) / len(FAULTS)))
            start = time.monotonic()
            next_event, next_fault, n, fault_index = start, start + min(15.0, every), 0, 0
            print(
                f"soak: {args.seconds:.0f} s, {args.rate} webhooks/s over {args.repos} repositories, "
                f"a fault every {every:.0f} s"
            )
            while time.monotonic() - start < args.seconds:
                now = time.monotonic()
                if now >= next_fault:
                    faults.append(inject(FAULTS[fault_index % len(FAULTS)]))
                    fault_index += 1
                    next_fault = time.monotonic() + every
                    continue
                if now >= next_event:
                    repo = repos[(n // 2) % len(repos)]
                    at = datetime.now(UTC)  # the stepped clock: the service's
                    if n % 2 == 0:
                        head = repo.heads.pop(0)
                        event, kind, key = "pull_request", "pr", head
                        payload = pull_request_event("synchronize", 1, head, repo.main[0], at, repo.full_name)
                    else:
                        after = repo.main.pop(0)
                        event, kind, key = "push", "push", f"push:{repo.full_name}:{after}"
                        payload = push_event(after, at, full_name=repo.full_name)
                    d = Delivery(
                        str(uuid.uuid4()), event, json.dumps(payload).encode(), kind, repo.full_name, key
                    )
                    sender.submit(d)
                    n += 1
                    next_event += 1 / args.rate
                time.sleep(0.02)
            stream_end = time.monotonic()
            print(f"stream done: {n} webhooks, {len(faults)} faults; draining (at most {args.drain:.0f} s)")

            def outstanding() -> list[Delivery]:
                with engine.connect() as c:
                    finished = {
                        k
                        for (k,) in c.execute(
                            text(
                                "SELECT task_key FROM runs WHERE task_key LIKE 'push:%' "
                                "AND status IN ('succeeded', 'partial', 'failed')"
                            )
                        )
                    }
                done_heads = {
                    r["head_sha"]
                    for h in hub.hubs.values()
                    for r in h.check_runs
                    if r["status"] == "completed"
                }
                return [
                    d
                    for d in sender.all
                    if d.refused is None and (d.key not in (done_heads if d.kind == "pr" else finished))
                ]

            drain_deadline = time.monotonic() + args.drain
            left: list[Delivery] = sender.all
            while time.monotonic() < drain_deadline:
                try:
                    left = outstanding()
                except Exception:  # the database may still be recovering
                    left = sender.all
                if not left and not sender.pending():
                    break
                time.sleep(1)
            drained = time.monotonic() - stream_end
            digest_deadline = time.monotonic() + 90
            while clock is not None and time.monotonic() < digest_deadline:
                if {to for _, to, _ in inbox.messages} >= {"ml@example.com", "lab@example.com"}:
                    break
                time.sleep(1)
            sender.close()
            stop_all.set()

            # -- count --------------------------------------------------------------------------
            accepted = [d for d in sender.all if d.accepted_at is not None]
            refused = [d for d in sender.all if d.refused is not None]
            lost = list(left)
            redelivered = sum(1 for d in sender.all if d.attempts > 1)
            heads = Counter((name, r["head_sha"]) for name, h in hub.hubs.items() for r in h.check_runs)
            pr_keys = {(d.repo, d.key) for d in sender.all if d.kind == "pr"}
            doubled_checks = [k for k, c in heads.items() if c > 1]
            wrong_checks = []
            for name, h in hub.hubs.items():
                for r in h.check_runs:
                    titles = [a["title"].split(" ")[0] for a in r.get("annotations", [])]
                    if (name, r["head_sha"]) in pr_keys and (
                        r["status"] != "completed"
                        or r.get("conclusion") != "failure"
                        or titles != ["cross-zone-blocked"]
                    ):
                        wrong_checks.append(
                            f"{name}@{r['head_sha'][:8]}: {r['status']} {r.get('conclusion')} {titles}"
                        )
            with engine.connect() as c:
                runs = c.execute(text("SELECT task_key, status, trigger, findings_count FROM runs")).all()
                findings = c.execute(
                    text(
                        "SELECT t.name, count(*) FROM findings f JOIN targets t ON t.id = f.target_id "
                        "GROUP BY t.name"
                    )
                ).all()
                deliveries_kept = c.execute(text("SELECT count(*) FROM webhook_deliveries")).scalar()
            push_runs = Counter(k for k, _, _, _ in runs if k and k.startswith("push:"))
            doubled_runs = [k for k, v in push_runs.items() if v > 1]
            bad_runs = [f"{k}: {s}" for k, s, _, _ in runs if s not in ("succeeded", "running")]
            scheduled_runs = Counter(s for _, s, trig, _ in runs if trig == "schedule")
            expected_targets = {r.full_name.replace("/", ".") for r in repos} | {"sched-0", "sched-1"}
            per_target = dict(findings)
            finding_errors = [
                f"{t}: {per_target.get(t, 0)} findings (1 expected)"
                for t in sorted(expected_targets)
                if per_target.get(t, 0) != 1
            ]
            ids = Counter(mid for mid, _, _ in inbox.messages)
            doubled_mail = [m for m, c in ids.items() if c > 1]
            mail_to = Counter(to for _, to, _ in inbox.messages)
            pulls = Counter(
                (name, p.get("head", {}).get("ref")) for name, h in hub.hubs.items() for p in h.pulls
            )
            doubled_pulls = [k for k, c in pulls.items() if c > 1]
            unrecovered = [
                f
                for f in faults
                if not f.note.startswith("not injected")
                and (f.ready_after is None or f.ready_after > args.recovery_limit)
            ]

            print("\nfaults injected (seconds from injection):")
            print(f"  {'#':>3}  {'fault':<18} {'repaired':>8} {'/readyz 200':>11} {'next check':>10}  note")
            for i, f in enumerate(faults, 1):

                def fmt(v: float | None) -> str:
                    return "never" if v is None else f"{v:.1f}"

                print(
                    f"  {i:>3}  {f.name:<18} {f.repaired - f.injected:>8.1f} {fmt(f.ready_after):>11} "
                    f"{fmt(f.work_after):>10}  {f.note}"
                )
            kinds = Counter(f.name for f in faults)
            print(
                "\nrecovery per kind (max /readyz 200 after injection, s): "
                + ", ".join(
                    f"{k} ×{c} {max((f.ready_after or float('inf')) for f in faults if f.name == k):.1f}"
                    for k, c in kinds.items()
                )
            )
            print(f"restarts by the supervisor: {dict(fleet.restarts)}")
            print("\ncounts compared (expected → found):")
            prs = [d for d in sender.all if d.kind == "pr"]
            pushes = [d for d in sender.all if d.kind == "push"]
            rows = [
                ("webhooks sent", n, len(sender.all)),
                (f"  accepted (after redelivery: {redelivered})", n, len(accepted)),
                ("  refused (4xx at once)", 0, len(refused)),
                ("  lost (accepted or not, no effect after the drain)", 0, len(lost)),
                ("check runs (one per pull-request head)", len(prs), sum(1 for k in heads if k in pr_keys)),
                ("  check runs made twice", 0, len(doubled_checks)),
                ("  check runs wrong", 0, len(wrong_checks)),
                ("push audits (one run per key)", len(pushes), len(push_runs)),
                ("  push runs made twice", 0, len(doubled_runs)),
                ("runs not succeeded", 0, len(bad_runs)),
                (
                    "targets with exactly one finding",
                    len(expected_targets),
                    len(expected_targets) - len(finding_errors),
                ),
                (
                    "digest e-mails per team (Message-ID once)",
                    len(TEAMS) if clock else len(ids),  # without the stepped clock, 07:00 may not fall in
                    len(ids),
                ),
                ("  digest e-mails sent twice", 0, len(doubled_mail)),
                ("pull requests opened twice", 0, len(doubled_pulls)),
                (f"faults not recovered within {args.recovery_limit:.0f} s", 0, len(unrecovered)),
            ]
            for label, want, got in rows:
                mark = "" if want == got else "   ← differs"
                print(f"  {label:<56} {want:>6} → {got:<6}{mark}")
            done_at = {
                r["head_sha"]: r["completed_monotonic"]
                for h in hub.hubs.values()
                for r in h.check_runs
                if "completed_monotonic" in r
            }
            waits = sorted(done_at[d.key] - d.sent_at for d in prs if d.key in done_at)
            if waits:
                p50, p95 = waits[len(waits) // 2], waits[min(len(waits) - 1, round(0.95 * (len(waits) - 1)))]
                print(
                    f"\nwebhook → check run, faults included: p50 {p50:.1f} s, p95 {p95:.1f} s, "
                    f"max {waits[-1]:.1f} s"
                )
            print(
                f"\nscheduled runs by status: {dict(scheduled_runs)}; delivery ids kept: {deliveries_kept}; "
                f"digests to {dict(mail_to)}; drain took {drained:.1f} s"
            )
            print(f"machine: {os.cpu_count()} CPUs, load {tuple(round(x, 2) for x in os.getloadavg())}")
            for label, want, got in rows:
                if want != got:
                    errors.append(f"{label}: expected {want}, found {got}")
            errors += [f"lost: {d.kind} {d.repo} {d.key[:60]} statuses {d.statuses[-5:]}" for d in lost[:10]]
            errors += [f"refused: {d.kind} {d.repo} {d.statuses}" for d in refused[:5]]
            errors += wrong_checks[:5] + bad_runs[:5] + finding_errors[:5]
    finally:
        if fleet is not None:
            fleet.close()
        controller.stop()
        engine.dispose()
        redis.stop()
        pg.close()
    if errors:
        print("\nWRONG:\n  " + "\n  ".join(errors[:30]))
        return 1
    print("\n0 lost, 0 doubled, every fault recovered.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
