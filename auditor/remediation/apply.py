"""Apply a fix plan to the files that define the workloads: one minimal edit per change.

The pod template of a role is found by kind (`spec.template` of a Deployment, `spec.<kind>ReplicaSpecs.
<Role>.template` of a Kubeflow job, a JobSet's replicated job, ...). Each change is a splice
(auditor/remediation/yamledit.py); after the edits the document is parsed again and must hold exactly the
intended values.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from auditor.model.objects import Role
from auditor.remediation import render, yamledit
from auditor.remediation.plan import FixPlan, RolePatch
from auditor.workloads.adapters import KUBEFLOW_REPLICA_SPECS

PathPart = str | int


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
    if kind in KUBEFLOW_REPLICA_SPECS:
        return ("spec", KUBEFLOW_REPLICA_SPECS[kind], role, "template")
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
    fragment = _fragment(patch, strategy, zone_key)
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
        text = _add_keys(text, root, pod_spec, "affinity", {affinity_key: fragment[affinity_key]})
    if fragment.get("annotations"):
        text = _add_keys(text, yamledit.locate(text, line), meta, "annotations", fragment["annotations"])
    return text


def _add_keys(
    text: str, root: yaml.Node, parent: tuple[PathPart, ...], key: str, value: Mapping[str, Any]
) -> str:
    """The keys of `value` added first in the mapping `key` under `parent`, created when absent."""
    if _exists(text, root, (*parent, key)):
        return yamledit.insert_keys(text, root, (*parent, key), render.block(value))
    return yamledit.insert_keys(text, root, parent, render.block({key: value}))


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


def _fragment(patch: RolePatch, strategy: str, zone_key: str) -> dict[str, Any]:
    values: dict[str, Any] = {
        "zone_key": zone_key,
        "tolerations": [render.toleration(t) for t in patch.tolerations],
    }
    if strategy == "follow-coordinator":
        values["coordinator_labels"] = dict(patch.coordinator_labels)
    elif strategy != "kueue-topology" or not patch.kueue:
        strategy = "pin-zone"
        values["zone"] = patch.zone or ""
    if not (patch.zone or patch.tolerations or patch.coordinator_labels or patch.kueue):
        return {}
    return render.render(strategy, **values)


def kustomize_patch(
    patch: RolePatch, strategy: str, zone_key: str, base_doc: Mapping[str, Any], base: tuple[PathPart, ...]
) -> dict[str, Any]:
    """A patch for the overlay (strategic merge for built-in kinds, JSON merge for CRDs): maps
    merge, so only what changes is written; lists are replaced, so tolerations are written whole."""
    if any(isinstance(part, int) for part in base):
        raise FixError("the pod template sits in a list: use kustomize_json6902")
    fragment = _fragment(patch, strategy, zone_key)
    template: dict[str, Any] = {}
    meta = {
        k: v for k, v in (("labels", dict(patch.labels)), ("annotations", fragment.get("annotations"))) if v
    }
    if meta:
        template["metadata"] = meta
    spec: dict[str, Any] = {}
    affinity = {k: fragment[k] for k in ("nodeAffinity", "podAffinity") if k in fragment}
    existing = patch.role.template.scheduling.affinity_kinds
    for key in affinity:
        if key in existing:
            raise FixError(f"the pod template already has affinity.{key}; merge the change by hand")
    if affinity:
        spec["affinity"] = affinity
    if fragment.get("tolerations"):
        old = [{k: v for k, v in asdict(t).items() if v} for t in patch.role.template.tolerations]
        spec["tolerations"] = [*old, *fragment["tolerations"]]
    if spec:
        template["spec"] = spec
    body: Any = template
    for part in reversed(base):
        body = {part: body}
    meta_raw = base_doc.get("metadata")
    meta_src: Mapping[str, Any] = meta_raw if isinstance(meta_raw, Mapping) else {}
    head: dict[str, Any] = {
        "apiVersion": base_doc.get("apiVersion"),
        "kind": base_doc.get("kind"),
        "metadata": {"name": meta_src.get("name")},
    }
    if meta_src.get("namespace"):
        head["metadata"]["namespace"] = meta_src["namespace"]
    return {**head, **body}


def _pointer(parts: Sequence[PathPart]) -> str:
    """A JSON Pointer (RFC 6901): `~` and `/` inside a part are escaped."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def kustomize_json6902(
    patch: RolePatch, strategy: str, zone_key: str, rendered: Mapping[str, Any], base: tuple[PathPart, ...]
) -> list[dict[str, Any]]:
    """JSON patch operations (RFC 6902) for a pod template inside a list (a JobSet's replicated job,
    a Ray worker group, a Volcano task), which merge patches cannot address: lists are replaced
    whole by a merge patch, and these CRDs declare no merge keys. Paths are checked against the
    object as the overlay renders it (`rendered`): `add` needs the parent to exist, so a missing
    mapping is added whole, and an existing one member by member."""
    try:
        template = _get(rendered, base)
    except (KeyError, IndexError, TypeError):
        raise FixError("the pod template is not where the rendered object has it") from None
    if not isinstance(template, Mapping):
        raise FixError("the pod template is not a mapping")
    fragment = _fragment(patch, strategy, zone_key)
    ops: list[dict[str, Any]] = []

    def add(parts: Sequence[PathPart], value: Any) -> None:
        ops.append({"op": "add", "path": _pointer((*base, *parts)), "value": value})

    wanted = {"labels": dict(patch.labels), "annotations": fragment.get("annotations") or {}}
    wanted_meta = {group: values for group, values in wanted.items() if values}
    meta = template.get("metadata")
    if wanted_meta and not isinstance(meta, Mapping):
        add(["metadata"], wanted_meta)
    else:
        for group, values in wanted_meta.items():
            assert isinstance(meta, Mapping)
            if not isinstance(meta.get(group), Mapping):
                add(["metadata", group], values)
            else:
                for key, value in values.items():
                    add(["metadata", group, key], value)  # `add` on a member replaces its value
    spec = template.get("spec")
    if not isinstance(spec, Mapping):
        raise FixError("the pod template has no spec")
    affinity = {k: fragment[k] for k in ("nodeAffinity", "podAffinity") if k in fragment}
    existing = spec.get("affinity")
    if affinity:
        if not isinstance(existing, Mapping):
            add(["spec", "affinity"], affinity)
        else:
            for key, value in affinity.items():
                if key in existing:
                    raise FixError(f"the pod template already has affinity.{key}; merge the change by hand")
                add(["spec", "affinity", key], value)
    tolerations = fragment.get("tolerations") or []
    if tolerations:
        if isinstance(spec.get("tolerations"), list):
            for t in tolerations:
                add(["spec", "tolerations", "-"], t)
        else:
            add(["spec", "tolerations"], tolerations)
    return ops


