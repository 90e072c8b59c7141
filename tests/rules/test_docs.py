"""docs/rules.md is generated from the rule modules: keep it in sync."""

from __future__ import annotations

from pathlib import Path

from auditor.rules import RULES, rules_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "rules.md"


def test_rules_doc_is_current() -> None:
    assert DOC.read_text() == rules_markdown(), (
        "regenerate: python -c 'from auditor.rules import rules_markdown...'"
    )


def test_every_rule_documents_a_failing_and_a_passing_example() -> None:
    for rule in RULES:
        doc = rule.__doc__ or ""
        assert doc.startswith(rule.META.id) and "Fails:" in doc and "Passes:" in doc, rule.META.id
