"""Controller-set per-pod labels: a Service or policy selecting one replica by them selects that
replica (DESIGN.md "Controller-set per-pod labels are part of each replica")."""

from __future__ import annotations

from pathlib import Path

import pytest

from auditor.model.objects import ReplicaLabel, ReplicaTest
from auditor.placement.observed import observe
from auditor.rules.model import AuditModel, build_model
from auditor.workloads import replicas
from auditor.workloads.edges import comm_edges
from tests.support import inventory

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "per-replica"

NODES = """
apiVersion: v1
kind: Node
metadata: {name: node-a, labels: {topology.kubernetes.io/zone: zone-a}}
status: {allocatable: {cpu: "64", memory: 256Gi, pods: "110"}}
---
apiVersion: v1
kind: Node
metadata: {name: node-b, labels: {topology.kubernetes.io/zone: zone-b}}
status: {allocatable: {cpu: "64", memory: 256Gi, pods: "110"}}
"""


def _edges(model: AuditModel) -> dict[tuple[str, str, int | None], bool]:
    """(source, destination, port) → allowed in every placement analysed."""
    return {(str(a.edge.source), str(a.edge.destination), a.edge.port): not a.denied for a in model.edges}


def _roles(model: AuditModel) -> dict[str, int]:
    return {str(r): r.replicas for r in model.placements}


STATEFULSET = """
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: trainer, namespace: ml}
spec:
  replicas: 4
  serviceName: trainer
  selector: {matchLabels: {app: trainer}}
  template:
    metadata: {labels: {app: trainer}}
    spec:
      containers:
      - name: main
        image: trainer
        env: [{name: MASTER_ADDR, value: "trainer-0-svc:29500"}]
        ports: [{containerPort: 29500}]
---
apiVersion: v1
kind: Service
metadata: {name: trainer-0-svc, namespace: ml}
spec:
  clusterIP: None
  selector: {statefulset.kubernetes.io/pod-name: trainer-0}
  ports: [{port: 29500}]
"""


def test_statefulset_service_on_pod_name_reaches_one_replica() -> None:
    model = build_model(inventory(text=STATEFULSET + "---" + NODES))
    assert _roles(model) == {"ml/trainer/trainer[0]": 1, "ml/trainer/trainer[1-3]": 3}
    assert set(_edges(model)) == {("ml/trainer/trainer[1-3]", "ml/trainer/trainer[0]", 29500)}


def test_statefulset_ordinals_start_offsets_pod_names() -> None:
    text = STATEFULSET.replace("replicas: 4", "replicas: 4\n  ordinals: {start: 1}")
    model = build_model(inventory(text=text + "---" + NODES))
    # pod names are trainer-1..trainer-4: none is trainer-0, so the Service selects nobody.
    assert _roles(model) == {"ml/trainer": 4}
    assert _edges(model) == {}


def test_pod_index_label_needs_kubernetes_1_28() -> None:
    from auditor.settings.config import KubernetesSettings, NetworkConfig, Settings

    text = STATEFULSET.replace(
        "statefulset.kubernetes.io/pod-name: trainer-0", 'apps.kubernetes.io/pod-index: "0"'
    )
    new = build_model(inventory(text=text + "---" + NODES))
    assert set(_edges(new)) == {("ml/trainer/trainer[1-3]", "ml/trainer/trainer[0]", 29500)}
    old = Settings(network=NetworkConfig(cni="auto"), kubernetes=KubernetesSettings(version="1.27"))
    assert _edges(build_model(inventory(text=text + "---" + NODES, settings=old))) == {}


