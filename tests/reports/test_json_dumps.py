"""json_report.dumps writes exactly what json.dumps(doc, indent=2) writes, byte for byte, on the
inputs where orjson and the standard library disagree (non-ASCII, DEL, floats below 1e-4, NaN,
infinities, integers past 64 bits, non-string keys, lone surrogates) and on a real scan report."""

from __future__ import annotations

import json
import math
import random
import struct
from pathlib import Path
from typing import Any

import pytest

from auditor.model.findings import Finding, ObjectRef
from auditor.reports import json_report
from tests.seedrepo import SEED

ALL_CHARS = "".join(chr(c) for c in range(0xD800)) + "".join(chr(c) for c in range(0xE000, 0x110000))

CASES: list[Any] = [
    {},
    [],
    {"a": [], "b": {}, "c": [{}], "d": None, "e": True, "f": False},
    {"text": ALL_CHARS, ALL_CHARS[:500]: 1},
    {"del": "\x7f", "e": "é", "astral": "\U0001f600", "lone": "\ud800"},
    [-0.0, 0.0, 1e-4, 9.99e-5, 1e-5, -3e-5, 2.5e-7, 1e-10, 1e-100, 5e-324, 1e15, 1e16, 1e22, 123.456],
    [float("nan"), 1.0],
    {"x": float("inf")},
    [float("-inf")],
    [2**63 - 1, -(2**63), 2**64 - 1, 2**64, 2**70, -(2**70)],
    {1: "int key"},
    {True: "bool key", None: "null key", 1.5: "float key"},
    (1, 2, (3, 4)),
    {"message": "a string that mentions 1e-5 and 0.00001 in text"},
    # A few distinct characters past ASCII, many times (escaped by replacing each throughout), and
    # just over the number of distinct ones that path takes (escaped character by character).
    {"edges": [f"ns/a{i} → ns/b{i} (zone-a→zone-b) café 😀 \u2028 ÿ" for i in range(500)]},
    {"one of each": [chr(0x4E00 + i) * (i % 3 + 1) for i in range(65)]},
    {"mixed": "".join(chr(0x100 + i) for i in range(64)) + "→" * 10},
]


@pytest.mark.parametrize("doc", CASES, ids=range(len(CASES)))
def test_same_bytes_as_json_dumps(doc: Any) -> None:
    assert json_report.dumps(doc) == json.dumps(doc, indent=2)


def test_random_floats() -> None:
    rng = random.Random(17)
    values = [struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0] for _ in range(20_000)]
    values += [rng.uniform(1, 10) * 10.0 ** rng.randint(-30, 30) for _ in range(20_000)]
    values = [v for v in values if math.isfinite(v)]
    for start in range(0, len(values), 500):
        chunk = {"values": values[start : start + 500]}
        assert json_report.dumps(chunk) == json.dumps(chunk, indent=2)


def test_a_real_report(tmp_path: Path) -> None:
    from auditor import cli

    out = tmp_path / "report.json"
    assert cli.main(
        [
            "scan",
            str(SEED / "before"),
            str(SEED / "policies.yaml"),
            str(SEED / "nodes.yaml"),
            "--format",
            "json",
            "--output",
            str(out),
            "--fail-on",
            "none",
        ]
    ) in (0, 3)
    text = out.read_text(encoding="utf-8")
    doc = json.loads(text)
    assert doc["findings"], "the seed repository has findings"
    assert text == json.dumps(doc, indent=2) + "\n"


def _floats(value: Any) -> list[float]:
    if isinstance(value, float):
        return [value]
    if isinstance(value, dict):
        return [f for v in value.values() for f in _floats(v)]
    if isinstance(value, list):
        return [f for v in value for f in _floats(v)]
    return []


def test_the_group_listing_holds_no_floats() -> None:
    """render() does not search the groups member for NaN: nothing in it may be a float."""
    from auditor.audit.scan import scan
    from auditor.settings.config import Settings
    from auditor.sources.manifests import load_inventory

    doc = json_report.to_document(scan(load_inventory([SEED], Settings())))
    assert doc["groups"], "the seed repository has training groups"
    assert _floats(doc["groups"]) == []
    assert json_report.dumps({"groups": [float("nan")]}) == json.dumps({"groups": [float("nan")]}, indent=2)


def _finding(estimate: float | None) -> Finding:
    """A finding with a non-ASCII message and these estimates."""
    return Finding(
        rule="cross-zone-traffic",
        severity="medium",
        certainty="likely",
        symptoms=("cost",),
        workload=ObjectRef("kubeflow.org/v1", "PyTorchJob", "ml", "job", "job.yaml", 1),
        message="crosses zones → billed",
        estimated_monthly_cost_usd=estimate,
        estimated_slowdown_pct=estimate,
    )


@pytest.mark.parametrize("estimate", [1e-05, 2.5e-07, 1e17, float("nan"), float("inf"), 0.0, 12.5, None])
def test_findings_estimates_of_every_form_render_as_json_does(estimate: float | None) -> None:
    """render() checks the findings' estimates itself instead of searching their JSON: a small,
    huge or non-finite one still gives json.dumps' exact text."""
    from auditor.audit.scan import ScanResult

    result = ScanResult([_finding(estimate)], [])
    assert json_report.render(result) == json.dumps(json_report.to_document(result), indent=2) + "\n"


def test_kept_texts_are_used_only_for_the_finding_they_were_written_for() -> None:
    """ScanResult.finding_json holds each text with its finding: an entry whose object is not the
    finding reported (one the pack re-rated, a recycled id) is ignored, and the report is still
    json.dumps' text."""
    from dataclasses import replace

    from auditor.audit.scan import ScanResult

    finding = _finding(1e-05)
    rerated = replace(finding, severity="low")
    expected = json.dumps(json_report.to_document(ScanResult([rerated], [])), indent=2) + "\n"
    stale = {id(rerated): (finding, json_report.finding_text(finding))}
    assert json_report.render(ScanResult([rerated], [], finding_json=stale)) == expected
    kept = {id(rerated): (rerated, json_report.finding_text(rerated))}
    assert json_report.render(ScanResult([rerated], [], finding_json=kept)) == expected
    garbage = {id(rerated): (rerated, "not json")}
    assert "not json" in json_report.render(ScanResult([rerated], [], finding_json=garbage)), (
        "the kept text is what is written: the cache, keyed by the code's digest, must hold the right one"
    )
