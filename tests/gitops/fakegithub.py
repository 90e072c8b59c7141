"""The local GitHub of the PR and fleet tests: benchmarks/world/fakegithub.py, which the fleet
benchmark serves its repositories from too (one server, so both speak the same protocol)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from world.fakegithub import INSTALLATION_TOKEN, TOKEN, FakeGitHub, MultiHub, serve

__all__ = ["INSTALLATION_TOKEN", "TOKEN", "FakeGitHub", "MultiHub", "serve"]
