"""Our own audit of our own manifests: `auditor scan` (through auditor.cli.main, rendering the
overlays with kubectl as a user's scan does) finds nothing at or above high."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from deploysupport import KUSTOMIZE, ROOT, kubectl

from auditor.cli import EXIT_FINDINGS, EXIT_OK, main
from auditor.model.findings import SEVERITY_RANK

pytestmark = pytest.mark.skipif(kubectl() is None, reason="kubectl is installed by .ci/run")
NODES = ROOT / "auditor" / "examples" / "seed-lab" / "nodes.yaml"  # two zones, so zone rules run


def scan(args: list[str], tmp_path: Path) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "report.json"
    code = main(
        ["scan", *args, "--nodes", str(NODES), "--format", "json", "--fail-on", "high", "--output", str(out)]
    )
    return code, json.loads(out.read_text())


def test_deploy_manifests_have_no_finding_at_or_above_high(tmp_path: Path) -> None:
    """The whole deploy/kustomize tree: each overlay rendered once (the base through them), and
    the components on their own."""
    code, report = scan([str(KUSTOMIZE)], tmp_path)
    high = [f for f in report["findings"] if SEVERITY_RANK[f["severity"]] <= SEVERITY_RANK["high"]]
    assert high == []
    assert code == EXIT_OK
    summary = report["summary"]
    assert summary["errors"] == 0, report["errors"]
    assert not any("skipped" in n for n in report["notes"]), report["notes"]
    # Both overlays were rendered and their workloads audited (two Deployments, the Job, ...).
    assert summary["audited_objects"] >= 4
    # sqlite and postgres, and components/fleet, admission and admission-selfsigned on their own
    # (the workers' and the webhook's ServiceMonitors)
    assert summary["skipped_kinds"].get("ServiceMonitor") == 5
    # both overlays, components/cilium-namespace, and the webhook's cilium-config Role in each admission component
    assert summary["skipped_kinds"].get("Role") == 5


def test_the_same_scan_reports_a_blocked_group(tmp_path: Path) -> None:
    """Control: the seed scenario's broken state, through the same call, fails at high."""
    example = ROOT / "auditor" / "examples" / "seed-lab"
    code, report = scan([str(example / "before"), str(example / "policies.yaml")], tmp_path)
    assert code == EXIT_FINDINGS
    assert any(f["rule"] == "cross-zone-blocked" for f in report["findings"])
