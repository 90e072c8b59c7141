"""Admission webhook benchmark (issue 34). Prints figures; never fails on time.

For each size, generates world/cluster.py's live cluster (nodes over three zones, GPU pools,
Deployments → ReplicaSets → pods, Kubeflow PyTorchJobs some split across zones or in zone-fenced
namespaces, NetworkPolicies and a share of CiliumNetworkPolicies), loads it into the webhook's
warm model as the informer's first lists would (the list JSON decoded, owned pods slimmed by
`kubeapi.slim_pod`, then `WarmModel.load`), and measures:

- warm-model memory: the bytes tracemalloc still traces once the decoded lists are dropped (what
  the model keeps), and the seconds `WarmModel.load` takes (a second, untraced load);
- latency of `Webhook.review(body)` (JSON parse → namespace mode → check in the webhook's own
  pool → answer → recorder and metrics), as `auditor admit` builds it (default settings, the
  built-in policy pack, a recorder), over AdmissionReview v1 bodies shaped as kube-apiserver sends
  them: CREATE/UPDATE of the cluster's PyTorchJobs and Deployments (as stored, renamed, replicas or
  a label changed) and CREATE/UPDATE/DELETE of its NetworkPolicies and CiliumNetworkPolicies (new
  names, rules dropped or opened, a label changed); one request at a time, and `--concurrency`
  threads at once (latency per request including the queue in the webhook's pool); p50/p95/p99/max;
- the same over real HTTPS (`Running`, a self-signed certificate made with `cryptography`,
  http.client keep-alive connections): the network and TLS overhead;
- with the webhook's default 4 workers (16 slots), how many answers of a `--concurrency`-wide burst
  fail open as "webhook busy" (a figure: the measured runs size the pool to the burst).

Namespaces: the cluster default mode is `warn` (the setting's default); a share of the training and
app namespaces is labelled `placement-auditor.io/admission=deny`, so answers are allowed, warned or
denied, never "off". The budget (`admission.budget_ms`) is raised to `--budget-ms` so that no
answer fails open on time; any failed-open answer in the measured runs is a wrong benchmark (exit 1).

Correctness (exit 1 on any difference): for a sample of reviewed workloads (those answered with
findings first, then jobs split across zones or in zone-fenced namespaces, then others), the
webhook's recorded answer (rules, groups and fingerprints of the findings it decided on) must
equal a full reference audit — `build_inventory` → `audit` → `finish`, as `auditor cluster` runs
them — of every object the model holds except Pods and ReplicaSets (a workload being applied has
no pods yet: the webhook answers as a scan would), with the reviewed object in place of the stored
one: its findings that `check.decides` and that concern the workload (about it, or an edge to or
from it). For a few policy reviews, the findings the change adds to a full audit of the whole
cluster with its pods (after minus before) must equal the webhook's too.

    .venv/bin/python benchmarks/bench_admission.py                 # 5,000 and 50,000 pods, 1,000 policies
    .venv/bin/python benchmarks/bench_admission.py --quick         # smoke run: 500 pods, 100 policies
    .venv/bin/python benchmarks/bench_admission.py --sizes 5000 --requests 100 --profile

Targets (issue 34): p99 < 10 ms at 5,000 pods and < 50 ms at 50,000, sequential and concurrent.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import cProfile
import dataclasses
import datetime as dt
import gc
import http.client
import math
import pstats
import queue
import random
import ssl
import sys
import tempfile
import threading
import time
import tracemalloc
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from world import growth
from world.cluster import generate
from world.tls import certificate as tls_certificate

from auditor import gcpause, yamlio
from auditor.admission import review as rv
from auditor.admission.answer import answer, mode_of
from auditor.admission.check import Checker, decides
from auditor.admission.record import AdmissionRecord
from auditor.admission.server import Certificates, Metrics, Recorder, Running, Webhook
from auditor.admission.warm import WarmModel
from auditor.audit.scan import audit, finish
from auditor.clock import system_clock, utc_date
from auditor.model.findings import Finding
from auditor.model.source import SourceRef
from auditor.rules.packs import load_packs
from auditor.settings.admission import MODE_LABEL, AdmissionSettings
from auditor.settings.config import Settings
from auditor.sources.cluster import allowed
from auditor.sources.kubeapi import RESOURCES, slim_pod
from auditor.sources.objects import build_inventory

Obj = dict[str, Any]
WorkloadId = tuple[str, str, str, str]  # (namespace, API group, kind, name)

CLUSTER = "bench"
DEFAULT_WORKERS = 4  # Webhook(workers=...) as bootstrap.build_admission leaves it
JOB_NAME = "training.kubeflow.org/job-name"
ZONE_KEY = "topology.kubernetes.io/zone"
SERVED = {(r.group, r.kind) for r in RESOURCES} | {("", "ConfigMap")}
LIVE = {("", "Pod"), ("apps", "ReplicaSet")}
FAILED_OPEN = ("not checked (",)
PLURALS = {
    "PyTorchJob": "pytorchjobs",
    "Deployment": "deployments",
    "NetworkPolicy": "networkpolicies",
    "CiliumNetworkPolicy": "ciliumnetworkpolicies",
}


def target_ms(pods: int) -> float:
    """Issue 34: p99 < 10 ms at 5,000 pods, < 50 ms at 50,000 (smaller sizes: the 5,000 target)."""
    return 10.0 if pods <= 5_000 else 50.0


def group_of(obj: Obj) -> str:
    api = str(obj.get("apiVersion") or "")
    return api.rpartition("/")[0] if "/" in api else ""


def wid_of(obj: Obj) -> WorkloadId:
    meta = obj["metadata"]
    return (str(meta.get("namespace") or ""), group_of(obj), str(obj["kind"]), str(meta["name"]))


# -- the cluster -----------------------------------------------------------------------------


@dataclass
class World:
    objects: list[Obj]  # decoded as the informer decodes them, owned pods slimmed
    stats: Any
    gen_s: float
    deny_namespaces: set[str]
    fenced: set[str]  # training namespaces with zone-boundary policies
    split_jobs: set[WorkloadId]  # PyTorchJobs whose running pods are in more than one zone


def build_world(args: argparse.Namespace, pods: int) -> World:
    nodes = args.nodes or max(30, pods // 30)
    jobs = args.jobs if args.jobs is not None else max(1, pods // 100)
    t0 = time.perf_counter()
    objects, stats = generate(nodes, pods, args.policies, args.cilium_share, jobs, None, args.seed)
    gen_s = time.perf_counter() - t0
    rng = random.Random(args.seed + pods)
    deny: set[str] = set()
    for obj in objects:
        if obj["kind"] != "Namespace":
            continue
        labels = obj["metadata"].setdefault("labels", {})
        share = 0.5 if labels.get("purpose") == "training" else 0.3
        if labels.get("team") and rng.random() < share:
            labels[MODE_LABEL] = "deny"
            deny.add(obj["metadata"]["name"])
    # What the API server sends and the informer decodes: JSON, owned pods slimmed.
    wire = [orjson.dumps(o) for o in objects if allowed(o) and (group_of(o), o["kind"]) in SERVED]
    del objects
    decoded = [_decoded(b) for b in wire]
    fenced = {
        o["metadata"]["namespace"]
        for o in decoded
        if o["kind"] == "NetworkPolicy" and o["metadata"]["name"].endswith("-only")
    }
    zone_of = {
        o["metadata"]["name"]: o["metadata"].get("labels", {}).get(ZONE_KEY, "")
        for o in decoded
        if o["kind"] == "Node"
    }
    zones: dict[WorkloadId, set[str]] = {}
    for o in decoded:
        job = o["metadata"].get("labels", {}).get(JOB_NAME) if o["kind"] == "Pod" else None
        node = o.get("spec", {}).get("nodeName")
        if job and node:
            key = (o["metadata"]["namespace"], "kubeflow.org", "PyTorchJob", job)
            zones.setdefault(key, set()).add(zone_of.get(node, ""))
    split = {k for k, z in zones.items() if len(z) > 1}
    return World(decoded, stats, gen_s, deny, fenced, split)


def _decoded(body: bytes) -> Obj:
    obj = orjson.loads(body)
    return slim_pod(obj) if obj.get("kind") == "Pod" else obj


def traced_load(world: World) -> tuple[float, int]:
    """(MiB the model keeps, objects in it): the lists decoded and loaded under tracemalloc,
    the decoded lists then dropped, so what is still traced is the model's."""
    wire = [orjson.dumps(o) for o in world.objects]
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    model = WarmModel(CLUSTER)
    decoded = [_decoded(b) for b in wire]
    model.load(decoded)
    del decoded
    gc.collect()
    kept = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    count = model.count()
    del model, wire
    gc.collect()
    return kept / 2**20, count


