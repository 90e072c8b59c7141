"""Patch fragments rendered from templates/patches/*.yaml.j2 in Jinja's sandbox.

StrictUndefined (a missing variable is an error, not an empty string), values through `tojson`
only, and the output parsed as YAML again and checked against the keys the strategy may produce:
a hostile value (a label with a newline and `privileged: true`, say) stays one string.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from jinja2.exceptions import SecurityError, UndefinedError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from auditor import templating
from auditor.model.objects import Taint

ALLOWED_KEYS = {
    "pin-zone": {"nodeAffinity", "tolerations"},
    "follow-coordinator": {"podAffinity", "tolerations"},
    "kueue-topology": {"annotations", "tolerations"},
}


class RenderError(ValueError):
    pass


def environment(directory: Path | None = None) -> ImmutableSandboxedEnvironment:
    return templating.sandbox(directory or "patches", autoescape=False, keep_trailing_newline=True)


def toleration(taint: Taint) -> dict[str, str]:
    return {"key": taint.key, "operator": "Equal", "value": taint.value, "effect": taint.effect}


def render(strategy: str, env: ImmutableSandboxedEnvironment | None = None, **values: Any) -> dict[str, Any]:
    """The patch fragment for one role, as data (parsed back from the rendered YAML)."""
    if strategy not in ALLOWED_KEYS:
        raise RenderError(f"no template for strategy {strategy!r}")
    env = env or environment()
    try:
        text = env.get_template(f"{strategy}.yaml.j2").render(**values)
    except (UndefinedError, SecurityError, TypeError) as exc:
        # A missing variable (StrictUndefined), an unsafe operation (the sandbox), or a value
        # tojson cannot write: the template is wrong, nothing is rendered.
        raise RenderError(f"template {strategy}: {type(exc).__name__}: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RenderError(f"template {strategy} rendered invalid YAML: {exc}") from None
    if not isinstance(data, dict) or not set(data) <= ALLOWED_KEYS[strategy]:
        raise RenderError(f"template {strategy} rendered unexpected content: {data!r:.200}")
    if data.get("tolerations") is None:
        data.pop("tolerations", None)
    return data


def block(data: Any) -> str:
    """Block YAML for a fragment (leaf collections in flow style, as people write selectors)."""
    return yaml.safe_dump(data, default_flow_style=None, sort_keys=False, allow_unicode=True, width=100)