INDEXED_JOB = """
apiVersion: batch/v1
kind: Job
metadata: {name: sweep, namespace: ml}
spec:
  completions: 4
  parallelism: 4
  completionMode: Indexed
  template:
    metadata: {labels: {app: sweep}}
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: sweep
        env: [{name: COORDINATOR, value: "sweep-rank0:7000"}]
        ports: [{containerPort: 7000}]
---
apiVersion: v1
kind: Service
metadata: {name: sweep-rank0, namespace: ml}
spec:
  clusterIP: None
  selector: {app: sweep}
  ports: [{port: 7000}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: rank0-only-from-rank0, namespace: ml}
spec:
  podSelector:
    matchExpressions:
    - {key: batch.kubernetes.io/job-completion-index, operator: In, values: ["0"]}
  policyTypes: [Ingress]
  ingress:
  - from:
    - podSelector: {matchLabels: {batch.kubernetes.io/job-completion-index: "0"}}
"""


def test_indexed_job_policy_by_completion_index() -> None:
    model = build_model(inventory(text=INDEXED_JOB + "---" + NODES))
    assert _roles(model) == {"ml/sweep/sweep[0]": 1, "ml/sweep/sweep[1-3]": 3}
    edges = _edges(model)
    # rank 0 admits only itself: the others cannot reach it; rank 0 reaches them.
    assert edges[("ml/sweep/sweep[1-3]", "ml/sweep/sweep[0]", 7000)] is False
    assert edges[("ml/sweep/sweep[0]", "ml/sweep/sweep[1-3]", 7000)] is True
    assert edges[("ml/sweep/sweep[1-3]", "ml/sweep/sweep[1-3]", 7000)] is True


def test_non_indexed_job_has_no_completion_index() -> None:
    text = INDEXED_JOB.replace("completionMode: Indexed", "completionMode: NonIndexed")
    model = build_model(inventory(text=text + "---" + NODES))
    assert _roles(model) == {"ml/sweep": 4}
    assert all(_edges(model).values())  # the policy selects no pod


PYTORCHJOB = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: bert, namespace: ml}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers: [{name: pytorch, image: bert}]
    Worker:
      replicas: 4
      template:
        spec:
          containers: [{name: pytorch, image: bert}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: workers-closed, namespace: ml}
spec:
  podSelector: {matchLabels: {training.kubeflow.org/replica-type: worker}}
  policyTypes: [Ingress]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: worker-0-open, namespace: ml}
spec:
  podSelector:
    matchLabels: {training.kubeflow.org/replica-type: worker, training.kubeflow.org/replica-index: "0"}
  policyTypes: [Ingress]
  ingress: [{}]