def timed_load(world: World) -> tuple[WarmModel, float]:
    objects = [orjson.loads(orjson.dumps(o)) for o in world.objects]  # the model's own copies
    t0 = time.perf_counter()
    model = WarmModel(CLUSTER)
    model.load(objects)
    return model, time.perf_counter() - t0


# -- requests ---------------------------------------------------------------------------------


@dataclass
class Request:
    label: str  # e.g. "PyTorchJob UPDATE replicas"
    operation: str
    obj: Obj | None
    old: Obj | None
    stored: WorkloadId | None  # identity of the stored object it replaces (None: a new name)

    @property
    def subject(self) -> Obj:
        subject = self.obj if self.obj is not None else self.old
        assert subject is not None
        return subject

    @property
    def is_workload(self) -> bool:
        return self.subject["kind"] in ("PyTorchJob", "Deployment")

    def body(self, uid: str) -> bytes:
        """An AdmissionReview v1 as kube-apiserver sends it (k8s.io/api admission/v1)."""
        subject = self.subject
        group, _, version = subject["apiVersion"].rpartition("/")
        kind = subject["kind"]
        gvk = {"group": group, "version": version, "kind": kind}
        gvr = {"group": group, "version": version, "resource": PLURALS[kind]}
        options = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}
        return orjson.dumps(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": uid,
                    "kind": gvk,
                    "resource": gvr,
                    "requestKind": gvk,
                    "requestResource": gvr,
                    "name": subject["metadata"]["name"],
                    "namespace": subject["metadata"].get("namespace", ""),
                    "operation": self.operation,
                    "userInfo": {
                        "username": "alice@example.com",
                        "uid": "4d8f2c1e-0b7a-4f0e-9c1d-3e5a7b9c2d4f",
                        "groups": ["system:authenticated", "ml-platform"],
                    },
                    "object": self.obj,
                    "oldObject": self.old,
                    "dryRun": False,
                    "options": {"apiVersion": "meta.k8s.io/v1", "kind": options[self.operation]},
                },
            }
        )


