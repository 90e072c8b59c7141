"""Types of the optional C extension auditor/_fastyaml.c (see there and yamlio._load_document)."""

from collections.abc import Callable
from typing import Any, Literal

def build(
    text: str,
    line_offset: int,
    max_depth: int,
    max_nodes: int,
    plain_tags: dict[str, str],
    resolve: Callable[[str], Any],
    construct: Callable[[str, str], Any],
    str_tag: str,
    map_type: type[dict[str, Any]],
    seq_type: type[list[Any]],
) -> tuple[Any, int] | Literal[False] | None: ...
def libyaml_version() -> str: ...
