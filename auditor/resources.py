"""Where the shipped policy packs, templates and examples are.

In a wheel, `policies/` and `templates/` are inside the package (auditor._policies,
auditor._templates); in a source checkout (editable install) they are at the repository root.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_ROOT = Path(__file__).resolve().parent


def _shipped(package: str, checkout_dir: str) -> Path:
    """The directory of a data package. These are namespace packages (no __init__.py), for which
    `importlib.resources.files` gives a MultiplexedPath whose str() is its repr, not a path: ask
    the import system for the package's location instead."""
    try:
        spec = importlib.util.find_spec(package)
    except ModuleNotFoundError:
        spec = None
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    if locations:
        return Path(locations[0])
    return _ROOT.parent / checkout_dir


def policies_dir() -> Path:
    return _shipped("auditor._policies", "policies")


def templates_dir() -> Path:
    return _shipped("auditor._templates", "templates")


def examples_dir() -> Path:
    return _ROOT / "examples"


def migrations_dir() -> Path:
    return _shipped("auditor._migrations", "migrations")
