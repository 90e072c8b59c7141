"""Compliance reports from a real store (SQLite and PostgreSQL), every format."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from dbsupport import engine_for
from sqlalchemy import Engine
from storedata import seeded_store

from auditor.reports import compliance


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    with engine_for(request.param, tmp_path) as e:
        yield e


def _report(tmp_path: Path, engine: Engine) -> compliance.Report:
    store, clock, settings = seeded_store(tmp_path, engine)
    return compliance.build(store.export(), settings.reports, clock.now, None)  # type: ignore[attr-defined]


def test_status_controls_waivers_and_evidence(tmp_path: Path, engine: Engine) -> None:
    report = _report(tmp_path, engine)
    rows = {(r["target"], r["rule"]): r for r in report.rows}
    lab = rows["lab", "cross-zone-blocked"]
    assert lab["status"] == "fail" and lab["controls"] == ["CC7.1", "A1.2"] and lab["evidence_run"] == 2
    assert rows["lab", "cross-zone-traffic"]["status"] == "pass"
    assert rows["web", "cross-zone-blocked"]["status"] == "not-audited"  # its only run failed
    assert rows["infra", "cross-zone-traffic"]["status"] == "fail"
    assert rows["infra", "cross-zone-blocked"]["evidence_revision"].startswith("0123456789ab")
    [waiver] = report.waivers
    assert waiver["reason"] == "moving next quarter" and waiver["expires"] == "2026-12-10"
    doc = json.loads(compliance.render(report, "json"))
    assert doc["schema"] == "placement-auditor/compliance/v1" and {r["status"] for r in doc["status"]} >= {
        "pass",
        "fail",
        "not-audited",
    }
    assert {r["id"] for r in doc["evidence"]["runs"]} >= {1, 2}


def test_every_format_with_a_verifiable_manifest(tmp_path: Path, engine: Engine) -> None:
    report = _report(tmp_path, engine)
    for fmt in compliance.FORMATS:
        out = tmp_path / f"report.{fmt}"
        manifest = compliance.write(report, fmt, out)
        assert compliance.manifest_ok(manifest), fmt
        if shutil.which("sha256sum"):
            subprocess.run(["sha256sum", "-c", manifest.name], cwd=tmp_path, check=True, capture_output=True)
    rows = list(csv.DictReader(io.StringIO((tmp_path / "report.csv").read_text())))
    assert {"target", "rule", "controls", "status"} <= set(rows[0])
    sarif = json.loads((tmp_path / "report.sarif").read_text())
    assert sarif["version"] == "2.1.0" and sarif["runs"][0]["results"]
    assert (tmp_path / "report.junit").read_text().startswith("<?xml")
    reports = list(yaml.safe_load_all((tmp_path / "report.policyreport").read_text()))
    # Target-level passes (a rule with no finding) go to the cluster-scoped report.
    assert {r["kind"] for r in reports} == {"PolicyReport", "ClusterPolicyReport"} and all(
        r["apiVersion"] == "wgpolicyk8s.io/v1alpha2" for r in reports
    )
    ml = next(r for r in reports if r["metadata"]["namespace"] == "ml-prod")
    assert ml["summary"]["fail"] == 1 and ml["summary"]["skip"] == 1  # the waived one is a skip
    assert (tmp_path / "report.pdf").read_bytes().startswith(b"%PDF")


def test_html_escapes_finding_text_and_embeds_the_map(tmp_path: Path, engine: Engine) -> None:
    html = compliance.render(_report(tmp_path, engine), "html").decode()
    assert (
        "<script>" not in html
        and "&lt;script&gt;" in html
        and "onmouseover=alert" not in html.replace("&lt;b onmouseover=alert(1)&gt;", "")
    )
    assert 'class="edge blocked"' in html and "deny-&lt;all&gt;" in html
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")  # no external assets


@pytest.mark.skipif(shutil.which("pdftoppm") is None, reason="poppler-utils (pdftoppm) is not installed")
def test_pdf_renders_to_images(tmp_path: Path, engine: Engine) -> None:
    report = _report(tmp_path, engine)
    compliance.write(report, "pdf", tmp_path / "r.pdf")
    subprocess.run(
        ["pdftoppm", "-png", "-r", "60", str(tmp_path / "r.pdf"), str(tmp_path / "page")], check=True
    )
    pages = sorted(tmp_path.glob("page*.png"))
    assert pages and all(p.stat().st_size > 5000 for p in pages)
    shots = Path("/tmp/placement-auditor-shots")
    shots.mkdir(exist_ok=True)
    for p in pages:  # kept for a person to look at
        shutil.copy(p, shots / f"report-{engine.dialect.name}-{p.name}")


def test_stored_findings_render_as_the_findings_they_were(tmp_path: Path, engine: Engine) -> None:
    """Reports of stored rows read the same protocol as a scan: every stored finding is the
    Finding that was stored (same fingerprint), and a target whose last run did not
    succeed makes the stored audit incomplete, so SARIF says the execution did not succeed."""
    from auditor.reports import StoredResult, sarif

    store, clock, settings = seeded_store(tmp_path, engine)
    report = compliance.build(store.export(), settings.reports, clock.now, None)  # type: ignore[attr-defined]
    stored = StoredResult.of(report.findings, report.targets)
    active = [f for f in report.findings if f["status"] in ("new", "open", "reopened")]
    assert sorted(f.fingerprint for f in stored.findings) == sorted(f["fingerprint"] for f in active)
    assert {f.workload.name for f in stored.findings} >= {"trainer-workers", "big-job"}
    assert not stored.complete and [n.path for n in stored.not_audited] == ["target web"]
    document = json.loads(sarif.render(stored))
    assert document["runs"][0]["invocations"][0]["executionSuccessful"] is False
    assert len(document["runs"][0]["results"]) == len(active)
