"""Pods in the scanned tree (`kubectl get pods -o yaml` next to the manifests) are observations of
their owner workloads: by ownerReferences (kind and name, uid when both sides carry one; a
ReplicaSet that is not in the tree stands for its Deployment by `pod-template-hash`), with
`observed` findings on the owner, and never `role-unschedulable` once bound to a node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import DATA

from auditor import cli
from auditor.audit.scan import scan
from auditor.settings.config import NetworkConfig, Settings
from auditor.sources.manifests import Tools, load_inventory

LAB = DATA / "seed-lab"

# What `kubectl get pods -n ml-demo -o yaml` prints for the seed lab as placed (abridged: no
# managedFields, fewer status fields): the coordinator on a zone-b node, the workers in zone-a.
SEED_PODS = """\
apiVersion: v1
kind: {list_kind}
items:
- apiVersion: v1
  kind: Pod
  metadata:
    creationTimestamp: "2026-03-02T09:14:03Z"
    generateName: trainer-coordinator-7d9f8c6b4-
    labels:
      app: trainer
      pod-template-hash: 7d9f8c6b4
      role: coordinator
      zone: zone-b
    name: trainer-coordinator-7d9f8c6b4-x2x4q
    namespace: ml-demo
    ownerReferences:
    - apiVersion: apps/v1
      blockOwnerDeletion: true
      controller: true
      kind: ReplicaSet
      name: trainer-coordinator-7d9f8c6b4
      uid: 5b0c6a2e-64a1-4b8e-9f0e-1c2d3e4f5a61
    resourceVersion: "48121"
    uid: 0f6e1c1a-1111-4c1e-8d55-2b3a4c5d6e01
  spec:
    containers:
    - command: ["sh", "-c", "while true; do nc -l -p 9999; done"]
      image: busybox:1.36
      name: coordinator
      ports:
      - {containerPort: 9999, name: rendezvous, protocol: TCP}
      resources:
        requests: {cpu: 100m, memory: 64Mi}
    nodeName: {coordinator_node}
    restartPolicy: Always
    schedulerName: default-scheduler
    tolerations:
    - {effect: NoExecute, key: node.kubernetes.io/not-ready, operator: Exists, tolerationSeconds: 300}
  status:
    conditions:
    - {lastTransitionTime: "2026-03-02T09:14:03Z", status: "True", type: PodScheduled}
    hostIP: 172.18.0.4
    phase: Running
    podIP: 10.244.3.7
    podIPs:
    - ip: 10.244.3.7
- apiVersion: v1
  kind: Pod
  metadata:
    generateName: trainer-workers-
    labels:
      app: trainer
      batch.kubernetes.io/controller-uid: {job_uid}
      batch.kubernetes.io/job-name: trainer-workers
      controller-uid: {job_uid}
      job-name: trainer-workers
      role: gpu-worker
      zone: zone-a
    name: trainer-workers-8kq2m
    namespace: ml-demo
    ownerReferences:
    - apiVersion: batch/v1
      blockOwnerDeletion: true
      controller: true
      kind: Job
      name: trainer-workers
      uid: {job_uid}
    uid: 0f6e1c1a-2222-4c1e-8d55-2b3a4c5d6e02
  spec:
    containers:
    - image: busybox:1.36
      name: worker
    nodeName: lab-worker
    nodeSelector: {gpu: "true"}
    tolerations:
    - {effect: NoSchedule, key: gpu, value: present}
  status:
    phase: Running
    podIP: 10.244.1.9
- apiVersion: v1
  kind: Pod
  metadata:
    labels:
      app: trainer
      batch.kubernetes.io/controller-uid: {job_uid}
      batch.kubernetes.io/job-name: trainer-workers
      controller-uid: {job_uid}
      job-name: trainer-workers
      role: gpu-worker
      zone: zone-a
    name: trainer-workers-tz7vw
    namespace: ml-demo
    ownerReferences:
    - apiVersion: batch/v1
      blockOwnerDeletion: true
      controller: true
      kind: Job
      name: trainer-workers
      uid: {job_uid}
    uid: 0f6e1c1a-3333-4c1e-8d55-2b3a4c5d6e03
  spec:
    containers:
    - image: busybox:1.36
      name: worker
    nodeName: lab-worker2
    nodeSelector: {gpu: "true"}
    tolerations:
    - {effect: NoSchedule, key: gpu, value: present}
  status:
    phase: Running
    podIP: 10.244.2.4
