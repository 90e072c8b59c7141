"""Placement Auditor: where training pods can land, and which network-policy doors are closed."""

from __future__ import annotations

__version__ = "0.1.0"
TOOL_NAME = "placement-auditor"