"""


def test_pytorchjob_policy_allowing_only_worker_0() -> None:
    model = build_model(inventory(text=PYTORCHJOB + "---" + NODES))
    assert _roles(model) == {"ml/bert/Master": 1, "ml/bert/Worker[0]": 1, "ml/bert/Worker[1-3]": 3}
    edges = _edges(model)
    assert edges[("ml/bert/Worker[0]", "ml/bert/Master", 23456)] is True
    assert edges[("ml/bert/Worker[1-3]", "ml/bert/Master", 23456)] is True
    # NCCL ring: into worker 0 allowed, into the other workers denied.
    assert edges[("ml/bert/Master", "ml/bert/Worker[0]", None)] is True
    assert edges[("ml/bert/Worker[1-3]", "ml/bert/Worker[0]", None)] is True
    assert edges[("ml/bert/Master", "ml/bert/Worker[1-3]", None)] is False
    assert edges[("ml/bert/Worker[0]", "ml/bert/Worker[1-3]", None)] is False
    assert edges[("ml/bert/Worker[1-3]", "ml/bert/Worker[1-3]", None)] is False
    assert ("ml/bert/Worker[0]", "ml/bert/Worker[0]", None) not in edges  # one pod


def test_findings_name_the_replicas() -> None:
    from auditor.audit.scan import scan

    result = scan(inventory(text=PYTORCHJOB + "---" + NODES))
    blocked = [f for f in result.findings if f.rule == "traffic-blocked"]
    assert blocked
    assert {f.edge.to_role for f in blocked if f.edge} == {"Worker[1-3]"}
    assert all("ml/bert/Worker[1-3]" in f.message for f in blocked)
    assert len({f.fingerprint for f in blocked}) == len(blocked)


def test_elastic_rendezvous_reaches_worker_0_only() -> None:
    text = PYTORCHJOB.replace(
        "    Master:\n      replicas: 1\n      template:\n        spec:\n"
        "          containers: [{name: pytorch, image: bert}]\n",
        "",
    ).replace(
        "spec:\n  pytorchReplicaSpecs:", "spec:\n  elasticPolicy: {rdzvPort: 29400}\n  pytorchReplicaSpecs:"
    )
    model = build_model(inventory(text=text + "---" + NODES))
    rendezvous = {(s, d) for s, d, p in _edges(model) if p == 29400}
    assert rendezvous == {("ml/bert/Worker[1-3]", "ml/bert/Worker[0]")}
    assert _edges(model)[("ml/bert/Worker[1-3]", "ml/bert/Worker[0]", 29400)] is True


JOBSET = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: llm, namespace: ml}
spec:
  replicatedJobs:
  - name: workers
    replicas: 3
    template:
      spec:
        parallelism: 2
        completions: 2
        template:
          spec:
            containers:
            - name: main
              image: llm
              env: [{name: LEADER, value: "llm-job0:8476"}]
              ports: [{containerPort: 8476}]
---
apiVersion: v1
kind: Service
metadata: {name: llm-job0, namespace: ml}
spec:
  clusterIP: None
  selector: {jobset.sigs.k8s.io/jobset-name: llm, jobset.sigs.k8s.io/job-index: "0"}
  ports: [{port: 8476}]
"""


def test_jobset_service_on_job_index_reaches_the_first_job() -> None:
    inv = inventory(text=JOBSET + "---" + NODES)
    model = build_model(inv)
    assert _roles(model) == {"ml/llm/workers[0-1]": 2, "ml/llm/workers[2-5]": 4}
    first = next(r for r in model.placements if r.label == "workers[0-1]")
    labels = first.template.label_map
    assert labels["jobset.sigs.k8s.io/job-index"] == "0"
    assert labels["job-name"] == "llm-workers-0"
    assert set(_edges(model)) == {
        ("ml/llm/workers[0-1]", "ml/llm/workers[0-1]", 8476),
        ("ml/llm/workers[2-5]", "ml/llm/workers[0-1]", 8476),
    }


def test_jobset_pod_dns_name_reaches_that_pod() -> None:
    text = JOBSET.replace("llm-job0:8476", "llm-workers-1-0.llm:8476")
    text = text.replace('jobset.sigs.k8s.io/job-index: "0"', 'batch.kubernetes.io/job-completion-index: "0"')
    model = build_model(inventory(text=text + "---" + NODES))
    # completion index 0 of each job: replicas 0, 2, 4; the pod named is job 1 pod 0, replica 2.
    assert _roles(model) == {"ml/llm/workers[0,2,4]": 3, "ml/llm/workers[1,3,5]": 3}
    named = {(s, d) for s, d, _ in _edges(model)}
    assert ("ml/llm/workers[1,3,5]", "ml/llm/workers[0,2,4]") in named
    assert ("ml/llm/workers[0,2,4]", "ml/llm/workers[1,3,5]") not in named


def test_no_per_replica_selector_leaves_roles_whole() -> None:
    inv = inventory(text=PYTORCHJOB.split("---", maxsplit=1)[0] + "---" + NODES)
    worker = next(r for w in inv.workloads for r in w.roles if r.name == "Worker")
    assert worker.replicas == 4 and worker.replica_class is None
    assert "training.kubeflow.org/replica-index" not in worker.template.label_map
    assert worker.replica_labels == (ReplicaLabel(replicas.KUBEFLOW_INDEX),)


