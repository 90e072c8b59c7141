"""Built-in rules, listed explicitly (no registration by import side effect)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from types import ModuleType
from typing import Any

from auditor.model.findings import Finding
from auditor.rules import (
    cross_zone_blocked,
    cross_zone_traffic,
    ineffective_policy_selector,
    role_unschedulable,
    traffic_blocked,
    zone_label_mismatch,
)
from auditor.rules.model import AuditModel

RULES: tuple[ModuleType, ...] = (
    cross_zone_blocked,
    traffic_blocked,
    cross_zone_traffic,
    role_unschedulable,
    zone_label_mismatch,
    ineffective_policy_selector,
)


def run_rules(model: AuditModel, options: Mapping[str, Mapping[str, Any]] | None = None) -> list[Finding]:
    findings: list[Finding] = []
    for rule in RULES:
        evaluate: Callable[[AuditModel, Mapping[str, Any]], Iterator[Finding]] = rule.evaluate
        findings.extend(evaluate(model, (options or {}).get(rule.META.id, {})))
    return sorted(findings)
