"""The published JSON Schemas come from the same declarations the config reader validates with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from auditor import yamlio
from auditor.config import ConfigError, config_json_schema, load_settings

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "docs" / "schemas"
CONFIGS = [
    ROOT / "auditor" / "examples" / "service.yaml",
    ROOT / "deploy" / "kustomize" / "base" / "config" / "auditor.yaml",
]


def _schema() -> dict[str, Any]:
    return json.loads((SCHEMAS / "config.schema.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def test_published_config_schema_is_current() -> None:
    assert (SCHEMAS / "config.schema.json").read_text(encoding="utf-8") == config_json_schema(), (
        "regenerate: python -c 'from auditor.config import config_json_schema; "
        'open("docs/schemas/config.schema.json","w").write(config_json_schema())\''
    )
    Draft202012Validator.check_schema(_schema())


def test_every_field_is_documented() -> None:
    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for key, prop in (node.get("properties") or {}).items():
                assert prop.get("description"), f"{where}.{key} has no description"
            for key, value in node.items():
                walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}[{i}]")

    walk(_schema(), "config")


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_satisfy_the_schema_and_the_reader(path: Path) -> None:
    load_settings(path)
    docs, errors = yamlio.load_file(path, str(path))
    assert not errors
    Draft202012Validator(_schema()).validate(json.loads(json.dumps(docs[0].data)))


@pytest.mark.parametrize(
    "text",
    [
        "kubernets: {}\n",
        "service: {port: 70000}\n",
        "service: {port: '80'}\n",
        "network: {cni: weave}\n",
        "network: {cilium: {enforcement_mode: sometimes}}\n",
        "targets: [{name: 'a b', directory: x}]\n",
        "targets: [{directory: x}]\n",
        "digest: {smtp: {security: ssl}}\n",
        "prometheus: {window: hourly}\n",
        "sources: {render_timeout_seconds: 0}\n",
    ],
)
def test_schema_and_reader_reject_the_same_mistakes(tmp_path: Path, text: str) -> None:
    config = tmp_path / "auditor.yaml"
    config.write_text(text)
    with pytest.raises(ConfigError):
        load_settings(config)
    errors = list(Draft202012Validator(_schema()).iter_errors(yamlio.load_text(text, "t")[0][0].data))
    assert errors, f"the schema accepts what the reader rejects: {text!r}"


def test_config_reference_is_current() -> None:
    from auditor.config import config_reference

    assert (ROOT / "docs" / "config-reference.md").read_text(encoding="utf-8") == config_reference(), (
        "regenerate: python -c 'from auditor.config import config_reference; "
        'open("docs/config-reference.md","w").write(config_reference())\''
    )