def _target(doc: Mapping[str, Any]) -> dict[str, str]:
    """A Kustomize patch target (group, version, kind, name, and the namespace when the document
    declares one) for an object."""
    api_version = str(doc.get("apiVersion") or "")
    group, _, version = api_version.rpartition("/")
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    target = {"group": group, "version": version, "kind": str(doc.get("kind")), "name": str(meta.get("name"))}
    if meta.get("namespace"):
        target["namespace"] = str(meta["namespace"])
    if not group:
        del target["group"]
    return target


def _template_path_or_none(role: Role, raw: Mapping[str, Any]) -> tuple[PathPart, ...]:
    w = role.workload
    try:
        return template_path(w.kind, w.api_version, raw, role.name)
    except FixError:
        return ()  # reported when the role itself is applied


def _merged(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Two merge-patch bodies of one object as one: mappings merged key by key, anything else
    taken from `b` (the roles of a workload write to different templates)."""
    out = dict(a)
    for key, value in b.items():
        old = out.get(key)
        out[key] = _merged(old, value) if isinstance(old, Mapping) and isinstance(value, Mapping) else value
    return out


def _reference(kustomization: str, patch_file: str, target: Mapping[str, str] | None = None) -> str:
    """kustomization.yaml with `patches: [- path: patch_file]` (and its `target`, for a JSON
    patch) added (once)."""
    data = yaml.safe_load(kustomization) if kustomization.strip() else {}
    if not isinstance(data, dict):
        raise FixError("the kustomization is not a mapping")
    if any(isinstance(p, Mapping) and p.get("path") == patch_file for p in data.get("patches") or []):
        return kustomization
    entry = render.block([{"path": patch_file, **({"target": dict(target)} if target else {})}])
    if not data:
        return kustomization + "patches:\n" + entry
    root = yamledit.locate(kustomization, 1)
    if "patches" in data:
        return yamledit.append_items(kustomization, root, ["patches"], entry)
    return yamledit.insert_keys(kustomization, root, [], "patches:\n" + entry)


def apply(
    plan: FixPlan, read: Callable[[str], str], raw_of: Mapping[Role, Any], zone_key: str
) -> dict[str, str]:
    """The new text of every file the plan touches; `read` gives a file's current text ("" when new)."""
    out: dict[str, str] = {}

    def text_of(file: str) -> str:
        return out[file] if file in out else read(file)

    # One patch file per workload holds the changes of all its roles: merge-patch bodies are merged,
    # JSON patch operations concatenated. A workload with any role inside a list (a Ray cluster's
    # worker groups beside its head) gets JSON patch operations for every role.
    bodies: dict[str, dict[str, Any]] = {}
    operations: dict[str, list[dict[str, Any]]] = {}
    in_lists = {
        p.role.workload
        for p in plan.patches
        if any(isinstance(part, int) for part in _template_path_or_none(p.role, raw_of.get(p.role) or {}))
    }
    # Bottom-up within a file, so earlier documents' lines stay where the loader saw them.
    ordered = sorted(plan.patches, key=lambda p: (p.role.workload.source.file, -p.role.workload.source.line))
    for patch in ordered:
        w = patch.role.workload
        if "cluster:" in w.source.file or w.source.file.endswith("(rendered)"):
            raise FixError(f"{w} is not written in a manifest file")
        base = template_path(w.kind, w.api_version, raw_of.get(patch.role) or {}, patch.role.name)
        if w.source.via.startswith("helm:"):
            raise FixError(
                f"{w} is rendered from the Helm chart {w.source.via[5:]}: editing the chart's values.yaml "
                "is not automated; set its affinity and tolerations values by hand"
            )
        try:
            if w.source.via:
                overlay = Path(w.source.via).parent
                name = re.sub(r"[^a-z0-9.-]+", "-", f"placement-auditor-{w.kind}-{w.name}".lower())
                patch_file = str(overlay / f"{name}.yaml")
                text = text_of(w.source.file)
                root = yamledit.locate(text, w.source.line)  # the document of the object, alone
                base_doc = yaml.safe_load(text[root.start_mark.index : root.end_mark.index]) or {}
                header = "# Written by placement-auditor fix: keep the group in one zone.\n"
                if w in in_lists:
                    # The template sits in a list: JSON patch operations, applied to the object
                    # the overlay renders (the inventory's copy of it).
                    rendered = raw_of.get(patch.role) or {}
                    ops = operations.setdefault(patch_file, [])
                    ops.extend(kustomize_json6902(patch, plan.strategy, zone_key, rendered, base))
                    out[patch_file] = header + render.block(ops)
                    # The target names the object as the source file writes it: the overlay's
                    # patches run before its namespace (and name prefix) transformers.
                    target = _target(base_doc)
                    out[w.source.via] = _reference(text_of(w.source.via), Path(patch_file).name, target)
                    continue
                data = kustomize_patch(patch, plan.strategy, zone_key, base_doc, base)
                body = bodies[patch_file] = _merged(bodies.get(patch_file, {}), data)
                out[patch_file] = header + render.block(body)
                out[w.source.via] = _reference(text_of(w.source.via), Path(patch_file).name)
                continue
            text = _apply_role(text_of(w.source.file), w.source.line, base, patch, plan.strategy, zone_key)
            _check(text, w.source.line, base, patch)
        except (yamledit.EditError, render.RenderError) as exc:
            raise FixError(f"{w.source.file}: {w}: {exc}") from None
        out[w.source.file] = text
    return {f: t for f, t in out.items() if t != read(f)}
