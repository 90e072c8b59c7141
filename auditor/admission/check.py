"""What an apply would do to placement and reachability: the webhook's decisions (pure, given
the warm model's snapshot).

A **workload** (CREATE or UPDATE of a kind the scan audits) is audited with the policies, nodes
and Services in force and the workloads it can have edges with (`WarmModel.related`): the
findings that concern it are its answer. On UPDATE, a finding the old object had as well is
reported but never denies: the change did not make it. Pods are not read for a workload being
applied: it has none yet, and where the scheduler has not placed them the answer is the scan's
("can split", with its certainty).

A **policy** (CREATE, UPDATE or DELETE of a kind the reachability engine reads) is judged by
auditing the groups it can touch twice, with the policies in force and with the change, with
the pods that run now (a running group's observed placement decides): the findings the change
adds are its answer, and they name the groups it cuts. A namespaced policy touches the workloads
of its namespace and those with edges into it; a cluster-scoped one every namespace.

Only these rules decide: `cross-zone-blocked`, `traffic-blocked`, `data-ports-partly-denied`
and `cross-zone-traffic` when it carries a cost. The policy pack's scopes, severities and waivers
apply as in a scan (a waived finding does not warn or deny).
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from auditor import yamlio
from auditor.admission.review import Review
from auditor.admission.warm import POLICY_KINDS, WORKLOAD_KINDS, WarmModel, WorkloadId, identity
from auditor.audit.scan import Audited, audit, finish
from auditor.inventory import Inventory
from auditor.model.findings import Finding
from auditor.model.objects import Node
from auditor.model.source import LoadError, SourceRef
from auditor.rules.model import AuditModel, object_ref
from auditor.rules.packs import PolicyPack
from auditor.settings.config import Settings
from auditor.sources.objects import Elsewhere, build_inventory
from auditor.workloads import replicas

BLOCKING = ("cross-zone-blocked", "traffic-blocked", "data-ports-partly-denied")
COSTED = "cross-zone-traffic"


def decides(finding: Finding) -> bool:
    """Whether a finding is one admission answers about."""
    if finding.rule in BLOCKING:
        return True
    return finding.rule == COSTED and finding.estimated_monthly_cost_usd is not None


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a change would do: the findings it brings, those it keeps (UPDATE), the groups."""

    subject: str  # "workload" | "policy" | "ignored"
    findings: tuple[Finding, ...] = ()  # made by this change: these warn or deny
    kept: tuple[Finding, ...] = ()  # present before the change too: they warn, never deny
    groups: tuple[str, ...] = ()  # "namespace/name" of the workloads the findings concern
    running: frozenset[str] = frozenset()  # of those, the ones with pods now
    reason: str = ""  # ignored: why
    fixes: Mapping[str, str] = field(default_factory=dict)  # fingerprint -> fix in short


def made_by(obj: Mapping[str, Any]) -> str | None:
    """ "Kind name" of the workload of a kind the webhook answers for that controls this one (a
    JobSet's Job, a RayJob's RayCluster): the owner's answer covered it, as the scan audits it
    through its owner. None: no such owner."""
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    for ref in refs if isinstance(refs, list) else ():
        if not isinstance(ref, Mapping) or ref.get("controller") is not True:
            continue
        group = str(ref.get("apiVersion") or "").rpartition("/")[0]
        if (group, str(ref.get("kind") or "")) in WORKLOAD_KINDS:
            return f"{ref.get('kind')} {ref.get('name')}"
    return None


def _prepared(obj: Mapping[str, Any], review: Review) -> dict[str, Any]:
    """The object as the model keeps it: apiVersion/kind set, namespace and name filled in from
    the request (a CREATE may carry only generateName), no managedFields, no status."""
    out = dict(obj)
    out.setdefault("apiVersion", review.kind.api_version)
    out.setdefault("kind", review.kind.kind)
    meta = dict(out.get("metadata") or {}) if isinstance(out.get("metadata"), Mapping) else {}
    meta.pop("managedFields", None)
    if review.namespace and not meta.get("namespace"):
        meta["namespace"] = review.namespace
    if not meta.get("name"):
        meta["name"] = review.name or f"{meta.get('generateName') or 'unnamed-'}<generated>"
    out["metadata"] = meta
    out.pop("status", None)
    return out


