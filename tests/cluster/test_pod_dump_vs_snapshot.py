"""`auditor scan` of the manifests in Git plus a `kubectl get pods -o yaml` dump finds what
`auditor scan` of a snapshot of the same cluster finds: the pods are observations of their owners
either way (the snapshot's ReplicaSet is not in the tree; its pods map to the Deployment)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from fakeapi import FakeCluster, kubeconfig, serve
from seedcluster import SEED, objects

from auditor import cli

CRDS = {"/apis/cilium.io/v2/ciliumnetworkpolicies"}


def _scan(path: Path, capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[type-arg]
    cli.main(["scan", str(path), "--format", "json", "--fail-on", "none"])
    out: dict = json.loads(capsys.readouterr().out)  # type: ignore[type-arg]
    assert out["errors"] == []
    return out


def _key(report: dict) -> list[tuple[str, str, str, str]]:  # type: ignore[type-arg]
    return sorted(
        (f["rule"], f["certainty"], f["workload"]["name"], f["fingerprint"]) for f in report["findings"]
    )


@pytest.mark.parametrize("coordinator_node", ["lab-worker3", "lab-worker"])
def test_a_tree_with_a_pod_dump_scans_like_a_snapshot_of_the_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], coordinator_node: str
) -> None:
    cluster_objects = objects("before", coordinator_node=coordinator_node)
    snap = tmp_path / "snap.yaml"
    with serve(FakeCluster(cluster_objects, CRDS)) as url:
        config = kubeconfig(tmp_path / "kubeconfig", url)
        assert cli.main(["snapshot", "--kubeconfig", str(config), "-o", str(snap)]) == 0
    capsys.readouterr()

    tree = tmp_path / "repo"
    (tree / "manifests").mkdir(parents=True)
    for name in ("nodes.yaml", "policies.yaml"):
        (tree / name).write_text((SEED / name).read_text())
    (tree / "manifests" / "workload.yaml").write_text((SEED / "before" / "workload.yaml").read_text())
    pods = [o for o in cluster_objects if o["kind"] == "Pod"]
    dump = {"apiVersion": "v1", "kind": "List", "items": pods, "metadata": {"resourceVersion": ""}}
    (tree / "pods.yaml").write_text(yaml.safe_dump(dump, sort_keys=True))

    offline = _scan(snap, capsys)
    files = _scan(tree, capsys)
    assert _key(files) == _key(offline)
    assert any(f["certainty"] == "observed" for f in files["findings"])
    assert not any(f["rule"] == "role-unschedulable" for f in files["findings"])
    # The findings point at the owner's manifest in the tree, not at the dump.
    assert {f["workload"]["file"] for f in files["findings"]} == {f"{tree}/manifests/workload.yaml"}
