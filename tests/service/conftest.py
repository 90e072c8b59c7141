from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from dbsupport import Clock, engine_for
from idpsupport import JWKS
from sqlalchemy import Engine


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    with engine_for(request.param, tmp_path) as e:
        yield e


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def idp() -> Iterator[JWKS]:
    server = JWKS()
    yield server
    server.server.shutdown()
