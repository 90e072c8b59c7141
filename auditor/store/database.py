"""The database: URL resolution, engine, and migrations (Alembic, from migrations/).

SQLite by default (a file in the working directory, no set-up); PostgreSQL by URL through
psycopg 3. `AUDITOR_DATABASE_URL` wins over the config file.
"""

from __future__ import annotations

import os
import sqlite3
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.pool import ConnectionPoolEntry

from auditor.resources import migrations_dir
from auditor.store.url import DatabaseURLError, check_url

DEFAULT_URL = "sqlite:///auditor.db"
ENV_URL = "AUDITOR_DATABASE_URL"


def resolve_url(configured: str | None, environ: Mapping[str, str] = os.environ) -> str:
    """The URL to use: the environment, then the config, then the default SQLite file."""
    return environ.get(ENV_URL) or configured or DEFAULT_URL


def parse_url(text: str) -> URL:
    """A validated URL: SQLite or PostgreSQL (`postgresql://` is driven by psycopg 3)."""
    backend = check_url(text)
    try:
        url = make_url(text)
    except ArgumentError as exc:
        raise DatabaseURLError(f"not a database URL ({exc})") from None
    if backend == "postgresql" and url.get_driver_name() != "psycopg":
        url = url.set(drivername="postgresql+psycopg")
    return url


def redacted(url: URL | str) -> str:
    """The URL for messages and logs: never the password."""
    return (url if isinstance(url, URL) else make_url(url)).render_as_string(hide_password=True)


def _sqlite_pragmas(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")  # another process holding the write lock
    cursor.execute("PRAGMA journal_mode=WAL")  # readers (API) never wait for the writer (a run)
    cursor.close()


# The SQLite file each engine opened (device, inode): a file deleted or replaced since is not
# the database the pooled connections write to, whatever a new connection would say.
_OPENED: weakref.WeakKeyDictionary[Engine, tuple[int, int]] = weakref.WeakKeyDictionary()


def sqlite_path(url: URL) -> Path | None:
    """The file of a SQLite URL (None for an in-memory database)."""
    name = url.database or ""
    if not name or name == ":memory:" or url.query.get("mode") == "memory":
        return None
    return Path(name.removeprefix("file:"))


def make_engine(url: URL | str, **options: Any) -> Engine:
    url = parse_url(url) if isinstance(url, str) else url
    if url.get_backend_name() == "sqlite":
        engine = create_engine(url, **options)
        event.listen(engine, "connect", _sqlite_pragmas)
        path = sqlite_path(url)
        if path is not None:

            def remember(_dbapi: Any, _record: ConnectionPoolEntry) -> None:
                if engine not in _OPENED:
                    st = path.stat()
                    _OPENED[engine] = (st.st_dev, st.st_ino)

            event.listen(engine, "connect", remember)
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


def is_current(engine: Engine) -> bool:
    """Whether the schema is at the newest migration."""
    return current_revision(engine) == ScriptDirectory.from_config(alembic_config(engine)).get_current_head()


_DRIVERS = ("psycopg", "psycopg2", "sqlite3")


def _driver_transient(exc: BaseException) -> bool:
    """A DB-API OperationalError or InterfaceError of a driver, raised past SQLAlchemy (the bulk
    writes use the driver's cursor directly): psycopg's DiskFull, AdminShutdown, a closed connection."""
    return any(
        c.__name__ in ("OperationalError", "InterfaceError") and c.__module__.split(".")[0] in _DRIVERS
        for c in type(exc).__mro__
    )


def is_transient(exc: BaseException) -> bool:
    """Whether `exc` says the database is away for now (refused or dropped connection, a server
    restarting or shutting down, a full disk, a pool timeout, SQLite's lock) rather than that the
    statement is wrong: the same work may succeed when it is tried again. SQLAlchemy's wrappers
    and the drivers' own exceptions (or either as the cause) count."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OperationalError | InterfaceError | DisconnectionError | PoolTimeout):
            return True
        if _driver_transient(current):
            return True
        current = current.__cause__ or current.__context__
    return False


def check_health(engine: Engine, budget_seconds: float = 2.0) -> str:
    """ "ok", or why the database cannot serve the service: for SQLite, the file the engine opened
    is still there (same inode), passes a bounded `PRAGMA quick_check` and takes a write lock
    (a rolled-back write: a read-only or immutable file fails); for PostgreSQL, the
    server answers and is not read-only. Never slower than about `budget_seconds`."""
    if engine.dialect.name != "sqlite":
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
            if connection.execute(text("SHOW transaction_read_only")).scalar() == "on":
                return "read-only (transaction_read_only is on)"
        return "ok"
    path = sqlite_path(engine.url)
    if path is None:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        return "ok"
    try:
        st = path.stat()
    except OSError as exc:
        return f"database file {path} is gone ({exc.strerror})"
    if not path.is_file():
        return f"database file {path} is not a regular file"
    if engine not in _OPENED:
        with engine.connect() as connection:  # opens it, and remembers which file that was
            connection.execute(text("SELECT 1"))
    opened = _OPENED.get(engine)
    if opened is not None and opened != (st.st_dev, st.st_ino):
        return f"database file {path} was replaced since the service opened it (restart the service)"
    try:  # as root a chmod does not refuse this, an immutable or read-only-mounted file does
        os.close(os.open(path, os.O_RDWR))
    except OSError as exc:
        return f"database file {path} cannot be written: {exc.strerror}"
    deadline = time.monotonic() + budget_seconds
    probe = sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True, timeout=budget_seconds)
    try:
        # A corrupt page or a huge file must not hang the probe: abort past the budget.
        probe.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        try:
            row = probe.execute("PRAGMA quick_check(1)").fetchone()
        except sqlite3.OperationalError as exc:
            if "interrupt" in str(exc):
                return "ok"  # too large to check within the budget; it opened and read
            return f"database file {path} cannot be read: {exc}"
        except sqlite3.DatabaseError as exc:
            return f"database file {path} is corrupt: {exc}"
        if row is None or row[0] != "ok":
            return f"database file {path} is corrupt: {row[0] if row else 'no answer'}"
        probe.set_progress_handler(None, 0)
        try:
            # In WAL mode BEGIN IMMEDIATE locks in the -shm file only: a write to the file
            # itself (rolled back, never committed) is what a read-only file refuses.
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("CREATE TABLE _auditor_readyz_probe (x INTEGER)")
            probe.execute("ROLLBACK")
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                return "ok"  # a run holds the write lock: writable
            return f"database file {path} cannot be written: {exc}"
    except sqlite3.DatabaseError as exc:
        return f"database file {path} cannot be opened: {exc}"
    finally:
        probe.close()
    return "ok"
