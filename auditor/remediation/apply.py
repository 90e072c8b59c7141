"""Apply a fix plan to the files that define the workloads: one minimal edit per change.

The pod template of a role is found by kind (`spec.template` of a Deployment, `spec.<kind>ReplicaSpecs.
<Role>.template` of a Kubeflow job, a JobSet's replicated job, ...). Each change is a splice
(auditor/yamledit.py); after the edits the document is parsed again and must hold exactly the
intended values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from auditor import yamledit
from auditor.model.objects import Role
from auditor.remediation import render
from auditor.remediation.plan import FixPlan, RolePatch

PathPart = str | int
_KUBEFLOW = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "PaddleJob": "paddleReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
}


class FixError(ValueError):
    pass


def template_path(kind: str, api_version: str, obj: Mapping[str, Any], role: str) -> tuple[PathPart, ...]:
    """Where the role's pod template (the mapping with metadata and spec) is in the manifest."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    if kind == "Pod":
        return ()
    if kind in ("Deployment", "StatefulSet", "ReplicaSet", "DaemonSet", "ReplicationController") or (
        kind == "Job" and api_version == "batch/v1"
    ):
        return ("spec", "template")
    if kind == "CronJob":
        return ("spec", "jobTemplate", "spec", "template")
    if kind in _KUBEFLOW:
        return ("spec", _KUBEFLOW[kind], role, "template")
    if kind == "JobSet":
        for i, rjob in enumerate(spec.get("replicatedJobs") or []):
            if isinstance(rjob, Mapping) and rjob.get("name") == role:
                return ("spec", "replicatedJobs", i, "template", "spec", "template")
    if kind in ("RayCluster", "RayJob"):
        base: tuple[PathPart, ...] = ("spec",) if kind == "RayCluster" else ("spec", "rayClusterSpec")
        cluster = spec if kind == "RayCluster" else spec.get("rayClusterSpec") or {}
        if role == "head":
            return (*base, "headGroupSpec", "template")
        for i, group in enumerate(cluster.get("workerGroupSpecs") or []):
            if isinstance(group, Mapping) and str(group.get("groupName") or f"group-{i}") == role:
                return (*base, "workerGroupSpecs", i, "template")
    if kind == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate") or {}
        if role == "leader" and isinstance(lwt, Mapping) and lwt.get("leaderTemplate") is not None:
            return ("spec", "leaderWorkerTemplate", "leaderTemplate")
        return ("spec", "leaderWorkerTemplate", "workerTemplate")
    if kind == "Job" and api_version.startswith("batch.volcano.sh/"):
        for i, task in enumerate(spec.get("tasks") or []):
            if isinstance(task, Mapping) and task.get("name") == role:
                return ("spec", "tasks", i, "template")
    raise FixError(f"{kind} {role}: no automatic fix for this kind (the pod template is not in the manifest)")


@dataclass(frozen=True, slots=True)
class FileEdit:
    file: str
    before: str
    after: str


def _exists(text: str, root: Any, path: Sequence[PathPart]) -> bool:
    try:
        yamledit.find(text, root, path)
    except yamledit.EditError:
        return False
    return True


def _apply_role(
    text: str, line: int, base: tuple[PathPart, ...], patch: RolePatch, strategy: str, zone_key: str
) -> str:
    pod_spec = (*base, "spec")
    meta = (*base, "metadata")
    values: dict[str, Any] = {
        "zone_key": zone_key,
        "tolerations": [render.toleration(t) for t in patch.tolerations],
    }
    if strategy == "follow-coordinator":
        values["coordinator_labels"] = dict(patch.coordinator_labels)
    elif strategy == "kueue-topology" and not patch.kueue:
        strategy = "pin-zone"
    if strategy in ("pin-zone", "zone-label"):
        values["zone"] = patch.zone or ""
        strategy = "pin-zone"
    fragment = (
        render.render(strategy, **values)
        if (patch.zone or patch.tolerations or patch.coordinator_labels or patch.kueue)
        else {}
    )
    for key, value in patch.labels:
        text = yamledit.set_scalar(text, yamledit.locate(text, line), (*meta, "labels", key), value)
    if fragment.get("tolerations"):
        root = yamledit.locate(text, line)
        if _exists(text, root, (*pod_spec, "tolerations")):
            text = yamledit.append_items(
                text, root, (*pod_spec, "tolerations"), render.block(fragment["tolerations"])
            )
        else:
            text = yamledit.insert_keys(
                text, root, pod_spec, render.block({"tolerations": fragment["tolerations"]})
            )
    for affinity_key in ("nodeAffinity", "podAffinity"):
        if affinity_key not in fragment:
            continue
        root = yamledit.locate(text, line)
        if _exists(text, root, (*pod_spec, "affinity", affinity_key)):
            raise FixError(f"the pod template already has affinity.{affinity_key}; merge the change by hand")
        if _exists(text, root, (*pod_spec, "affinity")):
            text = yamledit.insert_keys(
                text, root, (*pod_spec, "affinity"), render.block({affinity_key: fragment[affinity_key]})
            )
        else:
            text = yamledit.insert_keys(
                text, root, pod_spec, render.block({"affinity": {affinity_key: fragment[affinity_key]}})
            )
    if fragment.get("annotations"):
        root = yamledit.locate(text, line)
        if _exists(text, root, (*meta, "annotations")):
            text = yamledit.insert_keys(
                text, root, (*meta, "annotations"), render.block(fragment["annotations"])
            )
        else:
            text = yamledit.insert_keys(
                text, root, meta, render.block({"annotations": fragment["annotations"]})
            )
    return text


def _get(data: Any, path: Sequence[PathPart]) -> Any:
    for part in path:
        data = data[part]
    return data


def _check(text: str, line: int, base: tuple[PathPart, ...], patch: RolePatch) -> None:
    """The edited document must parse and hold the intended values."""
    root = yamledit.locate(text, line)
    data = yaml.SafeLoader(text)
    try:
        obj = data.construct_document(root)
    finally:
        data.dispose()
    template = _get(obj, base)
    labels = (template.get("metadata") or {}).get("labels") or {}
    for key, value in patch.labels:
        if labels.get(key) != value:
            raise FixError(f"after the edit, label {key} is {labels.get(key)!r}, not {value!r}")


def apply(
    plan: FixPlan, texts: Mapping[str, str], raw_of: Mapping[Role, Any], zone_key: str
) -> dict[str, str]:
    """The new text of every file the plan touches (files not in `texts` cannot be edited)."""
    out = dict(texts)
    for patch in plan.patches:
        w = patch.role.workload
        if w.source.file not in out:
            raise FixError(f"{w} comes from {w.source.file}, which is not a file this fix can edit")
        if w.source.file.endswith("(rendered)") or "cluster:" in w.source.file:
            raise FixError(f"{w} is not written in a manifest file")
        base = template_path(w.kind, w.api_version, raw_of.get(patch.role) or {}, patch.role.name)
        try:
            text = _apply_role(out[w.source.file], w.source.line, base, patch, plan.strategy, zone_key)
            _check(text, w.source.line, base, patch)
        except (yamledit.EditError, render.RenderError) as exc:
            raise FixError(f"{w.source.file}: {w}: {exc}") from None
        out[w.source.file] = text
    return {f: t for f, t in out.items() if t != texts[f]}
