"""A worker's Prometheus metrics: task latency and failures (Celery signals), queue depth.

Served on `service.broker.metrics_port` by the worker's own process (prometheus_client's HTTP
server). Recorded where the task runs: with `--pool solo` (the deployment's choice: one process
per pod, scaled by KEDA) that is this process; prefork children would record in themselves and
are not exported.

- `auditor_task_duration_seconds{task}`: histogram of task run time (start to end).
- `auditor_task_failures_total{task}`: tasks that raised (retries for a busy lease not counted).
- `auditor_task_retries_total{task}`: tasks put back because their target was leased elsewhere.
- `auditor_queue_depth{queue}`: messages waiting in the queue, read from the broker on scrape.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger("auditor.workermetrics")

BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800)


class QueueDepth(Collector):
    def __init__(self, depth: Callable[[], int], queue: str) -> None:
        self.depth, self.queue = depth, queue

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "auditor_queue_depth", "Messages waiting in the task queue", labels=["queue"]
        )
        try:
            family.add_metric([self.queue], float(self.depth()))
        except Exception as exc:  # the broker away: no sample (absent() alerts on it)
            log.warning("queue depth: %s", exc)
        yield family


def queue_depth(app: Any, queue: str) -> int:
    """Messages ready in `queue` (passive declare: Redis list length, AMQP message_count)."""
    with app.connection_for_read() as connection:
        _name, count, _consumers = connection.default_channel.queue_declare(queue=queue, passive=True)
        return int(count)


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry, depth: Callable[[], int], queue: str) -> None:
        self.registry = registry
        self.duration = Histogram(
            "auditor_task_duration_seconds", "Task run time", ["task"], buckets=BUCKETS, registry=registry
        )
        self.failures = Counter(
            "auditor_task_failures_total", "Tasks that failed", ["task"], registry=registry
        )
        self.retries = Counter(
            "auditor_task_retries_total",
            "Tasks retried (target leased elsewhere)",
            ["task"],
            registry=registry,
        )
        registry.register(QueueDepth(depth, queue))


def install(app: Any, queue: str, port: int) -> WorkerMetrics:
    from celery import signals

    metrics = WorkerMetrics(CollectorRegistry(), lambda: queue_depth(app, queue), queue)
    started: dict[str, float] = {}

    def prerun(task_id: str = "", **_: Any) -> None:
        started[task_id] = time.monotonic()

    def postrun(task_id: str = "", task: Any = None, state: str = "", **_: Any) -> None:
        begun = started.pop(task_id, None)
        if begun is not None and state != "RETRY":
            metrics.duration.labels(getattr(task, "name", "?")).observe(time.monotonic() - begun)

    def failure(sender: Any = None, **_: Any) -> None:
        metrics.failures.labels(getattr(sender, "name", "?")).inc()

    def retry(sender: Any = None, **_: Any) -> None:
        metrics.retries.labels(getattr(sender, "name", "?")).inc()

    signals.task_prerun.connect(prerun, weak=False)
    signals.task_postrun.connect(postrun, weak=False)
    signals.task_failure.connect(failure, weak=False)
    signals.task_retry.connect(retry, weak=False)
    if port:
        start_http_server(port, addr="0.0.0.0", registry=metrics.registry)
    return metrics