metadata:
  resourceVersion: ""
"""
JOB_UID = "9a1b2c3d-4e5f-4061-8a7b-9c0d1e2f3a4b"


def seed_tree(
    tmp_path: Path,
    list_kind: str = "List",
    coordinator_node: str = "lab-worker3",
    job_uid: str = JOB_UID,
    workload_uid: str | None = None,
) -> Path:
    """The seed lab's before/ manifests, nodes and policies, plus a dump of its pods."""
    tree = tmp_path / "tree"
    tree.mkdir(parents=True)
    for name in ("nodes.yaml", "policies.yaml"):
        (tree / name).write_text((LAB / name).read_text())
    workload = (LAB / "before" / "workload.yaml").read_text()
    if workload_uid is not None:  # the Job as `kubectl get job -o yaml` would print it
        workload = workload.replace(
            "  name: trainer-workers\n  namespace: ml-demo\n",
            f"  name: trainer-workers\n  namespace: ml-demo\n  uid: {workload_uid}\n",
        )
    (tree / "workload.yaml").write_text(workload)
    (tree / "pods.yaml").write_text(
        SEED_PODS.replace("{list_kind}", list_kind)
        .replace("{coordinator_node}", coordinator_node)
        .replace("{job_uid}", job_uid)
    )
    return tree


def report(tree: Path, capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[type-arg]
    code = cli.main(["scan", str(tree), "--format", "json", "--fail-on", "none"])
    assert code == 0
    out: dict = json.loads(capsys.readouterr().out)  # type: ignore[type-arg]
    assert out["errors"] == []
    return out


def rows(out: dict) -> list[tuple[str, str, str, str]]:  # type: ignore[type-arg]
    return [
        (f["rule"], f["certainty"], f["workload"]["kind"], f["workload"]["name"]) for f in out["findings"]
    ]


@pytest.mark.parametrize("list_kind", ["List", "PodList"])
def test_the_seed_lab_with_its_pods_dumped_is_one_observed_block_on_the_owner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], list_kind: str
) -> None:
    out = report(seed_tree(tmp_path, list_kind), capsys)
    assert rows(out) == [("cross-zone-blocked", "observed", "Job", "trainer-workers")]
    (finding,) = out["findings"]
    assert finding["workload"]["file"].endswith("tree/workload.yaml")
    assert finding["workload"]["line"] == 38  # the Job's document, not the pod dump
    assert finding["message"].startswith("now: ")
    assert finding["edge"]["from"] == {"role": "trainer-workers", "zones": ["zone-a"]}
    assert finding["edge"]["to"] == {"role": "trainer-coordinator", "zones": ["zone-b"]}
    # The pods are observations, not workloads of their own.
    assert not any(n.startswith("3 pod(s) name an owner") for n in out["notes"])


def test_a_replicaset_missing_from_the_tree_maps_to_its_deployment(tmp_path: Path) -> None:
    inv = load_inventory([seed_tree(tmp_path)], Settings(), Tools())
    assert sorted((w.ref.kind, w.ref.name) for w in inv.workloads) == [
        ("Deployment", "trainer-coordinator"),
        ("Job", "trainer-workers"),
    ]
    owners = {p.name: p.owner for p in inv.live_pods}
    assert owners == {
        "trainer-coordinator-7d9f8c6b4-x2x4q": ("Deployment", "trainer-coordinator"),
        "trainer-workers-8kq2m": ("Job", "trainer-workers"),
        "trainer-workers-tz7vw": ("Job", "trainer-workers"),
    }
    result = scan(inv)
    assert result.observation is not None
    zones = {str(role): seen.zones for role, seen in result.observation.roles.items()}
    assert zones == {"ml-demo/trainer-coordinator": ("zone-b",), "ml-demo/trainer-workers": ("zone-a",)}


