"""A fresh PostgreSQL schema for one run (the fleet benchmark's, and each store test's through
tests/dbsupport.py): created on entry, dropped with everything in it on the way out."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, text


@contextmanager
def pg_schema(url: str, prefix: str = "t") -> Iterator[str]:
    """A fresh schema `<prefix>_<12 hex>` in the database at `url`; yields its name."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as c:
            c.execute(text(f'CREATE SCHEMA "{name}"'))
        yield name
    finally:
        with admin.connect() as c:
            c.execute(text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))
        admin.dispose()


def pg_url(url: str, schema: str) -> str:
    """`url` whose connections use `schema` (libpq `options`)."""
    return f"{url}?options=-csearch_path%3D{schema}"
