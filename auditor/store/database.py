"""The database: URL resolution, engine, and migrations (Alembic, from migrations/).

SQLite by default (a file in the working directory, no set-up); PostgreSQL by URL through
psycopg 3. `AUDITOR_DATABASE_URL` wins over the config file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import ConnectionPoolEntry

from auditor.resources import migrations_dir

DEFAULT_URL = "sqlite:///auditor.db"
ENV_URL = "AUDITOR_DATABASE_URL"


class DatabaseURLError(ValueError):
    pass


def resolve_url(configured: str | None, environ: Mapping[str, str] = os.environ) -> str:
    """The URL to use: the environment, then the config, then the default SQLite file."""
    return environ.get(ENV_URL) or configured or DEFAULT_URL


def parse_url(text: str) -> URL:
    """A validated URL: SQLite or PostgreSQL (`postgresql://` is driven by psycopg 3)."""
    try:
        url = make_url(text)
    except ArgumentError as exc:
        raise DatabaseURLError(f"not a database URL ({exc})") from None
    backend = url.get_backend_name()
    if backend == "postgresql":
        if url.get_driver_name() not in ("psycopg", "psycopg2"):
            url = url.set(drivername="postgresql+psycopg")
        if url.get_driver_name() == "psycopg2":
            url = url.set(drivername="postgresql+psycopg")
        if not url.database:
            raise DatabaseURLError("a PostgreSQL URL needs a database name")
        return url
    if backend == "sqlite":
        return url
    raise DatabaseURLError(f"unsupported database {backend!r} (use sqlite:/// or postgresql://)")


def redacted(url: URL | str) -> str:
    """The URL for messages and logs: never the password."""
    return (url if isinstance(url, URL) else make_url(url)).render_as_string(hide_password=True)


def _sqlite_pragmas(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")  # another process holding the write lock
    cursor.execute("PRAGMA journal_mode=WAL")  # readers (API) never wait for the writer (a run)
    cursor.close()


def make_engine(url: URL | str, **options: Any) -> Engine:
    url = parse_url(url) if isinstance(url, str) else url
    if url.get_backend_name() == "sqlite":
        engine = create_engine(url, **options)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    # pre_ping: a server that went away and came back costs one failed run, not a dead pool.
    options.setdefault("pool_pre_ping", True)
    options["connect_args"] = {"connect_timeout": 10, **options.get("connect_args", {})}
    return create_engine(url, **options)


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply the migrations up to `revision` (idempotent)."""
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            # Two processes starting together: one migrates, the other waits and finds it done.
            connection.execute(text("SELECT pg_advisory_xact_lock(7311580123)"))
        cfg = alembic_config(engine)
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, revision)


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision(engine: Engine) -> str | None:
    return ScriptDirectory.from_config(alembic_config(engine)).get_current_head()


def is_current(engine: Engine) -> bool:
    return current_revision(engine) == head_revision(engine)