def _as_created(stored: Obj, name: str | None = None) -> Obj:
    """What `kubectl create` sends for a stored object: no server-set fields, no status."""
    obj = copy.deepcopy(stored)
    obj.pop("status", None)
    meta = obj["metadata"]
    for key in ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields"):
        meta.pop(key, None)
    if name is not None:
        meta["name"] = name
        meta.get("annotations", {}).pop("kubectl.kubernetes.io/last-applied-configuration", None)
    return obj


def _labelled(stored: Obj) -> Obj:
    obj = copy.deepcopy(stored)
    obj["metadata"].setdefault("labels", {})["app.kubernetes.io/version"] = "v2"
    return obj


def _rescaled(stored: Obj) -> Obj:
    obj = copy.deepcopy(stored)
    spec = obj["spec"]
    if obj["kind"] == "Deployment":
        spec["replicas"] = int(spec.get("replicas") or 1) + 1
    else:
        worker = spec["pytorchReplicaSpecs"]["Worker"]
        worker["replicas"] = int(worker.get("replicas") or 1) + 1
    return obj


def _policy_changed(stored: Obj) -> tuple[str, Obj]:
    """(what changed, the new policy): its rules dropped (tightening) or opened (loosening)."""
    obj = copy.deepcopy(stored)
    spec = obj["spec"]
    if obj["kind"] == "NetworkPolicy":
        if spec.get("ingress"):
            spec["ingress"] = spec["ingress"][1:]
            return "ingress rule dropped", obj
        if spec.get("egress"):
            spec["egress"] = spec["egress"][1:]
            return "egress rule dropped", obj
        spec["ingress"] = [{}]
        spec["policyTypes"] = sorted({*spec.get("policyTypes", []), "Ingress"})
        return "ingress opened", obj
    for direction in ("ingress", "egress"):
        if spec.get(direction):
            spec[direction] = spec[direction][1:]
            if not spec[direction]:
                spec[direction] = [{}]  # a Cilium policy of only empty rules denies that direction
            return f"{direction} rule dropped", obj
    spec["ingress"] = [{"fromEntities": ["cluster"]}]
    return "ingress opened", obj


def make_requests(world: World, count: int, seed: int) -> list[Request]:
    """A realistic mix: ~70% workloads (PyTorchJobs, Deployments), ~30% policies."""
    rng = random.Random(seed)
    by_kind: dict[str, list[Obj]] = {}
    for o in world.objects:
        by_kind.setdefault(o["kind"], []).append(o)
    jobs, deployments = by_kind.get("PyTorchJob", []), by_kind.get("Deployment", [])
    nps, cnps = by_kind.get("NetworkPolicy", []), by_kind.get("CiliumNetworkPolicy", [])
    out: list[Request] = []
    for i in range(count):
        roll = rng.random()
        if (roll < 0.35 and jobs) or (roll < 0.7 and deployments):
            kind = "PyTorchJob" if roll < 0.35 and jobs else "Deployment"
            stored = rng.choice(jobs if kind == "PyTorchJob" else deployments)
            op = rng.random()
            if op < 0.3:
                out.append(Request(f"{kind} CREATE", "CREATE", _as_created(stored), None, wid_of(stored)))
            elif op < 0.45:
                name = f"{stored['metadata']['name']}-r{i}"
                out.append(
                    Request(f"{kind} CREATE (new name)", "CREATE", _as_created(stored, name), None, None)
                )
            elif op < 0.75:
                out.append(
                    Request(f"{kind} UPDATE replicas", "UPDATE", _rescaled(stored), stored, wid_of(stored))
                )
            else:
                out.append(
                    Request(f"{kind} UPDATE label", "UPDATE", _labelled(stored), stored, wid_of(stored))
                )
            continue
        pool = cnps if cnps and (rng.random() < 0.3 or not nps) else nps
        stored = rng.choice(pool)
        kind = stored["kind"]
        op = rng.random()
        if op < 0.3:
            name = f"{stored['metadata']['name']}-r{i}"
            out.append(Request(f"{kind} CREATE (new name)", "CREATE", _as_created(stored, name), None, None))
        elif op < 0.55:
            what, changed = _policy_changed(stored)
            out.append(Request(f"{kind} UPDATE ({what})", "UPDATE", changed, stored, wid_of(stored)))
        elif op < 0.7:
            out.append(Request(f"{kind} UPDATE label", "UPDATE", _labelled(stored), stored, wid_of(stored)))
        else:
            out.append(Request(f"{kind} DELETE", "DELETE", None, stored, wid_of(stored)))
    return out


# -- the webhook ----------------------------------------------------------------------------------


class Records:
    """The recorder's sink: every answer the webhook made, by uid."""

    def __init__(self) -> None:
        self.by_uid: dict[str, AdmissionRecord] = {}
        self._lock = threading.Lock()

    def record_admission(self, decision: AdmissionRecord) -> bool:
        with self._lock:
            self.by_uid[decision.uid] = decision
        return True


def make_webhook(
    model: WarmModel, settings: Settings, workers: int, before_cache: int = 0
) -> tuple[Webhook, Records]:
    """As bootstrap.build_admission builds it (the store replaced by an in-memory sink), but by
    default without the cache of the state in force (`before_cache` 0): the requests here never
    change the model, so each policy request after the first over the same groups would hit it,
    which a cluster whose watch brings every applied change does far less often."""
    records = Records()
    metrics = Metrics()
    hook = Webhook(
        model,
        Checker(settings, load_packs([]), model, before_cache=before_cache),
        settings.admission,
        system_clock,
        cluster=CLUSTER,
        recorder=Recorder(records, metrics),
        metrics=metrics,
        workers=workers,
    )
    return hook, records


