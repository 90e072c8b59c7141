"""The one place the auditor turns YAML (and JSON) files into Python data.

Everything that reads manifests goes through here so that every input gets the same treatment:

* safe loading only (no ``!!python/...`` tags), with Kubernetes' YAML-to-JSON reading of
  scalars (timestamps stay strings, YAML 1.1 booleans and integers as PyYAML gives them);
* mappings and sequences that remember their line numbers (:class:`YamlMap`, :class:`YamlSeq`),
  so findings can point at the line that caused them;
* one broken document costs one :class:`LoadError`, not the whole file;
* hostile input (alias bombs, absurd nesting, huge or binary files, symlinks out of the scanned
  tree) is refused with an error entry before it can exhaust memory, time or the C stack.
"""

from __future__ import annotations

import math
import operator
import os
import re
import stat
import sys
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    CollectionStartEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from auditor import parallel
from auditor.model.source import LoadError, SourceRef
from auditor.model.values import value

if TYPE_CHECKING:
    from auditor.cache import DocumentCache

__all__ = [
    "Document",
    "YamlLimits",
    "YamlMap",
    "YamlSeq",
    "discover_files",
    "key_line",
    "line_of",
    "load_file",
    "load_paths",
    "load_text",
]


LOADER_VERSION = "1"
"""Bump whenever what the loader returns for the same bytes changes (values, containers, lines,
error messages): cached results (auditor.cache) of another version are never used."""


@dataclass(frozen=True, slots=True)
class YamlLimits:
    """Ceilings that keep one hostile or broken input from taking the whole scan down.

    Exceeding a limit turns the file or document into a :class:`LoadError`; nothing is truncated
    silently.
    """

    max_file_bytes: int = 16 * 1024 * 1024
    """Bytes per file (default 16 MiB). Checked with ``stat()`` before reading, so a huge file
    costs nothing. Real manifests, even big CRD bundles, are a few MiB at most."""

    max_depth: int = 100
    """Nesting levels of mappings and sequences (default 100), counted both as written and
    after alias expansion. Kubernetes objects rarely go past 20; the limit exists because the
    composer and every recursive walker downstream would otherwise hit the C or Python stack."""

    max_nodes: int = 1_000_000
    """Nodes per document after alias expansion (default one million). This is the alias-bomb
    ("billion laughs") guard: a few hundred bytes of anchors can describe 10**9 nodes, which
    anything that walks the data (including JSON output) would try to visit."""

    max_documents: int = 10_000
    """Documents per file (default 10,000). Guards against files that are mostly ``---``
    separators; documents past the limit are skipped with one error."""


class YamlMap(dict[str, Any]):
    """A YAML mapping that remembers where it was written.

    ``line`` is the 1-based line where the mapping starts (its first key for block mappings,
    the ``{`` for flow mappings); ``key_lines`` gives the 1-based line of each key. A mapping
    reached through an alias carries the lines of the anchored original.
    """

    __slots__ = ("key_lines", "line")

    def __init__(self, items: Mapping[str, Any] | None = None, *, line: int = 0) -> None:
        super().__init__(items or {})
        self.line: int = line
        self.key_lines: dict[str, int] = {}


class YamlSeq(list[Any]):
    """A YAML sequence that remembers where it was written (``line``) and where each item is
    (``item_lines``, 1-based, parallel to the items)."""

    __slots__ = ("item_lines", "line")

    def __init__(self, items: Sequence[Any] = (), *, line: int = 0) -> None:
        super().__init__(items)
        self.line: int = line
        self.item_lines: list[int] = []


def line_of(obj: object, default: int = 0) -> int:
    """The 1-based line where a loaded mapping or sequence starts, or ``default`` for anything
    else (scalars carry no location)."""
    if isinstance(obj, YamlMap | YamlSeq) and obj.line:
        return obj.line
    return default


def key_line(obj: object, key: str, default: int = 0) -> int:
    """The 1-based line of ``key`` in a loaded mapping; falls back to ``default``."""
    if isinstance(obj, YamlMap):
        return obj.key_lines.get(key, default)
    return default


@value(frozen=True)
class Document:
    """One non-empty YAML document: its data and where it starts (line of its content, 0-based
    index of the document within the file)."""

    data: Any
    source: SourceRef


# --------------------------------------------------------------------------------------------
# Loader classes


_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_VALUE_TAG = "tag:yaml.org,2002:value"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_STR_TAG = "tag:yaml.org,2002:str"


class _Resolver(Resolver):
    """PyYAML's resolver minus the implicit types Kubernetes reads as plain strings.

    The tag of a plain scalar depends on its text alone (we register no path resolvers), and
    manifests repeat the same few thousand keys and values, so tags are memoised: resolving
    was a quarter of the loading time.
    """

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is ScalarNode:
            if not implicit[0]:
                return self.DEFAULT_SCALAR_TAG
            tag = _PLAIN_TAGS.get(value)
            if tag is None:
                tag = super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
                if len(_PLAIN_TAGS) < _PLAIN_TAGS_MAX and len(value) <= 256:
                    _PLAIN_TAGS[value] = tag
            return tag
        return super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]

    def descend_resolver(self, current_node: Any, current_index: Any) -> None:
        pass  # no path resolvers

    def ascend_resolver(self) -> None:
        pass


_PLAIN_TAGS: dict[str, str] = {}
_PLAIN_TAGS_MAX = 1 << 16


# Kubernetes converts YAML to JSON, where `2024-01-01` stays a string; and `=` is a string to
# Go's YAML too (PyYAML would resolve it to a tag it then cannot construct). Done on our own
# subclass so other users of PyYAML in the process keep their behaviour.
_Resolver.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_TIMESTAMP_TAG, _VALUE_TAG)]
    for first, resolvers in Resolver.yaml_implicit_resolvers.items()
}


