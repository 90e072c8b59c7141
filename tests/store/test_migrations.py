"""The migrations and the models must describe the same schema, on both backends."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from dbsupport import engine_for

from auditor.store import database
from auditor.store.schema import Base


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_models_and_migrations_agree(backend: str, tmp_path: Path) -> None:
    with engine_for(backend, tmp_path) as engine:
        assert database.is_current(engine)
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            diff = compare_metadata(context, Base.metadata)
        assert diff == [], f"models and migrations differ; add a migration: {diff}"


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_upgrade_is_idempotent_and_downgrade_works(backend: str, tmp_path: Path) -> None:
    with engine_for(backend, tmp_path, migrate=False) as engine:
        assert database.current_revision(engine) is None
        database.upgrade(engine)
        database.upgrade(engine)
        assert database.is_current(engine)
        with engine.begin() as connection:
            cfg = database.alembic_config(engine)
            cfg.attributes["connection"] = connection
            command.downgrade(cfg, "base")
        assert database.current_revision(engine) is None
        database.upgrade(engine)
        assert database.is_current(engine)
