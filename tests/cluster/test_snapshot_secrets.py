"""A snapshot carries only what the audit reads: planted secrets in env values, arguments,
`last-applied-configuration` and bare pods never reach the file, and `auditor scan SNAPSHOT`
still finds what the live audit finds (the edges derived from env and arguments survive)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakeapi import FakeCluster, kubeconfig, serve
from seedcluster import objects

from auditor import cli

AWS_KEY = "AKIAPLANTEDSECRET7Q2X"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYPLANTED0"
GH_TOKEN = "ghp_PlantedToken0123456789abcdefABCDEF01"
PASSWORD = "hunter2-planted-password"
PLANTED = (AWS_KEY, AWS_SECRET, GH_TOKEN, PASSWORD)


def _planted() -> list[dict[str, Any]]:
    objs = objects("before")
    job = next(o for o in objs if o["kind"] == "Job")
    container = job["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [
        *container["env"],
        {"name": "AWS_ACCESS_KEY_ID", "value": AWS_KEY},
        {"name": "AWS_SECRET_ACCESS_KEY", "value": AWS_SECRET},
        {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db-password", "key": "password"}}},
        {"name": "MASTER_PORT", "value": "9999"},
    ]
    container["command"] = [
        "sh",
        "-c",
        f"export AWS_SECRET_ACCESS_KEY={AWS_SECRET}; "
        "until nc -z -w 2 trainer-coordinator.ml-demo.svc.cluster.local 9999; do sleep 5; done",
    ]
    container["args"] = [f"--token={GH_TOKEN}", f"--password {PASSWORD}"]
    container["livenessProbe"] = {"exec": {"command": ["check", f"--token={GH_TOKEN}"]}}
    job["spec"]["template"]["spec"]["volumes"] = [
        {"name": "creds", "secret": {"secretName": "db-password"}},
        {"name": "cfg", "csi": {"driver": "x", "volumeAttributes": {"password": PASSWORD}}},
    ]
    job["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": json.dumps(
            {"spec": {"env": [{"name": "AWS_SECRET_ACCESS_KEY", "value": AWS_SECRET}], "token": GH_TOKEN}}
        ),
        "placement-auditor.io/gradient-bytes": "4000000000",
        "example.com/owner-secret": PASSWORD,
    }
    # A bare pod (audited as a workload of its own, so the reader keeps it whole) that reaches
    # the coordinator only through an argument, with a token in the same command line.
    objs.append(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "debug-client",
                "namespace": "ml-demo",
                "uid": "0f0e0d0c-0000-4000-8000-000000000001",
                "labels": {"app": "trainer", "role": "gpu-worker", "zone": "zone-a"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": GH_TOKEN},
            },
            "spec": {
                "nodeName": "lab-worker",
                "nodeSelector": {"gpu": "true"},
                "tolerations": [{"key": "gpu", "value": "present", "effect": "NoSchedule"}],
                "containers": [
                    {
                        "name": "client",
                        "image": "curlimages/curl",
                        "command": [
                            "curl",
                            "-H",
                            f"Authorization: Bearer {GH_TOKEN}",
                            "http://trainer-coordinator:9999/ready",
                        ],
                        "env": [{"name": "API_KEY", "value": f"{AWS_KEY}:{AWS_SECRET}"}],
                    }
                ],
            },
            "status": {"phase": "Running", "podIP": "10.0.0.9"},
        }
    )
    return objs


def _findings(capsys: pytest.CaptureFixture[str]) -> list[tuple[str, str, str]]:
    report = json.loads(capsys.readouterr().out)
    return sorted((f["rule"], f["certainty"], f["fingerprint"]) for f in report["findings"])


def test_planted_secrets_never_reach_the_snapshot_and_findings_stay_the_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with serve(FakeCluster(_planted(), {"/apis/cilium.io/v2/ciliumnetworkpolicies"})) as url:
        config = kubeconfig(tmp_path / "kubeconfig", url)
        snap = tmp_path / "snap.yaml"
        assert cli.main(["snapshot", "--kubeconfig", str(config), "-o", str(snap)]) == 0
        capsys.readouterr()
        cli.main(["cluster", "--kubeconfig", str(config), "--format", "json"])
        live = _findings(capsys)
    text = snap.read_text()
    for secret in PLANTED:
        assert secret not in text, secret
    assert "last-applied-configuration" not in text and "secretKeyRef" not in text
    assert "example.com/owner-secret" not in text and "livenessProbe" not in text
    items = list(yaml.safe_load_all(text))[1]["items"]
    job = next(o for o in items if o["kind"] == "Job")
    assert job["metadata"]["annotations"] == {"placement-auditor.io/gradient-bytes": "4000000000"}
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env == {
        "COORDINATOR_ADDR": "trainer-coordinator.ml-demo.svc.cluster.local:9999",
        "AWS_ACCESS_KEY_ID": None,
        "AWS_SECRET_ACCESS_KEY": None,
        "DB_PASSWORD": None,
        "MASTER_PORT": "9999",
    }
    assert container["command"] == ["trainer-coordinator.ml-demo.svc.cluster.local"]
    assert "args" not in container and "image" not in container
    assert job["spec"]["template"]["spec"]["volumes"] == [{"name": "creds"}, {"name": "cfg"}]
    pod = next(o for o in items if o["metadata"]["name"] == "debug-client")
    assert pod["spec"]["containers"][0]["command"] == ["trainer-coordinator:9999"]
    # The offline audit of the reduced snapshot finds exactly what the live audit found,
    # including the bare pod's edge that only its command line declares.
    assert cli.main(["scan", str(snap), "--format", "json"]) == 1
    offline = _findings(capsys)
    assert offline == live and len(live) >= 2


def test_configured_annotations_are_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = tmp_path / "auditor.yaml"
    settings.write_text("cluster: {snapshot_annotations: [example.com/]}\n")
    with serve(FakeCluster(_planted(), {"/apis/cilium.io/v2/ciliumnetworkpolicies"})) as url:
        config = kubeconfig(tmp_path / "kubeconfig", url)
        snap = tmp_path / "snap.yaml"
        args = ["snapshot", "--kubeconfig", str(config), "--config", str(settings), "-o", str(snap)]
        assert cli.main(args) == 0
    job = next(o for o in list(yaml.safe_load_all(snap.read_text()))[1]["items"] if o["kind"] == "Job")
    assert job["metadata"]["annotations"]["example.com/owner-secret"] == PASSWORD
