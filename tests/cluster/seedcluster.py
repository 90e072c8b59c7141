"""The seed scenario as a live cluster would report it: the manifests plus uids, the ReplicaSet
and pods the controllers created, and each pod bound to a node (as in the lab: coordinator in
zone-b, workers in zone-a; or the fixed placement: everyone in zone-a)."""

from __future__ import annotations

import copy
import uuid
from typing import Any

import yaml

from auditor.resources import examples_dir

SEED = examples_dir() / "seed-lab"


def _uid(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, name))


def _load(path: str) -> list[dict[str, Any]]:
    out = []
    for doc in yaml.safe_load_all((SEED / path).read_text()):
        if not doc:
            continue
        if doc.get("kind", "").endswith("List"):
            out.extend(doc["items"])
        else:
            out.append(doc)
    return out


def _pod(
    name: str, template: dict[str, Any], owner: dict[str, Any], node: str, extra: dict[str, str]
) -> dict[str, Any]:
    meta = template["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": owner["metadata"]["namespace"],
            "uid": _uid("pod/" + name),
            "labels": {**meta.get("labels", {}), **extra},
            "ownerReferences": [
                {
                    "apiVersion": owner["apiVersion"],
                    "kind": owner["kind"],
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {**copy.deepcopy(template["spec"]), "nodeName": node},
        "status": {"phase": "Running", "podIP": "10.0.0.1"},
    }


def objects(
    state: str = "before", coordinator_node: str | None = None, secrets: bool = True
) -> list[dict[str, Any]]:
    """The cluster's objects. Pods are placed as the lab saw them (before) or as fixed (after)."""
    objs = _load(f"{state}/workload.yaml") + _load("policies.yaml") + _load("nodes.yaml")
    for o in objs:
        o.setdefault("metadata", {})["uid"] = _uid(
            f"{o['kind']}/{o['metadata'].get('namespace')}/{o['metadata']['name']}"
        )
    objs.append(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": "ml-demo",
                "uid": _uid("ns/ml-demo"),
                "labels": {"kubernetes.io/metadata.name": "ml-demo"},
            },
        }
    )
    deployment = next(o for o in objs if o["kind"] == "Deployment")
    job = next(o for o in objs if o["kind"] == "Job")
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": "trainer-coordinator-7d9f8",
            "namespace": "ml-demo",
            "uid": _uid("rs/coordinator"),
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": deployment["metadata"]["name"],
                    "uid": deployment["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "replicas": 1,
            "selector": deployment["spec"]["selector"],
            "template": copy.deepcopy(deployment["spec"]["template"]),
        },
    }
    objs.append(rs)
    node = coordinator_node or ("lab-worker3" if state == "before" else "lab-worker")
    objs.append(
        _pod(
            "trainer-coordinator-7d9f8-x2x4q",
            deployment["spec"]["template"],
            rs,
            node,
            {"pod-template-hash": "7d9f8"},
        )
    )
    for i in range(4):
        objs.append(
            _pod(
                f"trainer-workers-{i}-abcde",
                job["spec"]["template"],
                job,
                "lab-worker" if i % 2 == 0 else "lab-worker2",
                {
                    "batch.kubernetes.io/job-name": "trainer-workers",
                    "batch.kubernetes.io/controller-uid": job["metadata"]["uid"],
                },
            )
        )
    if secrets:
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "db-password", "namespace": "ml-demo"},
                "data": {"password": "aHVudGVyMg=="},
            }
        )
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "app-settings", "namespace": "ml-demo"},
                "data": {"token": "not-for-us"},
            }
        )
    objs.append(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cilium-config", "namespace": "kube-system"},
            "data": {"enable-policy": "default", "cluster-name": "lab"},
        }
    )
    return objs
