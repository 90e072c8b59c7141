"""The shipped NetworkPolicies, rendered with the real `kubectl kustomize` and checked by this
tool's own reachability engine (`auditor explain`): who may reach the service, on which port,
and what the service and the migration Job may reach."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from deploysupport import find, kubectl, one

from auditor.cli import EXIT_FINDINGS, EXIT_OK, main

pytestmark = pytest.mark.skipif(kubectl() is None, reason="kubectl is installed by .ci/run")

CLIENTS = """\
apiVersion: v1
kind: Namespace
metadata: {name: monitoring, labels: {kubernetes.io/metadata.name: monitoring, placement-auditor.io/access: allowed}}
---
apiVersion: v1
kind: Namespace
metadata: {name: tenant, labels: {kubernetes.io/metadata.name: tenant}}
---
apiVersion: v1
kind: Namespace
metadata: {name: kube-system, labels: {kubernetes.io/metadata.name: kube-system}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: prometheus, namespace: monitoring}
spec:
  selector: {matchLabels: {app: prometheus}}
  template:
    metadata: {labels: {app: prometheus}}
    spec: {containers: [{name: p, image: prom, ports: [{containerPort: 9090}]}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: curious, namespace: tenant}
spec:
  selector: {matchLabels: {app: curious}}
  template:
    metadata: {labels: {app: curious}}
    spec: {containers: [{name: c, image: curl, ports: [{containerPort: 8000}]}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: coredns, namespace: kube-system}
spec:
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec: {containers: [{name: dns, image: coredns, ports: [{containerPort: 53, protocol: UDP}]}]}
"""
SERVER = "placement-auditor/placement-auditor"
MIGRATION = "placement-auditor/placement-auditor-db-upgrade"


@pytest.fixture(scope="module")
def tree(rendered: dict[str, list[dict[str, Any]]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("netpol")
    (where / "deploy.yaml").write_text(yaml.safe_dump_all(rendered["postgres"]), encoding="utf-8")
    (where / "clients.yaml").write_text(CLIENTS, encoding="utf-8")
    return where


def explain(tree: Path, source: str, destination: str, port: str, protocol: str = "TCP") -> int:
    return main(
        ["explain", str(tree), "--from", source, "--to", destination, "--port", port, "--protocol", protocol]
    )


@pytest.mark.parametrize("overlay", ["sqlite", "postgres"])
def test_each_overlay_ships_the_policies(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    objs = rendered[overlay]
    server = one(objs, "NetworkPolicy", "placement-auditor")
    deploy = one(objs, "Deployment", "placement-auditor")
    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert server["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert server["spec"]["policyTypes"] == ["Ingress", "Egress"]
    (ingress,) = server["spec"]["ingress"]
    assert ingress["ports"] == [{"port": "http", "protocol": "TCP"}]
    migration = one(objs, "NetworkPolicy", "placement-auditor-db-upgrade")
    for job in find(objs, "Job"):
        labels = job["spec"]["template"]["metadata"]["labels"]
        assert migration["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
        assert not server["spec"]["podSelector"]["matchLabels"].items() <= labels.items()


def test_only_labelled_namespaces_reach_the_service_port(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert explain(tree, "monitoring/prometheus", SERVER, "8080") == EXIT_OK
    assert explain(tree, "tenant/curious", SERVER, "8080") == EXIT_FINDINGS
    assert explain(tree, "monitoring/prometheus", SERVER, "9999") == EXIT_FINDINGS  # no other port
    assert explain(tree, "monitoring/prometheus", MIGRATION, "8080") == EXIT_FINDINGS
    capsys.readouterr()


def test_what_the_service_and_the_migration_may_reach(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert explain(tree, SERVER, "kube-system/coredns", "53", "UDP") == EXIT_OK
    assert explain(tree, MIGRATION, "kube-system/coredns", "53", "UDP") == EXIT_OK
    assert explain(tree, SERVER, "monitoring/prometheus", "9090") == EXIT_OK  # measured signals
    assert explain(tree, SERVER, "tenant/curious", "8000") == EXIT_FINDINGS
    assert explain(tree, MIGRATION, "monitoring/prometheus", "9090") == EXIT_FINDINGS
    capsys.readouterr()
