"""Prometheus metrics, read from the store at scrape time (so every `serve` process on one
database exports the same figures). Labels are bounded: target (from the config), status,
severity and rule (fixed sets) — never a workload, namespace or finding.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from auditor.store.repository import Store

log = logging.getLogger("auditor.metrics")


class StoreCollector(Collector):
    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("auditor_store_up", "1 when the findings store answered this scrape")
        try:
            snap = self.store.metrics_snapshot()
        except Exception as exc:
            log.warning("metrics: the store did not answer: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        runs = CounterMetricFamily(
            "auditor_runs", "Audit runs by target and final status", labels=["target", "status"]
        )
        for target, status, count in snap.runs:
            runs.add_metric([target, status], count)
        yield runs
        last = GaugeMetricFamily(
            "auditor_last_successful_run_timestamp_seconds",
            "Unix time of the last successful run per target",
            labels=["target"],
        )
        for target, at in sorted(snap.last_success.items()):
            if at is not None:
                last.add_metric([target], at.timestamp())
        yield last
        open_findings = GaugeMetricFamily(
            "auditor_open_findings",
            "Findings new, open or reopened, by severity and rule",
            labels=["severity", "rule"],
        )
        for severity, rule, count in snap.open_findings:
            open_findings.add_metric([severity, rule], count)
        yield open_findings
        cost = GaugeMetricFamily(
            "auditor_estimated_monthly_inter_az_cost_usd",
            "Estimated monthly inter-AZ transfer cost of the open findings per target (USD)",
            labels=["target"],
        )
        for target in snap.targets:
            cost.add_metric([target], float(snap.cost.get(target, 0.0)))
        yield cost
        blocked = GaugeMetricFamily(
            "auditor_blocked_groups",
            "Open cross-zone-blocked and traffic-blocked findings per target",
            labels=["target"],
        )
        for target in snap.targets:
            blocked.add_metric([target], snap.blocked.get(target, 0))
        yield blocked


def registry_for(store: Store) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(StoreCollector(store))
    return registry
