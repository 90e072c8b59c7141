"""Admission webhook answers as the webhook makes them (auditor/admission/record.py), for the
store, web and digest tests."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from auditor.admission.record import AdmissionRecord

HOSTILE_MESSAGE = '<script>alert("admit")</script><img src=x onerror=alert(1)>'


def decision(uid: str, at: datetime, outcome: str = "denied", **fields: Any) -> AdmissionRecord:
    """A `kubectl apply` of a PyTorchJob in ml-research, answered `outcome` at `at`."""
    found = outcome in ("warned", "denied")
    values: dict[str, Any] = {
        "uid": uid,
        "at": at,
        "cluster": "prod-eu",
        "operation": "CREATE",
        "api_version": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "namespace": "ml-research",
        "name": f"job-{uid}",
        "user": "alice@example.com",
        "mode": "deny" if outcome == "denied" else "warn",
        "outcome": outcome,
        "dry_run": False,
        "latency_ms": 12.5,
        "rules": ("cross-zone-blocked",) if found else (),
        "groups": (f"ml-research/job-{uid}",) if found else (),
        "messages": (f"job-{uid}: Worker cannot reach Master across zones",) if found else (),
        "reason": "",
        "fingerprints": ("f" * 64,) if found else (),
    }
    values.update(fields)
    return AdmissionRecord(**values)
