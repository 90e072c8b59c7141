"""Findings as the scan produces them, for store tests."""

from __future__ import annotations

from auditor.model.findings import EdgeRef, Finding, ObjectRef


def finding(
    name: str,
    rule: str = "cross-zone-traffic",
    severity: str = "medium",
    namespace: str = "ml",
    cost: float | None = None,
    message: str = "",
) -> Finding:
    return Finding(
        rule=rule,
        severity=severity,
        certainty="likely",
        symptoms=("slowed", "billed"),
        workload=ObjectRef("kubeflow.org/v1", "PyTorchJob", namespace, name, f"jobs/{name}.yaml", 3),
        message=message or f"{name}: Worker → Master crosses zones",
        edge=EdgeRef("Worker", ("zone-a",), "Master", ("zone-b",), 23456),
        estimated_monthly_cost_usd=cost,
    )
