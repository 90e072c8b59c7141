"""The loader's fast paths (documents built straight from libyaml's events: in C by
auditor/_fastyaml.c when it was built, else in Python by yamlio._from_events) must give exactly what
the full path (compose a node tree, then construct) gives: data, every line, every error."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
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
    # Characters YAML does not allow (libyaml's reader and _NON_PRINTABLE_RE refuse the same set):
    "control character in a value": "a: 1\nb: x\x01y\n",
    "control character in a comment": "# bell \x07\na: 1\n",
    "control character quoted": "a: 'x\x1fy'\n",
    "DEL": "a: x\x7fy\n",
    "C1 control": "a: x\x9by\n",
    "allowed odd characters": "a: x\x85y\nb: \ufeffz\nc: \ue000\nd: \U0001f600\n",
    "non-character": "a: x\ufffey\n",
    # Found by tests/fuzz: the C extension's libyaml (the system's) and PyYAML's differ on a BOM
    # that starts a later document.
    "BOM after a document end": "...\n\ufeff...",
    "BOM starting a later document": "a: 1\n---\n\ufeffb: 2\n",
    "BOM inside a document": "a: \ufeff1\nb: [\ufeff]\n",
}


def _locations(data: Any) -> Any:
    if isinstance(data, yamlio.YamlMap):
        return ("map", data.line, dict(data.key_lines), {k: _locations(v) for k, v in data.items()})
    if isinstance(data, yamlio.YamlSeq):
        return ("seq", data.line, list(data.item_lines), [_locations(v) for v in data])
    return (type(data).__name__, data)


PATHS = ["c", "python"]


def _fast_path(path: str, m: pytest.MonkeyPatch) -> None:
    if path == "python":
        m.setattr(yamlio, "_fastyaml", None)
    elif yamlio._fastyaml is None:
        pytest.skip("the C extension auditor._fastyaml is not built here")


def _full_only(m: pytest.MonkeyPatch) -> None:
    def full_only(*_: object) -> tuple[Any, int]:
        raise yamlio._NeedsFullConstructor

    m.setattr(yamlio, "_fastyaml", None)
    m.setattr(yamlio, "_from_events", full_only)


def _both(text: str, monkeypatch: pytest.MonkeyPatch, path: str = "c") -> tuple[Any, Any]:
    with monkeypatch.context() as m:
        _fast_path(path, m)
        fast = yamlio.load_text(text, "f.yaml")
    with monkeypatch.context() as m:
        _full_only(m)
        full = yamlio.load_text(text, "f.yaml")
    return fast, full


def _comparable(result: tuple[list[yamlio.Document], list[Any]]) -> Any:
    docs, errors = result
    return [(d.source, _locations(d.data)) for d in docs], errors


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", sorted(EDGE_CASES))
def test_edge_cases_load_the_same_both_ways(name: str, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, full = _both(EDGE_CASES[name], monkeypatch, path)
    assert _comparable(fast) == _comparable(full)


def _corpus() -> list[Path]:
    roots = [DATA, examples_dir(), ROOT / "deploy", ROOT / "policies"]
    return sorted(p for r in roots for p in r.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))


@pytest.mark.parametrize("path", PATHS)
def test_every_document_we_have_loads_the_same_both_ways(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    files = _corpus()
    assert len(files) > 100
    calls = {"fast": 0}
    real_events, real_c = yamlio._from_events, yamlio._fastyaml

    def counted_events(*args: Any) -> tuple[Any, int]:
        out = real_events(*args)
        calls["fast"] += 1
        return out

    def counted_c(*args: Any) -> Any:
        out = real_c.build(*args)
        calls["fast"] += out is not None
        return out

    monkeypatch.setattr(yamlio, "_from_events", counted_events)
    if path == "c" and real_c is not None:
        monkeypatch.setattr(yamlio, "_fastyaml", SimpleNamespace(build=counted_c))
    documents = 0
    for file in files:
        text = file.read_text(encoding="utf-8")
        fast, full = _both(text, monkeypatch, path)
        assert _comparable(fast) == _comparable(full), file
        documents += len(fast[0])
    # The fast path really served most of them (the comparison is not vacuous).
    assert calls["fast"] > documents * 0.8


def test_the_c_extension_is_built_where_ci_requires_it() -> None:
    """.ci/run installs libyaml's headers and sets AUDITOR_REQUIRE_FASTYAML: there the suite must
    run the C path, not skip it (elsewhere the package works without it)."""
    if not os.environ.get("AUDITOR_REQUIRE_FASTYAML"):
        pytest.skip("AUDITOR_REQUIRE_FASTYAML is not set")
    assert yamlio._fastyaml is not None


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    "text",
    [
        "a: &a [x, x, x]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\n",  # aliases: the full path's guards
        "[" * 500 + "]" * 500 + "\n",  # over max_depth
        "a: [1, 2\n",  # a syntax error: the full path's message and line
        "a: 1\n---\nb: 2\n",  # two documents in one chunk: the composer says so
        "k: " + "x" * 100_000 + "\n",  # a long scalar
        'a: "\\ud800"\n',  # an escaped lone surrogate
        "a: \ud800\n",  # a lone surrogate in the text itself (load_text takes any str)
        '\u00e9t\u00e9: "caf\u00e9 \\u263a"\nz: \U0001f600\n',  # non-ASCII keys and values
    ],
)
def test_hostile_and_unusual_documents_load_the_same_both_ways(
    text: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, full = _both(text, monkeypatch, path)
    assert _comparable(fast) == _comparable(full)


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


def _suite() -> list[dict[str, Any]]:
    lines = (DATA / "yaml-test-suite" / "cases.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.parametrize("path", PATHS)
def test_every_yaml_test_suite_case_loads_the_same_on_every_path(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The official YAML test suite: tabs, flow and block edge cases, directives, anchors, odd
    keys, documents libyaml refuses. Data, lines and error messages agree on every case."""
    cases = _suite()
    assert len(cases) > 400
    differ = []
    for case in cases:
        fast, full = _both(case["yaml"], monkeypatch, path)
        if _comparable(fast) != _comparable(full):
            differ.append(f"{case['id']}#{case['index']} {case['name']}")
    assert differ == []
