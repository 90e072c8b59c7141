"""Compliance reports from a real store (SQLite and PostgreSQL), every format."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
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
from auditor.service import wire


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    with engine_for(request.param, tmp_path) as e:
        yield e


def _report(tmp_path: Path, engine: Engine) -> compliance.Report:
    store, clock, settings = seeded_store(tmp_path, engine)
    return compliance.build(wire.record_json(store.export()), settings.reports, clock.now, None)  # type: ignore[attr-defined]


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
        digest, _, name = manifest.read_text().strip().partition("  ")
        assert (name, digest) == (out.name, hashlib.sha256(out.read_bytes()).hexdigest()), fmt
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
    assert 'class="edge denied crossing"' in html and "deny-&lt;all&gt;" in html
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
    report = compliance.build(wire.record_json(store.export()), settings.reports, clock.now, None)  # type: ignore[attr-defined]
    stored = StoredResult.of(report.findings, report.targets)
    active = [f for f in report.findings if f["status"] in ("new", "open", "reopened")]
    assert sorted(f.fingerprint for f in stored.findings) == sorted(f["fingerprint"] for f in active)
    assert {f.workload.name for f in stored.findings} >= {"trainer-workers", "big-job"}
    assert not stored.complete and [n.path for n in stored.not_audited] == ["target web"]
    document = json.loads(sarif.render(stored))
    assert document["runs"][0]["invocations"][0]["executionSuccessful"] is False
    assert len(document["runs"][0]["results"]) == len(active)


def _words(pdf: Path) -> list[tuple[int, float, float, float, float, float, float, str]]:
    """(page, page width, page height, xMin, yMin, xMax, yMax, word) for every word, from
    pdftotext -bbox (points, origin top left)."""
    import xml.etree.ElementTree as ET

    out = subprocess.run(["pdftotext", "-bbox", str(pdf), "-"], capture_output=True, check=True).stdout
    root = ET.fromstring(out)
    words = []
    for n, page in enumerate(root.iter("{http://www.w3.org/1999/xhtml}page"), 1):
        w, h = float(page.get("width", 0)), float(page.get("height", 0))
        for word in page.iter("{http://www.w3.org/1999/xhtml}word"):
            box = tuple(float(word.get(k, 0)) for k in ("xMin", "yMin", "xMax", "yMax"))
            words.append((n, w, h, *box, word.text or ""))  # type: ignore[arg-type]
    return words


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils (pdftotext) is not installed")
@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_pdf_pages_fit_with_cover_contents_numbers_and_landscape_findings(
    tmp_path: Path, engine: Engine
) -> None:
    """80 findings with long names, messages and policies: no word lies beyond the page margins
    (pdftotext bounding boxes), every page after the cover is numbered "Page n of N", the contents
    give page numbers, the findings table is on landscape pages, the cover has scope, period,
    generated-at, tool version and content hash."""
    from factory import finding

    from auditor import __version__
    from auditor.store.repository import RunOutcome, TargetSpec

    store, clock, settings = seeded_store(tmp_path, engine)
    store.sync_targets(
        [
            *(TargetSpec(t.name, t.kind, t.location) for t in store.targets()),
            TargetSpec("wide", "git", "https://example.com/wide.git"),
        ]
    )
    run_id = store.claim_run("wide", None, "cli", "h:1")
    long = "a-very-long-namespace-name-that-does-not-break-anywhere-" * 2
    many = [
        finding(
            f"training-job-with-a-rather-long-name-{i:03d}",
            rule="cross-zone-blocked",
            severity="critical",
            namespace=long[:63],
            cost=float(i),
            message="Worker → Master on TCP/23456 is denied by CiliumNetworkPolicy "
            + "x" * 120
            + " in zone-a",
        )
        for i in range(80)
    ]
    store.complete_run(run_id, RunOutcome("succeeded", "f" * 40, many))
    report = compliance.build(wire.record_json(store.export()), settings.reports, clock.now, None)  # type: ignore[attr-defined]
    pdf = tmp_path / "r.pdf"
    compliance.write(report, "pdf", pdf)
    words = _words(pdf)
    pages = max(w[0] for w in words)
    mm = 72 / 25.4
    for page, width, height, x0, y0, x1, y1, text in words:
        side = 14 * mm if width > height else 16 * mm
        assert x0 >= side - 1 and x1 <= width - side + 1, (page, text, x0, x1, width)
        assert y0 >= 0 and y1 <= height - 4 * mm, (page, text, y1, height)
    by_page: dict[int, str] = {}
    for page, *_, text in words:
        by_page[page] = by_page.get(page, "") + " " + text
    assert "Page" not in by_page[1]  # the cover is not numbered
    for n in range(2, pages + 1):
        assert f"Page {n} of {pages}" in by_page[n], n
    cover = by_page[1]
    # Generated-at is the injected clock's time (tests/test_any_hour.py moves it).
    for needed in ("Scope", "Period", "Generated", report.generated_at, __version__, "sha256:", "wide"):
        assert needed in cover, needed
    assert compliance.content_hash(report)[:20] in cover.replace(" ", "")
    contents = by_page[2]
    assert "Executive summary" in contents and "Control mapping" in contents
    assert re.search(r"4\. Findings[ .]*\d+", contents)
    landscape = {w[0] for w in words if w[1] > w[2]}
    first = min(n for n, text in by_page.items() if n > 2 and "4. Findings" in text)
    after = min(n for n, text in by_page.items() if n > 2 and "5. Waivers" in text)
    finding_pages = set(range(first, after))
    assert len(finding_pages) > 1 and finding_pages <= landscape and after not in landscape
    controls = " ".join(by_page.values())
    assert "CC7.1" in controls and "Detection and monitoring procedures" in controls
    subprocess.run(
        ["pdftoppm", "-png", "-r", "50", "-f", "1", "-l", "6", str(pdf), str(tmp_path / "page")], check=True
    )
    shots = Path("/tmp/placement-auditor-shots")
    shots.mkdir(exist_ok=True)
    for p in sorted(tmp_path.glob("page*.png")):
        shutil.copy(p, shots / f"report-fit-{p.name}")


def test_csv_cells_are_safe_and_empty_cells_stay_empty(tmp_path: Path, engine: Engine) -> None:
    """The CSV escapes as the scan's CSV does (reports/csv_report): a formula is quoted, an
    empty cell (a rule mapped to no control) stays empty rather than a lone quote."""
    rows = {
        (r["target"], r["rule"]): r
        for r in csv.DictReader(io.StringIO(compliance.render(_report(tmp_path, engine), "csv").decode()))
    }
    assert rows["lab", "data-ports-partly-denied"]["controls"] == ""
    assert rows["lab", "cross-zone-blocked"]["controls"] == "CC7.1 A1.2"