def test_a_pod_template_hash_that_is_not_the_replicaset_suffix_does_not_map(tmp_path: Path) -> None:
    tree = seed_tree(tmp_path)
    pods = tree / "pods.yaml"
    pods.write_text(pods.read_text().replace("pod-template-hash: 7d9f8c6b4", "pod-template-hash: 5f6d7e8c9"))
    inv = load_inventory([tree], Settings(), Tools())
    names = sorted((w.ref.kind, w.ref.name) for w in inv.workloads)
    assert ("Pod", "trainer-coordinator-7d9f8c6b4-x2x4q") in names
    assert any(
        n.startswith("1 pod(s) name an owner that is not among the objects read")
        and "owned by ReplicaSet trainer-coordinator-7d9f8c6b4" in n
        for n in inv.notes
    ), inv.notes


def test_uids_must_agree_when_both_sides_have_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    same = report(seed_tree(tmp_path / "same", workload_uid=JOB_UID), capsys)
    assert rows(same) == [("cross-zone-blocked", "observed", "Job", "trainer-workers")]

    # The Job in the tree was recreated since the dump: its pods are not its pods.
    other = "11111111-2222-4333-8444-555555555555"
    out = report(seed_tree(tmp_path / "other", workload_uid=other), capsys)
    got = rows(out)
    assert ("cross-zone-blocked", "always", "Job", "trainer-workers") in got
    assert not any(r[1] == "observed" and r[2] == "Job" for r in got)
    assert not any(r[0] == "role-unschedulable" for r in got)
    assert any(
        n.startswith("2 pod(s) name an owner that is not among the objects read, or whose uid differs")
        and "owned by Job trainer-workers" in n
        for n in out["notes"]
    ), out["notes"]


def test_a_bound_pod_on_a_node_its_spec_does_not_tolerate_is_not_unschedulable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The coordinator was bound by hand to a GPU node whose taint it does not tolerate: it runs
    # there. Its `zone: zone-b` label keeps the policies shut even next to the workers (observed
    # traffic-blocked); the next scheduling puts it back in zone-b (predicted, "when rescheduled").
    out = report(seed_tree(tmp_path, coordinator_node="lab-worker"), capsys)
    assert sorted(rows(out)) == [
        ("cross-zone-blocked", "always", "Job", "trainer-workers"),
        ("traffic-blocked", "observed", "Job", "trainer-workers"),
    ]
    predicted = next(f for f in out["findings"] if f["certainty"] == "always")
    assert predicted["message"].startswith("when rescheduled: ")


BARE_PODS = """\
apiVersion: v1
kind: PodList
items:
- metadata:
    name: debug-shell
    namespace: ml-demo
    labels: {app: debug}
  spec:
    nodeName: lab-worker
    containers: [{name: sh, image: busybox:1.36, resources: {requests: {cpu: 100m}}}]
  status: {phase: Running}
- metadata:
    name: on-a-node-not-given
    namespace: ml-demo
    labels: {app: debug}
  spec:
    nodeName: lab-worker9
    containers: [{name: sh, image: busybox:1.36}]
  status: {phase: Running}
- metadata:
    name: leftover
    namespace: ml-demo
    labels: {app: debug}
    ownerReferences:
    - {apiVersion: argoproj.io/v1alpha1, kind: Workflow, name: nightly, uid: 4d3c2b1a-0000-4000-8000-000000000001, controller: true}
  spec:
    nodeName: lab-worker3
    containers: [{name: sh, image: busybox:1.36}]
  status: {phase: Running}
"""


def test_bare_bound_pods_stay_workloads_and_are_never_unschedulable(tmp_path: Path) -> None:
    # A pod with no owner in the tree is a workload of its own (as a manifest would be); bound to
    # a tainted node it does not tolerate, or to a node the Node objects do not list, it still runs.
    (tmp_path / "nodes.yaml").write_text((LAB / "nodes.yaml").read_text())
    (tmp_path / "pods.yaml").write_text(BARE_PODS)
    inv = load_inventory([tmp_path], Settings(network=NetworkConfig(cni="generic")), Tools())
    assert sorted(w.ref.name for w in inv.workloads) == ["debug-shell", "leftover", "on-a-node-not-given"]
    result = scan(inv)
    assert [f.rule for f in result.findings] == []
    assert any(
        n.startswith("1 pod(s) name an owner") and "owned by Workflow nightly" in n for n in result.notes
    ), result.notes


