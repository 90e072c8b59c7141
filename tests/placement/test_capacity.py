"""Capacity that does not exist yet (issue 35): Karpenter NodePools and NodeClaims, and
cluster-autoscaler node-group templates, as places a role can land.

Test data: tests/data/capacity (upstream NodePool examples, origins in its README) and the seed
lab. Expectations follow Karpenter's documented semantics: a pod's requirements must overlap the
pool's (`Requirements.Compatible`); a well-known label the pool leaves open may take any value
the cloud offers; a taint the pod does not tolerate keeps the pool from serving it (startup taints
do not); limits stop provisioning once reached.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support import DATA, inventory, placed
from support import node_yaml as node

from auditor.audit.scan import scan
from auditor.model.objects import Node, freeze_labels
from auditor.model.scheduling import NodeRequirement
from auditor.placement import capacity
from auditor.placement.coupling import pair_placement

CAP = DATA / "capacity"
SEED = DATA / "seed-lab"


def job(worker_spec: str = "", replicas: int = 4) -> str:
    spec = "{" + (worker_spec + ", " if worker_spec else "") + "containers: [{name: t, image: x}]}"
    return f"""---
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: j, namespace: ml}}
spec:
  pytorchReplicaSpecs:
    Master: {{replicas: 1, template: {{metadata: {{labels: {{app: train}}}}, spec: {spec}}}}}
    Worker: {{replicas: {replicas}, template: {{metadata: {{labels: {{app: train}}}}, spec: {spec}}}}}
