"""The one way templates are rendered: Jinja's immutable sandbox, StrictUndefined (a missing
variable is an error, never an empty string), loading from one directory of templates/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2 import FileSystemLoader, StrictUndefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

from auditor.resources import templates_dir


def sandbox(directory: str | Path, *, autoescape: bool, **options: Any) -> ImmutableSandboxedEnvironment:
    """An environment for `templates/<directory>` (or an absolute directory). HTML templates
    autoescape everything; text, YAML and Markdown templates pass values through tojson or filters."""
    path = Path(directory) if Path(directory).is_absolute() else templates_dir() / directory
    return ImmutableSandboxedEnvironment(
        loader=FileSystemLoader(str(path)), undefined=StrictUndefined, autoescape=autoescape, **options
    )
