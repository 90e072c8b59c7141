"""components/fleet (+ fleet-redis) on overlays/postgres, rendered by the real `kubectl kustomize`:
the worker Deployment runs `auditor worker` with the config that has service.broker; the KEDA
ScaledObject scales exactly that Deployment on the Celery queue the config names, reading an
address the worker's environment has; PodDisruptionBudgets; the worker metrics scraped; every
built-in object schema-valid, the ServiceMonitor valid against its CRD."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deploysupport import find, kubectl, one, render_variant
from test_deploy_schemas import validate_builtin, validate_crd

from auditor.settings.config import load_settings

pytestmark = pytest.mark.skipif(kubectl() is None, reason="kubectl is installed by .ci/run")


@pytest.fixture(scope="module", params=["in-cluster-redis", "external-broker"])
def fleet(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, list[dict[str, Any]]]:
    components = ["fleet", "fleet-redis"] if request.param == "in-cluster-redis" else ["fleet"]
    return request.param, render_variant(tmp_path_factory.mktemp(request.param), "postgres", components)


def _container(deploy: dict[str, Any]) -> dict[str, Any]:
    [container] = deploy["spec"]["template"]["spec"]["containers"]
    return container


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def test_objects_are_schema_valid(fleet: tuple[str, list[dict[str, Any]]]) -> None:
    _, objs = fleet
    for obj in objs:
        if obj["kind"] == "ScaledObject":
            continue  # KEDA's CRD: checked field by field below
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            validate_crd(obj)
        else:
            validate_builtin(obj)


def test_worker_runs_auditor_worker_with_the_broker_config(
    fleet: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    variant, objs = fleet
    worker = one(objs, "Deployment", "placement-auditor-worker")
    container = _container(worker)
    assert (
        container["args"][:1] == ["worker"] and "--pool" in container["args"] and "solo" in container["args"]
    )
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    env = _env(container)
    config_name = next(v for v in worker["spec"]["template"]["spec"]["volumes"] if v["name"] == "config")[
        "configMap"
    ]["name"]
    cm = one(objs, "ConfigMap", config_name)
    path = tmp_path / "auditor.yaml"
    path.write_text(cm["data"]["auditor.yaml"])
    settings = load_settings(path)
    broker = settings.service.broker
    assert broker is not None and broker.url_env in env and "AUDITOR_DATABASE_URL" in env
    # The server shares the config (so it enqueues) and has the broker URL too.
    server = one(objs, "Deployment", "placement-auditor")
    server_env = _env(_container(server))
    assert broker.url_env in server_env
    assert (
        next(v for v in server["spec"]["template"]["spec"]["volumes"] if v["name"] == "config")["configMap"][
            "name"
        ]
        == config_name
    )
    if variant == "in-cluster-redis":
        assert env[broker.url_env] == {
            "name": broker.url_env,
            "value": "redis://placement-auditor-redis.placement-auditor.svc:6379/0",
        }
        one(objs, "Service", "placement-auditor-redis")
    else:
        assert env[broker.url_env]["valueFrom"]["secretKeyRef"] == {
            "name": "placement-auditor-broker",
            "key": "url",
        }
        assert not find(objs, "Service", "placement-auditor-redis")
    # The metrics port the config names is the one the pod and the Service expose.
    assert {p["containerPort"] for p in container["ports"]} == {broker.metrics_port}
    service = one(objs, "Service", "placement-auditor-worker")
    assert service["spec"]["selector"] == worker["spec"]["selector"]["matchLabels"]
    monitor = one(objs, "ServiceMonitor", "placement-auditor-worker")
    assert monitor["spec"]["selector"]["matchLabels"] == service["metadata"]["labels"] | {}
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"


def test_scaledobject_scales_the_worker_on_the_configured_queue(
    fleet: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    _, objs = fleet
    scaled = one(objs, "ScaledObject", "placement-auditor-worker")
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    worker = one(objs, "Deployment", "placement-auditor-worker")
    assert scaled["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "placement-auditor-worker",
    }
    assert 1 <= scaled["spec"]["minReplicaCount"] <= scaled["spec"]["maxReplicaCount"]
    [trigger] = scaled["spec"]["triggers"]
    assert trigger["type"] == "redis"
    meta = trigger["metadata"]
    # KEDA's redis scaler: metadata values are strings; the env names must exist in the target.
    assert all(isinstance(v, str) for v in meta.values())
    assert set(meta) <= {
        "address",
        "addressFromEnv",
        "host",
        "port",
        "passwordFromEnv",
        "listName",
        "listLength",
        "activationListLength",
        "databaseIndex",
        "enableTLS",
        "usernameFromEnv",
    }
    env = _env(_container(worker))
    assert meta["addressFromEnv"] in env and meta["passwordFromEnv"] in env
    cm_name = next(v for v in worker["spec"]["template"]["spec"]["volumes"] if v["name"] == "config")[
        "configMap"
    ]["name"]
    path = tmp_path / "auditor.yaml"
    path.write_text(one(objs, "ConfigMap", cm_name)["data"]["auditor.yaml"])
    broker = load_settings(path).service.broker
    assert broker is not None and meta["listName"] == broker.queue  # Celery's Redis list is the queue name
    assert int(meta["listLength"]) >= 1


def test_disruption_budgets_cover_server_and_workers(fleet: tuple[str, list[dict[str, Any]]]) -> None:
    _, objs = fleet
    budgets = {p["metadata"]["name"]: p for p in find(objs, "PodDisruptionBudget")}
    worker = one(objs, "Deployment", "placement-auditor-worker")
    assert (
        budgets["placement-auditor-worker"]["spec"]["selector"]["matchLabels"]
        == worker["spec"]["selector"]["matchLabels"]
    )
    assert budgets["placement-auditor-worker"]["spec"]["maxUnavailable"] == 1
    assert "placement-auditor" in budgets  # the server's, from overlays/postgres
