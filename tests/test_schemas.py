"""The published JSON Schemas come from the same declarations the config reader validates with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from auditor import yamlio
from auditor.settings.config import ConfigError, config_json_schema, load_settings

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
        "regenerate: python -c 'from auditor.settings.config import config_json_schema; "
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
    from auditor.settings.config import config_reference

    assert (ROOT / "docs" / "config-reference.md").read_text(encoding="utf-8") == config_reference(), (
        "regenerate: python -c 'from auditor.settings.config import config_reference; "
        'open("docs/config-reference.md","w").write(config_reference())\''
    )


def _pack_schema() -> dict[str, Any]:
    return json.loads((SCHEMAS / "policy-pack.schema.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def test_published_pack_schema_is_current() -> None:
    from auditor.rules.packs import pack_json_schema

    assert (SCHEMAS / "policy-pack.schema.json").read_text(encoding="utf-8") == pack_json_schema()
    Draft202012Validator.check_schema(_pack_schema())


@pytest.mark.parametrize("path", sorted((ROOT / "policies").rglob("*.yaml")), ids=lambda p: p.name)
def test_shipped_packs_satisfy_the_schema_and_the_reader(path: Path) -> None:
    from auditor.rules.packs import load_packs

    load_packs([path])
    docs, errors = yamlio.load_file(path, str(path))
    assert docs and not errors
    for doc in docs:
        Draft202012Validator(_pack_schema()).validate(json.loads(json.dumps(doc.data, default=str)))


PACK = "apiVersion: placement-auditor.io/v1\nkind: PolicyPack\nmetadata: {name: p}\n"


@pytest.mark.parametrize(
    "text",
    [
        PACK + "spec: {rulez: {}}\n",
        PACK + "spec: {rules: {cross-zone-blocked: {severity: urgent}}}\n",
        PACK + "spec: {rules: {cross-zone-blocked: {enabled: 'no'}}}\n",
        PACK + "spec: {customRules: [{id: r, severity: low, condition: 'true'}]}\n",
        PACK + "spec: {customRules: [{id: R!, severity: low, message: m, condition: 'true'}]}\n",
        "apiVersion: placement-auditor.io/v2\nkind: PolicyPack\nmetadata: {name: p}\n",
        "apiVersion: placement-auditor.io/v1\nkind: Waiver\nmetadata: {name: w}\n"
        "spec: {rule: traffic-blocked, reason: r, expires: '2026-01-01', fingerprint: abc}\n",
    ],
)
def test_pack_schema_and_reader_reject_the_same_mistakes(tmp_path: Path, text: str) -> None:
    from auditor.rules.packs import PackError, load_packs

    pack = tmp_path / "pack.yaml"
    pack.write_text(text)
    with pytest.raises(PackError):
        load_packs([pack])
    data = yamlio.load_text(text, "t")[0][0].data
    assert list(Draft202012Validator(_pack_schema()).iter_errors(data)), text


def _findings_schema() -> dict[str, Any]:
    return json.loads((SCHEMAS / "findings-v1.schema.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def test_published_findings_schema_is_current() -> None:
    from auditor.reports.findings_schema import render_schema

    assert (SCHEMAS / "findings-v1.schema.json").read_text(encoding="utf-8") == render_schema()
    Draft202012Validator.check_schema(_findings_schema())


def test_every_report_the_corpus_produces_satisfies_the_findings_schema(tmp_path: Path) -> None:
    from auditor.audit.scan import scan
    from auditor.reports import json_report
    from tests.support import inventory
    from tests.test_findings_json import TWO_ZONES

    data = ROOT / "tests" / "data"
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(TWO_ZONES)
    validator = Draft202012Validator(_findings_schema())
    rules: set[str] = set()
    for paths in (
        [data / "seed-lab" / "before", data / "seed-lab" / "policies.yaml", data / "seed-lab" / "nodes.yaml"],
        [data / "workloads", data / "seed-lab" / "nodes.yaml"],
        [data / "workloads", data / "seed-lab" / "policies.yaml", nodes],
        [data / "workloads", tmp_path / "missing.yaml"],
    ):
        result = scan(inventory(paths=paths))
        document = json.loads(json_report.render(result))
        problems = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(document)]
        assert problems == [], problems[:5]
        rules |= {f["rule"] for f in document["findings"]}
    assert {"cross-zone-blocked", "cross-zone-traffic", "role-unschedulable"} <= rules
    # The schema is strict enough to notice a finding that changed shape.
    broken = json.loads(json_report.render(scan(inventory(paths=[data / "seed-lab"]))))
    broken["findings"][0]["edge"]["from"]["zone"] = "a"
    assert list(validator.iter_errors(broken))