def test_one_replica_role_gets_its_labels_without_a_split() -> None:
    text = STATEFULSET.replace("replicas: 4", "replicas: 1")
    model = build_model(inventory(text=text + "---" + NODES))
    (role,) = model.placements
    assert str(role) == "ml/trainer" and role.template.label_map[replicas.POD_NAME] == "trainer-0"
    assert _edges(model) == {}  # the only pod names itself


def test_leaderworkerset_labels() -> None:
    inv = inventory(
        text="""
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {name: vllm, namespace: ml}
spec:
  replicas: 2
  leaderWorkerTemplate:
    size: 3
    workerTemplate:
      spec:
        containers: [{name: main, image: vllm}]
---
apiVersion: v1
kind: Service
metadata: {name: group1, namespace: ml}
spec:
  selector: {leaderworkerset.sigs.k8s.io/group-index: "1"}
  ports: [{port: 80}]
"""
    )
    roles = {str(r): (r.replicas, r.template.label_map) for w in inv.workloads for r in w.roles}
    assert {k: v[0] for k, v in roles.items()} == {
        "ml/vllm/leader[0]": 1,
        "ml/vllm/leader[1]": 1,
        "ml/vllm/worker[0-1]": 2,
        "ml/vllm/worker[2-3]": 2,
    }
    assert roles["ml/vllm/worker[2-3]"][1][replicas.LWS_WORKER_INDEX] == "1"
    assert roles["ml/vllm/leader[1]"][1][replicas.POD_NAME] == "vllm-1"


def test_volcano_task_index() -> None:
    inv = inventory(
        text="""
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: vj, namespace: ml}
spec:
  tasks:
  - name: worker
    replicas: 3
    template:
      spec:
        containers: [{name: main, image: w}]
---
apiVersion: v1
kind: Service
metadata: {name: w2, namespace: ml}
spec:
  selector: {volcano.sh/task-index: "2"}
  ports: [{port: 80}]
"""
    )
    assert sorted((str(r), r.replicas) for w in inv.workloads for r in w.roles) == [
        ("ml/vj/worker[0-1]", 2),
        ("ml/vj/worker[2]", 1),
    ]


@pytest.mark.parametrize(
    ("tree", "expected"),
    [
        ({"matchLabels": {"k8s:statefulset.kubernetes.io/pod-name": "db-0"}}, {("==", "db-0")}),
        (
            {
                "matchExpressions": [
                    {"key": replicas.POD_NAME, "operator": "NotIn", "values": ["db-1", "db-2"]}
                ]
            },
            {("==", "db-1"), ("==", "db-2")},
        ),
        (
            {"selector": f"app == 'db' && {replicas.POD_NAME} in {{'db-0', \"db-3\"}}"},
            {("==", "db-0"), ("==", "db-3")},
        ),
        ({"selector": f"{replicas.POD_NAME} starts with 'db-1'"}, {("starts with", "db-1")}),
        ({"selector": f'{replicas.POD_NAME} != "db-4"'}, {("==", "db-4")}),
        ({"matchLabels": {"app": "db"}}, set()),
    ],
)
def test_tests_in_policy_trees(tree: object, expected: set[tuple[str, str]]) -> None:
    found = set(replicas.tests_in(tree, frozenset({replicas.POD_NAME})))
    assert {(t.op, t.literal) for t in found} == expected
    assert all(t.key == replicas.POD_NAME for t in found)


def test_calico_starts_with_splits_by_prefix() -> None:
    from dataclasses import replace

    inv = inventory(text=STATEFULSET.replace("replicas: 4", "replicas: 12") + "---" + NODES)
    whole = next(r for w in inv.workloads for r in w.roles if r.name == "trainer")
    base = replace(whole, replicas=12, replica_class=None)
    parts = replicas.split_role(base, [ReplicaTest(replicas.POD_NAME, "starts with", "trainer-1")], (1, 35))
    assert sorted(p.label for p in parts) == ["trainer[0,2-9]", "trainer[1,10-11]"]