@dataclass
class Run:
    name: str
    latencies_ms: list[float]
    wall_s: float
    outcomes: Counter[str] = field(default_factory=Counter)
    failed_open: list[str] = field(default_factory=list)  # "uid: warning"

    def pct(self, q: float) -> float:
        xs = sorted(self.latencies_ms)
        if not xs:
            return 0.0
        return xs[min(len(xs) - 1, max(0, math.ceil(q / 100 * len(xs)) - 1))]

    def line(self) -> str:
        n = len(self.latencies_ms)
        return (
            f"  {self.name:<36} {n:>5} req  p50 {self.pct(50):7.1f}  p95 {self.pct(95):7.1f}  "
            f"p99 {self.pct(99):7.1f}  max {max(self.latencies_ms, default=0):7.1f} ms  "
            f"{n / self.wall_s if self.wall_s else 0:6.1f} req/s"
        )


def _outcomes(run: Run, records: Records, uids: list[str], hook: Webhook) -> None:
    hook.recorder.flush(60)
    for uid in uids:
        record = records.by_uid.get(uid)
        if record is None:
            run.outcomes["unrecorded"] += 1
            continue
        run.outcomes[record.outcome] += 1
        if record.outcome == "failed-open":
            run.failed_open.append(f"{uid}: {record.reason}")


def _check_reply(uid: str, reply: Any) -> None:
    if reply.status != 200:
        raise SystemExit(f"WRONG: review {uid} answered HTTP {reply.status}: {reply.body[:300]!r}")


def sequential(name: str, hook: Webhook, records: Records, bodies: list[tuple[str, bytes]]) -> Run:
    lat = []
    t0 = time.perf_counter()
    for uid, body in bodies:
        s = time.perf_counter()
        reply = hook.review(body)
        lat.append((time.perf_counter() - s) * 1000)
        _check_reply(uid, reply)
    run = Run(name, lat, time.perf_counter() - t0)
    _outcomes(run, records, [u for u, _ in bodies], hook)
    return run


def concurrent(
    name: str, hook: Webhook, records: Records, bodies: list[tuple[str, bytes]], width: int
) -> Run:
    def one(item: tuple[str, bytes]) -> float:
        uid, body = item
        s = time.perf_counter()
        reply = hook.review(body)
        spent = (time.perf_counter() - s) * 1000
        _check_reply(uid, reply)
        return spent

    t0 = time.perf_counter()
    with ThreadPoolExecutor(width, thread_name_prefix="apiserver") as pool:
        lat = list(pool.map(one, bodies))
    run = Run(name, lat, time.perf_counter() - t0)
    _outcomes(run, records, [u for u, _ in bodies], hook)
    return run


# -- HTTPS ---------------------------------------------------------------------------------------


def certificate(tmp: Path) -> tuple[Path, Path]:
    """A self-signed ECDSA serving certificate for localhost, valid now."""
    return tls_certificate(tmp, "placement-auditor-admission", dt.datetime.now(dt.UTC), days=30)


def _connection(port: int) -> http.client.HTTPSConnection:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # self-signed; the benchmark pins nothing
    return http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=600)


def _post(conn: http.client.HTTPSConnection, uid: str, body: bytes) -> float:
    s = time.perf_counter()
    conn.request("POST", "/validate", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    spent = (time.perf_counter() - s) * 1000
    if resp.status != 200:
        raise SystemExit(f"WRONG: HTTPS review {uid} answered {resp.status}: {data[:300]!r}")
    return spent


def https_runs(
    model: WarmModel, settings: Settings, workers: int, bodies: list[tuple[str, bytes]], width: int
) -> list[Run]:
    hook, records = make_webhook(model, settings, workers)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        crt, key = certificate(Path(tmp))
        running = Running(hook, Certificates(crt, key), "127.0.0.1", 0, None, reload_seconds=3600).start()
        try:
            conn = _connection(running.port)
            _post(conn, "warm-up", bodies[0][1])
            t0 = time.perf_counter()
            lat = [_post(conn, uid, body) for uid, body in bodies]
            run = Run("HTTPS, 1 keep-alive connection", lat, time.perf_counter() - t0)
            conn.close()
            _outcomes(run, records, [u for u, _ in bodies], hook)
            runs.append(run)

            todo: queue.Queue[tuple[str, bytes]] = queue.Queue()
            for uid, body in bodies:
                todo.put((f"{uid}-c", body.replace(uid.encode(), f"{uid}-c".encode(), 1)))
            lat_c: list[float] = []
            lock = threading.Lock()

            def client() -> None:
                c = _connection(running.port)
                try:
                    while True:
                        try:
                            uid, body = todo.get_nowait()
                        except queue.Empty:
                            return
                        spent = _post(c, uid, body)
                        with lock:
                            lat_c.append(spent)
                finally:
                    c.close()

            t0 = time.perf_counter()
            threads = [threading.Thread(target=client) for _ in range(width)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            run = Run(f"HTTPS, {width} keep-alive connections", lat_c, time.perf_counter() - t0)
            _outcomes(run, records, [f"{u}-c" for u, _ in bodies], hook)
            runs.append(run)
        finally:
            running.stop()
    return runs


# -- the reference audit -------------------------------------------------------------------------


def _document(obj: Obj) -> yamlio.Document:
    meta = obj["metadata"]
    ns = meta.get("namespace")
    where = f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))
    return yamlio.Document(obj, SourceRef(f"cluster:{CLUSTER}/{obj['kind']}/{where}", 0, 0))


