"""Both overlays rendered with the real `kubectl kustomize`: the hardened Deployment, the overlay
differences (SQLite on a volume, one replica, Recreate; PostgreSQL from a Secret, two replicas,
the migration Job), the wiring between objects, the config file, and the generated ConfigMaps."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploysupport import (
    BASE,
    DASHBOARD,
    DEPLOY_DOC,
    DOCKERFILE,
    NAMESPACE,
    ROOT,
    find,
    kubectl,
    load_rules,
    one,
    render_variant,
)

from auditor.settings.config import load_settings

pytestmark = pytest.mark.skipif(kubectl() is None, reason="kubectl is installed by .ci/run")
CONFIG_PATH = "/etc/auditor/auditor.yaml"
SECRET_ENV = ("AUDITOR_API_TOKEN", "GITHUB_TOKEN", "SMTP_PASSWORD")


def _dockerfile_uid() -> int:
    users = re.findall(r"^USER\s+(\d+)", DOCKERFILE.read_text(), flags=re.MULTILINE)
    return int(users[-1])


def _dockerfile_cmd() -> list[str]:
    cmd = re.findall(r"^CMD\s+(\[.*\])\s*$", DOCKERFILE.read_text(), flags=re.MULTILINE)
    return list(json.loads(cmd[-1]))


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def _assert_hardened(pod: dict[str, Any]) -> None:
    psc = pod["securityContext"]
    assert psc["runAsNonRoot"] is True
    assert psc["runAsUser"] == _dockerfile_uid() != 0
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for c in pod["containers"] + pod.get("initContainers", []):
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc.get("privileged", False) is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc.get("runAsUser", psc["runAsUser"]) != 0
        assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
        assert c["resources"]["limits"]["memory"]
        # With a read-only root, every writable mount is a volume of the pod's own (no hostPath).
        for m in c.get("volumeMounts", []):
            volume = volumes[m["name"]]
            assert "hostPath" not in volume
            if not m.get("readOnly"):
                assert "emptyDir" in volume or "persistentVolumeClaim" in volume, m
        # /tmp (TMPDIR in the image) is writable.
        assert any(m["mountPath"] == "/tmp" and not m.get("readOnly") for m in c["volumeMounts"])


def _server(objs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    deploy = one(objs, "Deployment", "placement-auditor")
    (container,) = _pod(deploy)["containers"]
    return deploy, container


@pytest.mark.parametrize("overlay", ["sqlite", "postgres"])
def test_namespaces_and_labels(rendered: dict[str, list[dict]], overlay: str) -> None:
    objs = rendered[overlay]
    ns = one(objs, "Namespace", NAMESPACE)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    for o in objs:
        meta = o["metadata"]
        assert meta["labels"]["app.kubernetes.io/part-of"] == "placement-auditor", o["kind"]
        if o["kind"] in ("Role", "RoleBinding"):
            assert meta["namespace"] == "kube-system"
        elif o["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert meta["namespace"] == NAMESPACE, (o["kind"], meta["name"])


@pytest.mark.parametrize("overlay", ["sqlite", "postgres"])
def test_deployment_runs_serve_hardened_with_probes_and_secrets(
    rendered: dict[str, list[dict]], overlay: str
) -> None:
    objs = rendered[overlay]
    deploy, container = _server(objs)
    pod = _pod(deploy)
    _assert_hardened(pod)
    assert pod["serviceAccountName"] == one(objs, "ServiceAccount")["metadata"]["name"]
    assert container["args"] == _dockerfile_cmd()
    assert "command" not in container  # the image's ENTRYPOINT (auditor) runs
    assert container["image"] == "placement-auditor:0.1.0"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8080}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    env = _env(container)
    for name in SECRET_ENV:
        ref = env[name]["valueFrom"]["secretKeyRef"]
        assert ref["name"] == "placement-auditor" and ref["key"], name
        assert "value" not in env[name]
    assert env["AUDITOR_API_TOKEN"]["valueFrom"]["secretKeyRef"].get("optional") is not True
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/etc/auditor"]["readOnly"] is True
    assert not mounts["/data"].get("readOnly")
    volumes = {v["name"]: v for v in pod["volumes"]}
    app_key = volumes[next(m["name"] for m in container["volumeMounts"] if "github-app" in m["mountPath"])]
    assert app_key["secret"]["secretName"] == "placement-auditor-github-app"
    assert app_key["secret"]["optional"] is True


def test_sqlite_overlay_one_replica_recreate_on_a_volume(rendered: dict[str, list[dict]]) -> None:
    objs = rendered["sqlite"]
    deploy, container = _server(objs)
    assert deploy["spec"]["replicas"] == 1
    assert deploy["spec"]["strategy"] == {"type": "Recreate"}
    url = _env(container)["AUDITOR_DATABASE_URL"]
    assert "valueFrom" not in url
    assert url["value"].startswith("sqlite:////data/")
    data = next(v for v in _pod(deploy)["volumes"] if v["name"] == "data")
    claim = data["persistentVolumeClaim"]["claimName"]
    pvc = one(objs, "PersistentVolumeClaim", claim)
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert find(objs, "Job") == []  # serve migrates; the volume is ReadWriteOnce


def test_postgres_overlay_two_replicas_url_from_secret_and_migration_job(
    rendered: dict[str, list[dict]],
) -> None:
    objs = rendered["postgres"]
    deploy, container = _server(objs)
    assert deploy["spec"]["replicas"] == 2
    assert deploy["spec"]["strategy"]["type"] == "RollingUpdate"
    url = _env(container)["AUDITOR_DATABASE_URL"]
    assert url["valueFrom"]["secretKeyRef"] == {"name": "placement-auditor-database", "key": "url"}
    assert find(objs, "PersistentVolumeClaim") == []
    job = one(objs, "Job", "placement-auditor-db-upgrade")
    pod = _pod(job)
    _assert_hardened(pod)
    assert pod["automountServiceAccountToken"] is False
    (migrate,) = pod["containers"]
    assert migrate["args"] == ["db", "upgrade", "--config", CONFIG_PATH]
    assert migrate["image"] == container["image"]
    assert _env(migrate)["AUDITOR_DATABASE_URL"] == url
    pdb = one(objs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert (
        pdb["spec"]["selector"]["matchLabels"].items()
        <= deploy["spec"]["template"]["metadata"]["labels"].items()
    )


@pytest.mark.parametrize("overlay", ["sqlite", "postgres"])
def test_service_and_servicemonitor_reach_the_server_pods_only(
    rendered: dict[str, list[dict]], overlay: str
) -> None:
    objs = rendered[overlay]
    deploy, container = _server(objs)
    service = one(objs, "Service", "placement-auditor")
    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    selector = service["spec"]["selector"]
    assert selector.items() <= pod_labels.items()
    assert deploy["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    for job in find(objs, "Job"):  # the migration pod is no endpoint of the Service
        assert not selector.items() <= job["spec"]["template"]["metadata"]["labels"].items()
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] in {p["name"] for p in container["ports"]}
    monitor = one(objs, "ServiceMonitor")
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == port["name"] and endpoint["path"] == "/metrics"
    # AuditorDown matches the job label the ServiceMonitor gives: the Service's name.
    down = next(r for g in load_rules()["groups"] for r in g["rules"] if r.get("alert") == "AuditorDown")
    assert "jobLabel" not in monitor["spec"]
    assert f'job="{service["metadata"]["name"]}"' in down["expr"]


@pytest.mark.parametrize("overlay", ["sqlite", "postgres"])
def test_config_file_loads_and_its_secrets_come_from_the_environment(
    rendered: dict[str, list[dict]], overlay: str, tmp_path: Path
) -> None:
    objs = rendered[overlay]
    deploy, container = _server(objs)
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == str(Path(CONFIG_PATH).parent))
    config_volume = next(v for v in _pod(deploy)["volumes"] if v["name"] == mount["name"])
    cm = one(objs, "ConfigMap", config_volume["configMap"]["name"])
    assert re.fullmatch(r"placement-auditor-config-[a-z0-9]{10}", cm["metadata"]["name"])  # rolls pods
    text = cm["data"][Path(CONFIG_PATH).name]
    assert text == (BASE / "config" / "auditor.yaml").read_text()
    path = tmp_path / "auditor.yaml"
    path.write_text(text)
    settings = load_settings(path)
    assert settings.database.url == ""  # AUDITOR_DATABASE_URL decides
    assert settings.service.host == "0.0.0.0"
    assert settings.service.git_cache_dir.startswith("/data/")
    assert [t.name for t in settings.targets if t.cluster and t.cluster.in_cluster] == ["in-cluster"]
    env = _env(container)
    assert settings.service.api_token_env in env
    # Every variable the file names (commented examples included) is set in the Deployment.
    for key, name in re.findall(r"\b(\w+_env):\s*(\w+)", text):
        assert name in env, f"{key}: {name} is not in the Deployment's environment"
    mounts = [m["mountPath"] for m in container["volumeMounts"]]
    for keyfile in re.findall(r"private_key_file:\s*(\S+)", text):
        assert any(keyfile.startswith(m + "/") for m in mounts), keyfile


@pytest.mark.parametrize("overlay", ["sqlite", "postgres"])
def test_dashboard_configmap_and_prometheusrule_come_from_the_real_files(
    rendered: dict[str, list[dict]], overlay: str
) -> None:
    objs = rendered[overlay]
    dashboards = [
        o for o in find(objs, "ConfigMap") if o["metadata"].get("labels", {}).get("grafana_dashboard")
    ]
    (cm,) = dashboards
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"][DASHBOARD.name]) == json.loads(DASHBOARD.read_text())
    rule = one(objs, "PrometheusRule")
    assert rule["spec"]["groups"] == load_rules()["groups"], (
        "deploy/kustomize/base/prometheusrule.yaml and deploy/prometheus/rules.yaml disagree: "
        "copy the groups of the rule file into the PrometheusRule's spec"
    )


def test_budget_is_the_first_rule_of_the_first_group() -> None:
    """docs/deploy.md tells Operator users to patch /spec/groups/0/rules/0/expr."""
    first = load_rules()["groups"][0]["rules"][0]
    assert first["record"] == "auditor:inter_az_monthly_budget_usd"
    assert re.fullmatch(r"vector\(\d+(\.\d+)?\)", first["expr"])


def _doc_patch_blocks() -> list[list[dict[str, Any]]]:
    """The `patches:` snippets of docs/deploy.md (indented code blocks)."""
    lines = DEPLOY_DOC.read_text().splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() == "patches:" and line.startswith("    "):
            indent = len(line) - len(line.lstrip())
            block = [line]
            for nxt in lines[i + 1 :]:
                if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                    break
                block.append(nxt)
            blocks.append(yaml.safe_load(textwrap.dedent("\n".join(block)))["patches"])
    return blocks


def test_the_documented_patches_render(rendered: dict[str, list[dict]], tmp_path: Path) -> None:
    blocks = _doc_patch_blocks()
    assert len(blocks) == 3
    objs = render_variant(tmp_path, "postgres", patches=[p for b in blocks for p in b])
    (allowed,) = one(objs, "NetworkPolicy", "placement-auditor")["spec"]["ingress"][0]["from"]
    assert allowed["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}
    for kind in ("ServiceMonitor", "PrometheusRule"):
        assert one(objs, kind)["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    groups = one(objs, "PrometheusRule")["spec"]["groups"]
    budget = next(
        r for g in groups for r in g["rules"] if r.get("record") == "auditor:inter_az_monthly_budget_usd"
    )
    assert budget["expr"] == "vector(250)"
    assert one(rendered["postgres"], "PrometheusRule")["spec"]["groups"] != groups


def test_no_secret_objects_or_literal_credentials_are_shipped(rendered: dict[str, list[dict]]) -> None:
    for objs in rendered.values():
        assert find(objs, "Secret") == []  # created by the operator of the install (docs/deploy.md)
        for o in objs:
            text = yaml.safe_dump(o)
            assert not re.search(r"postgres(ql)?://[^\s:@/]+:[^\s@/]+@", text), o["metadata"]["name"]
    assert "kubectl apply -k deploy/kustomize/overlays/sqlite" in (ROOT / "docs" / "deploy.md").read_text()
