"""Measured signals from a local server speaking the Prometheus query API: cost from measured
bytes, GPU utilisation and policy drops as evidence; without Prometheus, the model and a note."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import fakeprom
import pytest
from fakeapi import FakeCluster, kubeconfig, serve
from seedcluster import objects

from auditor import cli

CRDS = {"/apis/cilium.io/v2/ciliumnetworkpolicies"}
WORKERS = [f"trainer-workers-{i}-abcde" for i in range(4)]
COORDINATOR = "trainer-coordinator-7d9f8-x2x4q"


def _audit(
    tmp_path: Path, cluster_objects: list, prom_url: str | None, capsys: pytest.CaptureFixture[str]
) -> list[dict]:
    config = tmp_path / "auditor.yaml"
    config.write_text(f"prometheus: {{url: '{prom_url}', timeout_seconds: 2}}\n" if prom_url else "{}\n")
    with serve(FakeCluster(cluster_objects, CRDS)) as url:
        cli.main(
            [
                "cluster",
                "--kubeconfig",
                str(kubeconfig(tmp_path / "k", url)),
                "--config",
                str(config),
                "--format",
                "json",
            ]
        )
    return json.loads(capsys.readouterr().out)["findings"]


def test_cost_from_measured_bytes_of_a_split_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The fixed specs, but the coordinator runs in zone-b: allowed, and crossing zones.
    prom = fakeprom.FakePrometheus({**dict.fromkeys(WORKERS, 50e6), COORDINATOR: 10e6}, {}, None)
    with fakeprom.serve(prom) as url:
        [finding] = _audit(tmp_path, objects("after", coordinator_node="lab-worker3"), url, capsys)
    assert (finding["rule"], finding["certainty"]) == ("cross-zone-traffic", "observed")
    # 4 workers in zone-a send 50 MB/s, a quarter of it to the coordinator's zone; the coordinator
    # sends 10 MB/s, all across: 60 MB/s × 2,592,000 s × $0.02/GB (AWS, both sides) = $3,110.40.
    assert finding["estimated_monthly_cost_usd"] == pytest.approx(3110.40)
    assert "cost from measurement" in finding["assumptions"][0]
    assert "about 60.0 MB/s crosses zones" in finding["evidence"][0]
    assert any(COORDINATOR in q and "container_network_transmit_bytes_total" in q for q in prom.queries)


def test_idle_gpus_and_drops_back_a_blocked_group(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prom = fakeprom.FakePrometheus({}, dict.fromkeys(WORKERS, 0.0), 3.5)
    with fakeprom.serve(prom) as url:
        [finding] = _audit(tmp_path, objects("before"), url, capsys)
    assert (finding["rule"], finding["certainty"]) == ("cross-zone-blocked", "observed")
    text = " ".join(finding["evidence"])
    assert "GPU utilisation of the group's pods: 0% on average" in text and "idle" in text
    assert "policy drops towards the group: 3.50/s" in text


def test_without_prometheus_the_model_is_used_and_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    [finding] = _audit(tmp_path, objects("before"), None, capsys)
    assert "no Prometheus configured: cost from the model" in finding["assumptions"][-1]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    [finding] = _audit(tmp_path, objects("before"), f"http://127.0.0.1:{port}", capsys)
    assert "Prometheus did not answer" in finding["assumptions"][-1]
    assert finding["certainty"] == "observed"  # the audit itself goes on
