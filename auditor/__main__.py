"""`python -m auditor` runs the CLI."""

from __future__ import annotations

from auditor.cli import entry

# Guarded: worker processes are spawned, and spawning re-imports the parent's main module.
if __name__ == "__main__":
    entry()
