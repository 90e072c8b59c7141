"""The seed scenario laid out as a repository (a module of its own: `conftest` names collide
between test directories)."""

from __future__ import annotations

from pathlib import Path

from auditor.resources import examples_dir

SEED = examples_dir() / "seed-lab"


def seed_files(state: str = "before") -> dict[str, str | Path]:
    """The seed scenario as a repository: workload, policies, nodes."""
    return {
        "training/workload.yaml": SEED / state / "workload.yaml",
        "policies/cilium.yaml": SEED / "policies.yaml",
        "nodes/nodes.yaml": SEED / "nodes.yaml",
    }
