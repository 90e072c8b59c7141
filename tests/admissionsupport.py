"""Admission webhook answers as the webhook makes them (auditor/admission/record.py), for the
store, web and digest tests."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from auditor.admission.record import AdmissionRecord

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from world.tls import certificate as _certificate

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


_RESOURCES = {
    "Job": ("batch", "jobs"),
    "Deployment": ("apps", "deployments"),
    "CiliumNetworkPolicy": ("cilium.io", "ciliumnetworkpolicies"),
}


def request(
    obj: dict[str, Any] | None,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    *,
    uid: str = "705ab4f5-6393-11e8-b7cc-42010a800002",
    dry_run: bool = False,
    sub_resource: str | None = None,
) -> dict[str, Any]:
    """An AdmissionReview as kube-apiserver sends it: the example request of the Kubernetes
    documentation "Dynamic Admission Control" (admission.k8s.io/v1), filled in from `obj`."""
    subject = obj if obj is not None else old
    assert subject is not None
    group, _, version = subject["apiVersion"].rpartition("/")
    kind = subject["kind"]
    plural = _RESOURCES.get(kind, (group, kind.lower() + "s"))[1]
    body: dict[str, Any] = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": plural},
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": {"group": group, "version": version, "resource": plural},
            "name": subject["metadata"]["name"],
            "namespace": subject["metadata"].get("namespace", ""),
            "operation": operation,
            "userInfo": {
                "username": "alice@example.com",
                "uid": "u-1",
                "groups": ["system:authenticated", "ml"],
            },
            "object": obj,
            "oldObject": old,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.title()}Options"},
            "dryRun": dry_run,
        },
    }
    if sub_resource:
        body["request"]["subResource"] = sub_resource
        body["request"]["requestSubResource"] = sub_resource
    return body


def certificate(
    tmp: Path, name: str, at: datetime = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
) -> tuple[Path, Path]:
    """A self-signed ECDSA serving certificate for `name` and localhost, valid around `at`
    (benchmarks/world/tls.py, which the admission benchmark uses too)."""
    return _certificate(tmp, name, at)
