"""`python -m auditor` and the `auditor` program (pyproject's script: `auditor.__main__:entry`)
run the CLI."""

from __future__ import annotations

from auditor import gcpause

# Importing the CLI defines the auditor's classes, functions and tables: some 100,000 objects
# that live as long as the process. The cyclic collector's passes over them while they are made
# free nothing and were 5 % of a re-scan's start; collection is back on once they are imported.
with gcpause.paused():
    from auditor.cli import entry

# Guarded: worker processes are spawned, and spawning re-imports the parent's main module.
if __name__ == "__main__":
    entry()
