"""Report formats and --baseline: same findings, same exit code, whatever the format."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from auditor.cli import main

SEED = ["scan", "--example", "seed-lab/before"]


def output(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main([*SEED, *args])
    return code, capsys.readouterr().out


def test_sarif_is_what_code_scanning_reads(capsys: pytest.CaptureFixture[str]) -> None:
    code, text = output(capsys, "--format", "sarif")
    doc = json.loads(text)
    assert code == 1 and doc["version"] == "2.1.0" and doc["$schema"].endswith("sarif-schema-2.1.0.json")
    (run,) = doc["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert {r["id"] for r in rules} >= {"cross-zone-blocked", "traffic-blocked", "cross-zone-traffic"}
    (result,) = run["results"]
    assert rules[result["ruleIndex"]]["id"] == result["ruleId"] == "cross-zone-blocked"
    assert (
        result["level"] == "error" and result["locations"][0]["physicalLocation"]["region"]["startLine"] > 0
    )
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("workload.yaml")
    assert len(result["partialFingerprints"]["placementAuditor/v1"]) == 32
    assert {loc["message"]["text"] for loc in result["relatedLocations"]} == {
        "Deciding policy: CiliumNetworkPolicy ml-demo/zone-a-only.",
        "Deciding policy: CiliumNetworkPolicy ml-demo/zone-b-only.",
        "Deciding policy: CiliumNetworkPolicy ml-demo/gpu-workers-stay-in-zone-a.",
    }
    assert all(float(r["properties"]["security-severity"]) > 0 for r in rules)


def test_junit_has_one_failure_per_finding(capsys: pytest.CaptureFixture[str]) -> None:
    code, text = output(capsys, "--format", "junit")
    root = ET.fromstring(text.split("?>", 1)[1])
    suite = root.find("testsuite")
    assert code == 1 and suite is not None and suite.get("failures") == "1"
    failure = suite.find("testcase/failure")
    assert failure is not None and failure.get("type") == "critical"


def test_csv_rows_and_formula_guard(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, text = output(capsys, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert (
        code == 1 and len(rows) == 1 and rows[0]["rule"] == "cross-zone-blocked" and rows[0]["port"] == "9999"
    )
    from auditor.reports.csv_report import _safe

    assert _safe("=HYPERLINK(1)") == "'=HYPERLINK(1)" and _safe("plain") == "plain"


def test_baseline_reports_only_new_findings(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    report = tmp_path / "before.json"
    assert main([*SEED, "--format", "json", "--output", str(report)]) == 1
    code, text = output(capsys, "--format", "json", "--baseline", str(report))
    doc = json.loads(text)
    assert code == 0 and doc["findings"] == [] and any("baseline: 1 known" in n for n in doc["notes"])
    (tmp_path / "bad.json").write_text("{}")
    assert main([*SEED, "--baseline", str(tmp_path / "bad.json")]) == 2
