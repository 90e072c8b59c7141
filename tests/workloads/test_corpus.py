"""Every example of the upstream workload corpus loads with the right roles and edges."""

from __future__ import annotations

import pytest
from support import DATA, inventory

from auditor.workloads.edges import comm_edges

CORPUS = DATA / "workloads"
RUNTIME = CORPUS / "15-clustertrainingruntime-torch.yaml"
E = None  # the ephemeral range (NCCL, MPI data)

EXPECTED: dict[str, tuple[str, list[tuple[str, int]], set[tuple[str, str, int | None]]]] = {
    "01": (
        "PyTorchJob",
        [("Master", 1), ("Worker", 1)],
        {("Worker", "Master", 23456), ("Worker", "Master", E), ("Master", "Worker", E)},
    ),
    "02": (
        "PyTorchJob",
        [("Master", 1), ("Worker", 1)],
        {("Worker", "Master", 23456), ("Worker", "Master", E), ("Master", "Worker", E)},
    ),
    "03": ("PyTorchJob", [("Worker", 2)], {("Worker", "Worker", 29400), ("Worker", "Worker", E)}),
    "04": (
        "TFJob",
        [("Chief", 1), ("PS", 1), ("Worker", 2)],
        {
            ("Chief", "PS", 2222),
            ("PS", "Chief", 2222),
            ("Worker", "PS", 2222),
            ("PS", "Worker", 2222),
            ("Worker", "Worker", 2222),
            ("Worker", "Chief", 2222),
            ("Chief", "Worker", 2222),
        },
    ),
    "05": ("TFJob", [("Worker", 2)], {("Worker", "Worker", 2222)}),
    "06": ("XGBoostJob", [("Master", 1), ("Worker", 2)], {("Worker", "Master", 9991)}),
    "09": ("MPIJob", [("Launcher", 1), ("Worker", 2)], {("Launcher", "Worker", 22), ("Worker", "Worker", E)}),
    "10": ("MPIJob", [("Launcher", 1), ("Worker", 2)], {("Launcher", "Worker", 22), ("Worker", "Worker", E)}),
    "11": ("MPIJob", [("Launcher", 1), ("Worker", 2)], {("Launcher", "Worker", 22), ("Worker", "Worker", E)}),
    "13": ("JobSet", [("workers", 4), ("driver", 1)], {("workers", "driver", E)}),
    "14": ("JobSet", [("workers", 4)], {("workers", "workers", 3389)}),
    "16": ("TrainJob", [("node", 3)], {("node", "node", 29500), ("node", "node", E)}),
    "17": ("TrainJob", [("node", 2)], {("node", "node", 29500), ("node", "node", E)}),
    "18": ("JobSet", [("workers", 4)], set()),
    "20": ("LeaderWorkerSet", [("leader", 2), ("worker", 4)], {("worker", "leader", 80)}),
    "22": ("RayJob", [("head", 1), ("small-group", 1)], {("small-group", "head", 6379)}),
}


@pytest.mark.parametrize("prefix", sorted(EXPECTED))
def test_roles_and_edges(prefix: str) -> None:
    (path,) = CORPUS.glob(f"{prefix}-*.yaml")
    inv = inventory([path, RUNTIME] if prefix in ("16", "17") else [path])
    assert inv.errors == []
    kind, roles, edges = EXPECTED[prefix]
    (workload,) = inv.workloads
    assert workload.ref.kind == kind
    assert [(r.name, r.replicas) for r in workload.roles] == roles
    got = {(e.source.name, e.destination.name, e.port) for e in comm_edges(inv.workloads, inv.services)}
    assert got == edges


@pytest.mark.parametrize(
    ("prefix", "labels"),
    [
        (
            "01",
            {
                "training.kubeflow.org/job-name": "pytorch-simple",
                "training.kubeflow.org/replica-type": "master",
                "training.kubeflow.org/job-role": "master",
            },
        ),
        (
            "14",
            {"jobset.sigs.k8s.io/jobset-name": "pytorch", "jobset.sigs.k8s.io/replicatedjob-name": "workers"},
        ),
        ("22", {"ray.io/cluster": "rayjob-sample", "ray.io/node-type": "head"}),
        ("20", {"leaderworkerset.sigs.k8s.io/name": "nginx-leaderworkerset"}),
    ],
)
def test_operator_labels(prefix: str, labels: dict[str, str]) -> None:
    (path,) = CORPUS.glob(f"{prefix}-*.yaml")
    role = inventory([path]).workloads[0].roles[0]
    assert labels.items() <= role.template.label_map.items()


def test_runtime_patches_reach_the_node_pods() -> None:
    (path,) = CORPUS.glob("17-*.yaml")
    (w,) = inventory([path, RUNTIME]).workloads
    (node,) = w.roles
    assert dict(node.template.node_selector) == {"node-type": "training"}
    assert [(t.key, t.value, t.effect) for t in node.template.tolerations] == [
        ("training-workload", "true", "NoSchedule")
    ]
    assert node.template.service_account == "training-sa"
    assert node.template.label_map["team"] == "ml-platform"


def test_trainjob_without_its_runtime_is_an_error_naming_the_field() -> None:
    (path,) = CORPUS.glob("16-*.yaml")
    inv = inventory([path])
    assert [(e.field, e.object) for e in inv.errors] == [
        ("spec.runtimeRef.name", "TrainJob default/multi-node-example")
    ]
    assert "ClusterTrainingRuntime 'torch-distributed'" in inv.errors[0].message


def test_kueue_objects_are_read_not_errors() -> None:
    # The Kueue TAS setup (Topology, ResourceFlavor, ClusterQueue, LocalQueue) is read by
    # placement/kueue.py (tests/placement/test_kueue.py): no error, nothing skipped.
    (path,) = CORPUS.glob("24-*.yaml")
    inv = inventory([path])
    assert inv.errors == [] and inv.skipped_kinds == {}
    assert inv.queues.local == {("default", "tas-user-queue"): "tas-cluster-queue"}
    assert inv.queues.topologies == {
        "default": (
            "cloud.provider.com/topology-block",
            "cloud.provider.com/topology-rack",
            "kubernetes.io/hostname",
        )
    }
    flavor = inv.queues.flavors["tas-flavor"]
    assert (
        flavor.node_labels == (("cloud.provider.com/node-group", "tas-group"),)
        and flavor.topology == "default"
    )
