"""Compatibility name for `world.netpol` (tests import the generator by this name)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from world.netpol import (
    APPS_PER_NAMESPACE,
    ENVS,
    PODS_PER_NAMESPACE,
    TEAMS,
    TIERS,
    generate,
    write_yaml,
)

__all__ = ["APPS_PER_NAMESPACE", "ENVS", "PODS_PER_NAMESPACE", "TEAMS", "TIERS", "generate", "write_yaml"]