class _DocError(Exception):
    """A problem in one document, already located (absolute 1-based line)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


class _Constructor(SafeConstructor):
    """SafeConstructor that builds located containers and refuses keys JSON cannot hold."""

    def __init__(self) -> None:
        super().__init__()
        # Documents are parsed one at a time from slices of the file; marks are relative to
        # the slice, so every line we report is shifted by where the slice started.
        self.line_offset = 0
        self._pairs_memo: dict[int, list[tuple[Node, Node]]] = {}

    def _line(self, node: Node) -> int:
        return _node_line(node, self.line_offset)

    def construct_located_map(self, node: MappingNode) -> Iterator[YamlMap]:
        data = YamlMap(line=self._line(node))
        # Yield before filling so aliases to this mapping resolve to the same object (PyYAML's
        # two-step construction); recursion itself was already refused by _measure.
        yield data
        for key_node, value_node in self._pairs(node):
            key = self._key(key_node)
            data[key] = self.construct_object(value_node, deep=False)
            data.key_lines[key] = self._line(key_node)

    def construct_located_seq(self, node: SequenceNode) -> Iterator[YamlSeq]:
        data = YamlSeq(line=self._line(node))
        yield data
        for child in node.value:
            data.append(self.construct_object(child, deep=False))
            data.item_lines.append(self._line(child))

    def _pairs(self, node: MappingNode) -> list[tuple[Node, Node]]:
        """The mapping's key/value nodes with `<<` merges expanded (explicit keys last, so they
        win). Unlike SafeConstructor.flatten_mapping this never mutates nodes: an anchored
        mapping that is merged elsewhere must still be checked for duplicates as written."""
        cached = self._pairs_memo.get(id(node))
        if cached is not None:
            return cached
        merged: list[tuple[Node, Node]] = []
        explicit: list[tuple[Node, Node]] = []
        first_seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merged.extend(self._merge_source(value_node, self._line(key_node)))
                continue
            key = self._key(key_node)
            line = self._line(key_node)
            if key in first_seen:
                raise _DocError(
                    line, f"duplicate key {key!r} in one mapping (first at line {first_seen[key]})"
                )
            first_seen[key] = line
            explicit.append((key_node, value_node))
        pairs = merged + explicit
        self._pairs_memo[id(node)] = pairs
        return pairs

    def _merge_source(self, value_node: Node, line: int) -> list[tuple[Node, Node]]:
        if isinstance(value_node, MappingNode):
            return self._pairs(value_node)
        if isinstance(value_node, SequenceNode):
            parts: list[list[tuple[Node, Node]]] = []
            for sub in value_node.value:
                if not isinstance(sub, MappingNode):
                    raise _DocError(line, "merge key '<<' must be given a mapping or a list of mappings")
                parts.append(self._pairs(sub))
            # YAML merge semantics: earlier mappings in the list take precedence, so they go last.
            return [pair for part in reversed(parts) for pair in part]
        raise _DocError(line, "merge key '<<' must be given a mapping or a list of mappings")

    def _key(self, key_node: Node) -> str:
        line = self._line(key_node)
        if not isinstance(key_node, ScalarNode):
            kind = "mapping" if isinstance(key_node, MappingNode) else "sequence"
            raise _DocError(
                line,
                f"a {kind} is used as a mapping key; keys must be scalars "
                "(an unrendered template such as '{{ ... }}'?)",
            )
        value = self.construct_object(key_node, deep=True)
        # Same key conversions as sigs.k8s.io/yaml's YAML-to-JSON step.
        if isinstance(value, str):
            return value
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int):
            return str(value)
        if isinstance(value, float):
            if math.isnan(value):
                return ".nan"
            if math.isinf(value):
                return ".inf" if value > 0 else "-.inf"
            return repr(value)
        what = "null" if value is None else f"of type {type(value).__name__}"
        raise _DocError(line, f"mapping key {key_node.value!r} is {what}; keys must be strings")


_Constructor.yaml_constructors = {
    **SafeConstructor.yaml_constructors,
    _MAP_TAG: _Constructor.construct_located_map,
    _SEQ_TAG: _Constructor.construct_located_seq,
}


class _PyLoader(Reader, Scanner, Parser, Composer, _Constructor, _Resolver):
    """Pure-Python loader, used when PyYAML was built without libyaml."""

    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        _Constructor.__init__(self)
        _Resolver.__init__(self)


if yaml.__with_libyaml__:
    from yaml._yaml import CParser

    class _CLoader(CParser, _Constructor, _Resolver):
        """libyaml-backed loader: the same constructor and resolver, parsing in C."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            _Constructor.__init__(self)
            _Resolver.__init__(self)

    _LOADER_CLASS: type[_PyLoader] | type[_CLoader] = _CLoader
    _C_LOADER: type[Any] | None = _CLoader
    _LIBYAML_VERSION = tuple(int(p) for p in yaml._yaml.get_version_string().split(".")[:3])
else:
    _LOADER_CLASS = _PyLoader
    _C_LOADER = None
    _LIBYAML_VERSION = (0, 0, 0)
# libyaml 0.2.6 added YAML_MAX_NESTING_LEVEL (1000) to its parser.
_PARSER_BOUNDS_NESTING = _LIBYAML_VERSION >= (0, 2, 6)


# --------------------------------------------------------------------------------------------
# Splitting a stream into documents

# YAML line breaks (YAML 1.1, which both PyYAML and libyaml follow): line numbers must be
# counted exactly as the parser counts them or every reported line drifts.
_BREAK_CHARS = "\r\n\x85\u2028\u2029"
_BREAK_RE = re.compile(r"\r\n|[\r\n\x85\u2028\u2029]")
# The line-start condition is checked by hand: a lookbehind in front of the literal would
# defeat the regex engine's fast literal scan (seconds on a 50 MB document).
_MARKER_RE = re.compile(r"(---|\.\.\.)(?=[ \t\r\n\x85\u2028\u2029]|\Z)")
# A line with something other than blanks, a comment or a directive.
_CONTENT_RE = re.compile(r"(?:\A|(?<=[\r\n\x85\u2028\u2029]))[ \t\ufeff]*[^ \t\ufeff#%\r\n\x85\u2028\u2029]")
# Same set PyYAML's reader rejects; checked ourselves to report the exact line.
_NON_PRINTABLE_RE = re.compile("[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _count_breaks(text: str, start: int, end: int) -> int:
    return (
        text.count("\n", start, end)
        + text.count("\r", start, end)
        - text.count("\r\n", start, end)
        + text.count("\x85", start, end)
        + text.count("\u2028", start, end)
        + text.count("\u2029", start, end)
    )


class _Chunk(NamedTuple):
    start: int
    end: int
    line: int  # 0-based line of `start`


def _split_documents(text: str) -> list[_Chunk]:
    """Cut the stream at column-0 `---` and `...` markers.

    Per the YAML spec such lines cannot occur inside a document's content, so cutting there is
    exact, and lets a syntax error in one document leave its neighbours readable. Comments and
    directives before a `---` stay with the document that follows.
    """
    if "---" not in text and "..." not in text:
        # No marker at all (most files): one document, if any; the same as the loop below finds.
        return [_Chunk(0, len(text), 0)] if _CONTENT_RE.search(text) is not None else []
    chunks: list[_Chunk] = []
    start = start_line = 0
    cursor = cursor_line = 0
    has_marker = False

    def content(a: int, b: int) -> bool:
        return _CONTENT_RE.search(text, a, b) is not None

    for match in _MARKER_RE.finditer(text):
        pos = match.start()
        if pos < start or (pos > 0 and text[pos - 1] not in _BREAK_CHARS):
            continue
        cursor_line += _count_breaks(text, cursor, pos)
        cursor = pos
        if match.group(1) == "---":
            if has_marker or content(start, pos):
                chunks.append(_Chunk(start, pos, start_line))
                start, start_line = pos, cursor_line
            has_marker = True
            continue
        line_end = _BREAK_RE.search(text, match.end())
        end = line_end.end() if line_end else len(text)
        if has_marker or content(start, pos):
            chunks.append(_Chunk(start, end, start_line))
        cursor_line += 1 if line_end else 0
        cursor = start = end
        start_line = cursor_line
        has_marker = False
    if has_marker or content(start, len(text)):
        chunks.append(_Chunk(start, len(text), start_line))
    return chunks


# --------------------------------------------------------------------------------------------
# Guards


def _prescan(chunk: str, line_offset: int, limits: YamlLimits) -> int:
    """Walk the event stream without building anything; returns the number of aliases.

    This must run before composing: the composer recurses once per nesting level (in C for
    libyaml), so a 100,000-deep document would crash the interpreter there. Events come from a
    state machine with an explicit stack, so reading them is safe at any depth.
    """
    loader = _LOADER_CLASS(chunk)
    depth = nodes = aliases = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, CollectionStartEvent):
                depth += 1
                nodes += 1
                if depth > limits.max_depth:
                    raise _DocError(
                        _event_line(event, line_offset),
                        f"nesting is deeper than {limits.max_depth} levels (limit max_depth); "
                        "document skipped",
                    )
            elif isinstance(event, CollectionEndEvent):
                depth -= 1
            elif isinstance(event, ScalarEvent):
                nodes += 1
            elif isinstance(event, AliasEvent):
                nodes += 1
                aliases += 1
            if nodes > limits.max_nodes:
                raise _DocError(
                    _event_line(event, line_offset),
                    f"document has more than {limits.max_nodes} nodes (limit max_nodes); document skipped",
                )
    finally:
        loader.dispose()
    return aliases


