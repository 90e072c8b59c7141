"""What every rule module declares: its metadata. Rules are pure functions of the AuditModel."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class RuleMeta:
    id: str
    title: str
    severity: str
    symptoms: tuple[str, ...]
    options: Mapping[str, Any] = field(default_factory=dict)
