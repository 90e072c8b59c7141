"""`auditor admit` as it runs in a cluster: a real process, its informer listing and watching the
fake API server through the real kubernetes client (kubeconfig with a bearer token), answering
AdmissionReview requests over HTTPS from the warm model, recording them in a real SQLite store,
draining and exiting 0 on SIGTERM; and its start-up errors, one line each, exit 2."""

from __future__ import annotations

import copy
import http.client
import json
import os
import queue
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from admissionsupport import certificate, request
from dbsupport import Clock
from fakeapi import FakeCluster, kubeconfig, serve
from seedcluster import objects

from auditor.settings.admission import MODE_LABEL
from auditor.store import database
from auditor.store.repository import Store

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "auditor" / "examples" / "seed-lab"
CNP_PATH = "/apis/cilium.io/v2/ciliumnetworkpolicies"


def _part(state: str, kind: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((SEED / state / "workload.yaml").read_text()) if d]
    return next(d for d in docs if d["kind"] == kind)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Admit:
    """One `auditor admit` process and the lines of its stderr."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("AUDITOR_DATABASE_URL", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "auditor", "admit", *argv],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        assert self.proc.stderr is not None
        stream = self.proc.stderr
        self.reader = threading.Thread(target=lambda: [self.lines.put(line) for line in stream], daemon=True)
        self.reader.start()

    def wait_for(self, needle: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                assert self.proc.poll() is None, f"auditor admit exited {self.proc.returncode}: {self.seen}"
                continue
            self.seen.append(line)
            if needle in line:
                return line
        raise AssertionError(f"no {needle!r} in the log within {timeout} s: {self.seen}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()

    def log(self) -> str:
        """Everything it wrote to stderr (once it has exited)."""
        self.reader.join(10)
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return "".join(self.seen)


def _https(port: int) -> http.client.HTTPSConnection:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)


def _review(conn: http.client.HTTPSConnection, body: dict[str, Any]) -> dict[str, Any]:
    conn.request("POST", "/validate", json.dumps(body), {"Content-Type": "application/json"})
    reply = conn.getresponse()
    data = reply.read()
    assert reply.status == 200, (reply.status, data)
    answer: dict[str, Any] = json.loads(data)["response"]
    return answer


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[FakeCluster, Path]]:
    fake = FakeCluster(objects("after"), {CNP_PATH})
    fake.bookmark_interval = 0.5
    with serve(fake) as url:
        yield fake, kubeconfig(tmp_path / "kubeconfig", url)


def test_admit_serves_from_the_watched_cluster_records_and_stops_on_sigterm(
    world: tuple[FakeCluster, Path], tmp_path: Path
) -> None:
    fake, kube = world
    db = tmp_path / "admission.db"
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump({"database": {"url": f"sqlite:///{db}"}, "admission": {"default_mode": "warn"}})
    )
    crt, key = certificate(tmp_path, "placement-auditor-admission.placement-auditor.svc")
    metrics_port = _free_port()
    admit = Admit(
        [
            "--kubeconfig", str(kube), "--config", str(config), "--tls-cert", str(crt),
            "--tls-key", str(key), "--host", "127.0.0.1", "--port", "0",
            "--metrics-port", str(metrics_port), "--drain-seconds", "0.5",
        ],
        tmp_path,
    )  # fmt: skip
    try:
        first = admit.wait_for("admission webhook for cluster")
        assert "cluster lab" in first and "default mode warn" in first and "sqlite:///" in first
        port = int(first.split("https://127.0.0.1:", 1)[1].split("/", 1)[0])
        conn = _https(port)
        deadline = time.monotonic() + 30
        while True:  # readiness follows the informer's first lists
            conn.request("GET", "/readyz")
            ready = conn.getresponse()
            ready.read()
            if ready.status == 200:
                break
            assert ready.status == 503 and time.monotonic() < deadline, ready.status
            time.sleep(0.1)

        # The fix of seed-lab reverted (the coordinator back to seed-lab/before, off the GPU
        # nodes, into zone-b) while its workers run in zone-a: warned, not denied.
        revert = request(
            _part("before", "Deployment"), "UPDATE", _part("after", "Deployment"), uid="uid-warn"
        )
        warned = _review(conn, revert)
        assert warned["uid"] == "uid-warn" and warned["allowed"] is True, warned
        assert any("cross-zone-blocked ml-demo/trainer-workers" in w for w in warned["warnings"]), warned

        # The namespace is switched to deny in the cluster: the watch brings it, no restart.
        namespace = copy.deepcopy(next(o for o in objects("after") if o["kind"] == "Namespace"))
        namespace["metadata"]["labels"][MODE_LABEL] = "deny"
        fake.put(namespace)
        deadline = time.monotonic() + 15
        while True:
            revert["request"]["uid"] = f"uid-deny-{time.monotonic()}"
            denied = _review(conn, revert)
            if denied["allowed"] is False:
                break
            assert time.monotonic() < deadline, "the namespace's new mode never reached the model"
            time.sleep(0.1)
        assert "cross-zone-blocked" in denied["status"]["message"]
        assert "auditor fix" in denied["status"]["message"]

        # The fixed state, scaled, is allowed with no warning.
        scaled = _part("after", "Deployment")
        scaled["spec"]["replicas"] = 2
        fixed = _review(conn, request(scaled, "UPDATE", _part("after", "Deployment"), uid="uid-ok"))
        assert fixed == {"uid": "uid-ok", "allowed": True}, fixed

        metrics = http.client.HTTPConnection("127.0.0.1", metrics_port, timeout=10)
        metrics.request("GET", "/metrics")
        text = metrics.getresponse().read().decode()
        assert "placement_auditor_admission_requests_total" in text
        assert "placement_auditor_admission_model_synced 1.0" in text
        conn.close()
    finally:
        code = admit.stop()
    rest = admit.log()
    assert code == 0, rest
    assert "stopping (draining" in rest
    assert "Traceback" not in rest

    store = Store(database.make_engine(f"sqlite:///{db}"), Clock())
    stored = {d.uid: d for d in store.admission_decisions(cluster="lab", limit=500).items}
    assert stored["uid-warn"].outcome == "warned"
    assert stored["uid-ok"].outcome == "allowed"
    assert any(d.outcome == "denied" and d.mode == "deny" for d in stored.values())


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AUDITOR_DATABASE_URL"}
    return subprocess.run(
        [sys.executable, "-m", "auditor", "admit", *argv],
        check=False,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_start_up_errors_are_one_line_and_exit_2(world: tuple[FakeCluster, Path], tmp_path: Path) -> None:
    _, kube = world
    crt, key = certificate(tmp_path, "localhost")
    base = [
        "--kubeconfig",
        str(kube),
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--metrics-port",
        "0",
        "--no-record",
    ]

    missing = _run([*base, "--tls-cert", str(tmp_path / "nope.crt"), "--tls-key", str(key)], tmp_path)
    assert missing.returncode == 2, missing.stderr
    assert "nope.crt" in missing.stderr and "--tls-cert" in missing.stderr

    garbage = tmp_path / "garbage.crt"
    garbage.write_text("-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n")
    broken = _run([*base, "--tls-cert", str(garbage), "--tls-key", str(key)], tmp_path)
    assert broken.returncode == 2, broken.stderr
    assert "garbage.crt" in broken.stderr and "do not load" in broken.stderr

    context = _run([*base, "--context", "nowhere", "--tls-cert", str(crt), "--tls-key", str(key)], tmp_path)
    assert context.returncode == 2, context.stderr
    assert "no context 'nowhere'" in context.stderr

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = str(taken.getsockname()[1])
        argv = [a if a != "0" or i != base.index("--port") + 1 else busy for i, a in enumerate(base)]
        clash = _run([*argv, "--tls-cert", str(crt), "--tls-key", str(key)], tmp_path)
    assert clash.returncode == 2, clash.stderr
    assert f"cannot listen on 127.0.0.1:{busy}" in clash.stderr

    for text in (missing.stderr, broken.stderr, context.stderr, clash.stderr):
        assert (
            "Traceback" not in text and len([ln for ln in text.splitlines() if ln.startswith("error:")]) == 1
        )
