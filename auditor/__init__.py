"""Placement Auditor: where training pods can land, and which network-policy doors are closed."""

from __future__ import annotations

from auditor import codecache, native

__version__ = "0.1.0"
TOOL_NAME = "placement-auditor"

# Before any compiled module is imported: compiled, or from source (auditor/native.py).
native.install()
# Before any of the auditor's classes is defined: their dataclass methods' code from the cache
# beside the bytecode (auditor/codecache.py).
codecache.install()
