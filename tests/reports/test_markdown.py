"""The Markdown summary (CI job summaries, PR comments): what the JSON says, with text from the
audited files unable to inject Markdown, HTML or table cells."""

from __future__ import annotations

import json
import re

import pytest

from auditor import cli
from auditor.reports import markdown


def test_the_summary_of_a_scan(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["scan", "--example", "seed-lab/before", "--format", "markdown"]) == 1
    text = capsys.readouterr().out
    assert text.startswith("## Placement Auditor\n") and "**1 finding(s)** (1 critical)." in text
    (row,) = [line for line in text.splitlines() if line.startswith("| 🛑")]
    assert "`cross-zone-blocked`" in row and "Job ml-demo/trainer-workers" in row


def test_hostile_text_is_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["scan", "--example", "seed-lab/before", "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    doc["findings"][0]["message"] = "<img src=x onerror=alert(1)> | [click](http://evil) `x`\n# heading"
    doc["findings"][0]["workload"]["name"] = "a|b"
    text = markdown.render(doc)
    (row,) = [line for line in text.splitlines() if line.startswith("| 🛑")]
    message = row.strip("| ").split(" | ")[-1]
    assert re.search(r"(?<!\\)[<>|\[\]`#]", message) is None
    assert "\\<img" in row and "\\[click\\]\\(http://evil\\)" in row
    assert "a\\|b" in row and row.count(" | ") == 6  # seven cells, no injected one
    assert "\n# heading" not in text
