"""The one YAML editor: minimal, located edits of one document in a file's text.

Edits are splices at positions PyYAML's composer reports for the nodes of the document, so
everything not edited — comments, key order, quoting, indentation, blank lines, line endings —
stays byte for byte: a scalar replaced, keys inserted at the top of a block mapping, items
appended to a block sequence. What is refused (`EditError`, with a reason a person can act on):
docs/remediation.md, step 3.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

PathPart = str | int
_PLAIN_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
_RESERVED = re.compile(
    r"^(?:y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF|null|Null|NULL|~)$"
)


class EditError(ValueError):
    pass


def newline_of(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def _documents(text: str) -> list[Node]:
    try:
        return list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise EditError(f"the file is not valid YAML: {exc}") from None


def locate(text: str, line: int) -> Node:
    """The root node of the document that holds 1-based `line` (where the loader said it starts)."""
    for node in _documents(text):
        if node.start_mark.line + 1 <= line <= node.end_mark.line + 1:
            return node
    raise EditError(f"no YAML document at line {line}")


def _anchored(text: str, node: Node) -> bool:
    """A node written with an anchor (&name) is shared with its aliases."""
    start = node.start_mark.index
    before = text[_line_start(text, start) : start]
    return bool(re.search(r"&[^\s]+\s*$", before)) or text[start : start + 1] == "&"


def find(text: str, root: Node, path: Sequence[PathPart]) -> Node:
    node = root
    seen: set[int] = set()
    for step, part in enumerate(path):
        if id(node) in seen:
            raise EditError("the path goes through a YAML alias; editing it would change other places too")
        seen.add(id(node))
        where = ".".join(str(p) for p in path[: step + 1])
        if isinstance(part, int):
            if not isinstance(node, SequenceNode) or part >= len(node.value):
                raise EditError(f"{where} does not exist")
            node = node.value[part]
        else:
            if not isinstance(node, MappingNode):
                raise EditError(f"{where} does not exist (not a mapping above it)")
            matches = [v for k, v in node.value if isinstance(k, ScalarNode) and k.value == part]
            if not matches:
                raise EditError(f"{where} does not exist")
            if any(isinstance(k, ScalarNode) and k.value == "<<" for k, _ in node.value):
                raise EditError(f"{where} sits in a mapping with a merge key (<<); edit it by hand")
            node = matches[0]
        if _anchored(text, node):
            raise EditError(
                f"{where} carries a YAML anchor shared with aliases; editing it would change them too"
            )
    return node


def quote(value: str) -> str:
    """A scalar that reads back as exactly `value`, as a string: plain when unambiguous, else
    double-quoted with JSON escapes (a newline cannot start a new key)."""
    if _PLAIN_SAFE.match(value) and not _RESERVED.match(value) and not re.match(r"^[0-9.+-]", value):
        return value
    return json.dumps(value, ensure_ascii=False)


def set_scalar(text: str, root: Node, path: Sequence[PathPart], value: str) -> str:
    node = find(text, root, path)
    if not isinstance(node, ScalarNode):
        raise EditError(f"{'.'.join(map(str, path))} is not a scalar")
    return text[: node.start_mark.index] + quote(value) + text[node.end_mark.index :]


def _line_start(text: str, index: int) -> int:
    return text.rfind("\n", 0, index) + 1


def _indent_block(block: str, indent: int, newline: str) -> str:
    lines = block.rstrip("\n").split("\n")
    return "".join((" " * indent + line if line else "") + newline for line in lines)


def insert_keys(text: str, root: Node, path: Sequence[PathPart], block: str) -> str:
    """Insert the keys of `block` (block YAML at column 0) first in the block mapping at `path`."""
    node = find(text, root, path)
    if not isinstance(node, MappingNode):
        raise EditError(f"{'.'.join(map(str, path))} is not a mapping")
    if node.flow_style or not node.value:
        raise EditError(
            f"{'.'.join(map(str, path)) or 'the document'} is written in flow style ({{...}}); "
            "keys cannot be added without rewriting it"
        )
    first_key = node.value[0][0]
    start = _line_start(text, first_key.start_mark.index)
    indent = first_key.start_mark.column
    if "\t" in text[start : first_key.start_mark.index]:
        raise EditError("the mapping is indented with tabs")
    return text[:start] + _indent_block(block, indent, newline_of(text)) + text[start:]


def _last_content_end(node: Node) -> int:
    while isinstance(node, (MappingNode, SequenceNode)) and node.value and not node.flow_style:
        last = node.value[-1]
        node = last[1] if isinstance(last, tuple) else last
    return int(node.end_mark.index)


def append_items(text: str, root: Node, path: Sequence[PathPart], block: str) -> str:
    """Append the items of `block` (a block sequence at column 0) to the block sequence at `path`."""
    node = find(text, root, path)
    if not isinstance(node, SequenceNode):
        raise EditError(f"{'.'.join(map(str, path))} is not a list")
    if node.flow_style or not node.value:
        raise EditError(f"{'.'.join(map(str, path))} is written in flow style ([...]); items cannot be added")
    dash = _line_start(text, node.value[0].start_mark.index)
    indent = len(text[dash : node.value[0].start_mark.index]) - 2
    if indent < 0 or text[dash + indent : dash + indent + 1] != "-":
        raise EditError(f"{'.'.join(map(str, path))}: cannot tell the list's indentation")
    end = _last_content_end(node)
    nl = text.find("\n", end)
    insert_at = len(text) if nl < 0 else nl + 1
    prefix = "" if nl >= 0 or text.endswith("\n") else newline_of(text)
    return text[:insert_at] + prefix + _indent_block(block, indent, newline_of(text)) + text[insert_at:]
