"""The loader's fast path (documents built straight from libyaml's events) must give exactly what
the full path (compose a node tree, then construct) gives: data, every line, every error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support import DATA

from auditor import yamlio
from auditor.resources import examples_dir

ROOT = Path(__file__).resolve().parent.parent

EDGE_CASES = {
    "scalars": "a: 1\nb: true\nc: ~\nd: '1'\ne: 1.5\nf: 0x1F\ng: .inf\nh: 2024-01-01\ni: =\nj: ''\nk: null\n",
    "non-string keys": "1: a\ntrue: b\n1.5: c\n",
    "null key": "~: a\n",
    "merge": "base: &b {x: 1}\nchild:\n  <<: *b\n  y: 2\n",
    "merge without anchor": "child:\n  <<: {x: 1}\n  y: 2\n",
    "duplicates at two depths": "a:\n  b: 1\n  b: 2\nc: 1\nc: 2\n",
    "explicit tags": "a: !!str 123\nb: !!binary aGk=\nc: !!int '7'\n",
    "custom tag": "a: !custom x\n",
    "complex key": "? [a, b]\n: c\n",
    "mapping key": "{a: 1}: x\n",
    "flow": "{a: [1, {b: 2}], c: [], d: {}}\n",
    "scalar document": "hello\n",
    "empty document": "---\n# only a comment\n",
    "literal": "--- |\n  line one\n  line two\n",
    "ampersand and star in text": "url: http://x/?a=1&b=2\ncron: '*/5 * * * *'\nglob: a*b\n",
    "anchors": "a: &x [1, 2]\nb: *x\nc: &y hello\n",
    "deep": "".join("  " * i + "a:\n" for i in range(150)) + "  " * 150 + "b: 1\n",
    "crlf": "a: 1\r\nb:\r\n  - x\r\n  - y: z\r\n",
    "sequence of mappings": "- a: 1\n  b: [x, y]\n- c: {d: e}\n- - nested\n  - list\n",
    "list document": "- 1\n- 2\n",
    "syntax error": "a: [1, 2\nb: 3\n",
    "tabs": "a:\n\tb: 1\n",
    "bool-like strings": "a: yes\nb: on\nc: 'no'\nd: Off\n",
}


def _locations(data: Any) -> Any:
    if isinstance(data, yamlio.YamlMap):
        return ("map", data.line, dict(data.key_lines), {k: _locations(v) for k, v in data.items()})
    if isinstance(data, yamlio.YamlSeq):
        return ("seq", data.line, list(data.item_lines), [_locations(v) for v in data])
    return (type(data).__name__, data)


def _both(text: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    fast = yamlio.load_text(text, "f.yaml")

    def full_only(*_: object) -> tuple[Any, int]:
        raise yamlio._NeedsFullConstructor

    with monkeypatch.context() as m:
        m.setattr(yamlio, "_from_events", full_only)
        full = yamlio.load_text(text, "f.yaml")
    return fast, full


def _comparable(result: tuple[list[yamlio.Document], list[Any]]) -> Any:
    docs, errors = result
    return [(d.source, _locations(d.data)) for d in docs], errors


@pytest.mark.parametrize("name", sorted(EDGE_CASES))
def test_edge_cases_load_the_same_both_ways(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, full = _both(EDGE_CASES[name], monkeypatch)
    assert _comparable(fast) == _comparable(full)


def _corpus() -> list[Path]:
    roots = [DATA, examples_dir(), ROOT / "deploy", ROOT / "policies"]
    return sorted(p for r in roots for p in r.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))


def test_every_document_we_have_loads_the_same_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    files = _corpus()
    assert len(files) > 100
    calls = {"events": 0}
    real = yamlio._from_events

    def counted(*args: Any) -> tuple[Any, int]:
        out = real(*args)
        calls["events"] += 1
        return out

    monkeypatch.setattr(yamlio, "_from_events", counted)
    documents = 0
    for path in files:
        text = path.read_text(encoding="utf-8")
        fast, full = _both(text, monkeypatch)
        assert _comparable(fast) == _comparable(full), path
        documents += len(fast[0])
    # The fast path really served most of them (the comparison is not vacuous).
    assert calls["events"] > documents * 0.8


def test_the_fast_path_counts_nodes_as_the_composed_path_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """The root and one node per mapping entry or sequence item (keys not counted apart), as
    _construct_plain counts: a document within max_nodes is read once, from the events, not
    dropped half-way to be composed again (a 20,000-pod PodList took twice as long)."""
    limits = yamlio.YamlLimits(max_nodes=10)
    composed = {"calls": 0}
    real = yamlio._construct_plain

    def counted(*args: Any) -> Any:
        composed["calls"] += 1
        return real(*args)

    monkeypatch.setattr(yamlio, "_construct_plain", counted)
    within = "".join(f"k{i}: {i}\n" for i in range(9))  # root + 9 entries = 10 nodes
    docs, errors = yamlio.load_text(within, "f.yaml", limits)
    assert not errors and len(docs[0].data) == 9 and composed["calls"] == 0
    over = within + "k9: 9\n"  # 11 nodes: refused, by the composed path's own words
    docs, errors = yamlio.load_text(over, "f.yaml", limits)
    assert not docs and "more than 10 nodes (limit max_nodes)" in errors[0].message
