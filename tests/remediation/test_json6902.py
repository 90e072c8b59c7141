"""JSON patch operations for pod templates inside lists (Kustomize overlays of JobSets, Ray worker
groups, Volcano tasks): `add` needs its parent, so what exists decides the operations."""

from __future__ import annotations

from typing import Any

import jsonpatch
import pytest

from auditor.model.objects import PodTemplate, Role, Taint, WorkloadRef
from auditor.model.source import SourceRef
from auditor.remediation.apply import FixError, kustomize_json6902
from auditor.remediation.plan import RolePatch

BASE = ("spec", "replicatedJobs", 1, "template", "spec", "template")


def _role() -> Role:
    ref = WorkloadRef("jobset.x-k8s.io/v1alpha2", "JobSet", "ml", "js", SourceRef("js.yaml", 1))
    return Role(ref, "workers", 2, PodTemplate(labels=()), SourceRef("js.yaml", 1))


def _zone_a_with_gpu() -> RolePatch:
    """Pin to zone a, correct the zone label to a, tolerate the GPU taint."""
    return RolePatch(
        _role(),
        zone="a",
        labels=(("topology.kubernetes.io/zone", "a"),),
        tolerations=(Taint("gpu", "x", "NoSchedule"),),
    )


def _jobset(template: dict[str, Any]) -> dict[str, Any]:
    other = {"name": "driver", "template": {"spec": {"template": {"spec": {"containers": []}}}}}
    return {
        "spec": {"replicatedJobs": [other, {"name": "workers", "template": {"spec": {"template": template}}}]}
    }


def test_missing_parents_are_added_whole() -> None:
    obj = _jobset({"spec": {"containers": [{"name": "c"}]}})
    patch = _zone_a_with_gpu()
    ops = kustomize_json6902(patch, "pin-zone", "topology.kubernetes.io/zone", obj, BASE)
    prefix = "/spec/replicatedJobs/1/template/spec/template"
    assert [(o["op"], o["path"]) for o in ops] == [
        ("add", f"{prefix}/metadata"),
        ("add", f"{prefix}/spec/affinity"),
        ("add", f"{prefix}/spec/tolerations"),
    ]
    assert ops[0]["value"] == {"labels": {"topology.kubernetes.io/zone": "a"}}
    after = jsonpatch.apply_patch(obj, ops)
    pod = after["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]
    assert pod["spec"]["tolerations"] == [
        {"key": "gpu", "operator": "Equal", "value": "x", "effect": "NoSchedule"}
    ]
    assert after["spec"]["replicatedJobs"][0] == obj["spec"]["replicatedJobs"][0]  # the other item kept


def test_existing_members_are_added_one_by_one_and_keys_escaped() -> None:
    obj = _jobset(
        {
            "metadata": {"labels": {"app": "x", "topology.kubernetes.io/zone": "b"}},
            "spec": {
                "affinity": {"podAntiAffinity": {}},
                "tolerations": [{"key": "old", "operator": "Exists"}],
                "containers": [],
            },
        }
    )
    patch = _zone_a_with_gpu()
    ops = kustomize_json6902(patch, "pin-zone", "topology.kubernetes.io/zone", obj, BASE)
    paths = [o["path"].removeprefix("/spec/replicatedJobs/1/template/spec/template") for o in ops]
    assert paths == [
        "/metadata/labels/topology.kubernetes.io~1zone",
        "/spec/affinity/nodeAffinity",
        "/spec/tolerations/-",
    ]
    pod = jsonpatch.apply_patch(obj, ops)["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]
    assert pod["metadata"]["labels"] == {"app": "x", "topology.kubernetes.io/zone": "a"}
    assert set(pod["spec"]["affinity"]) == {"podAntiAffinity", "nodeAffinity"}
    assert [t["key"] for t in pod["spec"]["tolerations"]] == ["old", "gpu"]


def test_an_existing_node_affinity_is_left_to_a_person() -> None:
    obj = _jobset({"spec": {"affinity": {"nodeAffinity": {"x": 1}}, "containers": []}})
    with pytest.raises(FixError, match=r"already has affinity\.nodeAffinity"):
        kustomize_json6902(RolePatch(_role(), zone="a"), "pin-zone", "topology.kubernetes.io/zone", obj, BASE)


def test_a_template_missing_from_the_rendered_object_is_refused() -> None:
    with pytest.raises(FixError, match="not where the rendered object has it"):
        kustomize_json6902(RolePatch(_role(), zone="a"), "pin-zone", "z", {"spec": {}}, BASE)
