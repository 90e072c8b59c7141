"""Shared helpers for the deploy/ tests: rendering, object lookup, PromQL metric names, and the
metric names the service exports and the docs allow."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from auditor.store.records import MetricsSnapshot

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUSTOMIZE = DEPLOY / "kustomize"
BASE = KUSTOMIZE / "base"
COMPONENTS = KUSTOMIZE / "components"
OVERLAYS = {"sqlite": KUSTOMIZE / "overlays" / "sqlite", "postgres": KUSTOMIZE / "overlays" / "postgres"}
RULES = DEPLOY / "prometheus" / "rules.yaml"
RULE_TESTS = DEPLOY / "prometheus" / "rules.test.yaml"
DASHBOARD = BASE / "dashboards" / "placement-auditor.json"
DOCKERFILE = DEPLOY / "Dockerfile"
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
NAMESPACE = "placement-auditor"


def kubectl() -> str | None:
    return shutil.which("kubectl")


def render(path: Path) -> list[dict[str, Any]]:
    exe = kubectl()
    assert exe is not None
    proc = subprocess.run(
        [exe, "kustomize", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert proc.returncode == 0, f"kubectl kustomize {path} failed:\n{proc.stderr}"
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def render_variant(
    tmp: Path, overlay: str, components: Iterable[str] = (), patches: list[Any] | None = None
) -> list[dict[str, Any]]:
    """An overlay plus components and patches, the way a user's own overlay would add them
    (kustomize wants relative paths)."""
    data: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(OVERLAYS[overlay], tmp)],
    }
    if components:
        data["components"] = [os.path.relpath(COMPONENTS / c, tmp) for c in components]
    if patches:
        data["patches"] = patches
    (tmp / "kustomization.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    return render(tmp)


def find(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = find(objs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def load_rules() -> dict[str, Any]:
    data = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def all_rules(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for g in groups for r in g["rules"]]


# --- PromQL --------------------------------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_KEYWORDS = {
    "and",
    "or",
    "unless",
    "bool",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "atan2",
    "inf",
    "nan",
}
_NAME = re.compile(r"(?<![\w.:$])([A-Za-z_:][A-Za-z0-9_:]*)")


def metric_names(expr: str) -> set[str]:
    """The metric and recording-rule names a PromQL expression selects (not functions, label
    names, keywords, Grafana variables or numbers)."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = re.sub(r"\$\{[^}]*\}|\$\w+", " 1 ", text)  # Grafana variables
    text = _GROUPING.sub(" ", text)
    names: set[str] = set()
    for m in _NAME.finditer(text):
        name = m.group(1)
        rest = text[m.end() :].lstrip()
        if rest.startswith("(") or name.lower() in _KEYWORDS:
            continue  # a function or aggregation, or a keyword
        names.add(name)
    return names


class _Snapshot:
    """Stands in for the Store: one of everything, so every metric has a sample."""

    def metrics_snapshot(self) -> MetricsSnapshot:
        return MetricsSnapshot(
            targets=("prod",),
            runs=(("prod", "succeeded", 3),),
            last_success={"prod": datetime(2026, 1, 1, tzinfo=UTC)},
            open_findings=(("critical", "cross-zone-blocked", 1),),
            cost={"prod": 12.5},
            blocked={"prod": 1},
        )


def exported_metrics() -> set[str]:
    """Sample names auditor/service/metrics.py exports (the collector run on a stand-in store)."""
    from auditor.service.metrics import StoreCollector

    collector = StoreCollector(_Snapshot())  # type: ignore[arg-type]
    return {s.name for family in collector.collect() for s in family.samples} | worker_metrics()


def worker_metrics() -> set[str]:
    """Sample names a worker exports (auditor/service/workermetrics.py), each metric observed once."""
    from prometheus_client import CollectorRegistry

    from auditor.service.workermetrics import WorkerMetrics

    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry, lambda: 3, "auditor")
    metrics.duration.labels("auditor.audit").observe(1.0)
    metrics.failures.labels("auditor.audit").inc()
    metrics.retries.labels("auditor.audit").inc()
    return {
        s.name for family in registry.collect() for s in family.samples if not s.name.endswith("_created")
    }


def documented_external_metrics() -> set[str]:
    """The metric names in the "External metrics" table of docs/deploy.md."""
    text = DEPLOY_DOC.read_text(encoding="utf-8")
    start = text.index("\n## External metrics")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    return set(re.findall(r"^\| `([A-Za-z_:][A-Za-z0-9_:]*)` \|", section, flags=re.MULTILINE))


def recording_rules() -> dict[str, str]:
    return {r["record"]: r["expr"] for r in all_rules(load_rules()["groups"]) if "record" in r}


def underlying_metrics(names: set[str], records: dict[str, str]) -> set[str]:
    """Names with every recording rule replaced by the metrics its expression selects."""
    out: set[str] = set()
    todo = list(names)
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in records:
            todo.extend(metric_names(records[name]))
        else:
            out.add(name)
    return out