"""


W, M = "ml/j/Worker", "ml/j/Master"
TOLERATE = "tolerations: [{key: example.com/special-taint, operator: Exists, effect: NoSchedule}]"


# --- zones a pool adds ---------------------------------------------------------------------------


def test_a_pool_adds_the_zones_it_can_make_nodes_in_and_says_so() -> None:
    p, ctx, _ = placed(node("n1", "us-west-2a") + job(TOLERATE), (CAP / "nodepool-docs.yaml",))
    assert p[W].zones == ("us-west-2a", "us-west-2b")
    assert p[W].provisioned == (("us-west-2b", ("NodePool default",)),)
    pair = pair_placement(p[M], p[W], ctx)
    # Nothing couples the roles; the split needs a node the pool has not made: possible, not likely.
    assert pair.split == "possible"
    assert "us-west-2b through NodePool default" in pair.coupling
    assert (
        pair.through(["us-west-2a"], ["us-west-2b"])
        == "; ml/j/Worker: us-west-2b only through NodePool default"
    )


def test_a_pool_taint_the_pod_does_not_tolerate_keeps_the_pool_out() -> None:
    # "If Karpenter encounters a taint in the NodePool that is not tolerated by a Pod, Karpenter
    # won't use that NodePool to provision the pod." The startup taint needs no toleration.
    p, _, _ = placed(node("n1", "us-west-2a") + job(), (CAP / "nodepool-docs.yaml",))
    assert p[W].zones == ("us-west-2a",) and p[W].provisioned == ()
    startup_only = "tolerations: [{key: example.com/special-taint, operator: Exists}]"
    assert placed(node("n1", "us-west-2a") + job(startup_only), (CAP / "nodepool-docs.yaml",))[0][
        W
    ].zones == (
        "us-west-2a",
        "us-west-2b",
    )


def test_a_pool_without_a_zone_requirement_makes_nodes_in_every_zone_known() -> None:
    text = (
        node("a1", "za")
        + node("b1", "zb")
        + node("c1", "zc", gpu="true")
        + job("nodeSelector: {gpu: 'true'}")
    )
    # Without the pool: the GPU label is only in zc.
    assert placed(text)[0][W].zones == ("zc",)
    # spot.yaml sets no zone: it can make nodes in za, zb and zc, but none carries `gpu`.
    p, _, _ = placed(text, (CAP / "spot.yaml",))
    assert p[W].zones == ("zc",)
    # Selecting a well-known label the pool leaves open: any value may be chosen.
    nodes = node("a1", "za") + node("b1", "zb") + node("c1", "zc", gpu="true")
    p, _, _ = placed(
        nodes + job("nodeSelector: {node.kubernetes.io/instance-type: c6i.large}"), (CAP / "spot.yaml",)
    )
    assert p[W].zones == ("za", "zb", "zc")
    # No present node carries the instance type: every zone is reached through the pool.
    assert p[W].provisioned == tuple((z, ("NodePool spot",)) for z in ("za", "zb", "zc"))


@pytest.mark.parametrize(
    ("selector", "fits"),
    [
        ("nodeSelector: {karpenter.sh/capacity-type: spot}", True),
        ("nodeSelector: {karpenter.sh/capacity-type: on-demand}", False),  # In [spot]
        ("nodeSelector: {karpenter.k8s.aws/instance-category: c}", True),  # In [c, m, r]
        ("nodeSelector: {karpenter.k8s.aws/instance-category: p}", False),
        ("nodeSelector: {kubernetes.io/arch: arm64}", False),  # In [amd64]
        ("nodeSelector: {karpenter.k8s.aws/instance-gpu-name: a100}", True),  # well-known, open
        ("nodeSelector: {team: ml}", False),  # not a label the pool sets
        (
            "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: "
            "[{matchExpressions: [{key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ['5']}]}]}}}",
            True,  # Gt 2 and Gt 5 overlap
        ),
        (
            "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: "
            "[{matchExpressions: [{key: karpenter.k8s.aws/instance-generation, operator: Lt, values: ['3']}]}]}}}",
            False,  # Gt 2 and Lt 3: no integer between
        ),
        (
            "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: "
            "[{matchExpressions: [{key: karpenter.sh/capacity-type, operator: NotIn, values: [spot]}]}]}}}",
            False,  # the pool makes only spot nodes
        ),
        (
            "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: "
            "[{matchExpressions: [{key: kubernetes.io/os, operator: DoesNotExist}]}]}}}",
            False,  # a made node always carries its os label
        ),
        (
            "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: "
            "[{matchExpressions: [{key: team, operator: DoesNotExist}]}]}}}",
            True,
        ),
    ],
)
def test_pod_requirements_are_compatible_as_karpenter_decides(selector: str, fits: bool) -> None:
    p, _, _ = placed(job(selector), (CAP / "spot.yaml",))
    # No present node: the only place is what the pool can make (no zone known: one node, no zone).
    assert (not p[W].unschedulable) is fits, p[W].rejected


def test_a_pool_at_its_limit_makes_no_node() -> None:
    p, _, notes = placed(node("a1", "za") + job(), (CAP / "100-cpu-limit.yaml",))
    assert p[W].zones == ("za",)
    assert "NodePool limitcpu100 makes no node: its limit cpu: 100 is reached (100 in use)" in notes
    # Under its limit (docs example: 20 of 1000 cpu) it does.
    assert placed(node("a1", "us-west-2a") + job(TOLERATE), (CAP / "nodepool-docs.yaml",))[0][W].provisioned


def test_an_extended_resource_at_its_limit_is_made_by_no_node(tmp_path: Path) -> None:
    pool = (CAP / "kwok-default-nodepool.yaml").read_text().replace(
        "  limits:\n    cpu: 1000\n", "  limits:\n    cpu: 1000\n    nvidia.com/gpu: 16\n"
    ) + "status:\n  resources: {cpu: '64', nvidia.com/gpu: '16'}\n"
    (tmp_path / "pool.yaml").write_text(pool)
    gpu = "containers: [{name: t, image: x, resources: {limits: {nvidia.com/gpu: 8}}}]"
    a1 = node("a1", "za") + "status: {allocatable: {cpu: '8', memory: 32Gi, pods: '110'}}\n"
    text = a1 + job().replace("containers: [{name: t, image: x}]", gpu)
    p, _, notes = placed(text, (tmp_path / "pool.yaml",))
    assert p[W].unschedulable  # a1 has no GPUs; the pool makes none any more
    assert any("makes no node with nvidia.com/gpu" in n for n in notes)
    cpu_only = placed(a1 + job(), (tmp_path / "pool.yaml",))[0]
    assert cpu_only[W].zones == ("za",) and cpu_only[W].nodes == ("a1", "nodepool/default/za")


def test_a_pool_makes_as_many_hosts_as_required_anti_affinity_needs() -> None:
    anti = (
        "affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
        "[{labelSelector: {matchLabels: {app: train}}, topologyKey: kubernetes.io/hostname}]}}"
    )
    p, _, _ = placed(node("a1", "za") + job(anti, replicas=8))
    assert p[W].max_replicas == 1  # one host: one pod of the group
    p, _, _ = placed(node("a1", "za") + job(anti, replicas=8), (CAP / "kwok-default-nodepool.yaml",))
    assert p[W].max_replicas is None and not p[W].partly_unschedulable


# --- NodeClaims and autoscaler templates ---------------------------------------------------------


def test_a_launched_node_claim_is_a_node_and_a_registered_one_is_its_node() -> None:
    text = node("ip-192-168-1-1", "us-west-2c") + job(TOLERATE)
    p, _, _ = placed(text, (CAP / "nodeclaim.yaml",))
    assert p[W].zones == ("us-west-2b", "us-west-2c")
    assert p[W].provisioned == (("us-west-2b", ("NodeClaim default-sfpsl of NodePool default",)),)
    assert "nodeclaim/default-x8fk2" not in p[W].nodes  # that claim is Node ip-192-168-1-1
    # The launched claim carries the pool's taint: a pod that does not tolerate it stays out.
    assert placed(node("ip-192-168-1-1", "us-west-2c") + job(), (CAP / "nodeclaim.yaml",))[0][W].zones == (
        "us-west-2c",
    )


TEMPLATE = """---
apiVersion: v1
kind: Node
metadata:
  name: gpu-zone-b-template
  annotations: {placement-auditor.io/node-template: gpu-zone-b}
  labels: {topology.kubernetes.io/zone: zb, gpu: 'true'}
