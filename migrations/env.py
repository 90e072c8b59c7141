"""Alembic environment for the findings store.

Run through `auditor db upgrade` (auditor/store/database.py passes the engine or an open
connection in `config.attributes`); `alembic` on the command line works too with
`-x url=sqlite:///auditor.db`.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from auditor.store.database import make_engine, parse_url
from auditor.store.schema import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things: batch mode rebuilds the table.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = config.attributes.get("engine")
    if engine is None:
        url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
            "sqlalchemy.url"
        )
        if not url:
            raise SystemExit("give the database with -x url=… (or use `auditor db upgrade`)")
        engine = make_engine(parse_url(url))
    with engine.begin() as conn:
        _run(conn)


if context.is_offline_mode():
    raise SystemExit("offline (SQL script) migrations are not supported; use `auditor db upgrade`")
run_migrations_online()
