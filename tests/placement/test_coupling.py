"""Group coupling: which zone pairs two roles can occupy, and how certain a split is."""

from __future__ import annotations

import pytest
from support import inventory

from auditor.placement.coupling import PairContext, PlacementOptions, pair_placement, place_roles

ZONE = "topology.kubernetes.io/zone"
NODES = """\
apiVersion: v1
kind: NodeList
items:
- {apiVersion: v1, kind: Node, metadata: {name: a, labels: {topology.kubernetes.io/zone: za, pool: gpu, rack: r1, block: b1}}}
- {apiVersion: v1, kind: Node, metadata: {name: b, labels: {topology.kubernetes.io/zone: zb, pool: cpu, rack: r2, block: b1}}}
- {apiVersion: v1, kind: Node, metadata: {name: c, labels: {topology.kubernetes.io/zone: zc, pool: cpu, rack: r3, block: b2}}}
"""


def pytorchjob(master: str = "", worker: str = "", replicas: int = 4, annotations: str = "") -> str:
    def spec(extra: str) -> str:
        return "{" + (extra + ", " if extra else "") + "containers: [{name: t, image: x}]}"

    meta = f"{{annotations: {{{annotations}}}, labels: {{job: j}}}}" if annotations else "{labels: {job: j}}"
    return f"""---
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: j, namespace: ml}}
spec:
  pytorchReplicaSpecs:
    Master: {{replicas: 1, template: {{metadata: {{labels: {{role: master}}}}, spec: {spec(master)}}}}}
    Worker: {{replicas: {replicas}, template: {{metadata: {meta}, spec: {spec(worker)}}}}}
"""


def placement(
    text: str, src: str = "Worker", dst: str = "Master"
) -> tuple[list[tuple[str, str]], str | None]:
    inv = inventory(text=NODES + text)
    assert not inv.errors, inv.errors
    roles = {r.name: r for w in inv.workloads for r in w.roles}
    placed = place_roles(list(roles.values()), inv.nodes, ZONE)
    p = pair_placement(placed[roles[src]], placed[roles[dst]], PairContext(inv.nodes, PlacementOptions(ZONE)))
    return list(p.pairs), p.split


AFFINITY_TO_MASTER = (
    "affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
    "[{labelSelector: {matchLabels: {role: master}}, topologyKey: topology.kubernetes.io/zone}]}}"
)
ANTI_TO_MASTER = AFFINITY_TO_MASTER.replace("podAffinity", "podAntiAffinity")
PREFERRED = (
    "affinity: {podAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 50, podAffinityTerm: "
    "{labelSelector: {matchLabels: {role: master}}, topologyKey: topology.kubernetes.io/zone}}]}}"
)
SELF_SPREAD = (
    "topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, "
    "whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {job: j}}}]"
)


@pytest.mark.parametrize(
    ("worker", "master", "pairs", "split"),
    [
        ("", "", 9, "likely"),
        (AFFINITY_TO_MASTER, "", 3, None),  # the workers follow the master into its zone
        (ANTI_TO_MASTER, "", 6, "always"),
        (PREFERRED, "", 9, "possible"),
        ("nodeSelector: {pool: gpu}", "nodeSelector: {pool: cpu}", 2, "always"),  # disjoint feasible zones
        ("nodeSelector: {pool: gpu}", "nodeSelector: {pool: gpu}", 1, None),  # one zone for both
    ],
    ids=["unconstrained", "podAffinity", "podAntiAffinity", "preferred", "disjoint", "single-zone"],
)
def test_between_roles(worker: str, master: str, pairs: int, split: str | None) -> None:
    got_pairs, got_split = placement(pytorchjob(master, worker))
    assert (len(got_pairs), got_split) == (pairs, split)


@pytest.mark.parametrize(
    ("worker", "replicas", "annotations", "split"),
    [
        ("", 4, "", "likely"),
        ("", 1, "", None),
        (SELF_SPREAD, 4, "", "always"),  # DoNotSchedule spread with maxSkew 1 forces the replicas apart
        ("", 4, '"kueue.x-k8s.io/podset-required-topology": rack', None),  # racks nest in zones here
        # `block` spans zones za and zb on these nodes: one block does not mean one zone.
        ("", 4, '"kueue.x-k8s.io/podset-required-topology": block', "likely"),
        # A key no node carries decides nothing.
        ("", 4, '"kueue.x-k8s.io/podset-required-topology": cloud.provider.com/topology-rack', "likely"),
        ("", 4, '"kueue.x-k8s.io/podset-required-topology": topology.kubernetes.io/region', "likely"),
        # Kueue packs a preferred topology unless it cannot fit: possible, not likely.
        ("", 4, '"kueue.x-k8s.io/podset-preferred-topology": topology.kubernetes.io/zone', "possible"),
    ],
    ids=[
        "free",
        "one-replica",
        "hard-spread",
        "kueue-rack",
        "kueue-block-spans-zones",
        "kueue-unknown-key",
        "kueue-region",
        "kueue-preferred",
    ],
)
def test_within_a_role(worker: str, replicas: int, annotations: str, split: str | None) -> None:
    _, got = placement(pytorchjob("", worker, replicas, annotations), "Worker", "Worker")
    assert got == split


