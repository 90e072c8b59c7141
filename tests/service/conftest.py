from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from dbsupport import Clock, engine_for
from sqlalchemy import Engine

from auditor.resources import examples_dir

SEED = examples_dir() / "seed-lab"


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    with engine_for(request.param, tmp_path) as e:
        yield e


@pytest.fixture
def clock() -> Clock:
    return Clock()


def seed_files(state: str = "before") -> dict[str, str | Path]:
    """The seed scenario as a repository: workload, policies, nodes."""
    return {
        "training/workload.yaml": SEED / state / "workload.yaml",
        "policies/cilium.yaml": SEED / "policies.yaml",
        "nodes/nodes.yaml": SEED / "nodes.yaml",
    }
