"""`python -m auditor` runs the CLI."""

from __future__ import annotations

from auditor.cli import entry

entry()
