"""Tests for auditor.yamlio: located loading, per-document errors, hostile-input guards, discovery."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from auditor import yamlio
from auditor.model.source import LoadError, SourceRef
from auditor.yamlio import (
    Document,
    YamlLimits,
    YamlMap,
    YamlSeq,
    discover,
    discover_files,
    key_line,
    line_of,
    load_file,
    load_paths,
    load_text,
)
from tests.support import age_tree, disk_now_ns

_LOADERS: list[type] = [yamlio._PyLoader]
if hasattr(yamlio, "_CLoader"):
    _LOADERS.insert(0, yamlio._CLoader)


@pytest.fixture(params=_LOADERS, ids=lambda cls: cls.__name__)
def loader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[type]:
    """Run a test once with libyaml (when built in) and once with the pure-Python parser."""
    monkeypatch.setattr(yamlio, "_LOADER_CLASS", request.param)
    yield request.param


def _billion_laughs(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels + 1):
        refs = ", ".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------
# Documents, lines and located containers


@pytest.mark.usefixtures("loader")
def test_multi_document_indexes_and_start_lines() -> None:
    text = (
        "# leading comment\n"  # 1
        "a: 1\n"  # 2
        "---\n"  # 3
        "\n"  # 4
        "b: 2\n"  # 5
        "---\n"  # 6  empty document: skipped but still counted
        "--- # comment\n"  # 7
        "- c\n"  # 8
        "...\n"  # 9
        "# between\n"  # 10
        "---\n"  # 11
        "d: 4\n"  # 12
    )
    docs, errors = load_text(text, "m.yaml")
    assert errors == []
    assert [d.data for d in docs] == [{"a": 1}, {"b": 2}, ["c"], {"d": 4}]
    assert [d.source for d in docs] == [
        SourceRef("m.yaml", 2, 0),
        SourceRef("m.yaml", 5, 1),
        SourceRef("m.yaml", 8, 3),
        SourceRef("m.yaml", 12, 4),
    ]


@pytest.mark.usefixtures("loader")
def test_line_numbers_with_crlf_and_cr_breaks() -> None:
    docs, errors = load_text("a: 1\r\n---\r\nb: 2\rc: 3\r\n---\nd: [1,\n  2]\n", "crlf.yaml")
    assert errors == []
    assert [d.source.line for d in docs] == [1, 3, 6]
    assert key_line(docs[1].data, "c") == 4


@pytest.mark.usefixtures("loader")
def test_yaml_map_and_seq_record_lines() -> None:
    text = (
        "---\n"  # 1
        "kind: Pod\n"  # 2
        "metadata:\n"  # 3
        "  name: web\n"  # 4
        "  labels: {app: web,\n"  # 5
        "    tier: front}\n"  # 6
        "spec:\n"  # 7
        "  containers:\n"  # 8
        "  - name: a\n"  # 9
        "    ports:\n"  # 10
        "    - containerPort: 80\n"  # 11
        "  - name: b\n"  # 12
    )
    docs, errors = load_text(text, "pod.yaml")
    assert errors == []
    data = docs[0].data
    assert isinstance(data, YamlMap)
    assert data.line == 2
    assert data.key_lines == {"kind": 2, "metadata": 3, "spec": 7}
    meta = data["metadata"]
    assert isinstance(meta, YamlMap)
    assert (meta.line, meta.key_lines) == (4, {"name": 4, "labels": 5})
    assert line_of(meta["labels"]) == 5
    assert key_line(meta["labels"], "tier") == 6
    containers = data["spec"]["containers"]
    assert isinstance(containers, YamlSeq)
    assert containers.line == 9
    assert containers.item_lines == [9, 12]
    assert line_of(containers[0]["ports"][0]) == 11
    # Plain dict/list semantics are untouched.
    assert data["metadata"] == {"name": "web", "labels": {"app": "web", "tier": "front"}}
    assert containers == [{"name": "a", "ports": [{"containerPort": 80}]}, {"name": "b"}]


def test_line_helpers_defaults() -> None:
    assert line_of("scalar", 7) == 7
    assert line_of({"plain": "dict"}) == 0
    assert key_line(YamlMap({"a": 1}, line=3), "missing", 9) == 9
    assert key_line(["not", "a", "map"], "a", 4) == 4


@pytest.mark.usefixtures("loader")
def test_broken_document_does_not_hide_the_others() -> None:
    text = (
        "a: 1\n"  # 1
        "---\n"  # 2
        "b:\n"  # 3
        "  c: [1, 2\n"  # 4
        "  d: 3\n"  # 5
        "e: ]\n"  # 6
        "---\n"  # 7
        "f: 4\n"  # 8
    )
    docs, errors = load_text(text, "mixed.yaml")
    assert [d.data for d in docs] == [{"a": 1}, {"f": 4}]
    assert [d.source.document for d in docs] == [0, 2]
    assert len(errors) == 1
    err = errors[0]
    assert err.file == "mixed.yaml"
    assert err.line == 5  # where the unclosed flow sequence runs into the next key
    assert err.message.startswith("invalid YAML")


@pytest.mark.usefixtures("loader")
def test_syntax_error_line_is_absolute() -> None:
    text = "a: 1\n---\nb: 2\n---\nx: 1\n  y: 2\n"
    _, errors = load_text(text, "abs.yaml")
    assert [e.line for e in errors] == [6]


# ------------------------------------------------------------------------------------------
# Hostile input


@pytest.mark.usefixtures("loader")
def test_billion_laughs_is_rejected_quickly() -> None:
    start = time.perf_counter()
    docs, errors = load_text(_billion_laughs(), "lol.yaml")
    elapsed = time.perf_counter() - start
    constructed = len(docs)  # not `docs == []`: a failure must not make pytest print 10**9 nodes
    assert constructed == 0
    assert len(errors) == 1
    assert "max_nodes" in errors[0].message
    assert "1000000" in errors[0].message
    assert elapsed < 1.0


@pytest.mark.usefixtures("loader")
def test_aliases_within_limits_are_shared_not_rejected() -> None:
    docs, errors = load_text(_billion_laughs(levels=3), "small.yaml")
    assert errors == []
    assert docs[0].data["a3"][0][0][0] == ["lol"] * 9


@pytest.mark.usefixtures("loader")
def test_alias_expansion_counts_against_max_nodes() -> None:
    # 1 + 3 * (1 + 5) = 19 expanded nodes although only 10 are written.
    text = "[&x [1, 2, 3, 4, 5], *x, *x]"
    assert load_text(text, "x", YamlLimits(max_nodes=19)) == (
        [Document([[1, 2, 3, 4, 5]] * 3, SourceRef("x", 1, 0))],
        [],
    )
    _, errors = load_text(text, "x", YamlLimits(max_nodes=18))
    assert len(errors) == 1
    assert "max_nodes" in errors[0].message


@pytest.mark.usefixtures("loader")
def test_depth_after_alias_expansion_is_limited() -> None:
    # Each anchor nests the previous one two levels deeper: written depth stays at 4,
    # expanded depth grows with every level.
    lines = ["a0: &a0 [[x]]"] + [f"a{i}: &a{i} [[*a{i - 1}]]" for i in range(1, 8)]
    _, errors = load_text("\n".join(lines), "nest.yaml", YamlLimits(max_depth=10))
    assert len(errors) == 1
    assert "max_depth" in errors[0].message


@pytest.mark.usefixtures("loader")
def test_recursive_anchor_is_an_error() -> None:
    docs, errors = load_text("ok: 1\n---\na: &a\n  b: *a\n", "rec.yaml")
    assert [d.data for d in docs] == [{"ok": 1}]
    assert len(errors) == 1
    assert "recursive" in errors[0].message


@pytest.mark.usefixtures("loader")
@pytest.mark.parametrize("depth", [10_000, 100_000])
def test_deep_flow_sequences_are_rejected(depth: int) -> None:
    text = "ok: 1\n---\n" + "[" * depth + "]" * depth + "\n"
    docs, errors = load_text(text, "deep.yaml")
    assert [d.data for d in docs] == [{"ok": 1}]
    assert len(errors) == 1
    assert errors[0].line == 3
    assert "nesting" in errors[0].message


@pytest.mark.slow
@pytest.mark.usefixtures("loader")
def test_deep_block_mappings_are_rejected() -> None:
    depth = 10_000
    text = "\n".join(" " * i + "k:" for i in range(depth)) + " leaf\n"
    docs, errors = load_text(text, "deep.yaml", YamlLimits(max_file_bytes=len(text)))
    assert docs == []
    assert len(errors) == 1
    assert "max_depth" in errors[0].message
    assert errors[0].line == 101


@pytest.mark.usefixtures("loader")
def test_depth_limit_is_exact() -> None:
    assert load_text("[" * 5 + "]" * 5, "d", YamlLimits(max_depth=5))[1] == []
    _, errors = load_text("[" * 6 + "]" * 6, "d", YamlLimits(max_depth=5))
    assert len(errors) == 1


@pytest.mark.usefixtures("loader")
def test_python_tags_are_refused_and_not_executed(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    text = (
        f'a: !!python/object/apply:os.system ["touch {marker}"]\n'
        "---\n"
        f"b: !!python/object/new:subprocess.Popen [[touch, {marker}]]\n"
        "---\n"
        "c: !!python/name:os.system\n"
    )
    docs, errors = load_text(text, "evil.yaml")
    assert docs == []
    assert [e.line for e in errors] == [1, 3, 5]
    assert all("constructor" in e.message for e in errors)
    assert not marker.exists()


@pytest.mark.usefixtures("loader")
def test_control_characters_are_reported_with_line() -> None:
    docs, errors = load_text("a: 1\n---\nb: 2\nc: \x07\n", "ctl.yaml")
    assert [d.data for d in docs] == [{"a": 1}]
    assert [(e.line, "U+0007" in e.message) for e in errors] == [(4, True)]


@pytest.mark.usefixtures("loader")
def test_max_documents() -> None:
    text = "".join(f"---\nn: {i}\n" for i in range(5))
    docs, errors = load_text(text, "many.yaml", YamlLimits(max_documents=3))
    assert [d.data["n"] for d in docs] == [0, 1, 2]
    assert len(errors) == 1
    assert errors[0].line == 7
    assert "max_documents" in errors[0].message


# ------------------------------------------------------------------------------------------
# Keys and scalar typing


@pytest.mark.usefixtures("loader")
def test_duplicate_key_names_key_and_line() -> None:
    text = "a: 1\n---\nmetadata:\n  name: x\n  labels: {}\n  name: y\n"
    docs, errors = load_text(text, "dup.yaml")
    assert [d.data for d in docs] == [{"a": 1}]
    assert len(errors) == 1
    assert errors[0].line == 6
    assert "'name'" in errors[0].message
    assert "line 4" in errors[0].message


@pytest.mark.usefixtures("loader")
def test_merge_keys_override_without_duplicate_error() -> None:
    text = "base: &base {a: 1, b: 2}\nmore: &more {c: 3}\nderived:\n  <<: [*base, *more]\n  b: 20\n"
    docs, errors = load_text(text, "merge.yaml")
    assert errors == []
    derived = docs[0].data["derived"]
    assert derived == {"a": 1, "b": 20, "c": 3}
    assert key_line(derived, "b") == 5
    assert key_line(derived, "a") == 1
    assert docs[0].data["base"] == {"a": 1, "b": 2}


@pytest.mark.usefixtures("loader")
def test_mapping_as_key_from_go_template_is_an_error_for_that_document_only() -> None:
    text = (
        "kind: ConfigMap\n"  # 1
        "---\n"  # 2
        "kind: Pod\n"  # 3
        "spec:\n"  # 4
        "  containers:\n"  # 5
        "  - ports:\n"  # 6
        "    - containerPort: {{ index .Values.ports 0 }}\n"  # 7
        "---\n"  # 8
        "kind: Service\n"  # 9
    )
    docs, errors = load_text(text, "tpl.yaml")
    assert [d.data["kind"] for d in docs] == ["ConfigMap", "Service"]
    assert len(errors) == 1
    assert errors[0].line == 7
    assert "mapping key" in errors[0].message


@pytest.mark.usefixtures("loader")
def test_scalar_keys_become_strings_like_kubernetes() -> None:
    docs, errors = load_text("1: a\ntrue: b\n0x10: c\n", "keys.yaml")
    assert errors == []
    assert docs[0].data == {"1": "a", "true": "b", "16": "c"}
    _, errors = load_text("~: x\n", "null.yaml")
    assert len(errors) == 1
    assert "null" in errors[0].message


@pytest.mark.usefixtures("loader")
def test_scalar_typing_follows_kubernetes_yaml() -> None:
    text = (
        "created: 2024-01-02T03:04:05Z\n"
        "day: 2024-01-02\n"
        "yes_: yes\n"
        "off_: off\n"
        "octal: 0755\n"
        "eq: =\n"
        "empty:\n"
        "f: 1.5\n"
    )
    docs, errors = load_text(text, "types.yaml")
    assert errors == []
    assert docs[0].data == {
        "created": "2024-01-02T03:04:05Z",
        "day": "2024-01-02",
        "yes_": True,
        "off_": False,
        "octal": 493,
        "eq": "=",
        "empty": None,
        "f": 1.5,
    }


def test_timestamp_resolver_removed_only_for_our_loader() -> None:
    import yaml

    assert yaml.safe_load("d: 2024-01-02")["d"].__class__.__name__ == "date"


@pytest.mark.usefixtures("loader")
def test_null_and_empty_documents_are_skipped() -> None:
    docs, errors = load_text("---\n---\n# only a comment\n---\nnull\n---\nx: 1\n", "e.yaml")
    assert errors == []
    assert [(d.data, d.source.document) for d in docs] == [({"x": 1}, 3)]


# ------------------------------------------------------------------------------------------
# Files


def test_load_file_json(tmp_path: Path) -> None:
    path = tmp_path / "obj.json"
    path.write_text('{\n  "kind": "Namespace",\n  "metadata": {"name": "ns"}\n}\n')
    docs, errors = load_file(path, "obj.json")
    assert errors == []
    assert docs[0].data == {"kind": "Namespace", "metadata": {"name": "ns"}}
    assert key_line(docs[0].data, "metadata") == 3


def test_oversized_file_is_refused_without_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("a: " + "x" * 200 + "\n")

    def no_open(self: Path, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"{self} was opened")

    monkeypatch.setattr(Path, "open", no_open)
    monkeypatch.setattr(Path, "read_bytes", no_open)
    monkeypatch.setattr(Path, "read_text", no_open)
    docs, errors = load_file(path, "big.yaml", YamlLimits(max_file_bytes=100))
    assert docs == []
    assert len(errors) == 1
    assert errors[0].file == "big.yaml"
    assert "file is 204 bytes, over the limit of 100" in errors[0].message


def test_file_at_the_size_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "edge.yaml"
    path.write_bytes(b"a: 1\n")
    docs, errors = load_file(path, "edge.yaml", YamlLimits(max_file_bytes=5))
    assert (len(docs), errors) == (1, [])


@pytest.mark.parametrize(
    "content",
    [b"a: 1\n\x00\x01\x02binary", b"a: caf\xe9\n", "a: 1\n".encode("utf-16")],
    ids=["nul", "latin1", "utf16"],
)
def test_binary_or_non_utf8_file_is_skipped(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bin.yaml"
    path.write_bytes(content)
    docs, errors = load_file(path, "bin.yaml")
    assert docs == []
    assert [e.message for e in errors] == ["binary or non-UTF-8 file, skipped"]


def test_utf8_bom_is_stripped(tmp_path: Path) -> None:
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbfkind: Pod\n---\nkind: Service\n")
    docs, errors = load_file(path, "bom.yaml")
    assert errors == []
    assert [d.data for d in docs] == [{"kind": "Pod"}, {"kind": "Service"}]
    assert list(docs[0].data) == ["kind"]
    assert docs[0].source == SourceRef("bom.yaml", 1, 0)


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    docs, errors = load_file(tmp_path / "nope.yaml", "nope.yaml")
    assert docs == []
    assert len(errors) == 1
    assert errors[0].file == "nope.yaml"
    assert "cannot read" in errors[0].message


def test_non_regular_file_is_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    docs, errors = load_file(fifo, "pipe.yaml")  # would block forever if opened without O_NONBLOCK
    assert docs == []
    assert "not a regular file" in errors[0].message


def test_a_socket_or_a_directory_is_not_a_regular_file(tmp_path: Path) -> None:
    import socket

    sock_path = tmp_path / "s.yaml"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(sock_path))
        docs, errors = load_file(sock_path, "s.yaml")  # a socket cannot even be opened
    assert docs == [] and "not a regular file" in errors[0].message
    (tmp_path / "d.yaml").mkdir()
    docs, errors = load_file(tmp_path / "d.yaml", "d.yaml")
    assert docs == [] and "not a regular file" in errors[0].message


# ------------------------------------------------------------------------------------------
# Discovery


def _touch(path: Path, text: str = "a: 1\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_discover_files_order_is_deterministic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for rel in [
        "m/z.yaml",
        "m/b/c.yml",
        "m/a.json",
        "m/b/a.yaml",
        "m/a-b/x.yaml",
        "m/notes.txt",
        "m/.git/config.yaml",
        "m/.hidden.yaml",
        "single.yml.txt",
    ]:
        _touch(tmp_path / rel)
    files, errors = discover_files([Path("m"), Path("single.yml.txt")])
    assert errors == []
    names = [display for _, display in files]
    assert names == [
        "m/.hidden.yaml",
        "m/a-b/x.yaml",
        "m/a.json",
        "m/b/a.yaml",
        "m/b/c.yml",
        "m/z.yaml",
        "single.yml.txt",  # a file argument is taken whatever its suffix
    ]
    assert all(real.is_file() for real, _ in files)
    assert discover_files([Path("m"), Path("single.yml.txt")]) == (files, errors)


def test_discover_missing_path(tmp_path: Path) -> None:
    files, errors = discover_files([tmp_path / "nope"])
    assert files == []
    assert [e.message for e in errors] == ["no such file or directory"]


def test_symlink_to_file_outside_tree_is_not_read(tmp_path: Path) -> None:
    secret = _touch(tmp_path / "outside" / "secret.yaml", "password: hunter2-SECRET\n")
    tree = tmp_path / "tree"
    _touch(tree / "ok.yaml")
    (tree / "link.yaml").symlink_to(secret)
    (tree / "dirlink").symlink_to(secret.parent, target_is_directory=True)

    files, errors = discover_files([tree])
    assert [display for _, display in files] == [f"{tree}/ok.yaml"]
    assert sorted((e.file, e.message) for e in errors) == [
        (f"{tree}/dirlink", f"symlink points outside the scanned tree (-> {secret.parent})"),
        (f"{tree}/link.yaml", f"symlink points outside the scanned tree (-> {secret})"),
    ]
    docs, load_errors = load_paths([tree])
    assert [d.data for d in docs] == [{"a": 1}]
    assert "hunter2" not in repr(docs) + repr(load_errors)


def test_symlinks_inside_tree_are_followed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _touch(tmp_path / "t" / "real" / "a.yaml")
    _touch(tmp_path / "t" / ".stash" / "b.yaml")
    (tmp_path / "t" / "alias").symlink_to("real", target_is_directory=True)
    (tmp_path / "t" / "visible").symlink_to(".stash", target_is_directory=True)
    (tmp_path / "t" / "again.yaml").symlink_to("real/a.yaml")
    files, errors = discover_files([Path("t")])
    assert errors == []
    # real/a.yaml is reachable three ways but listed once, under its real name; the hidden
    # directory is reached only through the explicit link.
    assert [display for _, display in files] == ["t/real/a.yaml", "t/visible/b.yaml"]
    assert files[1][0] == (tmp_path / "t" / ".stash" / "b.yaml").resolve()


def test_symlink_directory_loop_terminates(tmp_path: Path) -> None:
    tree = tmp_path / "loop"
    _touch(tree / "sub" / "a.yaml")
    (tree / "sub" / "up").symlink_to("..", target_is_directory=True)
    (tree / "sub" / "self").symlink_to(".", target_is_directory=True)
    (tree / "x").symlink_to("y")
    (tree / "y").symlink_to("x")
    files, errors = discover_files([tree])
    assert [display for _, display in files] == [f"{tree}/sub/a.yaml"]
    assert [(e.file, e.message.split(" (")[0]) for e in errors] == [
        (f"{tree}/x", "broken symlink"),
        (f"{tree}/y", "broken symlink"),
    ]


def test_dangling_symlink_is_reported(tmp_path: Path) -> None:
    tree = tmp_path / "d"
    _touch(tree / "a.yaml")
    (tree / "gone.yaml").symlink_to(tmp_path / "missing.yaml")
    files, errors = discover_files([tree, tmp_path / "d" / "gone.yaml"])
    assert [display for _, display in files] == [f"{tree}/a.yaml"]
    assert len(errors) == 2
    assert all(e.file == f"{tree}/gone.yaml" and "broken symlink" in e.message for e in errors)


def test_load_paths_combines_discovery_and_loading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _touch(tmp_path / "k" / "a.yaml", "kind: A\n---\nkind: B\n")
    _touch(tmp_path / "k" / "b.json", '{"kind": "C"}')
    _touch(tmp_path / "k" / "c.yaml", "kind: [\n")
    docs, errors = load_paths([Path("k"), Path("missing")])
    assert [(d.data["kind"], d.source) for d in docs] == [
        ("A", SourceRef("k/a.yaml", 1, 0)),
        ("B", SourceRef("k/a.yaml", 3, 1)),
        ("C", SourceRef("k/b.json", 1, 0)),
    ]
    assert [(e.file, e.line) for e in errors] == [("missing", 0), ("k/c.yaml", 2)]
    assert all(isinstance(e, LoadError) for e in errors)


def _located(obj: Any) -> Any:
    """Data plus every line number, for comparing two loads exactly."""
    if isinstance(obj, yamlio.YamlMap):
        return ("map", obj.line, {k: (obj.key_lines[k], _located(v)) for k, v in obj.items()})
    if isinstance(obj, yamlio.YamlSeq):
        return ("seq", obj.line, list(zip(obj.item_lines, map(_located, obj), strict=True)))
    return obj


def test_fast_constructor_matches_the_full_one(monkeypatch: pytest.MonkeyPatch) -> None:
    data_dir = Path(__file__).parent / "data"
    files = sorted(p for p in data_dir.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))
    assert len(files) > 40
    fast = [yamlio.load_file(p, str(p)) for p in files]

    def refuse(ctor: Any, node: Any, limits: Any = None) -> Any:
        raise yamlio._NeedsFullConstructor

    monkeypatch.setattr(yamlio, "_construct_plain", refuse)
    full = [yamlio.load_file(p, str(p)) for p in files]
    for path, (fd, fe), (sd, se) in zip(files, fast, full, strict=True):
        assert fe == se, path
        assert [(d.source, _located(d.data)) for d in fd] == [(d.source, _located(d.data)) for d in sd], path


def test_fast_constructor_reports_duplicates_and_merges_like_the_full_one() -> None:
    docs, errors = yamlio.load_text("a: 1\nb: 2\na: 3\n", "f.yaml")
    assert not docs and errors[0].line == 3 and "first at line 1" in errors[0].message
    docs, errors = yamlio.load_text("base: &b {x: 1}\nm:\n  <<: *b\n  y: 2\n", "f.yaml")
    assert not errors and docs[0].data["m"] == {"x": 1, "y": 2}
    docs, errors = yamlio.load_text("m:\n  <<: {x: 1}\n  y: 2\n", "f.yaml")
    assert not errors and docs[0].data["m"] == {"x": 1, "y": 2}


def test_memoised_scalar_tags_match_a_fresh_resolution() -> None:
    # The second document meets every value again, now from the tag memo: same types both times,
    # quoted values stay strings, and the Kubernetes exceptions (dates, `=`) stay strings too.
    text = (
        "a: true\nb: 'true'\nc: 1\nd: \"1\"\ne: 1.5\nf: ~\ng: null\nh: 2024-01-01\ni: =\n"
        "j: 0x1F\nk: yes\nl: ''\nm: .inf\n"
    )
    first, errors = yamlio.load_text(text + "---\n" + text, "t.yaml")
    assert not errors
    expected = {
        "a": True, "b": "true", "c": 1, "d": "1", "e": 1.5, "f": None, "g": None,
        "h": "2024-01-01", "i": "=", "j": 31, "k": True, "l": "", "m": float("inf"),
    }  # fmt: skip
    for doc in first:
        assert dict(doc.data) == expected
        assert {k: type(v) for k, v in doc.data.items()} == {k: type(v) for k, v in expected.items()}


def test_read_capped_reads_past_a_stale_stat_up_to_one_byte_over_the_limit(tmp_path: Path) -> None:
    """The stat only sizes the first read: a file that grew since is read on, never past limit + 1."""
    f = tmp_path / "grown.yaml"
    body = b"a: 1\n" * 500_000  # 2.5 MB
    f.write_bytes(body)
    assert yamlio.read_capped(str(f), 10 * 2**20, 0) == body
    assert yamlio.read_capped(str(f), 10 * 2**20, 5) == body
    assert yamlio.read_capped(str(f), 10 * 2**20, len(body)) == body
    capped = yamlio.read_capped(str(f), 2**20, 100)
    assert capped == body[: 2**20 + 1]
    docs, errors = yamlio.load_file(f, "grown.yaml", yamlio.YamlLimits(max_file_bytes=2**20))
    assert not docs and "over the limit" in errors[0].message


def _listed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The directories os.scandir lists from now on."""
    listed: list[str] = []
    real = os.scandir

    def counting(path: Any = ".") -> Any:
        listed.append(str(path))
        return real(path)

    monkeypatch.setattr(yamlio.os, "scandir", counting)
    return listed