"""


def test_an_autoscaler_template_adds_its_zone_unless_its_group_is_at_max_size() -> None:
    text = node("a1", "za", gpu="true") + TEMPLATE + job("nodeSelector: {gpu: 'true'}")
    p, _, _ = placed(text)
    assert p[W].zones == ("za", "zb")
    assert p[W].provisioned == (("zb", ("node group gpu-zone-b (cluster-autoscaler)",)),)
    p, _, notes = placed(text, (CAP / "autoscaler-status.yaml",))
    assert p[W].zones == ("za",)
    assert any("gpu-zone-b" in n and "maxSize 4" in n for n in notes)


def test_the_legacy_autoscaler_status_text_is_read_too() -> None:
    legacy = (
        "Cluster-autoscaler status at 2026-12-06 10:00:00 +0000 UTC:\nCluster-wide:\n  Health: Healthy\n"
        "NodeGroups:\n  Name:        gpu-zone-b\n  Health:      Healthy (ready=4 unready=0 notStarted=0 "
        "longNotStarted=0 registered=4 longUnregistered=0 cloudProviderTarget=4 (minSize=0, maxSize=4))\n"
    )
    assert capacity.autoscaler_full_groups(legacy) == {
        "gpu-zone-b": "at its maxSize 4 (cloudProviderTarget 4)"
    }
    assert capacity.autoscaler_full_groups(legacy.replace("maxSize=4", "maxSize=10")) == {}
    assert capacity.autoscaler_full_groups("not: [yaml") == {}


# --- the seed lab: the fixed state is safe only while no pool can make GPU nodes elsewhere --------

GPU_POOL = """---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: gpu}
spec:
  template:
    metadata:
      labels: {gpu: "true", node-type: gpu}
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: gpu}
      taints:
      - {key: gpu, value: present, effect: NoSchedule}
      requirements:
      - {key: topology.kubernetes.io/zone, operator: In, values: [zone-a, zone-b]}
      - {key: karpenter.k8s.aws/instance-family, operator: In, values: [g5, p4d]}
