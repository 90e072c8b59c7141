"""Where the shipped policy packs, templates and examples are.

In a wheel, `policies/` and `templates/` are inside the package (auditor._policies,
auditor._templates); in a source checkout (editable install) they are at the repository root.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

_ROOT = Path(__file__).resolve().parent


def _shipped(package: str, checkout_dir: str) -> Path:
    try:
        return Path(str(resources.files(package)))
    except ModuleNotFoundError:
        return _ROOT.parent / checkout_dir


def policies_dir() -> Path:
    return _shipped("auditor._policies", "policies")


def templates_dir() -> Path:
    return _shipped("auditor._templates", "templates")


def examples_dir() -> Path:
    return _ROOT / "examples"


def migrations_dir() -> Path:
    return _shipped("auditor._migrations", "migrations")
