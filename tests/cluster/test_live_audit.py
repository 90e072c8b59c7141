"""`auditor cluster` and `auditor snapshot` through the real kubernetes client, against a local
server speaking the Kubernetes list API (tests/cluster/fakeapi.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from fakeapi import FakeCluster, kubeconfig, serve
from seedcluster import objects

from auditor import cli

CRDS = {"/apis/cilium.io/v2/ciliumnetworkpolicies"}


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[FakeCluster, Path]]:
    cluster = FakeCluster(objects("before"), CRDS)
    with serve(cluster) as url:
        yield cluster, kubeconfig(tmp_path / "kubeconfig", url)


def _json(capsys: pytest.CaptureFixture[str]) -> dict:
    return json.loads(capsys.readouterr().out)


def test_the_seed_lab_as_placed_is_one_observed_cross_zone_block(
    lab: tuple[FakeCluster, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, config = lab
    code = cli.main(["cluster", "--kubeconfig", str(config), "--context", "lab", "--format", "json"])
    report = _json(capsys)
    assert code == 1
    assert [(f["rule"], f["certainty"]) for f in report["findings"]] == [("cross-zone-blocked", "observed")]
    finding = report["findings"][0]
    assert finding["edge"]["from"] == {"role": "trainer-workers", "zones": ["zone-a"]}
    assert finding["edge"]["to"] == {"role": "trainer-coordinator", "zones": ["zone-b"]}
    assert {p["name"] for p in finding["policies"]} == {
        "zone-a-only",
        "gpu-workers-stay-in-zone-a",
        "zone-b-only",
    }
    assert finding["workload"]["file"].startswith("cluster:lab/Job/ml-demo/trainer-workers")
    assert report["errors"] == []
    # Secrets are never read; of the ConfigMaps only cilium-config.
    assert not any(
        "secrets" in r or "/configmaps?" in r or r.startswith("/api/v1/configmaps") for r in cluster.requests
    )


def test_the_fixed_placement_has_no_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with serve(FakeCluster(objects("after"), CRDS)) as url:
        code = cli.main(["cluster", "--kubeconfig", str(kubeconfig(tmp_path / "k", url)), "--format", "json"])
    report = _json(capsys)
    assert code == 0 and report["findings"] == [] and report["errors"] == []


def test_observed_and_predicted_views_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The before/ specs, but the coordinator was bound by hand to a zone-a node: it still carries
    # its `zone: zone-b` label, so the policies deny it even next to the workers (observed
    # traffic-blocked); and the next scheduling puts it back in zone-b (predicted cross-zone-blocked).
    with serve(FakeCluster(objects("before", coordinator_node="lab-worker"), CRDS)) as url:
        cli.main(["cluster", "--kubeconfig", str(kubeconfig(tmp_path / "k", url)), "--format", "json"])
    findings = {(f["rule"], f["certainty"]): f for f in _json(capsys)["findings"]}
    assert set(findings) == {("traffic-blocked", "observed"), ("cross-zone-blocked", "always")}
    assert findings["traffic-blocked", "observed"]["edge"]["to"]["zones"] == ["zone-a"]
    assert findings["cross-zone-blocked", "always"]["message"].startswith("when rescheduled:")


def test_missing_permission_names_the_rbac_rule_and_fails_the_audit(
    lab: tuple[FakeCluster, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, config = lab
    cluster.faults.forbidden.add("/apis/cilium.io/v2/ciliumnetworkpolicies")
    code = cli.main(["cluster", "--kubeconfig", str(config), "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 3
    assert 'apiGroups: ["cilium.io"], resources: ["ciliumnetworkpolicies"], verbs: ["list"]' in err
    assert "the audit is partial" in err
    report = json.loads(out)
    assert any("forbidden" in e["message"] for e in report["errors"])


def test_absent_crds_are_skipped_and_reported_not_errors(
    lab: tuple[FakeCluster, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, config = lab
    assert cli.main(["cluster", "--kubeconfig", str(config), "--format", "json"]) == 1
    report = _json(capsys)
    assert report["errors"] == []


def test_nothing_readable_is_a_failed_audit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = kubeconfig(tmp_path / "k", f"http://127.0.0.1:{port}")
    from auditor.sources import kubeapi

    quick = kubeapi.ReadOptions(
        attempts=1, backoff_seconds=0.0, relists=0, cilium_config_namespaces=("kube-system",)
    )
    monkeypatch.setattr(kubeapi.ReadOptions, "from_settings", classmethod(lambda cls, settings: quick))
    assert cli.main(["cluster", "--kubeconfig", str(config)]) == 3
    assert "nothing could be read" in capsys.readouterr().err


def test_unknown_context_is_a_usage_error(
    lab: tuple[FakeCluster, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, config = lab
    assert cli.main(["cluster", "--kubeconfig", str(config), "--context", "prod"]) == 2
    assert "no context 'prod'" in capsys.readouterr().err


def test_snapshot_round_trips_and_scans_to_the_same_findings(
    lab: tuple[FakeCluster, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, config = lab
    snap = tmp_path / "snap.yaml"
    assert cli.main(["snapshot", "--kubeconfig", str(config), "-o", str(snap)]) == 0
    capsys.readouterr()
    header, listing = list(yaml.safe_load_all(snap.read_text()))
    assert header["kind"] == "ClusterSnapshot" and header["spec"]["serverVersion"] == "v1.34.2"
    kinds = [o["kind"] for o in listing["items"]]
    assert "Secret" not in kinds
    assert [o["metadata"]["name"] for o in listing["items"] if o["kind"] == "ConfigMap"] == ["cilium-config"]
    assert kinds.count("Pod") == 5 and "ReplicaSet" in kinds
    assert not any("managedFields" in o["metadata"] for o in listing["items"])
    cli.main(["cluster", "--kubeconfig", str(config), "--format", "json"])
    live = _json(capsys)
    assert cli.main(["scan", str(snap), "--format", "json"]) == 1
    offline = _json(capsys)
    key = lambda r: sorted((f["rule"], f["certainty"], f["fingerprint"]) for f in r["findings"])  # noqa: E731
    assert key(offline) == key(live) and key(live)
    # Round trip: writing what was read again gives the same objects.
    snap2 = tmp_path / "snap2.yaml"
    from auditor.sources.cluster import write_snapshot
    from auditor.sources.kubeapi import ClusterRead

    write_snapshot(
        ClusterRead("lab", "v1.34.2", listing["items"]), snap2, datetime(2026, 12, 3, 6, 30, tzinfo=UTC)
    )
    assert list(yaml.safe_load_all(snap2.read_text()))[1]["items"] == listing["items"]