def full_audit(objects: list[Obj], settings: Settings, today: dt.date) -> list[Finding]:
    """The live audit's sequence (cluster.inventory_from_read, then scan) on these objects."""
    inv = build_inventory([_document(o) for o in objects], settings)
    return list(finish(audit(inv, load_packs([])), load_packs([]), today).findings)


def _prepared(obj: Obj, namespace: str) -> Obj:
    """The reviewed object as the cluster would store it (what the audit reads of it)."""
    out = copy.deepcopy(obj)
    out["metadata"].setdefault("namespace", namespace)
    out["metadata"].pop("managedFields", None)
    out.pop("status", None)
    return out


def edge_ends(f: Finding) -> tuple[str, str] | None:
    """("namespace/name", "namespace/name") of the workloads at both ends of an edge finding. The
    EdgeRef names roles only (`app-0`, `Worker[1-7]`), which two namespaces can share; every rule
    that decides words its message "{source role} → {destination role} ...", a role written
    `namespace/workload` or `namespace/workload/role` (model.objects.Role.__str__)."""
    if f.edge is None or " → " not in f.message:
        return None
    source, _, rest = f.message.partition(" → ")
    destination = rest.split(" ", 1)[0]
    return "/".join(source.split("/")[:2]), "/".join(destination.split("/")[:2])


def concerns(f: Finding, wid: WorkloadId) -> bool:
    """A finding about the workload, or about an edge from or to one of its roles."""
    ns, group, kind, name = wid
    if f.workload.identity == f"{group}/{kind}/{ns}/{name}":
        return True
    ends = edge_ends(f)
    return ends is not None and f"{ns}/{name}" in ends


