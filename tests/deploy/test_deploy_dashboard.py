"""The Grafana dashboard: a valid dashboard model (uid, title, schemaVersion, panels on the grid with
queries, templating for the data source and the target), and every query names a metric the
service exports, a recording rule of deploy/prometheus/rules.yaml, or a documented external metric."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from deploysupport import (
    DASHBOARD,
    documented_external_metrics,
    exported_metrics,
    metric_names,
    recording_rules,
    underlying_metrics,
)

GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range", "__interval_ms", "__range_s"}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _exprs(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]


def _variables(dashboard: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dashboard["templating"]["list"]}


def test_dashboard_model(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] == "placement-auditor"
    assert dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    assert "id" not in dashboard or dashboard["id"] is None  # provisioned dashboards carry no id
    panels = dashboard["panels"]
    assert panels
    assert len({p["id"] for p in panels}) == len(panels)
    cells: dict[tuple[int, int], str] = {}
    for p in panels:
        assert p["type"] in {"stat", "timeseries", "gauge", "bargauge", "table", "text"}
        g = p["gridPos"]
        assert all(isinstance(g[k], int) for k in "xywh"), p["title"]
        assert g["x"] >= 0 and g["y"] >= 0 and g["w"] >= 1 and g["h"] >= 1
        assert g["x"] + g["w"] <= 24, f"{p['title']} leaves the 24-column grid"
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = p["title"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert p["targets"], f"{p['title']} has no query"
        refs = [t["refId"] for t in p["targets"]]
        assert len(set(refs)) == len(refs)
        for t in p["targets"]:
            assert t["expr"].strip()
            assert t["datasource"] == p["datasource"]


def test_templating_datasource_and_target(dashboard: dict[str, Any]) -> None:
    variables = _variables(dashboard)
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    target = variables["target"]
    assert target["type"] == "query" and target["includeAll"] and target["multi"]
    assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    used: set[str] = set()
    for _title, expr in _exprs(dashboard):
        used |= set(re.findall(r"\$\{?(\w+)", expr))
    assert used - GRAFANA_BUILTINS <= variables.keys(), "a query uses an undefined variable"
    assert "target" in used


def test_queries_name_exported_recorded_or_documented_external_metrics(dashboard: dict[str, Any]) -> None:
    exported = exported_metrics()
    external = documented_external_metrics()
    records = recording_rules()
    assert {"up", "container_network_transmit_bytes_total", "DCGM_FI_DEV_GPU_UTIL"} <= external
    for title, expr in _exprs(dashboard):
        names = metric_names(expr)
        assert names, f"{title}: {expr} selects no metric"
        for name in names:
            if ":" in name:
                assert name in records, (
                    f"{title}: recording rule {name} is not in deploy/prometheus/rules.yaml"
                )
            else:
                assert name in exported | external, f"{title}: {name} is neither exported nor documented"
    for var in _variables(dashboard).values():
        if var["type"] == "query":
            (metric,) = re.findall(r"label_values\((\w+),\s*\w+\)", var["query"]["query"])
            assert metric in exported | external, var["name"]


def test_panels_cover_the_service_metrics_and_the_external_signals(dashboard: dict[str, Any]) -> None:
    """Findings by severity, blocked groups, estimated and measured cost, GPU utilisation, audit
    freshness, runs by status, store health: every exported metric and both external signals
    appear, directly or through a recording rule."""
    used: set[str] = set()
    for _title, expr in _exprs(dashboard):
        used |= metric_names(expr)
    base = underlying_metrics(used, recording_rules())
    assert exported_metrics() <= base
    assert {"container_network_transmit_bytes_total", "DCGM_FI_DEV_GPU_UTIL"} <= base
    titles = " ".join(p["title"].lower() for p in dashboard["panels"])
    for word in ("severity", "blocked", "cost", "measured", "gpu", "freshness", "runs by status"):
        assert word in titles, word