PYTORCH = """\
apiVersion: v1
kind: NodeList
items:
- {apiVersion: v1, kind: Node, metadata: {name: a1, labels: {topology.kubernetes.io/zone: za}}}
- {apiVersion: v1, kind: Node, metadata: {name: b1, labels: {topology.kubernetes.io/zone: zb}}}
---
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: train, namespace: ml}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms:
            [{matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [za]}]}]}}}
          containers: [{name: pytorch, image: x}]
    Worker:
      replicas: 2
      template:
        spec:
          affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms:
            [{matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [za]}]}]}}}
          containers: [{name: pytorch, image: x}]
"""
PYTORCH_POD = """\
- apiVersion: v1
  kind: Pod
  metadata:
    name: train-{rtype}-{index}
    namespace: ml
    labels:
      training.kubeflow.org/job-name: train
      training.kubeflow.org/operator-name: pytorchjob-controller
      training.kubeflow.org/replica-index: "{index}"
      training.kubeflow.org/replica-type: {rtype}{extra}
    ownerReferences:
    - {apiVersion: kubeflow.org/v1, kind: PyTorchJob, name: train, controller: true,
       uid: 7e6d5c4b-0000-4000-8000-00000000000a}
  spec:
    nodeName: {node}
    containers: [{name: pytorch, image: x}]
  status: {phase: Running}
"""

MASTER = "\n      training.kubeflow.org/job-role: master"


def pytorch_pod(rtype: str, index: int, node: str, extra: str = "") -> str:
    text = PYTORCH_POD
    for key, value in (("rtype", rtype), ("index", str(index)), ("node", node), ("extra", extra)):
        text = text.replace("{" + key + "}", value)
    return text


def test_pods_map_to_the_operator_role_they_are_labelled_with(tmp_path: Path) -> None:
    # Predicted: everyone in za, no finding. The dump shows worker-1 running in zb (bound before
    # the affinity was added): the split is observed, on the PyTorchJob, between its roles.
    (tmp_path / "job.yaml").write_text(PYTORCH)
    pods = [
        pytorch_pod("master", 0, "a1", MASTER),
        pytorch_pod("worker", 0, "a1"),
        pytorch_pod("worker", 1, "b1"),
    ]
    (tmp_path / "pods.yaml").write_text("apiVersion: v1\nkind: List\nitems:\n" + "".join(pods))
    inv = load_inventory([tmp_path], Settings(network=NetworkConfig(cni="generic")), Tools())
    assert [(w.ref.kind, w.ref.name) for w in inv.workloads] == [("PyTorchJob", "train")]
    result = scan(inv)
    assert result.observation is not None
    zones = {role.name: seen.zones for role, seen in result.observation.roles.items()}
    assert zones == {"Master": ("za",), "Worker": ("za", "zb")}
    (finding,) = result.findings
    assert (finding.rule, finding.certainty, finding.workload.kind) == (
        "cross-zone-traffic",
        "observed",
        "PyTorchJob",
    )
    assert finding.edge is not None and "zb" in (*finding.edge.from_zones, *finding.edge.to_zones)


def test_explain_names_a_dumped_pod_as_a_replica_of_its_owner_where_it_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = seed_tree(tmp_path)
    args = ["explain", str(tree), "--from", "ml-demo/trainer-workers-8kq2m", "--port", "9999"]
    assert cli.main([*args, "--to", "ml-demo/trainer-coordinator-7d9f8c6b4-x2x4q", "--format", "json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert [
        (p["from"]["pod"], p["from"]["zone"], p["to"]["pod"], p["to"]["zone"]) for p in out["placements"]
    ] == [("ml-demo/trainer-workers", "zone-a", "ml-demo/trainer-coordinator", "zone-b")]
    assert out["verdict"] == "deny"