def _answer_key(findings: list[Finding]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(rules, groups, fingerprints) as the webhook records them."""
    return (
        tuple(sorted({f.rule for f in findings})),
        tuple(sorted({f"{f.workload.namespace}/{f.workload.name}" for f in findings})),
        tuple(sorted({f.fingerprint for f in findings})),
    )


def _record_key(record: AdmissionRecord) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    return record.rules, tuple(sorted(record.groups)), record.fingerprints


def _describe(key: tuple[tuple[str, ...], ...]) -> str:
    rules, groups, fps = key
    return f"rules {list(rules)}, groups {list(groups)}, {len(fps)} finding(s)"


def pick_sample(
    world: World, requests: list[Request], uids: list[str], records: Records, n: int, seed: int
) -> list[int]:
    """Indexes of reviewed workloads: answered with findings, then split or zone-fenced jobs,
    then others; at most one per (stored workload, operation)."""
    rng = random.Random(seed)
    seen: set[tuple[Any, ...]] = set()
    found, planted, rest = [], [], []
    for i, r in enumerate(requests):
        if not r.is_workload:
            continue
        key = (wid_of(r.subject), r.label)
        if key in seen:
            continue
        seen.add(key)
        record = records.by_uid.get(uids[i])
        if record is None or record.outcome not in ("allowed", "warned", "denied"):
            continue
        w = wid_of(r.subject)
        if record.fingerprints:
            found.append(i)
        elif r.stored in world.split_jobs or w[0] in world.fenced:
            planted.append(i)
        else:
            rest.append(i)
    for xs in (found, planted, rest):
        rng.shuffle(xs)
    out = found[: n // 2]
    out += planted[: max(0, n // 4)]
    pool = [i for i in (*found, *planted, *rest) if i not in out]
    out += pool[: n - len(out)]
    return sorted(out)


def check_workloads(
    world: World,
    requests: list[Request],
    uids: list[str],
    records: Records,
    sample: list[int],
    settings: Settings,
    today: dt.date,
) -> tuple[int, list[str], float]:
    """(agreed, differences, seconds): each sampled workload's answer against the full audit."""
    manifests = [o for o in world.objects if (group_of(o), o["kind"]) not in LIVE]
    agreed, wrong = 0, []
    t0 = time.perf_counter()
    for i in sample:
        r = requests[i]
        assert r.obj is not None
        wid = wid_of(r.subject)
        ns = wid[0]
        objects = [o for o in manifests if r.stored is None or wid_of(o) != r.stored]
        objects.append(_prepared(r.obj, ns))
        ref = [f for f in full_audit(objects, settings, today) if decides(f) and concerns(f, wid)]
        want = _answer_key(ref)
        got = _record_key(records.by_uid[uids[i]])
        if want == got:
            agreed += 1
            continue
        detail = [f"{r.label} {ns}/{wid[3]} (uid {uids[i]}):"]
        detail.append(f"    webhook:   {_describe(got)}")
        detail.append(f"    reference: {_describe(want)}")
        only_ref = [f for f in ref if f.fingerprint not in set(got[2])]
        for f in only_ref[:6]:
            edge = f" {f.edge.from_role}->{f.edge.to_role}:{f.edge.port}" if f.edge else ""
            detail.append(
                f"    only in the reference: {f.rule} {f.workload.namespace}/{f.workload.name}{edge}"
            )
        extra = sorted(set(got[2]) - set(want[2]))
        if extra:
            detail.append(f"    only in the webhook's answer: {len(extra)} fingerprint(s), e.g. {extra[0]}")
        wrong.append("\n".join(detail))
    return agreed, wrong, time.perf_counter() - t0


def check_policies(
    world: World,
    requests: list[Request],
    uids: list[str],
    records: Records,
    n: int,
    settings: Settings,
    today: dt.date,
) -> tuple[int, int, list[str], float]:
    """(checked, agreed, differences, seconds): policy answers against the findings the change
    adds to the full live audit (pods included: a running group's placement decides)."""
    chosen, seen = [], set()
    for i, r in enumerate(requests):
        key = (wid_of(r.subject), r.label)
        rec = records.by_uid.get(uids[i])
        if r.is_workload or key in seen or rec is None or rec.outcome not in ("allowed", "warned", "denied"):
            continue
        seen.add(key)
        chosen.append((0 if rec.fingerprints else 1, i))
    chosen.sort()
    picks = [i for _, i in chosen[:n]]
    if not picks:
        return 0, 0, [], 0.0
    t0 = time.perf_counter()
    before = {f.fingerprint: f for f in full_audit(list(world.objects), settings, today) if decides(f)}
    agreed, wrong = 0, []
    for i in picks:
        r = requests[i]
        objects = [o for o in world.objects if r.stored is None or wid_of(o) != r.stored]
        if r.obj is not None:
            objects.append(_prepared(r.obj, wid_of(r.subject)[0]))
        after = [f for f in full_audit(objects, settings, today) if decides(f)]
        new = [f for f in after if f.fingerprint not in before]
        want, got = _answer_key(new), _record_key(records.by_uid[uids[i]])
        if want == got:
            agreed += 1
        else:
            w = wid_of(r.subject)
            wrong.append(
                f"{r.label} {w[0]}/{w[3]} (uid {uids[i]}):\n    webhook:   {_describe(got)}\n"
                f"    reference: {_describe(want)}"
            )
    return len(picks), agreed, wrong, time.perf_counter() - t0


# -- profile -------------------------------------------------------------------------------------


def profile(hook: Webhook, bodies: list[tuple[str, bytes]], top: int = 25) -> None:
    """cProfile of what the webhook's pool thread runs per request (parse, mode, Checker.check,
    answer), in this thread: cProfile sees only the thread it runs in."""
    today = utc_date(system_clock)
    profiler = cProfile.Profile()

    def work() -> None:
        for _, body in bodies:
            request = rv.parse(body)
            ns = hook.model.namespace_object(request.namespace) if request.namespace else None
            mode, where = mode_of(ns, hook.settings)
            verdict = hook.checker.check(request, today)
            answer(verdict, mode, where, request.name, hook.settings)

    profiler.runcall(work)
    stats = pstats.Stats(profiler)
    table: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    n = len(bodies)
    root = str(Path(__file__).resolve().parent.parent) + "/"

    def where(file: str, line: int, func: str) -> str:
        for prefix in (root, *(p + "/" for p in sys.path if p.endswith("site-packages"))):
            if file.startswith(prefix):
                file = file[len(prefix) :]
        return f"{file}:{line}({func})" if line else func

    rows = sorted(table.items(), key=lambda kv: kv[1][3], reverse=True)
    print(f"  cProfile of {n} checks (in one thread), top {top} by cumulative ms per request:")
    print(f"  {'cum ms/req':>10} {'own ms/req':>10} {'calls/req':>10}  function")
    for (file, line, func), (_, calls, own, cum, _) in rows[:top]:
        print(f"  {cum * 1000 / n:10.2f} {own * 1000 / n:10.2f} {calls / n:10.1f}  {where(file, line, func)}")
    print("  top 15 by own time:")
    for (file, line, func), (_, calls, own, cum, _) in sorted(rows, key=lambda kv: kv[1][2], reverse=True)[
        :15
    ]:
        print(f"  {cum * 1000 / n:10.2f} {own * 1000 / n:10.2f} {calls / n:10.1f}  {where(file, line, func)}")


# -- one size --------------------------------------------------------------------------------------


@dataclass
class SizeResult:
    pods: int
    policies: int
    objects: int
    load_s: float
    traced_mib: float
    seq: Run
    conc: Run
    https: list[Run]
    busy: Run | None
    per_kind: dict[str, Run]
    wrong: list[str]
    agreed: str

    @property
    def met(self) -> bool:
        t = target_ms(self.pods)
        return self.seq.pct(99) < t and self.conc.pct(99) < t


def run_size(args: argparse.Namespace, pods: int, settings: Settings) -> SizeResult:
    print(f"\n== {pods:,} pods, {args.policies:,} policies ==", flush=True)
    world = build_world(args, pods)
    st = world.stats
    kinds = Counter(o["kind"] for o in world.objects)
    print(
        f"generation: {world.gen_s:.1f}s, {len(world.objects):,} objects the model reads "
        f"({', '.join(f'{k} {n:,}' for k, n in kinds.most_common())})"
    )
    print(
        f"  {st.jobs} PyTorchJobs ({len(world.split_jobs)} running split across zones, {st.fenced_jobs} in "
        f"{len(world.fenced)} zone-fenced namespaces, {st.stray_masters} with the master in another zone); "
        f"{len(world.deny_namespaces)} namespaces labelled {MODE_LABEL}=deny, the rest warn (the default)"
    )
    traced_mib, count = traced_load(world)
    model, load_s = timed_load(world)
    health = model.health()
    if not health.synced:
        raise SystemExit(f"WRONG: the model is not synced after load(): {health}")
    print(f"warm model: {count:,} objects, load {load_s:.2f}s, {traced_mib:,.1f} MiB traced (tracemalloc)")

    requests = make_requests(world, args.requests, args.seed + pods)
    uids = [f"{pods}-{i:05d}" for i in range(len(requests))]
    bodies = [(uid, r.body(uid)) for uid, r in zip(uids, requests, strict=True)]
    mix = Counter(r.label for r in requests)
    print(f"requests: {len(requests)} ({', '.join(f'{k} {n}' for k, n in sorted(mix.items()))})")
    print(f"  body sizes: median {sorted(len(b) for _, b in bodies)[len(bodies) // 2]:,} bytes")

    hook, records = make_webhook(model, settings, args.workers, args.before_cache)
    hook.recorder.start()
    warm = [(f"warm-{u}", b.replace(u.encode(), f"warm-{u}".encode(), 1)) for u, b in bodies[:10]]
    for uid, body in warm:  # imports on first use (remediation), caches
        _check_reply(uid, hook.review(body))
    # As `auditor admit` does once the model has synced (AdmissionService.warm_when_synced).
    started = time.perf_counter()
    parsed = hook.checker.warm()
    gcpause.freeze(collect=True)
    print(f"  warm-up: {parsed:,} objects parsed and the heap frozen in {time.perf_counter() - started:.2f}s")
    seq = sequential("in-process, one at a time", hook, records, bodies)
    print(seq.line(), flush=True)
    per_kind: dict[str, Run] = {}
    for label in sorted({r.label.split(" (")[0] for r in requests}):
        idx = [i for i, r in enumerate(requests) if r.label.split(" (")[0] == label]
        per_kind[label] = Run(
            label, [seq.latencies_ms[i] for i in idx], sum(seq.latencies_ms[i] for i in idx) / 1000
        )
    for run in per_kind.values():
        print("    " + run.line().strip())
    cbodies = [(f"{u}-c", b.replace(u.encode(), f"{u}-c".encode(), 1)) for u, b in bodies]
    conc = concurrent(
        f"in-process, {args.concurrency} at once ({args.workers} workers)",
        hook,
        records,
        cbodies,
        args.concurrency,
    )
    print(conc.line(), flush=True)
    over = sum(1 for x in (*seq.latencies_ms, *conc.latencies_ms) if x > AdmissionSettings().budget_ms)
    print(f"  answers over the default {AdmissionSettings().budget_ms} ms budget (would fail open): {over}")
    hook.recorder.stop()
    hook.close()

    busy = None
    if args.workers != DEFAULT_WORKERS and not args.no_busy:
        probe, probe_records = make_webhook(model, settings, DEFAULT_WORKERS)
        probe.recorder.start()
        pbodies = [
            (f"{u}-b", b.replace(u.encode(), f"{u}-b".encode(), 1))
            for u, b in bodies[: min(100, len(bodies))]
        ]
        busy = concurrent(
            f"default {DEFAULT_WORKERS} workers, {args.concurrency} at once",
            probe,
            probe_records,
            pbodies,
            args.concurrency,
        )
        probe.recorder.stop()
        probe.close()
        print(busy.line())
        print(
            f"    {len(busy.failed_open)} of {len(pbodies)} answers failed open (webhook busy: "
            f"{DEFAULT_WORKERS} workers × 4 slots) — a figure, not checked"
        )

    https: list[Run] = []
    if not args.no_https:
        hb = bodies[: args.https_requests]
        hb = [(f"{u}-h", b.replace(u.encode(), f"{u}-h".encode(), 1)) for u, b in hb]
        https = https_runs(model, settings, args.workers, hb, args.concurrency)
        same = seq.latencies_ms[: len(hb)]
        print(Run("(in-process, the same bodies)", same, sum(same) / 1000).line())
        for run in https:
            print(run.line(), flush=True)

    wrong: list[str] = []
    for run in (seq, conc, *https):
        if run.failed_open or run.outcomes.get("unrecorded"):
            wrong.append(
                f"{run.name}: {len(run.failed_open)} answers failed open, "
                f"{run.outcomes.get('unrecorded', 0)} unrecorded: {run.failed_open[:3]}"
            )
        if run.outcomes.get("ignored"):
            wrong.append(f"{run.name}: {run.outcomes['ignored']} answers ignored (not checked)")
    # The same body answered alike one at a time and at once.
    for (u, _), (cu, _) in zip(bodies, cbodies, strict=True):
        a, b = records.by_uid.get(u), records.by_uid.get(cu)
        if a and b and (a.outcome, a.fingerprints) != (b.outcome, b.fingerprints):
            wrong.append(f"{u}: answered {a.outcome} one at a time, {b.outcome} concurrently")

    if args.profile:
        profile(hook, bodies)

    today = utc_date(system_clock)
    sample = pick_sample(world, requests, uids, records, args.sample, args.seed)
    agreed, diffs, ref_s = check_workloads(world, requests, uids, records, sample, settings, today)
    with_findings = sum(1 for i in sample if records.by_uid[uids[i]].fingerprints)
    print(
        f"correctness: {agreed}/{len(sample)} sampled workload answers equal the full reference audit "
        f"({with_findings} with findings; {ref_s:.1f}s of reference audits)"
    )
    wrong += [f"workload answer differs from the reference audit: {d}" for d in diffs]
    checked, pagreed, pdiffs, pref_s = check_policies(
        world, requests, uids, records, args.policy_sample, settings, today
    )
    if checked:
        print(
            f"  {pagreed}/{checked} sampled policy answers equal the findings the change adds to the full "
            f"live audit ({pref_s:.1f}s)"
        )
    wrong += [f"policy answer differs from the reference audit: {d}" for d in pdiffs]
    for w in wrong:
        print(f"WRONG: {w}", file=sys.stderr)
    result = SizeResult(
        pods,
        args.policies,
        count,
        load_s,
        traced_mib,
        seq,
        conc,
        https,
        busy,
        per_kind,
        wrong,
        f"{agreed}/{len(sample)} workloads, {pagreed}/{checked} policies",
    )
    del model, world
    gc.collect()
    return result


def print_table(results: list[SizeResult], settings: Settings, args: argparse.Namespace) -> None:
    print(
        f"\nsummary (budget {settings.admission.budget_ms:,} ms, {args.workers} webhook workers, "
        f"concurrency {args.concurrency}, {args.requests} requests per run; latencies in ms):"
    )
    head = (
        f"{'pods':>7} {'policies':>8} {'objects':>8} {'load s':>6} {'MiB':>6} | "
        f"{'seq p50':>7} {'p95':>6} {'p99':>6} {'max':>6} | {'conc p50':>8} {'p95':>6} {'p99':>6} "
        f"{'max':>6} | {'allowed':>7} {'warned':>6} {'denied':>6} | target"
    )
    print(head)
    for r in results:
        s, c, o = r.seq, r.conc, r.seq.outcomes
        print(
            f"{r.pods:>7,} {r.policies:>8,} {r.objects:>8,} {r.load_s:>6.2f} {r.traced_mib:>6.0f} | "
            f"{s.pct(50):>7.1f} {s.pct(95):>6.1f} {s.pct(99):>6.1f} {max(s.latencies_ms):>6.1f} | "
            f"{c.pct(50):>8.1f} {c.pct(95):>6.1f} {c.pct(99):>6.1f} {max(c.latencies_ms):>6.1f} | "
            f"{o['allowed']:>7} {o['warned']:>6} {o['denied']:>6} | p99 < {target_ms(r.pods):.0f}: "
            f"{'yes' if r.met else 'no'}"
        )
    for r in results:
        for run in r.https:
            print(f"{r.pods:>7,} {run.line().strip()}")
    if len(results) > 1:
        sizes = [r.pods for r in results]
        print(
            f"growth sequential p50 over pods: exponent "
            f"{growth.exponent(sizes, [max(r.seq.pct(50), 1e-3) for r in results]):.2f}; "
            f"traced MiB: {growth.exponent(sizes, [max(r.traced_mib, 1e-3) for r in results]):.2f}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="5000,50000", help="pod counts, comma-separated")
    ap.add_argument("--policies", type=int, default=1_000)
    ap.add_argument("--nodes", type=int, help="nodes (default: pods / 30)")
    ap.add_argument("--jobs", type=int, help="PyTorchJobs (default: pods / 100)")
    ap.add_argument("--cilium-share", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--requests", type=int, default=300, help="requests per run")
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument(
        "--before-cache",
        type=int,
        default=0,
        help="Checker(before_cache=): 0 (default) audits the state in force on every policy request",
    )
    ap.add_argument(
        "--workers", type=int, help="the webhook's pool (default: enough slots for --concurrency, ≥ 4)"
    )
    ap.add_argument("--budget-ms", type=int, default=600_000, help="admission.budget_ms for the runs")
    ap.add_argument("--sample", type=int, default=20, help="workload answers checked against the reference")
    ap.add_argument("--policy-sample", type=int, default=4, help="policy answers checked (full live audits)")
    ap.add_argument("--https-requests", type=int, default=150)
    ap.add_argument("--no-https", action="store_true")
    ap.add_argument("--no-busy", action="store_true", help="skip the default-workers burst")
    ap.add_argument("--quick", action="store_true", help="smoke run: 500 pods, 100 policies, few requests")
    ap.add_argument("--profile", action="store_true", help="cProfile the checks of the sequential run")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.policies = "500", min(args.policies, 100)
        args.requests, args.https_requests, args.sample = 40, 20, 8
        args.policy_sample = min(args.policy_sample, 2)
    if args.workers is None:
        args.workers = max(DEFAULT_WORKERS, math.ceil(args.concurrency / 4))
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    base = Settings()
    settings = dataclasses.replace(
        base, admission=dataclasses.replace(base.admission, budget_ms=args.budget_ms)
    )
    print(growth.machine_load())
    print(
        f"settings: defaults, admission.budget_ms={args.budget_ms:,} (raised from "
        f"{base.admission.budget_ms:,} so that no answer fails open on time), default_mode="
        f"{settings.admission.default_mode}; policy pack: built-in; webhook workers {args.workers}"
    )
    results = [run_size(args, pods, settings) for pods in sizes]
    print_table(results, settings, args)
    wrong = [w for r in results for w in r.wrong]
    for r in results:
        print(
            f"correctness at {r.pods:,} pods: {r.agreed} agree"
            + (f"; {len(r.wrong)} WRONG" if r.wrong else "")
        )
    if wrong:
        print(f"WRONG: {len(wrong)} wrong answer(s) (see above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