"""


def _seed(extra: str = "") -> list[tuple[str, str, str]]:
    inv = inventory(paths=[SEED / "nodes.yaml", SEED / "policies.yaml", SEED / "after"], text=extra)
    assert not inv.errors, inv.errors
    return [(f.rule, f.certainty, f.message) for f in scan(inv).findings]


def test_the_seed_labs_fixed_state_splits_through_a_gpu_pool_in_the_other_zone() -> None:
    # Fixed: every pod of the group in zone-a, the only zone with GPU nodes; nothing to say.
    assert _seed() == []
    # A pool that can make GPU nodes in zone-b: the workers can land there, away from the
    # coordinator pinned to zone-a. The policies select the pods' `zone` label (set in the
    # template, not by the node), so the traffic is allowed, and crosses zones.
    found = _seed(GPU_POOL)
    assert [(rule, certainty) for rule, certainty, _ in found] == [("cross-zone-traffic", "possible")]
    message = found[0][2]
    assert message.endswith("ml-demo/trainer-workers: zone-b only through NodePool gpu")
    assert "made only for pods the present nodes cannot take" in message
    # The same pool limited to zone-a changes nothing.
    assert _seed(GPU_POOL.replace("[zone-a, zone-b]", "[zone-a]")) == []


# --- the pure parts --------------------------------------------------------------------------------


def _made(*ranges: NodeRequirement, **labels: str) -> Node:
    return Node(
        "nodepool/p/z",
        freeze_labels(labels),
        provisioner="NodePool p",
        multiplies=True,
        ranges=ranges,
        open_keys=True,
    )


def test_compatibility_of_requirements() -> None:
    pool = NodeRequirement("k", "In", ("a", "b"))
    assert capacity.compatible(NodeRequirement("k", "In", ("b", "c")), pool, False)
    assert not capacity.compatible(NodeRequirement("k", "In", ("c",)), pool, False)
    assert capacity.compatible(NodeRequirement("k", "NotIn", ("a",)), pool, False)
    assert not capacity.compatible(NodeRequirement("k", "NotIn", ("a", "b")), pool, False)
    assert capacity.compatible(NodeRequirement("k", "NotIn", ("a",)), None, False)  # absent
    assert not capacity.compatible(NodeRequirement("k", "Exists"), None, False)
    assert capacity.compatible(NodeRequirement("k", "Exists"), None, True)
    gt = NodeRequirement("n", "Gt", ("2",))
    assert capacity.compatible(NodeRequirement("n", "In", ("3",)), gt, False)
    assert not capacity.compatible(NodeRequirement("n", "In", ("2", "x")), gt, False)
    assert capacity.compatible(NodeRequirement("n", "Lt", ("5",)), gt, False)
    assert not capacity.compatible(NodeRequirement("n", "Lt", ("3",)), gt, False)
    node_ = _made(pool, team="ml")
    assert capacity.range_matches(NodeRequirement("team", "In", ("ml",)), node_) is None  # fixed label
    assert capacity.range_matches(NodeRequirement("k", "In", ("a",)), node_) is True
    assert capacity.range_matches(NodeRequirement("other", "In", ("x",)), node_) is None  # absent


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("spec: {template: {spec: {requirements: [{key: k, operator: Near, values: [a]}]}}}", "operator"),
        ("spec: {template: {spec: {requirements: [{key: k, operator: In}]}}}", "values"),
        ("spec: {template: {spec: {requirements: [{key: k, operator: Gt, values: [two]}]}}}", "values"),
        ("spec: {template: {spec: {taints: [{key: k, effect: Sometimes}]}}}", "effect"),
        ("spec: {limits: {cpu: lots}}", "spec.limits.cpu"),
    ],
)
def test_a_bad_nodepool_is_an_error_naming_file_object_and_field(body: str, field: str) -> None:
    text = (
        f"apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: bad}}\n{body}\n"
        + node("a1", "za")
        + job()
    )
    inv = inventory(text=text)
    assert len(inv.errors) == 1, inv.errors
    e = inv.errors[0]
    assert e.file == "<text>" and e.object == "NodePool bad" and field in (e.field or "")
    # Nothing else is lost: the job is still placed on the present node.
    assert [str(r) for w in inv.workloads for r in w.roles] == [M, W]


def test_a_pool_naming_many_zones_is_bounded() -> None:
    zones = ", ".join(f"z{i}" for i in range(500))
    text = (
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: wide}\n"
        f"spec: {{template: {{spec: {{requirements: [{{key: topology.kubernetes.io/zone, operator: In, values: [{zones}]}}]}}}}}}\n"
    )
    inv = inventory(text=text)
    assert len([n for n in inv.nodes if n.provisioner]) == capacity.MAX_ZONES_PER_POOL


def test_nothing_changes_without_capacity_objects() -> None:
    inv = inventory(paths=[SEED / "nodes.yaml"])
    assert all(not n.provisioner and not n.ranges and not n.open_keys for n in inv.nodes)
    assert not inv.capacity
