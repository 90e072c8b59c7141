"""Findings: values, ordered, with a stable fingerprint (rule + target + workload + edge)."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import field
from operator import attrgetter
from typing import Any

from auditor.model.pickling import by_fields
from auditor.model.values import value

SEVERITIES = ("critical", "high", "medium", "low")
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}


@by_fields
@value(frozen=True, order=True)
class ObjectRef:
    api_version: str
    kind: str
    namespace: str
    name: str
    file: str = ""
    line: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "file": self.file,
            "line": self.line,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ObjectRef:
        return cls(
            str(data.get("apiVersion", "")),
            str(data.get("kind", "")),
            str(data.get("namespace", "")),
            str(data.get("name", "")),
            str(data.get("file", "")),
            int(data.get("line") or 0),
        )

    @property
    def identity(self) -> str:
        group = self.api_version.rpartition("/")[0] if "/" in self.api_version else ""
        return f"{group}/{self.kind}/{self.namespace}/{self.name}"


@by_fields
@value(frozen=True, order=True)
class EdgeRef:
    from_role: str
    from_zones: tuple[str, ...]
    to_role: str
    to_zones: tuple[str, ...]
    port: int | None
    protocol: str = "TCP"

    def to_json(self) -> dict[str, Any]:
        return {
            "from": {"role": self.from_role, "zones": list(self.from_zones)},
            "to": {"role": self.to_role, "zones": list(self.to_zones)},
            "port": self.port,
            "protocol": self.protocol,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EdgeRef:
        return cls(
            str(data["from"]["role"]),
            tuple(data["from"]["zones"]),
            str(data["to"]["role"]),
            tuple(data["to"]["zones"]),
            data.get("port"),
            str(data.get("protocol", "TCP")),
        )


@by_fields
@value(frozen=True, order=True)
class PolicyMention:
    kind: str
    namespace: str
    name: str
    file: str
    line: int

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "file": self.file,
            "line": self.line,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PolicyMention:
        return cls(
            str(data["kind"]), str(data["namespace"]), str(data["name"]), str(data["file"]), int(data["line"])
        )


@by_fields
@value(frozen=True, order=True)
class Finding:
    sort_key: tuple[int, str, str] = field(init=False, repr=False)
    rule: str
    severity: str
    certainty: str
    symptoms: tuple[str, ...]
    workload: ObjectRef
    message: str
    edge: EdgeRef | None = None
    policies: tuple[PolicyMention, ...] = ()
    estimated_monthly_cost_usd: float | None = None
    estimated_slowdown_pct: float | None = None
    assumptions: tuple[str, ...] = ()
    target: str = ""
    # Measurements that back the finding (Prometheus: bytes sent, GPU utilisation, policy drops).
    evidence: tuple[str, ...] = ()
    # The role of the workload the finding is about (an edge finding: its source role), as
    # `Role.label`: with the workload's identity, the key into the model (`role_key`). Not part of
    # the finding's identity or its JSON (an edge finding's JSON carries it as `edge.from.role`).
    role: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "sort_key", (SEVERITY_RANK.get(self.severity, 9), self.workload.identity, self.rule)
        )

    @property
    def role_key(self) -> tuple[str, str] | None:
        """(workload identity, role label) of the role the finding is about; None for a finding
        about the workload as a whole."""
        return (self.workload.identity, self.role) if self.role else None

    @property
    def fingerprint(self) -> str:
        edge = ""
        if self.edge is not None:
            edge = f"{self.edge.from_role}->{self.edge.to_role}:{self.edge.port}/{self.edge.protocol}"
        text = "\x1f".join((self.rule, self.target, self.workload.identity, edge))
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rule": self.rule,
            "severity": self.severity,
            "certainty": self.certainty,
            "symptoms": list(self.symptoms),
            "workload": self.workload.to_json(),
            "edge": self.edge.to_json() if self.edge else None,
            "policies": [p.to_json() for p in self.policies],
            "estimated_monthly_cost_usd": self.estimated_monthly_cost_usd,
            "estimated_slowdown_pct": self.estimated_slowdown_pct,
            "message": self.message,
            "fingerprint": self.fingerprint,
        }
        if self.assumptions:
            out["assumptions"] = list(self.assumptions)
        if self.evidence:
            out["evidence"] = list(self.evidence)
        if self.target:
            out["target"] = self.target  # part of the fingerprint (a custom rule's role)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Finding:
        """The finding `to_json` wrote."""
        edge = data.get("edge")
        return cls(
            rule=data["rule"],
            severity=data["severity"],
            certainty=data["certainty"],
            symptoms=tuple(data.get("symptoms") or ()),
            workload=ObjectRef.from_json(data["workload"]),
            message=data["message"],
            edge=EdgeRef.from_json(edge) if edge else None,
            policies=tuple(PolicyMention.from_json(p) for p in data.get("policies") or ()),
            estimated_monthly_cost_usd=data.get("estimated_monthly_cost_usd"),
            estimated_slowdown_pct=data.get("estimated_slowdown_pct"),
            assumptions=tuple(data.get("assumptions") or ()),
            target=str(data.get("target") or ""),
            evidence=tuple(data.get("evidence") or ()),
            role=str(edge["from"]["role"]) if edge else str(data.get("role") or ""),
        )


FINDING_ORDER: Callable[[Finding], tuple[Any, ...]] = attrgetter(
    *(f.name for f in dataclasses.fields(Finding) if f.compare)
)
"""A sort key giving exactly the findings' own order (`sorted(fs, key=FINDING_ORDER) ==
sorted(fs)`): the tuple the generated `__lt__` compares, made once per finding instead of twice
per comparison (a third of the time on a scan's 3,000 findings)."""