JOBSET = """---
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: js
  namespace: ml
  annotations: {alpha.jobset.sigs.k8s.io/exclusive-topology: topology.kubernetes.io/zone}
spec:
  replicatedJobs:
  - name: workers
    replicas: JOBS
    template: {spec: {parallelism: 2, template: {spec: {containers: [{name: c, image: x}]}}}}
  - name: ps
    template: {spec: {parallelism: 1, template: {spec: {containers: [{name: c, image: x}]}}}}
"""


def test_jobset_exclusive_topology() -> None:
    _, one_job = placement(JOBSET.replace("JOBS", "1"), "workers", "workers")
    assert one_job is None  # one Job: its pods share a zone
    _, two_jobs = placement(JOBSET.replace("JOBS", "2"), "workers", "workers")
    assert two_jobs == "always"
    pairs, across = placement(JOBSET.replace("JOBS", "1"), "workers", "ps")
    assert across == "always" and all(a != b for a, b in pairs)


def test_grouped_placement_equals_node_by_node() -> None:
    """place_roles filters one node per group of indistinguishable nodes; it must agree with
    filtering every node, including for templates that name a host and for node labels (rack,
    gen) that only some templates read."""
    from support import DATA

    from auditor.placement.coupling import place_roles

    nodes = "apiVersion: v1\nkind: NodeList\nitems:\n" + "".join(
        f"- {{apiVersion: v1, kind: Node, metadata: {{name: n{i}, labels: {{kubernetes.io/hostname: n{i}, "
        f"topology.kubernetes.io/zone: z{i % 3}, rack: r{i % 5}, gen: '{i % 6}', gpu: '{'true' if i % 4 == 0 else 'false'}'}}}}, "
        f"spec: {{taints: [{{key: gpu, value: present, effect: NoSchedule}}]}}, "
        f"status: {{allocatable: {{cpu: '8', nvidia.com/gpu: '{8 if i % 4 == 0 else 0}'}}}}}}\n"
        if i % 4 == 0
        else f"- {{apiVersion: v1, kind: Node, metadata: {{name: n{i}, labels: {{kubernetes.io/hostname: n{i}, "
        f"topology.kubernetes.io/zone: z{i % 3}, rack: r{i % 5}, gen: '{i % 6}'}}}}, spec: {{unschedulable: {str(i % 7 == 0).lower()}}}, "
        f"status: {{allocatable: {{cpu: '8'}}}}}}\n"
        for i in range(24)
    )
    host_pinned = """---
apiVersion: v1
kind: Pod
metadata: {name: pinned, namespace: ml}
spec:
  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms:
    [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [n3, n8]}]}]}}}
  containers: [{name: c, image: x}]
---
apiVersion: v1
kind: Pod
metadata: {name: on-rack, namespace: ml}
spec:
  nodeSelector: {rack: r1}
  containers: [{name: c, image: x}]
---
apiVersion: v1
kind: Pod
metadata: {name: by-generation, namespace: ml}
spec:
  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms:
    [{matchExpressions: [{key: gen, operator: Gt, values: ['3']}, {key: rack, operator: NotIn, values: [r2]}]}]}}}
  containers: [{name: c, image: x}]
"""
    inv = inventory([*sorted((DATA / "workloads").glob("*.yaml"))], text=nodes + host_pinned)
    roles = [r for w in inv.workloads for r in w.roles]
    grouped = place_roles(roles, inv.nodes, ZONE)
    for role in roles:
        one_by_one = place_roles([role], inv.nodes, ZONE)[role]
        assert grouped[role] == one_by_one, role
    by_name = {str(r): grouped[r] for r in roles}
    # Schedulable for a plain pod: no GPU taint (i % 4 != 0), not cordoned (i % 7 != 0).
    plain = [i for i in range(24) if i % 4 and i % 7]
    assert by_name["ml/on-rack"].nodes == tuple(f"n{i}" for i in plain if i % 5 == 1)
    assert by_name["ml/by-generation"].nodes == tuple(f"n{i}" for i in plain if i % 6 > 3 and i % 5 != 2)
