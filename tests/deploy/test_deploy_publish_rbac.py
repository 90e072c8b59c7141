"""The RBAC of `auditor cluster --publish-reports` (deploy/kustomize/components/publish-reports):
exactly the resources the publisher writes, both PolicyReport APIs, with the verbs server-side
apply needs (create the first time, patch after, get) and those that remove its stale reports
(list, delete), bound to the auditor's service account;
valid Kubernetes objects (kubernetes-validate, strict)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from auditor.reports import policyreport

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "deploy/kustomize/components/publish-reports"


def _objects() -> list[dict]:
    return [d for d in yaml.safe_load_all((COMPONENT / "rbac.yaml").read_text()) if d]


def test_the_grants_are_what_the_publisher_writes() -> None:
    (role,) = [o for o in _objects() if o["kind"] == "ClusterRole"]
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    needed = {
        (f.group, plural, verb)
        for f in policyreport.FLAVOURS.values()
        for plural in (f.plural, f.cluster_plural)
        for verb in ("get", "list", "create", "patch", "delete")
    }
    assert granted == needed
    assert all("*" not in str(rule) and "resourceNames" not in rule for rule in role["rules"])


def test_it_is_bound_to_the_auditor_service_account() -> None:
    (binding,) = [o for o in _objects() if o["kind"] == "ClusterRoleBinding"]
    account = yaml.safe_load((ROOT / "deploy/kustomize/base/serviceaccount.yaml").read_text())
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": account["metadata"]["namespace"],
        }
    ]
    assert binding["roleRef"]["name"] == "placement-auditor-publish-reports"
    component = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert component["kind"] == "Component" and component["resources"] == ["rbac.yaml"]


def test_the_objects_are_valid_kubernetes() -> None:
    kv = pytest.importorskip("kubernetes_validate.utils")
    for obj in _objects():
        kv.validate(obj, kv.latest_version(), strict=True)
