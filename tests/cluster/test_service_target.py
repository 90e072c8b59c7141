"""Cluster targets in the service: audited on their schedule like repositories, stored with the
server version as the revision; a partial read resolves nothing."""

from __future__ import annotations

import sys
from pathlib import Path

from fakeapi import FakeCluster, kubeconfig, serve
from seedcluster import objects

sys.path.insert(0, str(Path(__file__).parents[1]))
from dbsupport import Clock, engine_for

from auditor.service.runner import AuditRunner
from auditor.settings.config import load_settings
from auditor.sources.kubeapi import ReadOptions
from auditor.sources.manifests import Tools
from auditor.store.repository import FindingFilter, Store, TargetSpec


def test_cluster_target_runs_and_stores_observed_findings(tmp_path: Path) -> None:
    fake = FakeCluster(objects("before"), {"/apis/cilium.io/v2/ciliumnetworkpolicies"})
    with serve(fake) as url, engine_for("sqlite", tmp_path) as engine:
        kubeconfig(tmp_path / "kubeconfig", url, context="lab")
        config = tmp_path / "auditor.yaml"
        config.write_text(
            "targets:\n  - name: lab-cluster\n    cluster: {context: lab, kubeconfig: kubeconfig}\n"
        )
        settings = load_settings(config)
        assert settings.targets[0].kind == "cluster"
        clock = Clock()
        store = Store(engine, clock)
        store.sync_targets(TargetSpec(t.name, t.kind, t.location) for t in settings.targets)
        runner = AuditRunner(settings, store, Tools(None, None))
        runner.read_options = ReadOptions(attempts=1, backoff_seconds=0)
        first = runner.run("lab-cluster")
        assert first is not None and first.status == "succeeded", first
        [finding] = store.findings(FindingFilter(target="lab-cluster"), 10).items
        assert (finding.rule, finding.certainty, finding.status) == (
            "cross-zone-blocked",
            "observed",
            "new",
        )
        assert store.run(first.run_id).revision == "v1.34.2"  # type: ignore[union-attr]
        # A read the service account is not allowed to complete: partial, nothing resolved.
        fake.faults.forbidden.add("/api/v1/pods")
        clock.advance(days=1)
        second = runner.run("lab-cluster")
        assert second is not None and second.status == "partial"
        run = store.run(second.run_id)
        assert run is not None and 'resources: ["pods"]' in run.load_errors[0]["message"]
        assert store.findings(FindingFilter(target="lab-cluster"), 10).items[0].status == "open"