def _node_line(node: Node, line_offset: int) -> int:
    """Absolute 1-based line of a node parsed from a slice starting at 0-based `line_offset`."""
    mark = node.start_mark
    return int(mark.line) + 1 + line_offset if mark is not None else line_offset + 1


def _event_line(event: object, line_offset: int) -> int:
    mark = getattr(event, "start_mark", None)
    return int(mark.line) + 1 + line_offset if mark is not None else line_offset + 1


def _measure(root: Node, line_offset: int, limits: YamlLimits) -> None:
    """Refuse documents whose alias-expanded size or depth is over the limits, or that refer
    to themselves.

    Sizes are memoised per node object: an alias is the same node object as its anchor, so
    each distinct node is visited once and a billion-laughs document costs a few dozen steps.
    Iterative, because the expanded depth is not bounded by the written depth.
    """
    memo: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, expanded height)
    open_nodes: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]

    def children(node: Node) -> list[Node]:
        if isinstance(node, SequenceNode):
            return list(node.value)
        if isinstance(node, MappingNode):
            return [n for pair in node.value for n in pair]
        return []

    while stack:
        node, done = stack.pop()
        nid = id(node)
        if done:
            open_nodes.discard(nid)
            size, height = 1, 0
            for child in children(node):
                child_size, child_height = memo[id(child)]
                size += child_size
                height = max(height, child_height)
            height += 1
            if size > limits.max_nodes:
                raise _DocError(
                    _node_line(node, line_offset),
                    f"document expands to more than {limits.max_nodes} nodes through aliases "
                    "(limit max_nodes; an alias bomb?); document skipped",
                )
            if height > limits.max_depth:
                raise _DocError(
                    _node_line(node, line_offset),
                    f"nesting is deeper than {limits.max_depth} levels after alias expansion "
                    "(limit max_depth); document skipped",
                )
            memo[nid] = (size, height)
            continue
        if nid in memo:
            continue
        if nid in open_nodes:
            raise _DocError(
                _node_line(node, line_offset), "an alias refers to a node that contains it (recursive anchor)"
            )
        if isinstance(node, ScalarNode):
            memo[nid] = (1, 0)
            continue
        open_nodes.add(nid)
        stack.append((node, True))
        for child in children(node):
            if id(child) not in memo:
                stack.append((child, False))


class _NeedsFullConstructor(Exception):
    """The fast path met a merge key or a non-core collection tag: use _Constructor."""


def _construct_plain(ctor: _Constructor, root: Node, limits: YamlLimits | None = None) -> Any:
    """Build an alias-free document as _Constructor would, without PyYAML's per-node machinery.

    Big manifests (a PodList of thousands of pods) are mostly mappings and plain strings; walking
    the node tree with an explicit queue and converting only non-string scalars through the
    constructor is several times faster and cannot recurse. Same containers, lines, key
    conversions and duplicate-key errors as the full constructor (tests compare the two).
    With `limits`, it also enforces the depth and node limits (alias-free: written = expanded).
    """
    offset = ctor.line_offset
    max_depth = limits.max_depth if limits is not None else None
    max_nodes = limits.max_nodes if limits is not None else None
    nodes = 1

    def make(node: Node) -> tuple[Any, Node | None]:
        if isinstance(node, ScalarNode):
            return (node.value if node.tag == _STR_TAG else ctor.construct_object(node, deep=True)), None
        if isinstance(node, MappingNode) and node.tag == _MAP_TAG:
            return YamlMap(line=_node_line(node, offset)), node
        if isinstance(node, SequenceNode) and node.tag == _SEQ_TAG:
            return YamlSeq(line=_node_line(node, offset)), node
        raise _NeedsFullConstructor

    result, pending = make(root)
    # First in, first out: the order in which the full constructor resumes its generators, so the
    # first error reported is the same one.
    queue: deque[tuple[Any, Node, int]] = deque([(result, pending, 1)] if pending is not None else [])
    while queue:
        container, node, depth = queue.popleft()
        if max_depth is not None and depth > max_depth:
            raise _DocError(
                _node_line(node, offset),
                f"nesting is deeper than {max_depth} levels (limit max_depth); document skipped",
            )
        if max_nodes is not None:
            nodes += len(node.value)
            if nodes > max_nodes:
                raise _DocError(
                    _node_line(node, offset),
                    f"document has more than {max_nodes} nodes (limit max_nodes); document skipped",
                )
        if isinstance(container, YamlMap):
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE_TAG:
                    raise _NeedsFullConstructor
                key = (
                    key_node.value
                    if (isinstance(key_node, ScalarNode) and key_node.tag == _STR_TAG)
                    else (ctor._key(key_node))
                )
                line = _node_line(key_node, offset)
                if key in container:
                    raise _DocError(
                        line,
                        f"duplicate key {key!r} in one mapping (first at line {container.key_lines[key]})",
                    )
                value, child = make(value_node)
                container[key] = value
                container.key_lines[key] = line
                if child is not None:
                    queue.append((value, child, depth + 1))
        else:
            for item in node.value:
                value, child = make(item)
                container.append(value)
                container.item_lines.append(_node_line(item, offset))
                if child is not None:
                    queue.append((value, child, depth + 1))
    return result


