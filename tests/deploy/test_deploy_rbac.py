"""The RBAC the manifests grant is exactly what the cluster reader uses: the `list` of every
resource in auditor.sources.kubeapi.RESOURCES at cluster scope, and the `get` of the ConfigMap
cilium-config in the namespaces of ReadOptions.cilium_config_namespaces — nothing missing, nothing
extra, no Secrets, no wildcard, only read verbs."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import pytest
from deploysupport import NAMESPACE, find, kubectl, one, render_variant

from auditor.sources.kubeapi import CILIUM_CONFIG, RESOURCES, ReadOptions

pytestmark = pytest.mark.skipif(kubectl() is None, reason="kubectl is installed by .ci/run")
READ_VERBS = {"get", "list", "watch"}
ANY = "*all*"  # a grant that applies in every namespace (ClusterRoleBinding)


class Grant(NamedTuple):
    namespace: str  # ANY for cluster-wide
    group: str
    resource: str
    verb: str
    name: str  # ANY when not limited by resourceNames


def grants_of(objs: list[dict[str, Any]], account: tuple[str, str]) -> set[Grant]:
    """Every (namespace, group, resource, verb, name) the service account is granted, expanding
    rules; asserts on what must never appear (wildcards, write verbs, Secrets, URLs)."""
    roles = {("ClusterRole", "", o["metadata"]["name"]): o for o in find(objs, "ClusterRole")}
    roles |= {("Role", o["metadata"]["namespace"], o["metadata"]["name"]): o for o in find(objs, "Role")}
    out: set[Grant] = set()
    for binding in find(objs, "ClusterRoleBinding") + find(objs, "RoleBinding"):
        subjects = {(s["kind"], s.get("namespace", ""), s["name"]) for s in binding["subjects"]}
        if ("ServiceAccount", *account) not in subjects:
            continue
        assert subjects == {("ServiceAccount", *account)}, f"{binding['metadata']['name']} binds others"
        ref = binding["roleRef"]
        assert ref["apiGroup"] == "rbac.authorization.k8s.io"
        binding_ns = binding["metadata"].get("namespace", "") if binding["kind"] == "RoleBinding" else ""
        role_ns = binding_ns if ref["kind"] == "Role" else ""
        role = roles.get((ref["kind"], role_ns, ref["name"]))
        assert role is not None, f"{binding['metadata']['name']} refers to a missing {ref['kind']}"
        assert "aggregationRule" not in role
        where = binding_ns or ANY
        for rule in role["rules"]:
            assert "nonResourceURLs" not in rule, rule
            for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(key, []), f"wildcard in {key}: {rule}"
            assert set(rule["verbs"]) <= READ_VERBS, f"a write verb: {rule}"
            assert "secrets" not in rule["resources"], rule
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    assert "/" not in resource, f"a subresource: {resource}"
                    for verb in rule["verbs"]:
                        for name in rule.get("resourceNames") or [ANY]:
                            out.add(Grant(where, group, resource, verb, name))
    return out


def reader_needs(namespaces: tuple[str, ...]) -> set[Grant]:
    """The requests the reader makes, as grants."""
    lists = {Grant(ANY, r.group, r.plural, "list", ANY) for r in RESOURCES}
    cilium = {
        Grant(ns, CILIUM_CONFIG.group, CILIUM_CONFIG.plural, "get", "cilium-config") for ns in namespaces
    }
    return lists | cilium


def allowed(grants: set[Grant], need: Grant) -> bool:
    return any(
        g.namespace in (ANY, need.namespace)
        and (g.group, g.resource, g.verb) == (need.group, need.resource, need.verb)
        and g.name in (ANY, need.name)
        for g in grants
    )


def _account(objs: list[dict[str, Any]]) -> tuple[str, str]:
    deploy = one(objs, "Deployment", "placement-auditor")
    return NAMESPACE, deploy["spec"]["template"]["spec"]["serviceAccountName"]


def test_the_checks_catch_a_missing_list_and_an_extra_grant() -> None:
    """The comparison itself: a grant set missing one list, or with one more verb, differs."""
    need = reader_needs(("kube-system",))
    fewer = set(need)
    fewer.discard(Grant(ANY, "cilium.io", "ciliumnetworkpolicies", "list", ANY))
    assert fewer != need
    assert not allowed(fewer, Grant(ANY, "cilium.io", "ciliumnetworkpolicies", "list", ANY))
    assert not allowed(need, Grant("cilium", "", "configmaps", "get", "cilium-config"))
    assert allowed(
        {Grant(ANY, "", "configmaps", "get", "cilium-config")},
        Grant("x", "", "configmaps", "get", "cilium-config"),
    )
    assert not allowed(
        {Grant(ANY, "", "configmaps", "get", "cilium-config")}, Grant("x", "", "configmaps", "get", "other")
    )


@pytest.mark.parametrize("overlay", ["sqlite", "postgres"])
def test_overlays_grant_exactly_the_reader_lists_and_cilium_config_in_kube_system(
    rendered: dict[str, list[dict]], overlay: str
) -> None:
    objs = rendered[overlay]
    grants = grants_of(objs, _account(objs))
    # The base covers Cilium in kube-system, where the reader looks first (and stops when found).
    assert grants == reader_needs(("kube-system",))
    assert ReadOptions().cilium_config_namespaces[0] == "kube-system"
    # The list rules are one ClusterRole; the cilium-config get is a namespaced Role.
    (cluster_role,) = find(objs, "ClusterRole")
    assert all(rule["verbs"] == ["list"] for rule in cluster_role["rules"])
    (role,) = find(objs, "Role")
    assert role["metadata"]["namespace"] == "kube-system"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["cilium-config"], "verbs": ["get"]}
    ]


def test_component_cilium_namespace_grants_every_namespace_the_reader_tries(tmp_path: Path) -> None:
    objs = render_variant(tmp_path, "sqlite", ["cilium-namespace"])
    grants = grants_of(objs, _account(objs))
    assert grants == reader_needs(ReadOptions().cilium_config_namespaces)
    assert {r["metadata"]["namespace"] for r in find(objs, "Role")} == set(
        ReadOptions().cilium_config_namespaces
    )


def test_component_any_namespace_grants_cilium_config_only_by_name(tmp_path: Path) -> None:
    objs = render_variant(tmp_path, "postgres", ["cilium-config-any-namespace"])
    grants = grants_of(objs, _account(objs))
    for need in reader_needs(ReadOptions().cilium_config_namespaces):
        assert allowed(grants, need), need
    extra = grants - reader_needs(("kube-system",))
    assert extra == {Grant(ANY, "", "configmaps", "get", "cilium-config")}
    assert not allowed(grants, Grant("kube-system", "", "configmaps", "get", "kubeadm-config"))
    assert not allowed(grants, Grant("default", "", "secrets", "get", ANY))


@pytest.mark.parametrize("overlay", ["sqlite", "postgres"])
def test_only_the_server_can_use_the_grants(rendered: dict[str, list[dict]], overlay: str) -> None:
    objs = rendered[overlay]
    job_accounts = {
        (
            j["spec"]["template"]["spec"].get("serviceAccountName"),
            j["spec"]["template"]["spec"].get("automountServiceAccountToken"),
        )
        for j in find(objs, "Job")
    }
    for account, automount in job_accounts:
        assert automount is False, f"the Job mounts the token of {account}"
    accounts = {
        (s["namespace"], s["name"])
        for b in find(objs, "ClusterRoleBinding") + find(objs, "RoleBinding")
        for s in b["subjects"]
    }
    assert accounts == {_account(objs)}
