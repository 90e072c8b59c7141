"""PolicyReport objects: what Kyverno's Policy Reporter, kubectl and dashboards read, in two APIs
with the same content: ``wgpolicyk8s.io/v1alpha2`` PolicyReport / ClusterPolicyReport
(kubernetes-sigs/wg-policy-prototypes) and ``openreports.io/v1alpha1`` Report / ClusterReport
(openreports/reports-api), which Kyverno and Policy Reporter ship now. One report per namespace;
which results it holds: docs/cli.md (`auditor cluster --publish-reports`, `auditor report`).
`entries_*` and `build` are pure; `publish` writes them with the official client by server-side apply.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

import yaml

from auditor import TOOL_NAME
from auditor.audit.scan import ScanResult
from auditor.model.findings import Finding
from auditor.rules import RULES

REPORT_NAME = TOOL_NAME
FIELD_MANAGER = TOOL_NAME
MANAGED_BY = {"app.kubernetes.io/managed-by": TOOL_NAME}
MESSAGE_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class Flavour:
    """One PolicyReport API: group, version, kinds and plurals."""

    group: str
    version: str
    kind: str
    cluster_kind: str
    plural: str
    cluster_plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


WGPOLICY = Flavour(
    "wgpolicyk8s.io",
    "v1alpha2",
    "PolicyReport",
    "ClusterPolicyReport",
    "policyreports",
    "clusterpolicyreports",
)
OPENREPORTS = Flavour("openreports.io", "v1alpha1", "Report", "ClusterReport", "reports", "clusterreports")
FLAVOURS = {"wgpolicyk8s": WGPOLICY, "openreports": OPENREPORTS}

# Rules about a workload: a checked group that none of them fired on passes each of them.
WORKLOAD_RULES = tuple(r.META.id for r in RULES if r.META.id != "ineffective-policy-selector")


@dataclass(frozen=True, slots=True)
class Resource:
    api_version: str
    kind: str
    namespace: str
    name: str

    def to_json(self) -> dict[str, str]:
        out = {"kind": self.kind, "name": self.name}
        if self.api_version:  # unknown for some stored findings: left out rather than guessed
            out = {"apiVersion": self.api_version, **out}
        if self.namespace:
            out["namespace"] = self.namespace
        return out


@dataclass(frozen=True, slots=True)
class Entry:
    """One result, before it is put into a report of either API."""

    namespace: str  # "" for the cluster-scoped report
    rule: str
    result: str  # pass | fail | warn | error | skip
    severity: str
    message: str
    resource: Resource | None
    properties: Mapping[str, str] = field(default_factory=dict)

    def to_json(self, seconds: int) -> dict[str, Any]:
        out: dict[str, Any] = {
            "source": TOOL_NAME,
            "policy": self.rule,
            "rule": self.rule,
            "category": "placement",
            "severity": self.severity if self.severity in ("critical", "high", "medium", "low") else "info",
            "result": self.result,
            "scored": True,
            "message": self.message[:MESSAGE_LIMIT],
            "timestamp": {"seconds": seconds, "nanos": 0},
            "properties": dict(sorted(self.properties.items())),
        }
        if self.resource is not None:
            out["resources"] = [self.resource.to_json()]
        return out


def _finding_properties(f: Finding) -> dict[str, str]:
    out = {"fingerprint": f.fingerprint, "certainty": f.certainty}
    if f.target:
        out["target"] = f.target
    if f.estimated_monthly_cost_usd is not None:
        out["estimatedMonthlyCostUSD"] = f"{f.estimated_monthly_cost_usd:.2f}"
    return out


def entries_from_scan(result: ScanResult) -> list[Entry]:
    """Results of one scan (a live cluster): fail per finding, skip per waived finding, pass per
    checked group × workload rule that did not fire on it."""
    out: list[Entry] = []
    fired: set[tuple[str, str]] = set()
    for f, verdict in [
        *((f, "fail") for f in result.findings),
        *((w.finding, "skip") for w in result.waived),
    ]:
        w = f.workload
        fired.add((w.identity, f.rule))
        message = f.message if verdict == "fail" else f"waived: {f.message}"
        out.append(
            Entry(
                w.namespace,
                f.rule,
                verdict,
                f.severity,
                message,
                Resource(w.api_version, w.kind, w.namespace, w.name),
                _finding_properties(f),
            )
        )
    checked = result.groups.groups if result.groups is not None else ()
    for g in checked:
        w = g.workload
        for rule in WORKLOAD_RULES:
            if (w.identity, rule) in fired:
                continue
            out.append(
                Entry(
                    w.namespace,
                    rule,
                    "pass",
                    _default_severity(rule),
                    f"{g.recognised_as or w.kind} {w.namespace}/{w.name}: checked, {rule} does not apply",
                    Resource(w.api_version, w.kind, w.namespace, w.name),
                    {"roles": str(len(g.roles)), "edges": str(len(g.edges))},
                )
            )
    return out


def _default_severity(rule: str) -> str:
    return next((r.META.severity for r in RULES if r.META.id == rule), "info")


def entries_from_export(
    findings: Iterable[Mapping[str, Any]], rows: Iterable[Mapping[str, Any]]
) -> list[Entry]:
    """Results of a compliance export from the store: fail (active), skip (waived), pass
    (resolved: only present with --since), and one result per target × rule row that has no
    finding — pass when audited, error when the target has no successful run."""
    out: list[Entry] = []
    controls = {(r["target"], r["rule"]): ",".join(r.get("controls") or ()) for r in rows}
    with_findings: set[tuple[str, str]] = set()
    for f in findings:
        status = f["status"]
        verdict = {"waived": "skip", "resolved": "pass"}.get(status, "fail")
        w = f["workload"]
        detail = f.get("detail") or {}
        api_version = (detail.get("workload") or {}).get("apiVersion", "")
        props = {"fingerprint": f["fingerprint"], "certainty": f["certainty"], "target": f["target"]}
        props["status"] = status
        if controls.get((f["target"], f["rule"])):
            props["controls"] = controls[(f["target"], f["rule"])]
        if status == "resolved" and f.get("resolved_at"):
            props["resolvedAt"] = str(f["resolved_at"])
        message = f"{status}: {f['message']}" if status in ("resolved", "waived") else f["message"]
        with_findings.add((f["target"], f["rule"]))
        out.append(
            Entry(
                w.get("namespace") or "",
                f["rule"],
                verdict,
                f["severity"],
                message,
                Resource(api_version, w["kind"], w.get("namespace") or "", w["name"]),
                props,
            )
        )
    for r in rows:
        if (r["target"], r["rule"]) in with_findings or r["status"] not in ("pass", "not-audited"):
            continue
        props = {"target": r["target"]}
        if r.get("controls"):
            props["controls"] = ",".join(r["controls"])
        if r.get("evidence_run") is not None:
            props["evidenceRun"] = str(r["evidence_run"])
        if r.get("evidence_revision"):
            props["evidenceRevision"] = str(r["evidence_revision"])
        audited = r["status"] == "pass"
        out.append(
            Entry(
                "",
                r["rule"],
                "pass" if audited else "error",
                _default_severity(r["rule"]),
                f"target {r['target']}: no finding of {r['rule']}"
                if audited
                else f"target {r['target']} has no successful run: not audited",
                None,
                props,
            )
        )
    return out


def build(entries: Sequence[Entry], flavour: Flavour, now: datetime) -> list[dict[str, Any]]:
    """One report per namespace (sorted), then the cluster-scoped one when it has results."""
    seconds = int(now.timestamp())
    by_ns: dict[str, list[Entry]] = {}
    for e in entries:
        by_ns.setdefault(e.namespace, []).append(e)
    docs = []
    for ns in sorted(by_ns, key=lambda n: (n == "", n)):
        results = sorted(by_ns[ns], key=_order)
        rendered = [e.to_json(seconds) for e in results]
        summary = {
            k: sum(r["result"] == k for r in rendered) for k in ("pass", "fail", "warn", "error", "skip")
        }
        meta: dict[str, Any] = {"name": REPORT_NAME, "labels": dict(MANAGED_BY)}
        if ns:
            meta["namespace"] = ns
        doc: dict[str, Any] = {
            "apiVersion": flavour.api_version,
            "kind": flavour.kind if ns else flavour.cluster_kind,
            "metadata": meta,
        }
        if flavour is OPENREPORTS:
            doc["source"] = TOOL_NAME
        doc["summary"] = summary
        doc["results"] = rendered
        docs.append(doc)
    return docs


def _order(e: Entry) -> tuple[bool, str, str, str, str]:
    r = e.resource
    return (
        e.result != "fail",
        e.rule,
        r.kind if r else "",
        r.name if r else "",
        e.properties.get("target", ""),
    )


def render(docs: Sequence[Mapping[str, Any]]) -> str:
    return yaml.safe_dump_all(list(docs), sort_keys=False) if docs else ""


# Publishing (the I/O edge): server-side apply with the official client.


@dataclass(frozen=True, slots=True)
class Published:
    kind: str
    namespace: str
    name: str
    results: int


class PublishError(Exception):
    """A report could not be written: which one, the HTTP status, and what the server said."""

    def __init__(self, what: str, status: int, message: str) -> None:
        hint = ""
        if status == 404:
            hint = " (is the CRD installed? Kyverno and Policy Reporter ship it)"
        elif status == 403:
            hint = " (grant it the ClusterRole in deploy/kustomize/components/publish-reports/rbac.yaml)"
        super().__init__(f"{what}: HTTP {status}: {message}{hint}")
        self.status = status


def publish(api_client: Any, docs: Sequence[Mapping[str, Any]], flavour: Flavour) -> list[Published]:
    """Server-side apply each report (PATCH, ``application/apply-patch+yaml``, fieldManager
    placement-auditor, force: this tool owns its reports), then delete the reports this tool
    wrote before where it wrote none now (a namespace whose groups are gone), found by the
    managed-by label. Stops at the first failure. Deleted reports are returned with results -1."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    api = client.CustomObjectsApi(api_client)
    done: list[Published] = []
    for doc in docs:
        meta = doc["metadata"]
        ns = meta.get("namespace", "")
        what = f"{doc['kind']} {ns + '/' if ns else ''}{meta['name']}"
        apply: dict[str, Any] = {
            "field_manager": FIELD_MANAGER,
            "force": True,
            "_content_type": "application/apply-patch+yaml",
        }
        try:
            if ns:
                api.patch_namespaced_custom_object(
                    flavour.group, flavour.version, ns, flavour.plural, meta["name"], dict(doc), **apply
                )
            else:
                api.patch_cluster_custom_object(
                    flavour.group, flavour.version, flavour.cluster_plural, meta["name"], dict(doc), **apply
                )
        except ApiException as exc:
            raise PublishError(what, int(exc.status or 0), _reason(exc)) from None
        done.append(Published(doc["kind"], ns, meta["name"], len(doc["results"])))
    written = {(p.namespace, p.name) for p in done}
    selector = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
    for plural, kind in ((flavour.plural, flavour.kind), (flavour.cluster_plural, flavour.cluster_kind)):
        try:
            listed = cast(
                "dict[str, Any]",
                api.list_cluster_custom_object(
                    flavour.group, flavour.version, plural, label_selector=selector
                ),
            )
            for item in listed.get("items", []):
                meta = item["metadata"]
                ns, name = meta.get("namespace", ""), meta["name"]
                if (ns, name) in written:
                    continue
                if ns:
                    api.delete_namespaced_custom_object(flavour.group, flavour.version, ns, plural, name)
                else:
                    api.delete_cluster_custom_object(flavour.group, flavour.version, plural, name)
                done.append(Published(kind, ns, name, -1))
        except ApiException as exc:
            raise PublishError(f"stale {kind} reports", int(exc.status or 0), _reason(exc)) from None
    return done


def _reason(exc: Any) -> str:
    try:
        body = json.loads(exc.body)
        return str(body.get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)