_EMPTY = object()  # the root of a document whose stream held no document at all
_NEEDS_FULL = object()
_SCALAR_MEMO_MAX = 1 << 14
_SCALAR_MEMO: dict[tuple[str, str], Any] = {}  # (tag, text) → an immutable constructed value


def _from_events(loader: Any, line_offset: int, limits: YamlLimits) -> tuple[Any, int]:
    """The document built straight from libyaml's events, without composing a node tree: (data,
    line of its root), or `_EMPTY` when the stream has no document.

    For the common case only: untagged mappings and sequences, plain or quoted scalars, string keys,
    no anchors or aliases, no duplicate keys, within the limits. Anything else raises
    _NeedsFullConstructor and the caller composes the document as before, so every unusual input
    (and every error message) goes through the one full path. Same containers and lines as
    _construct_plain (tests compare the two on every document they have).
    """
    get_event = loader.get_event
    resolve = loader.resolve
    tags = _PLAIN_TAGS
    scalar = _scalar_value
    scalar_event, mapping_start, sequence_start = ScalarEvent, MappingStartEvent, SequenceStartEvent
    new_map, new_seq = dict.__new__, list.__new__
    get_event()  # StreamStartEvent
    event = get_event()
    if not isinstance(event, DocumentStartEvent):
        return _EMPTY, 0
    max_depth, max_nodes = limits.max_depth, limits.max_nodes
    offset = line_offset + 1
    stack: list[tuple[Any, bool, Any, int]] = []
    container: Any = None
    is_map = False
    key: Any = None
    key_line = 0
    root: Any = None
    root_line = 0
    nodes = 0
    while True:
        event = get_event()
        cls = event.__class__
        new: Any = None
        if cls is scalar_event:
            if event.anchor is not None:
                raise _NeedsFullConstructor
            value = event.value
            if event.tag is not None and event.tag != "!":
                raise _NeedsFullConstructor  # an explicit tag (!!binary, !!str 1, a custom one)
            implicit = event.implicit
            tag = (tags.get(value) or resolve(ScalarNode, value, implicit)) if implicit[0] else _STR_TAG
            if tag != _STR_TAG:
                if is_map and key is None:
                    raise _NeedsFullConstructor  # a key JSON must convert (1, true, ~) or a merge
                try:
                    value = scalar(tag, value)  # as the C walk constructs it
                except MemoryError:
                    raise
                except Exception:
                    raise _NeedsFullConstructor from None  # the full path reports it, at its line
            # A mapping's value (a key is waiting): its line is never read.
            line = 0 if key is not None else event.start_mark.line + offset
        elif cls is mapping_start or cls is sequence_start:
            if event.anchor is not None or (event.tag is not None and event.tag != "!"):
                raise _NeedsFullConstructor
            if is_map and key is None:
                raise _NeedsFullConstructor  # a mapping or sequence used as a key
            line = event.start_mark.line + offset
            # Built without their Python __init__ (one call less per container, 300,000 in a
            # large repository); the same attributes as YamlMap(line=...) / YamlSeq(line=...).
            if cls is mapping_start:
                value = new = new_map(YamlMap)
                new.key_lines = {}
            else:
                value = new = new_seq(YamlSeq)
                new.item_lines = []
            new.line = line
            if len(stack) + 1 > max_depth:
                raise _NeedsFullConstructor  # the full path reports it, at its line
        elif cls is MappingEndEvent or cls is SequenceEndEvent:
            container, is_map, key, key_line = stack.pop()
            if container is None:
                break
            continue
        else:  # an alias, or anything unforeseen
            raise _NeedsFullConstructor
        if is_map and key is None:
            if value in container:
                raise _NeedsFullConstructor  # a duplicate key: reported by the full path
            key, key_line = value, line
            continue
        # Counted as the composed path counts (one node per mapping entry or sequence item, keys
        # not apart), so a document that path accepts is not read here twice.
        nodes += 1
        if nodes > max_nodes:
            raise _NeedsFullConstructor
        if container is None:
            root, root_line = value, line
        elif is_map:
            container[key] = value
            container.key_lines[key] = key_line
            key = None
        else:
            container.append(value)
            container.item_lines.append(line)
        if new is not None:
            stack.append((container, is_map, key, key_line))
            container, is_map, key = new, cls is mapping_start, None
        elif container is None:
            break  # a scalar document
    if not isinstance(get_event(), DocumentEndEvent) or not isinstance(get_event(), StreamEndEvent):
        raise _NeedsFullConstructor  # more than one document: the composer says so
    return root, root_line


# The same walk in C, when the extension was built (setup.py; optional: without a compiler or
# libyaml's headers the package installs without it and _from_events does the work).
_fastyaml: ModuleType | None
try:
    from auditor import _fastyaml
except ImportError:  # pragma: no cover - depends on the build
    _fastyaml = None

_SCALAR_RESOLVER = _Resolver()
_SCALAR_CONSTRUCTOR = _Constructor()


def _resolve_plain(value: str) -> Any:
    """The tag of a plain scalar, as the loader's resolver gives it (memoised in _PLAIN_TAGS)."""
    return _SCALAR_RESOLVER.resolve(ScalarNode, value, (True, False))


def _scalar_value(tag: str, value: str) -> Any:
    """A plain scalar of a non-string tag, constructed by the loader's constructor and memoised:
    the one place both event walks (the C one and _from_events) make such values."""
    found = _SCALAR_MEMO.get((tag, value), _EMPTY)
    if found is _EMPTY:
        ctor = _SCALAR_CONSTRUCTOR
        try:
            found = ctor.construct_object(ScalarNode(tag, value, None, None, ""), deep=True)
        finally:
            ctor.constructed_objects.clear()
            ctor.recursive_objects.clear()
        if len(_SCALAR_MEMO) < _SCALAR_MEMO_MAX and isinstance(found, int | float | bool | None):
            _SCALAR_MEMO[(tag, value)] = found
    return found


# --------------------------------------------------------------------------------------------
# Loading


def _yaml_error(exc: yaml.YAMLError, file: str, line_offset: int) -> LoadError:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        line = int(mark.line) + 1 + line_offset if mark is not None else line_offset + 1
        message = f"invalid YAML: {exc.problem or exc.context or 'syntax error'}"
        if mark is not None:
            message += f" (column {int(mark.column) + 1})"
        if exc.problem and exc.context and exc.context_mark is not None:
            message += f", {exc.context} at line {int(exc.context_mark.line) + 1 + line_offset}"
        return LoadError(file, line, message)
    return LoadError(file, line_offset + 1, f"invalid YAML: {exc}")


