"""docs/cli.md documents every command the parser has."""

from __future__ import annotations

import argparse
from pathlib import Path

from auditor.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def test_every_command_is_documented() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    text = (ROOT / "docs" / "cli.md").read_text()
    missing = [name for name in sub.choices if f"## `auditor {name}" not in text]
    assert missing == [], f"document these commands in docs/cli.md: {missing}"