def test_observed_pods_map_to_their_part() -> None:
    from auditor.model.objects import LivePod
    from auditor.model.source import SourceRef

    inv = inventory(text=STATEFULSET + "---" + NODES)
    pods = [
        LivePod(
            "ml",
            f"trainer-{i}",
            (("app", "trainer"), (replicas.POD_NAME, f"trainer-{i}")),
            "node-a" if i == 0 else "node-b",
            "Running",
            ("StatefulSet", "trainer"),
            "",
            SourceRef("<pod>"),
        )
        for i in range(4)
    ]
    seen = observe(inv.workloads, pods, inv.nodes, "topology.kubernetes.io/zone")
    assert not seen.unmatched
    assert {str(r): len(o.pods) for r, o in seen.roles.items()} == {
        "ml/trainer/trainer[0]": 1,
        "ml/trainer/trainer[1-3]": 3,
    }


def test_comm_edges_of_unsplit_workloads_unchanged() -> None:
    inv = inventory(paths=[ROOT / "tests" / "data" / "workloads"])
    edges = comm_edges(inv.workloads, inv.services)
    assert edges and all(
        e.source.replica_class is None and e.destination.replica_class is None for e in edges
    )


@pytest.mark.parametrize(
    ("golden", "args"),
    [
        (
            "seed-lab-before.json",
            [
                "auditor/examples/seed-lab/before",
                "auditor/examples/seed-lab/policies.yaml",
                "--nodes",
                "auditor/examples/seed-lab/nodes.yaml",
            ],
        ),
        (
            "workloads-seed-policies.json",
            [
                "tests/data/workloads",
                "auditor/examples/seed-lab/policies.yaml",
                "--nodes",
                "auditor/examples/seed-lab/nodes.yaml",
            ],
        ),
    ],
)
def test_scan_json_byte_identical_without_per_replica_selectors(
    golden: str, args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reports recorded before per-replica labels existed (same code, same inputs), byte for
    byte once the `groups` listing and its summary counts, and the summary's `complete` and
    `not_audited` (partial audits), added since, are taken out."""
    import json

    from auditor.cli import main

    monkeypatch.chdir(ROOT)
    main(["scan", *args, "--format", "json", "--fail-on", "none"])
    report = json.loads(capsys.readouterr().out)
    assert report.pop("groups")
    assert report["summary"].pop("complete") is True and report["summary"].pop("not_audited") == []
    for key in ("groups", "edges", "workloads_without_edges", "unlisted_workloads_by_kind"):
        report["summary"].pop(key)
    assert json.dumps(report, indent=2) + "\n" == (GOLDEN / golden).read_text()


def test_explain_names_a_part() -> None:
    from auditor.audit.explain import find_role

    inv = inventory(text=PYTORCHJOB + "---" + NODES)
    assert find_role(inv, "ml/bert/Worker[1-3]").replicas == 3
    assert find_role(inv, "ml/bert/Worker").label == "Worker[0]"


def test_pod_affinity_on_pod_name_splits_for_placement() -> None:
    text = STATEFULSET.replace(
        "    spec:\n      containers:",
        "    spec:\n      affinity:\n        podAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n"
        "          - topologyKey: topology.kubernetes.io/zone\n"
        "            labelSelector: {matchLabels: {statefulset.kubernetes.io/pod-name: trainer-0}}\n"
        "      containers:",
    ).replace("statefulset.kubernetes.io/pod-name: trainer-0}\n  ports", "app: trainer}\n  ports")
    model = build_model(inventory(text=text + "---" + NODES))
    assert _roles(model) == {"ml/trainer/trainer[0]": 1, "ml/trainer/trainer[1-3]": 3}
    follow = next(
        a
        for a in model.edges
        if a.edge.source.label == "trainer[1-3]" and a.edge.destination.label == "trainer[0]"
    )
    assert all(x == y for x, y in follow.placement.pairs)  # followers share rank 0's zone