def _load_document(
    chunk: str, line_offset: int, file: str, index: int, limits: YamlLimits
) -> Document | LoadError | None:
    """One document, or its error, or None when it is empty."""
    try:
        # libyaml ≥ 0.2.6 refuses nesting over 1,000 levels while parsing, so its recursive
        # composer cannot exhaust the C stack; then the limits are checked on the composed tree
        # (one pass less). The pure-Python parser still needs the event pre-scan.
        prescanned = not _PARSER_BOUNDS_NESTING or _LOADER_CLASS is not _C_LOADER
        # A byte-order mark inside a document goes down the full path: the C extension links the
        # system's libyaml, whose BOM handling differs between versions from the one PyYAML bundles
        # (0.2.5 reads "\ufeff..." after a document end as the scalar "...", 0.2.6 refuses it;
        # found by tests/fuzz). Rare, and the full path is the reference.
        if not prescanned and _fastyaml is not None and "\ufeff" not in chunk:
            # The common case in C (auditor/_fastyaml.c): _from_events without Python events.
            # First, before the character check below: libyaml refuses exactly the characters
            # _NON_PRINTABLE_RE finds (its reader's set), so what it builds has none of them,
            # and what it refuses comes back here (None) to be checked and reported.
            built = _fastyaml.build(
                chunk,
                line_offset,
                limits.max_depth,
                limits.max_nodes,
                _PLAIN_TAGS,
                _resolve_plain,
                _scalar_value,
                Resolver.DEFAULT_SCALAR_TAG,
                YamlMap,
                YamlSeq,
            )
            if built is False:
                return None
            if built is not None:
                data, root_line = built
                return None if data is None else Document(data, SourceRef(file, root_line, index))
        bad = _NON_PRINTABLE_RE.search(chunk)
        if bad is not None:
            return LoadError(
                file,
                line_offset + 1 + _count_breaks(chunk, 0, bad.start()),
                f"invalid YAML: character U+{ord(bad.group()):04X} is not allowed in YAML",
            )
        aliases = _prescan(chunk, line_offset, limits) if prescanned else int("*" in chunk)
        if not prescanned and _fastyaml is None:
            # The common case, straight from the events (about an eighth faster than composing);
            # an anchor, alias, tag, odd key or limit sends the document down the full path.
            loader = _LOADER_CLASS(chunk)
            try:
                loader.line_offset = line_offset
                data, root_line = _from_events(loader, line_offset, limits)
            except _NeedsFullConstructor:
                data = _NEEDS_FULL
            finally:
                loader.dispose()
            if data is not _NEEDS_FULL:
                if data is _EMPTY or data is None:
                    return None
                return Document(data, SourceRef(file, root_line, index))
        loader = _LOADER_CLASS(chunk)
        try:
            loader.line_offset = line_offset
            node = loader.get_single_node()
            if node is None:
                return None
            # Without aliases the pre-scan's count and depth already are the expanded ones.
            if aliases:
                _measure(node, line_offset, limits)
                data = loader.construct_document(node)
            else:
                try:
                    data = _construct_plain(loader, node, None if prescanned else limits)
                except _NeedsFullConstructor:
                    if not prescanned:
                        _measure(node, line_offset, limits)
                    data = loader.construct_document(node)
        finally:
            loader.dispose()
        if data is None:
            return None
        return Document(data, SourceRef(file, _node_line(node, line_offset), index))
    except _DocError as exc:
        return LoadError(file, exc.line, exc.message)
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(exc):
            # libyaml stopped at its own 1,000-level cap: report our limit, at the line where
            # the document first went past it (the event pre-scan finds it without recursing).
            try:
                _prescan(chunk, line_offset, limits)
            except _DocError as deep:
                return LoadError(file, deep.line, deep.message)
            except yaml.YAMLError:
                pass  # libyaml's look-ahead hit the cap first: its own error says where
        return _yaml_error(exc, file, line_offset)
    except MemoryError:
        raise
    except RecursionError:
        return LoadError(file, line_offset + 1, "document is nested too deeply to read; skipped")
    except Exception as exc:
        # A bug or an input we did not foresee must cost one document, not the scan.
        return LoadError(file, line_offset + 1, f"could not read document: {type(exc).__name__}: {exc}")


def load_text(
    text: str, file: str, limits: YamlLimits = YamlLimits()
) -> tuple[list[Document], list[LoadError]]:
    """Load every document of a YAML (or JSON) text.

    Returns the non-empty documents in order and one error per document that could not be
    read; a broken document does not stop the others. ``file`` is only used for locations.
    Only MemoryError escapes.
    """
    documents: list[Document] = []
    errors: list[LoadError] = []
    try:
        if len(text) > limits.max_file_bytes:
            # Characters never outnumber UTF-8 bytes, so this is never stricter than load_file.
            msg = f"text is {len(text)} characters, over the limit of {limits.max_file_bytes} bytes, skipped"
            return [], [LoadError(file, 0, msg)]
        text = text.removeprefix("\ufeff")
        for index, chunk in enumerate(_split_documents(text)):
            if index >= limits.max_documents:
                errors.append(
                    LoadError(
                        file,
                        chunk.line + 1,
                        f"more than {limits.max_documents} documents (limit max_documents); "
                        "the rest of the file was skipped",
                    )
                )
                break
            result = _load_document(text[chunk.start : chunk.end], chunk.line, file, index, limits)
            if isinstance(result, Document):
                documents.append(result)
            elif isinstance(result, LoadError):
                errors.append(result)
    except MemoryError:
        raise
    except Exception as exc:
        errors.append(LoadError(file, 0, f"could not read YAML: {type(exc).__name__}: {exc}"))
    return documents, errors


def load_file(
    path: Path | str, display_name: str, limits: YamlLimits = YamlLimits()
) -> tuple[list[Document], list[LoadError]]:
    """Read and load one file. Errors and sources name it ``display_name``.

    The size is checked before reading; binary and non-UTF-8 files are skipped with an error.
    """
    raw = _read_file(path, display_name, limits)
    return raw if isinstance(raw, tuple) else _load_bytes(raw, display_name, limits)


_Loaded = tuple[list[Document], list[LoadError]]


# O_NONBLOCK: opening a FIFO (a file swapped for one, say) must not wait for a writer; it
# changes nothing for a regular file.
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)


