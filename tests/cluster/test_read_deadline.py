"""A stalled API server: one read has an overall deadline (`cluster.read_deadline_seconds`),
checked across pages and retries; past it the read stops with what it has and the audit is
partial (exit 3 for `auditor cluster`, a `partial` run in the service)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from fakeapi import FakeCluster, kubeconfig, serve
from kubernetes import config
from seedcluster import objects

sys.path.insert(0, str(Path(__file__).parents[1]))
from dbsupport import Clock, engine_for

from auditor import cli
from auditor.service.runner import AuditRunner
from auditor.settings.config import load_settings
from auditor.sources.kubeapi import KubernetesTransport, Reader, ReadOptions
from auditor.sources.manifests import Tools
from auditor.store.repository import Store, TargetSpec

CRDS = {"/apis/cilium.io/v2/ciliumnetworkpolicies"}
PODS = "/api/v1/pods"


def test_a_stalled_list_ends_the_cli_audit_partial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeCluster(objects("before"), CRDS)
    fake.faults.slow[PODS] = 30.0  # the pod list never answers within the deadline
    settings = tmp_path / "auditor.yaml"
    settings.write_text("cluster: {read_deadline_seconds: 1}\n")
    with serve(fake) as url:
        kc = kubeconfig(tmp_path / "k", url)
        started = time.monotonic()
        code = cli.main(["cluster", "--kubeconfig", str(kc), "--config", str(settings), "--format", "json"])
        elapsed = time.monotonic() - started
    out, err = capsys.readouterr()
    assert code == 3
    assert "read deadline of 1 s (cluster.read_deadline_seconds)" in err and "the audit is partial" in err
    assert "not read: Pod" in err
    assert elapsed < 25  # it did not wait for the stalled answer (30 s)
    assert '"errors": [' in out and "read deadline" in out


def test_the_deadline_is_checked_across_pages(tmp_path: Path) -> None:
    fake = FakeCluster(objects("before"), CRDS)
    fake.faults.slow_pages[PODS] = 0.4  # every page after the first is slow, none beyond a timeout
    with serve(fake) as url:
        api = config.new_client_from_config(config_file=str(kubeconfig(tmp_path / "k", url)))
        try:
            reader = Reader(
                KubernetesTransport(api, (5.0, 10.0)),
                ReadOptions(page_size=1, attempts=1, deadline_seconds=1.0),
                lambda _: None,
            )
            read = reader.read("lab")
        finally:
            api.close()
    [problem] = read.incomplete
    assert problem.problem == "deadline" and "GET /api/v1/pods" in problem.message
    assert read.counts["Node (v1)"] > 0 and "Pod (v1)" not in read.counts
    pages = [r for r in fake.requests if r.startswith(PODS) and "continue=" in r]
    assert 1 <= len(pages) < 4  # five pods, one per page: stopped before the end


def test_a_stalled_cluster_target_run_is_stored_partial(tmp_path: Path) -> None:
    fake = FakeCluster(objects("before"), CRDS)
    fake.faults.slow[PODS] = 30.0
    with serve(fake) as url, engine_for("sqlite", tmp_path) as engine:
        kubeconfig(tmp_path / "kubeconfig", url, context="lab")
        cfg = tmp_path / "auditor.yaml"
        cfg.write_text(
            "cluster: {read_deadline_seconds: 1}\n"
            "targets:\n  - name: lab-cluster\n    cluster: {context: lab, kubeconfig: kubeconfig}\n"
        )
        settings = load_settings(cfg)
        store = Store(engine, Clock())
        store.sync_targets(TargetSpec(t.name, t.kind, t.location) for t in settings.targets)
        result = AuditRunner(settings, store, Tools(None, None)).run("lab-cluster")
        assert result is not None and result.status == "partial", result
        run = store.run(result.run_id)
        assert run is not None and "read deadline" in run.load_errors[0]["message"]
