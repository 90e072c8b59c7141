"""deploy/prometheus: the rule file checked and unit-tested by the real promtool, every alert with
a firing and a not-firing case, and every metric a rule uses exported by the service (or one of
the external metrics docs/deploy.md lists)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from deploysupport import (
    RULE_TESTS,
    RULES,
    all_rules,
    documented_external_metrics,
    exported_metrics,
    load_rules,
    metric_names,
    recording_rules,
)

REQUIRED_ALERTS = {"AuditStale", "TrainingGroupBlocked", "InterAZCostOverBudget", "AuditorDown", "StoreDown"}
SERVICE_DOC = Path(__file__).resolve().parents[2] / "docs" / "service.md"


def promtool() -> str:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.skip("promtool is not installed (.ci/run installs the Debian package prometheus)")
    return exe


def run_promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_promtool_check_rules() -> None:
    proc = run_promtool("check", "rules", RULES.name, cwd=RULES.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(all_rules(load_rules()['groups']))} rules found" in proc.stdout


def test_promtool_test_rules() -> None:
    proc = run_promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_promtool_test_rules_fails_when_a_threshold_changes(tmp_path: Path) -> None:
    """The unit tests pin the thresholds: a budget of 2000 breaks them."""
    text = RULES.read_text()
    assert "vector(1000)" in text
    (tmp_path / RULES.name).write_text(text.replace("vector(1000)", "vector(2000)"))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    proc = run_promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert proc.returncode != 0
    assert "InterAZCostOverBudget" in proc.stdout + proc.stderr


def test_required_alerts_with_severity_and_annotations() -> None:
    rules = all_rules(load_rules()["groups"])
    alerts = {r["alert"]: r for r in rules if "alert" in r}
    assert alerts.keys() >= REQUIRED_ALERTS
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
        assert re.fullmatch(r"\d+[smh]", rule.get("for", "")), f"{name} has no `for`"
    assert "time()" in alerts["AuditStale"]["expr"]
    assert "absent(up{" in alerts["AuditorDown"]["expr"]
    assert "auditor_store_up == 0" in alerts["StoreDown"]["expr"]
    assert "auditor:inter_az_monthly_budget_usd" in alerts["InterAZCostOverBudget"]["expr"]


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())
    assert tests["rule_files"] == [RULES.name]
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in tests["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    alerts = {r["alert"] for r in all_rules(load_rules()["groups"]) if "alert" in r}
    assert alerts - firing == set(), "alerts never tested firing"
    assert alerts - quiet == set(), "alerts never tested quiet"


def test_exported_metrics_are_the_documented_ones() -> None:
    exported = exported_metrics()
    assert exported == {
        "auditor_runs_total",
        "auditor_last_successful_run_timestamp_seconds",
        "auditor_open_findings",
        "auditor_estimated_monthly_inter_az_cost_usd",
        "auditor_blocked_groups",
        "auditor_store_up",
        # the workers' (fleet mode)
        "auditor_task_duration_seconds_bucket",
        "auditor_task_duration_seconds_sum",
        "auditor_task_duration_seconds_count",
        "auditor_task_failures_total",
        "auditor_task_retries_total",
        "auditor_queue_depth",
    }
    documented = set(re.findall(r"^\| `(auditor_\w+)`", SERVICE_DOC.read_text(), flags=re.MULTILINE))
    histogram_series = {f"auditor_task_duration_seconds_{s}" for s in ("bucket", "sum", "count")}
    assert exported - histogram_series | {"auditor_task_duration_seconds"} == documented


def test_metric_names_parser() -> None:
    assert metric_names('sum by (target) (rate(foo_total{a="b"}[5m])) / on () group_left () bar:x') == {
        "foo_total",
        "bar:x",
    }
    assert metric_names('time() - x > 26 * 3600 or absent(up{job="a"}) unless y offset 5m') == {
        "x",
        "up",
        "y",
    }
    assert metric_names('rate(m{n=~"$namespace"}[$__rate_interval]) * 2592000 / 1e9 * $price') == {"m"}


def test_rules_use_only_exported_external_or_recorded_metrics() -> None:
    known = exported_metrics() | documented_external_metrics() | set(recording_rules())
    for rule in all_rules(load_rules()["groups"]):
        unknown = metric_names(rule["expr"]) - known
        assert unknown == set(), f"{rule.get('alert') or rule.get('record')} uses {unknown}"
    # Recorded names carry a colon (level:metric:operations), exported ones never do: the two
    # cannot be confused, and the dashboard test tells a missing recording rule by its colon.
    for record in recording_rules():
        assert ":" in record and not record.startswith("auditor_"), record
    assert not any(":" in name for name in exported_metrics())
