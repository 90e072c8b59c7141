"""The fake Kubernetes API of the cluster tests: benchmarks/world/apiserver.py, which the
live-cluster benchmark serves its world from too (one server, so both speak the same protocol)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from world.apiserver import (
    BUILTIN,
    PLURALS,
    TOKEN,
    ApplyKind,
    FakeCluster,
    Faults,
    kubeconfig,
    serve,
)

__all__ = ["BUILTIN", "PLURALS", "TOKEN", "ApplyKind", "FakeCluster", "Faults", "kubeconfig", "serve"]
