"""Database URL checks that need no database library (the config loader validates with them, so
`auditor scan --config` never imports SQLAlchemy)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

# SQLAlchemy's own URL shape: `backend[+driver]://rest`.
_URL = re.compile(r"^(?P<backend>[a-zA-Z][\w]*)(?:\+(?P<driver>\w+))?://(?P<rest>.*)$", re.DOTALL)


class DatabaseURLError(ValueError):
    pass


def check_url(text: str) -> str:
    """The backend (`sqlite` or `postgresql`) of a database URL this product can use."""
    found = _URL.match(text)
    if found is None:
        raise DatabaseURLError("not a database URL (expected sqlite:///FILE or postgresql://HOST/DB)")
    backend = found["backend"].lower()
    if backend == "postgresql":
        if not urlsplit("x://" + found["rest"]).path.strip("/"):
            raise DatabaseURLError("a PostgreSQL URL needs a database name")
        return backend
    if backend == "sqlite":
        return backend
    raise DatabaseURLError(f"unsupported database {backend!r} (use sqlite:/// or postgresql://)")