def _read_file(path: Path | str, display_name: str, limits: YamlLimits) -> bytes | _Loaded:
    """The file's bytes, or the result for a file that is not read (missing, too big, binary).

    Opened first and checked on the open file (one path look-up, not two; and what is read is
    what was checked); a FIFO is refused as not a regular file (see _READ_FLAGS).
    """
    where = os.fspath(path)
    try:
        fd = os.open(where, _READ_FLAGS)
    except OSError as exc:
        try:
            regular = stat.S_ISREG(os.stat(where).st_mode)  # noqa: PTH116
        except OSError:
            regular = True  # missing or unreadable: its own error says so
        if not regular:  # e.g. a socket, which cannot be opened at all
            return [], [LoadError(display_name, 0, "not a regular file, skipped")]
        return [], [LoadError(display_name, 0, f"cannot read file: {exc.strerror or exc}")]
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return [], [LoadError(display_name, 0, "not a regular file, skipped")]
        if st.st_size > limits.max_file_bytes:
            msg = f"file is {st.st_size} bytes, over the limit of {limits.max_file_bytes} bytes, skipped"
            return [], [LoadError(display_name, 0, msg)]
        raw = _read_fd(fd, limits.max_file_bytes, st.st_size)
    except OSError as exc:
        return [], [LoadError(display_name, 0, f"cannot read file: {exc.strerror or exc}")]
    finally:
        os.close(fd)
    problem = _byte_problem(raw, display_name, limits)
    return raw if problem is None else problem


def read_capped(where: str, limit: int, size: int) -> bytes:
    """The file's bytes, at most `limit` + 1 of them (one over says it is over the limit).

    `size` is what a stat said; the file is not trusted to have kept it (it may have grown since),
    but it sizes the first read: asking for the limit allocated 16 MiB per file, however small.
    """
    fd = os.open(where, _READ_FLAGS)
    try:
        return _read_fd(fd, limit, size)
    finally:
        os.close(fd)