def test_listings_are_reused_only_while_a_directory_is_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory listed before, unchanged since (its stat) and older than the trusted time, is
    not listed again, and the walk finds what a fresh one finds; adding, removing or renaming a
    child lists it again, even when its mtime is put back (its ctime still moves)."""
    root = tmp_path / "repo"
    for rel in ["a/x.yaml", "a/b/y.yml", "a/b/c/z.json", "d/w.yaml", "d/notes.txt", "e/.hidden/h.yaml"]:
        _touch(root / rel)
    (root / "e" / "empty").mkdir()
    age_tree(root)
    now = disk_now_ns(tmp_path)
    first = yamlio.Listings({}, now)
    fresh = discover([root])
    assert discover([root], listings=first) == fresh
    real = str(root.resolve())
    walked = {str(p.resolve()) for p in root.rglob("*") if p.is_dir() and ".hidden" not in str(p)}
    assert set(first.found) == {real, *walked}
    again = yamlio.Listings(first.found, now)
    listed = _listed(monkeypatch)
    assert discover([root], listings=again) == fresh
    assert listed == [] and again.found == first.found

    # Not trusted: modified within the racy window of the recording (here: after it).
    listed.clear()
    assert discover([root], listings=yamlio.Listings(first.found, now - 2 * 86_400 * 10**9)) == fresh
    assert len(listed) == len(first.found)

    # A child added: only that directory is listed again.
    monkeypatch.undo()
    _touch(root / "a" / "b" / "new.yaml")
    changed = discover([root])
    assert f"{root}/a/b/new.yaml" in [d for _, d in changed[0]]
    third = yamlio.Listings(first.found, disk_now_ns(tmp_path))
    listed = _listed(monkeypatch)
    assert discover([root], listings=third) == changed
    assert listed == [str((root / "a" / "b").resolve())]

    # A child removed and the directory's times put back: its ctime still gives it away.
    before = (root / "d").stat()
    (root / "d" / "w.yaml").unlink()
    os.utime(root / "d", ns=(before.st_atime_ns, before.st_mtime_ns))
    listed.clear()
    fourth = yamlio.Listings(third.found, disk_now_ns(tmp_path) + 10**10)  # trusts the fresh listing of a/b
    files, _ = discover([root], listings=fourth)
    assert listed == [str((root / "d").resolve())]
    assert f"{root}/d/w.yaml" not in [d for _, d in files]


def test_a_directory_holding_a_symlink_or_a_special_file_is_never_recorded(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    _touch(root / "real" / "a.yaml")
    _touch(root / "plain" / "b.yaml")
    (root / "links").mkdir()
    (root / "links" / "to-real").symlink_to("../real", target_is_directory=True)
    (root / "links" / "c.yaml").symlink_to("../real/a.yaml")
    (root / "special").mkdir()
    os.mkfifo(root / "special" / "pipe.yaml")
    age_tree(root)
    listings = yamlio.Listings({}, disk_now_ns(tmp_path))
    files, errors = discover([root], listings=listings)
    assert (files, errors) == discover([root])
    recorded = set(listings.found)
    assert str((root / "links").resolve()) not in recorded
    assert str((root / "special").resolve()) not in recorded
    assert {str((root / d).resolve()) for d in ("real", "plain")} <= recorded
    # Reused listings give the same walk, symlinks resolved afresh.
    again = yamlio.Listings(listings.found, disk_now_ns(tmp_path))
    assert discover([root], listings=again) == (files, errors)


def test_relist_gives_the_listing_a_walk_records(tmp_path: Path) -> None:
    """yamlio.relist (an incremental scan's check of a changed directory) gives, for every
    directory, what a walk records for it, and None exactly where the walk records nothing: a
    symlink or a special file among what it reads. Files of other suffixes, hidden directories
    and a FIFO without a YAML suffix are not part of a listing."""
    root = tmp_path / "repo"
    for rel in [
        "a/x.yaml",
        "a/B.YML",
        "a/b/y.yml",
        "a/b/c/z.json",
        "d/w.yaml",
        "d/notes.txt",
        "e/.hidden/h.yaml",
    ]:
        _touch(root / rel)
    (root / "e" / "empty").mkdir()
    (root / "e" / ".git").mkdir()
    os.mkfifo(root / "d" / "pipe")  # no suffix: not read, so not in the way
    (root / "links").mkdir()
    (root / "links" / "to-a").symlink_to("../a", target_is_directory=True)
    (root / "special").mkdir()
    os.mkfifo(root / "special" / "pipe.yaml")
    age_tree(root)
    listings = yamlio.Listings({}, disk_now_ns(tmp_path))
    discover([root], listings=listings)
    directories = {str(p.resolve()) for p in [root, *root.rglob("*")] if p.is_dir() and not p.is_symlink()}
    directories -= {str((root / "e" / d).resolve()) for d in (".hidden", ".git")}
    assert listings.visited == len(directories)
    for directory in directories:
        assert yamlio.relist(directory) == listings.found.get(directory), directory
    assert yamlio.relist(str(root / "links")) is None and yamlio.relist(str(root / "special")) is None
    assert yamlio.relist(str(root / "missing")) is None
    assert listings.visited == len(listings.found) + 2  # links/ and special/: walked, not recorded
