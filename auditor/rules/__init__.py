"""Built-in rules, listed explicitly (no registration by import side effect)."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Mapping
from types import ModuleType
from typing import Any

from auditor import native
from auditor.model.findings import FINDING_ORDER, Finding
from auditor.placement import coupling
from auditor.rules import (
    cross_zone_blocked,
    cross_zone_traffic,
    data_ports_partly_denied,
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
    data_ports_partly_denied,
    role_unschedulable,
    zone_label_mismatch,
    ineffective_policy_selector,
)


def run_rules(model: AuditModel, options: Mapping[str, Mapping[str, Any]] | None = None) -> list[Finding]:
    findings: list[Finding] = []
    for rule in RULES:
        evaluate: Callable[[AuditModel, Mapping[str, Any]], Iterator[Finding]] = rule.evaluate
        findings.extend(evaluate(model, (options or {}).get(rule.META.id, {})))
    return sorted(findings, key=FINDING_ORDER)


def rules_markdown() -> str:
    """docs/rules.md, built from each rule's metadata and docstring (a test keeps the file in sync)."""
    parts = [
        "# Rules\n",
        "Built-in rules, with a failing and a passing example each. Severity is the default; "
        "`cross-zone-traffic` is high when the split is `always` and medium otherwise.\n",
        "An edge's port is the one the manifest declares (a containerPort, `MASTER_PORT`, a plugin "
        "`--port`); a data-plane edge (NCCL/Gloo all-reduce, MPI's TCP transport) has none: it "
        "connects on kernel-chosen ports of the destination's ephemeral range (`network.ephemeral_ports`, "
        "Linux default 32768-60999, narrowed by the pod's `net.ipv4.ip_local_port_range` sysctl or Open "
        "MPI's `btl_tcp_port_min_v4`/`btl_tcp_port_range_v4`). Such an edge is blocked only when every "
        "port of its range is denied; a deny of some of them is `data-ports-partly-denied`.\n",
        "| rule | severity | symptoms |",
        "|---|---|---|",
    ]
    parts += [f"| `{r.META.id}` | {r.META.severity} | {', '.join(r.META.symptoms)} |" for r in RULES]
    for rule in RULES:
        doc = (rule.__doc__ or "").strip()
        parts.append(f"\n## `{rule.META.id}` — {rule.META.title}\n\n{doc}\n")
    # The edge rules' certainty comes from the one placement model; its own words say how.
    parts.append(f"\n## Where a group can land (certainty)\n\n{module_doc(coupling).strip()}\n")
    return "\n".join(parts)


def module_doc(module: ModuleType) -> str:
    """A module's docstring; read from its source beside it when the module is compiled (mypyc
    keeps no module docstring: auditor/native.py)."""
    if module.__doc__:
        return module.__doc__
    try:
        text = native.source(module.__name__).read_text(encoding="utf-8")
        return ast.get_docstring(ast.parse(text), clean=False) or ""
    except (OSError, SyntaxError, ValueError):
        return ""