def _read_fd(fd: int, limit: int, size: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    want = min(max(size, 0), limit) + 1
    while total <= limit:
        chunk = os.read(fd, min(want, limit + 1 - total))
        if not chunk:
            break
        parts.append(chunk)
        total += len(chunk)
        want = 1 << 20  # it grew past the stat: the rest in steps
    return parts[0] if len(parts) == 1 else b"".join(parts)


def load_bytes(
    raw: bytes, display_name: str, limits: YamlLimits = YamlLimits()
) -> tuple[list[Document], list[LoadError]]:
    """Load what was read from a file or a stream (``auditor scan -``), with the checks of
    load_file: the size limit (read at most one byte over it), no binary, UTF-8 only."""
    problem = _byte_problem(raw, display_name, limits)
    return _load_bytes(raw, display_name, limits) if problem is None else problem


def _byte_problem(raw: bytes, display_name: str, limits: YamlLimits) -> _Loaded | None:
    if len(raw) > limits.max_file_bytes:
        msg = f"file is over the limit of {limits.max_file_bytes} bytes, skipped"
        return [], [LoadError(display_name, 0, msg)]
    if b"\x00" in raw:
        return [], [LoadError(display_name, 0, "binary or non-UTF-8 file, skipped")]
    return None


def _load_bytes(raw: bytes, display_name: str, limits: YamlLimits) -> _Loaded:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return [], [LoadError(display_name, 0, "binary or non-UTF-8 file, skipped")]
    return load_text(text, display_name, limits)


def versions() -> str:
    """The versions what the loader returns depends on, besides its own (LOADER_VERSION)."""
    libyaml = yaml._yaml.get_version_string() if yaml.__with_libyaml__ else "none"
    fast = _fastyaml.libyaml_version() if _fastyaml is not None else "none"
    return (
        f"PyYAML {yaml.__version__} libyaml {libyaml} _fastyaml libyaml {fast} "
        f"Python {sys.version.split()[0]}"
    )


def _cache_context(limits: YamlLimits) -> str:
    return (
        f"yamlio {LOADER_VERSION} libyaml-parser {_LOADER_CLASS is _C_LOADER} "
        f"{limits.max_file_bytes} {limits.max_depth} {limits.max_nodes} {limits.max_documents}"
    )


# Below this many bytes in all, files are read in this process: starting workers costs more.
PARALLEL_MIN_BYTES = 1 << 20


def _load_chunk(
    job: tuple[Sequence[tuple[Path | str, str]], YamlLimits],
) -> list[tuple[list[Document], list[LoadError]]]:
    files, limits = job
    return [load_file(path, display, limits) for path, display in files]


def _size(path: Path | str) -> int:
    try:
        return os.stat(path).st_size  # noqa: PTH116
    except OSError:
        return 0  # load_file reports it


def _chunks(
    files: Sequence[tuple[Path | str, str]], sizes: Sequence[int], count: int
) -> list[list[tuple[Path | str, str]]]:
    """Contiguous runs of files of about equal bytes (so results come back in file order)."""
    target = sum(sizes) / count
    chunks: list[list[tuple[Path | str, str]]] = [[]]
    filled = 0
    for item, size in zip(files, sizes, strict=True):
        if filled >= target and chunks[-1]:
            chunks.append([])
            filled = 0
        chunks[-1].append(item)
        filled += size
    return chunks


def load_files(
    files: Sequence[tuple[Path | str, str]],
    limits: YamlLimits = YamlLimits(),
    jobs: int | None = None,
    cache: DocumentCache | None = None,
) -> Iterator[tuple[list[Document], list[LoadError]]]:
    """:func:`load_file` for each (path, display name), results in the same order.

    A large input (over PARALLEL_MIN_BYTES still to parse) is parsed by worker processes, one per
    idle CPU unless `jobs` says otherwise (`jobs=1`: all in this process); see auditor.parallel.
    With a `cache`, what was loaded before is read from it (see :func:`_load_cached`). The results
    are the same either way.
    """
    if cache is not None and cache.ready():
        yield from _load_cached(files, limits, jobs, cache)
        return
    yield from _parse_files(files, limits, jobs)


def _parse_files(
    files: Sequence[tuple[Path | str, str]], limits: YamlLimits, jobs: int | None
) -> Iterator[tuple[list[Document], list[LoadError]]]:
    workers = parallel.workers_for(jobs)
    if workers > 1 and len(files) > 1:
        sizes = [_size(path) for path, _ in files]
        if sum(sizes) >= PARALLEL_MIN_BYTES:
            work = [(chunk, limits) for chunk in _chunks(files, sizes, workers * 4)]
            for results in parallel.ordered_map(_load_chunk, work, workers):
                yield from results
            return
    for path, display in files:
        yield load_file(path, display, limits)


_RUN_BOUNDARY = 32
"""A run of cached files ends after a file whose key is 0 modulo this (runs of 32 files on average)."""


def _load_cached(
    files: Sequence[tuple[Path | str, str]], limits: YamlLimits, jobs: int | None, cache: DocumentCache
) -> Iterator[tuple[list[Document], list[LoadError]]]:
    """Files through the cache, stored in *runs*: consecutive files cut where a file's own key
    says so (content-defined, as backup tools chunk a stream), one cache entry per run, keyed by
    its files' keys. Thousands of small files cost a few hundred entries to read and write; an
    edited file changes one run, and an added, deleted or renamed one at most two, because the
    cut points move with the files, not with their positions. Files that are not read (too big,
    binary, unreadable) are in no run. The runs not in the cache are parsed (by workers when
    large) and written."""
    context = _cache_context(limits)
    keys: list[str | None] = []
    for path, display in files:
        raw = _read_file(path, display, limits)
        keys.append(None if isinstance(raw, tuple) else cache.key(raw, context))
    runs: list[list[int]] = [[]]
    for i, key in enumerate(keys):
        if key is None:
            continue
        runs[-1].append(i)
        if int(key[:8], 16) % _RUN_BOUNDARY == 0:
            runs.append([])
    runs = [r for r in runs if r]
    run_keys = [cache.key("".join(keys[i] or "" for i in run).encode(), "run " + context) for run in runs]
    stored = {n for n, key in enumerate(run_keys) if cache.has(key)}
    to_parse = [i for n, run in enumerate(runs) if n not in stored for i in run]
    parsed = _parse_files([files[i] for i in to_parse], limits, jobs)
    results: dict[int, _Loaded] = {}
    run_of = {i: n for n, run in enumerate(runs) for i in run}
    next_parsed = iter(to_parse)
    for i, (path, display) in enumerate(files):
        if keys[i] is None:
            results[i] = load_file(path, display, limits)  # its error again
        elif i not in results:
            n = run_of[i]
            run = runs[n]
            entries = cache.get(run_keys[n]) if n in stored else None
            if entries is not None and [e[0] for e in entries] == [keys[j] for j in run]:
                for j, (_, docs, errs) in zip(run, entries, strict=True):
                    name = files[j][1]
                    results[j] = (
                        [Document(data, SourceRef(name, line, index)) for data, line, index in docs],
                        [LoadError(name, line, message) for line, message in errs],
                    )
                cache.stats.hits += len(run)
            else:
                for j in run:
                    if n in stored:  # listed but unusable: parse here
                        results[j] = load_file(*files[j], limits)
                    else:
                        assert next(next_parsed) == j
                        results[j] = next(parsed)
                cache.stats.misses += len(run)
                cache.put(
                    run_keys[n],
                    [
                        (
                            keys[j] or "",
                            [(d.data, d.source.line, d.source.document) for d in results[j][0]],
                            [(e.line, e.message) for e in results[j][1]],
                        )
                        for j in run
                    ],
                )
        yield results.pop(i)


# --------------------------------------------------------------------------------------------
# Finding files

SUFFIXES = (".yaml", ".yml", ".json")
"""The suffixes of the files a directory walk reads."""


_NAME = operator.attrgetter("name")


def _has_suffix(name: str, suffixes: tuple[str, ...]) -> bool:
    return name.lower().endswith(suffixes)


Listing = tuple[tuple[int, int, int, int], str]
"""A directory's listing as a walk may reuse it: the directory's (mtime_ns, ctime_ns, inode,
device) when it was listed, and its children that a walk descends into or yields — names joined
by NUL, a directory's name ending in "/" — in name order."""


@dataclass
class Listings:
    """Directory listings a walk reuses and records (an incremental scan keeps them in its
    snapshot): a directory whose stat is the one `known` records, older than `trusted_ns`, is
    not listed again. A directory's entries change only with its mtime and ctime (creating,
    removing or renaming a child; a mount shows as another inode or device), and one holding
    a symlink or anything but plain files and directories is never recorded: it is always
    listed, and its symlinks resolved, afresh. The walk puts every listing it used or made in
    `found`, and counts in `visited` the directories it went through: when the two agree, every
    directory of the walk is recorded, and a walk whose listings are all still trusted yields what
    this one yielded (auditor/sources/incremental.py then skips the walk)."""

    known: Mapping[str, Listing]
    trusted_ns: int
    suffixes: tuple[str, ...] = SUFFIXES
    found: dict[str, Listing] = field(default_factory=dict)
    visited: int = 0


def _walk(
    given: Path, root: Path, suffixes: tuple[str, ...], listings: Listings | None = None
) -> tuple[list[tuple[str, str, bool]], list[LoadError], bool]:
    """Files under one directory argument: (real path, path relative to it joined by "/", reached
    via symlink), and whether any symlink was followed. Without symlinks they come in the order of
    their relative paths (a directory's children in name order, each subdirectory's files where
    its name falls).

    Real directories are walked first and symlinked ones afterwards, so a tree that is both
    present and linked to is reported under its real name; `visited` (resolved directories)
    makes symlink loops and repeated links terminate. Paths are plain strings here (joined with
    os.path.join, as pathlib would for these resolved, absolute directories): building three
    Path objects per file was most of the time on a tree of 17,000 files. `listings`: see
    Listings (only for the default suffixes).
    """
    if listings is not None and listings.suffixes != suffixes:
        listings = None
    found: list[tuple[str, str, bool]] = []
    errors: list[LoadError] = []
    visited: set[str] = set()
    # Directories to list and files to yield, popped in order: a directory's children are
    # pushed in reverse name order.
    pending: list[tuple[str, str, bool, bool]] = [(str(root), "", False, True)]
    linked: list[tuple[str, str]] = []
    followed = False

    def error(rel: str, message: str) -> None:
        errors.append(LoadError(str(given.joinpath(rel)), 0, message))

    while pending or linked:
        if pending:
            path, rel, via_link, is_dir = pending.pop()
            if not is_dir:
                found.append((path, rel, via_link))
                continue
        else:
            path, rel = linked.pop(0)
            via_link = True
        directory = path
        if directory in visited:
            continue
        visited.add(directory)
        if listings is not None:
            listings.visited += 1
        # Resolved, absolute, without a trailing separator but for the root itself: joined by hand
        # (os.path.join per entry was a third of listing a tree of 17,000 files).
        prefix = directory if directory.endswith(os.sep) else directory + os.sep
        under = f"{rel}/" if rel else ""
        stamp: tuple[int, int, int, int] | None = None
        if listings is not None:
            try:
                st = os.stat(directory)  # noqa: PTH116 (before listing: a change after it shows)
                stamp = (st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
            except OSError:
                stamp = None
            known = listings.known.get(directory)
            if (
                stamp is not None
                and known is not None
                and known[0] == stamp
                and stamp[0] < listings.trusted_ns
            ):
                listings.found[directory] = known
                if known[1]:
                    for name in reversed(known[1].split("\0")):
                        if name.endswith("/"):
                            name = name[:-1]
                            pending.append((prefix + name, under + name, via_link, True))
                        else:
                            pending.append((prefix + name, under + name, via_link, False))
                continue
        try:
            # scandir's entries carry the file type from the directory listing: no stat per entry
            # for the common case (plain files and directories).
            with os.scandir(directory) as listing:
                children = sorted(listing, key=_NAME)
        except OSError as exc:
            error(rel, f"cannot list directory: {exc.strerror or exc}")
            continue
        kept: list[tuple[str, str, bool, bool]] = []
        recordable = stamp is not None
        for entry in children:
            name = entry.name
            try:
                plain_file = not entry.is_symlink() and not entry.is_dir(follow_symlinks=False)
                if plain_file and not _has_suffix(name, suffixes):
                    continue  # most of a repository: nothing built for it
                child_rel = under + name
                if entry.is_symlink():
                    recordable = False
                    followed = True
                    child = Path(directory, name)
                    try:
                        target = child.resolve(strict=True)
                    except (OSError, RuntimeError):
                        error(child_rel, f"broken symlink (-> {_readlink(child)}), skipped")
                        continue
                    inside = target == root or target.is_relative_to(root)
                    if target.is_dir():
                        if name.startswith("."):
                            continue
                        if not inside:
                            error(child_rel, f"symlink points outside the scanned tree (-> {target})")
                            continue
                        linked.append((str(target), child_rel))
                    elif _has_suffix(name, suffixes):
                        if not inside:
                            error(child_rel, f"symlink points outside the scanned tree (-> {target})")
                        elif target.is_file():
                            kept.append((str(target), child_rel, True, False))
                        else:
                            error(child_rel, "not a regular file, skipped")
                elif entry.is_dir(follow_symlinks=False):
                    if not name.startswith("."):
                        kept.append((prefix + name, child_rel, via_link, True))
                elif _has_suffix(name, suffixes):
                    if entry.is_file(follow_symlinks=False):
                        kept.append((prefix + name, child_rel, via_link, False))
                    else:
                        recordable = False
                        error(child_rel, "not a regular file, skipped")
            except OSError as exc:
                recordable = False
                error(under + name, f"cannot inspect: {exc.strerror or exc}")
        if listings is not None and recordable and stamp is not None:
            # Nothing was reached through a symlink here: each child's path is prefix + name.
            names = "\0".join(c[0][len(prefix) :] + "/" if c[3] else c[0][len(prefix) :] for c in kept)
            listings.found[directory] = (stamp, names)
        # Reversed so the stack pops them in name order.
        pending.extend(reversed(kept))
    return found, errors, followed


def relist(directory: str, suffixes: tuple[str, ...] = SUFFIXES) -> Listing | None:
    """The listing a walk (`_walk` with Listings) would record for `directory` if it listed it
    now, or None where it would record none (a symlink, anything but plain files and directories
    among what it reads, an error). Its stat is taken before it is listed, as the walk does. An
    incremental scan re-lists a changed directory this way to tell whether its entries did (a
    file replaced by a new one changes its directory's times, not its listing)."""
    try:
        st = os.stat(directory)  # noqa: PTH116
        with os.scandir(directory) as listing:
            children = sorted(listing, key=_NAME)
        names: list[str] = []
        for entry in children:
            name = entry.name
            if entry.is_symlink():
                return None
            if entry.is_dir(follow_symlinks=False):
                if not name.startswith("."):
                    names.append(name + "/")
            elif _has_suffix(name, suffixes):
                if not entry.is_file(follow_symlinks=False):
                    return None
                names.append(name)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev), "\0".join(names)


def _display(given: str, tail: str) -> str:
    """str(Path(given) / tail) for a normalised `given` and a relative path of plain names, without
    building paths."""
    if given == ".":
        return tail
    return given + tail if given.endswith("/") else f"{given}/{tail}"


def _readlink(path: Path) -> str:
    try:
        return str(path.readlink())
    except OSError:
        return "?"


def discover_files(
    paths: Sequence[Path], suffixes: tuple[str, ...] = SUFFIXES
) -> tuple[list[tuple[Path, str]], list[LoadError]]:
    """:func:`discover`, real paths as Path objects."""
    found, errors = discover(paths, suffixes)
    return [(Path(real), display) for real, display in found], errors


def discover(
    paths: Sequence[Path], suffixes: tuple[str, ...] = SUFFIXES, listings: Listings | None = None
) -> tuple[list[tuple[str, str]], list[LoadError]]:
    """The files to read for the given paths: (real path to read, display name) pairs, plus
    error entries for paths that are missing, broken, or lead outside the scanned tree.

    The paths returned are resolved. A file argument is taken as given, whatever its suffix.
    A directory argument is walked recursively (hidden directories skipped) for files with one
    of ``suffixes``; display names are the argument joined with the relative path. Symlinks
    inside a walked directory are followed only while they stay inside that directory's
    resolved root. Output is in argument order, then sorted by relative path; a file reached
    twice is listed once (under its non-symlink name when it has one). `listings`: directory
    listings to reuse and record (see Listings).
    """
    results: list[tuple[str, str]] = []
    errors: list[LoadError] = []
    seen: set[str] = set()
    for given in paths:
        name = str(given)
        try:
            if given.is_symlink() and not given.exists():
                errors.append(LoadError(name, 0, f"broken symlink (-> {_readlink(given)})"))
                continue
            if not given.exists():
                errors.append(LoadError(name, 0, "no such file or directory"))
                continue
            if given.is_dir():
                root = given.resolve(strict=True)
                walked, walk_errors, followed = _walk(given, root, suffixes, listings)
                errors.extend(sorted(walk_errors))
                if followed:
                    # A file may be reached twice: kept once, under its real name when it has one.
                    best: dict[str, tuple[bool, tuple[str, ...]]] = {}
                    for real, rel, via_link in walked:
                        # _walk only yields resolved paths: its directories are resolved and a
                        # child that is not a symlink is itself real.
                        candidate = (via_link, tuple(rel.split("/")))
                        if real not in best or candidate < best[real]:
                            best[real] = candidate
                    ordered = [
                        (real, "/".join(parts))
                        for real, (_, parts) in sorted(best.items(), key=lambda i: i[1][1])
                    ]
                else:  # each file once, in the order of the relative paths
                    ordered = [(real, rel) for real, rel, _ in walked]
                for real, rel in ordered:
                    if real not in seen:
                        seen.add(real)
                        results.append((real, _display(name, rel)))
            elif given.is_file():
                key = str(given.resolve())
                if key not in seen:
                    seen.add(key)
                    results.append((key, name))
            else:
                errors.append(LoadError(name, 0, "not a regular file or directory, skipped"))
        except (OSError, RuntimeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            errors.append(LoadError(name, 0, f"cannot read path: {reason}"))
    return results, errors


def load_paths(
    paths: Sequence[Path], limits: YamlLimits = YamlLimits()
) -> tuple[list[Document], list[LoadError]]:
    """Discover and load every YAML/JSON file under ``paths`` (see :func:`discover_files`)."""
    files, errors = discover_files(paths)
    documents: list[Document] = []
    for real, display in files:
        docs, file_errors = load_file(real, display, limits)
        documents.extend(docs)
        errors.extend(file_errors)
    return documents, errors