def _subject(obj: Mapping[str, Any], review: Review) -> SourceRef:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    where = f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))
    return SourceRef(f"admission:{review.kind.kind}/{where}", 0, 0)


def _ref_identity(wid: WorkloadId) -> str:
    ns, group, kind, name = wid
    return f"{group}/{kind}/{ns}/{name}"


def _names_role(role: str, wid: WorkloadId) -> bool:
    ns, _, _, name = wid
    return any(role == p or role.startswith(p + "/") for p in (name, f"{ns}/{name}"))


def _concerns(finding: Finding, wid: WorkloadId) -> bool:
    if finding.workload.identity == _ref_identity(wid):
        return True
    edge = finding.edge
    return edge is not None and (_names_role(edge.from_role, wid) or _names_role(edge.to_role, wid))


def _group(finding: Finding) -> str:
    return f"{finding.workload.namespace}/{finding.workload.name}"


def _running(audited: Audited) -> frozenset[str]:
    """ "namespace/name" of the workloads with pods running now."""
    if audited.observation is None:
        return frozenset()
    refs = (object_ref(r) for r, o in audited.observation.roles.items() if o.pods)
    return frozenset(f"{ref.namespace}/{ref.name}" for ref in refs)


class Fixes(Mapping[str, str]):
    """Fingerprint -> the fix in short (the first `pin-zone` plan), worked out only when an answer
    reads it (a denial names the fix; a warning does not) and once per rule, workload and peer:
    a group with forty edges cut has one plan, not forty."""

    def __init__(self, model: AuditModel, findings: Sequence[Finding]) -> None:
        self._model = model
        self._findings = {f.fingerprint: f for f in findings}
        self._plans: dict[tuple[str, str, str | None], str | None] = {}

    def _plan(self, finding: Finding) -> str | None:
        from auditor.remediation.plan import plan

        key = (finding.rule, finding.workload.identity, finding.edge.to_role if finding.edge else None)
        if key not in self._plans:
            try:
                plans = plan(self._model, finding, "pin-zone")
            except Exception:  # a fix is a hint: never let it cost the answer
                plans = []
            self._plans[key] = plans[0].describe() if isinstance(plans, list) and plans else None
        return self._plans[key]

    def __getitem__(self, fingerprint: str) -> str:
        finding = self._findings[fingerprint]
        fix = self._plan(finding)
        if fix is None:
            raise KeyError(fingerprint)
        return fix

    def __iter__(self) -> Iterator[str]:
        return (fp for fp, f in self._findings.items() if self._plan(f) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class Checker:
    """Decisions over a warm model, under one config and policy pack."""

    def __init__(
        self, settings: Settings, pack: PolicyPack, model: WarmModel, *, before_cache: int = 64
    ) -> None:
        """`before_cache`: how many sets of findings of the state in force to keep (per set of
        workloads and the versions of their namespaces' buckets) for the next policy request over
        the same groups: a retry, or the next policy of a namespace applied before the watch
        brought the first (0: audit the state in force every time)."""
        self.settings = settings
        self.pack = pack
        self.model = model
        self.before_cache = before_cache
        self._before: OrderedDict[Hashable, list[Finding]] = OrderedDict()
        self._lock = threading.Lock()
        self._parsed_nodes: tuple[int, tuple[Node, ...], tuple[LoadError, ...]] | None = None

    def check(self, review: Review, today: date) -> Verdict:
        key = (review.kind.group, review.kind.kind)
        if review.sub_resource:
            return Verdict("ignored", reason=f"subresource {review.sub_resource} is not checked")
        if key in WORKLOAD_KINDS:
            if review.operation not in ("CREATE", "UPDATE"):
                return Verdict("ignored", reason=f"{review.operation} of a workload is not checked")
            owner = made_by(review.object or {})
            if owner is not None:
                return Verdict("ignored", reason=f"made by {owner}: judged through its owner")
            return self._workload(review, today)
        if key in POLICY_KINDS:
            if review.operation not in ("CREATE", "UPDATE", "DELETE"):
                return Verdict("ignored", reason=f"{review.operation} of a policy is not checked")
            return self._policy(review, today)
        return Verdict("ignored", reason=f"{review.kind.kind} ({review.kind.api_version}) is not checked")

    def warm(self) -> int:
        """Parse once what answers read again and again (every Node, Namespace and Service the
        model holds: build_inventory keeps them in the model's memo), so the first requests after
        the model syncs do not pay for it. Returns how many objects were read."""
        nodes, _ = self._nodes()
        documents = self.model.documents(self.model.namespaces(), [], policies=False, nodes=False)
        build_inventory(documents, self.settings, (), self._elsewhere(), memo=self.model.memo)
        return len(nodes) + len(documents)

    # -- the audit of a subset of the cluster --------------------------------------------------

    def _elsewhere(self) -> Elsewhere:
        cilium, calico = self.model.cni_kinds()
        return Elsewhere(cilium_kinds=cilium, calico_policies=calico)

    def _nodes(self) -> tuple[tuple[Node, ...], tuple[LoadError, ...]]:
        """The cluster's Nodes parsed, and the errors of those that do not parse: kept until the
        cluster bucket's version moves (each Node's parse is memoised besides)."""
        with self._lock:
            kept = self._parsed_nodes
        if kept is not None and kept[0] == self.model.version(""):
            return kept[1], kept[2]
        version, docs = self.model.nodes()
        inv = build_inventory(docs, self.settings, memo=self.model.memo)
        parsed = (version, tuple(inv.nodes), tuple(inv.errors))
        with self._lock:
            self._parsed_nodes = parsed
        return parsed[1], parsed[2]

    def _inventory(self, documents: list[yamlio.Document]) -> Inventory:
        nodes, errors = self._nodes()
        return build_inventory(
            documents, self.settings, errors, self._elsewhere(), memo=self.model.memo, nodes=nodes
        )

    def _changed(
        self,
        before: Inventory,
        context: Sequence[yamlio.Document],
        old: yamlio.Document | None,
        new: yamlio.Document | None,
    ) -> Inventory | None:
        """The inventory of the state after a policy change, made from the one before without
        parsing everything again: its policies (and their errors and notes) less those of `old`,
        plus those of `new`. None when the change can alter more than the policy set: the CNI it
        decides is not the same (`context`: the objects that decide it besides the policies), or
        the old or new policy compares a per-replica label (the roles are split by those)."""
        keys = replicas.replica_keys(before.workloads)
        changed = [d.data for d in (old, new) if d is not None]
        if keys and replicas.mentioned_tests((), (), changed, keys):
            return None
        part = build_inventory(
            [*context, *([new] if new is not None else [])],
            self.settings,
            (),
            self._elsewhere(),
            memo=self.model.memo,
        )
        if part.network != before.network:
            return None
        gone = old.source.file if old is not None else None
        return dataclasses.replace(
            before,
            policies=[p for p in before.policies if p.ref.source.file != gone] + part.policies,
            errors=[e for e in before.errors if e.file != gone]
            + [e for e in part.errors if new is not None and e.file == new.source.file],
            file_notes=[n for n in before.file_notes if n[0] != gone]
            + [n for n in part.file_notes if new is not None and n[0] == new.source.file],
        )

    def _findings(
        self, documents: list[yamlio.Document], today: date
    ) -> tuple[list[Finding], AuditModel | None, frozenset[str]]:
        findings, audited = self._audited(self._inventory(documents), today)
        return findings, audited.model, _running(audited)

    def _audited(
        self, inv: Inventory, today: date, like: Audited | None = None
    ) -> tuple[list[Finding], Audited]:
        audited = audit(inv, self.pack, like=like)
        result = finish(audited, self.pack, today)
        return [f for f in result.findings if decides(f)], audited

    def _fixes(self, model: AuditModel | None, findings: Sequence[Finding]) -> Mapping[str, str]:
        return {} if model is None else Fixes(model, findings)

    # -- workloads -----------------------------------------------------------------------------

    def _workload_findings(
        self, obj: dict[str, Any], review: Review, today: date
    ) -> tuple[list[Finding], AuditModel | None]:
        ns = str(obj["metadata"].get("namespace") or review.namespace)
        wid = identity(obj, ns)
        related = self.model.related(obj, ns, skip=wid)
        namespaces = {ns, *(r[0] for r in related)}
        documents = self.model.documents(namespaces, related, skip=[wid], nodes=False)
        documents.append(yamlio.Document(obj, _subject(obj, review)))
        findings, model, _ = self._findings(documents, today)
        return [f for f in findings if _concerns(f, wid)], model

    def _workload(self, review: Review, today: date) -> Verdict:
        assert review.object is not None
        obj = _prepared(review.object, review)
        findings, model = self._workload_findings(obj, review, today)
        kept: list[Finding] = []
        if findings and review.operation == "UPDATE" and review.old_object is not None:
            old = _prepared(review.old_object, review)
            before = {f.fingerprint for f in self._workload_findings(old, review, today)[0]}
            kept = [f for f in findings if f.fingerprint in before]
            findings = [f for f in findings if f.fingerprint not in before]
        groups = tuple(sorted({_group(f) for f in (*findings, *kept)}))
        return Verdict("workload", tuple(findings), tuple(kept), groups, fixes=self._fixes(model, findings))

    # -- policies ------------------------------------------------------------------------------

    def _policy(self, review: Review, today: date) -> Verdict:
        source = review.object if review.object is not None else review.old_object
        if source is None:
            return Verdict("ignored", reason="the request carries no object")
        obj = _prepared(source, review)
        meta = obj["metadata"]
        ns = str(meta.get("namespace") or "") if review.namespace else ""
        if not review.namespace:
            meta.pop("namespace", None)
        key = (ns, review.kind.group, review.kind.kind, str(meta["name"]))
        if ns:
            workloads = set(self.model.workloads(ns))
            for wid in list(workloads):
                found = self.model.get(*wid)
                if found is not None:
                    workloads |= self.model.related(found, ns, skip=wid)
            namespaces = {ns, *(w[0] for w in workloads)}
            chosen: set[WorkloadId] | None = workloads
        else:
            namespaces = set(self.model.namespaces_with_workloads())
            chosen = None
        if not namespaces or (chosen is not None and not chosen):
            return Verdict("policy")
        versions = self.model.versions(namespaces)  # before reading: a later event moves them on
        in_force = self.model.documents(namespaces, chosen, live=True, nodes=False)
        cache_key = (
            frozenset(chosen) if chosen is not None else None,
            versions,
            today,
        )
        with self._lock:
            before = self._before.get(cache_key)
            if before is not None:
                self._before.move_to_end(cache_key)

        def replaced(d: yamlio.Document) -> bool:
            return identity(d.data) == key or (not ns and identity(d.data)[1:] == key[1:])

        new_doc = yamlio.Document(obj, _subject(obj, review)) if review.operation != "DELETE" else None
        after_inv: Inventory | None = None
        like: Audited | None = None
        if before is None:
            before_inv = self._inventory(in_force)
            before, like = self._audited(before_inv, today)
            with self._lock:
                self._before[cache_key] = before
                while len(self._before) > self.before_cache:
                    self._before.popitem(last=False)
            old_doc = next((d for d in in_force if replaced(d)), None)
            context = [d for d in in_force if d.data.get("kind") == "ConfigMap"]
            after_inv = self._changed(before_inv, context, old_doc, new_doc)
        if after_inv is None:  # not built from the one before: nothing of its audit applies
            after_docs = [d for d in in_force if not replaced(d)] + ([new_doc] if new_doc else [])
            after_inv, like = self._inventory(after_docs), None
        after, audited = self._audited(after_inv, today, like)
        model, running = audited.model, _running(audited)
        known = {f.fingerprint for f in before}
        new = [f for f in after if f.fingerprint not in known]
        groups = tuple(sorted({_group(f) for f in new}))
        return Verdict("policy", tuple(new), (), groups, running & set(groups), fixes=self._fixes(model, new))
