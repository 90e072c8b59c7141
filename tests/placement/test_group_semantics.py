"""Where a training group can land, case by case, with expectations taken from upstream semantics
(tests/data/scheduler/README.md, "Group semantics", cites each source): the scheduler's
PodTopologySpread and InterPodAffinity filters, JobSet's and LeaderWorkerSet's exclusive placement,
Kueue's topology annotations, the ExtendedResourceToleration admission plugin.

Every case runs the production path: `place_roles` over all the roles of the manifests and
`pair_placement` with the nodes' topology, as `auditor scan` does.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import support
from support import findings, inventory

from auditor.placement.coupling import PairContext, RolePlacement, pair_placement
from auditor.settings.config import KubernetesSettings, Settings

# Three zones of two nodes; racks nest inside zones; node pool `p-ab` spans zones za and zb.
NODES = """\
apiVersion: v1
kind: NodeList
items:
""" + "".join(
    f"- {{apiVersion: v1, kind: Node, metadata: {{name: {n}, labels: {{topology.kubernetes.io/zone: {z}, "
    f"kubernetes.io/hostname: {n}, rack: r-{n}, pool: {p}{extra}}}}}{taints}}}\n"
    for n, z, p, extra, taints in [
        ("a1", "za", "p-ab", ", gpu: 'true'", ""),
        ("a2", "za", "p-ab", "", ""),
        ("b1", "zb", "p-ab", "", ""),
        ("b2", "zb", "p-ab", "", ""),
        ("c1", "zc", "p-c", "", ""),
        ("c2", "zc", "p-c", "", ""),
    ]
)


def tainted_nodes(zones: set[str], taint: str = "dedicated=other:NoSchedule") -> str:
    key, _, rest = taint.partition("=")
    value, _, effect = rest.partition(":")
    out = []
    for line in NODES.splitlines(keepends=True):
        if any(f"zone: {z}," in line for z in zones):
            line = (
                line.rstrip("\n")[:-1]
                + f", spec: {{taints: [{{key: {key}, value: '{value}', effect: {effect}}}]}}}}\n"
            )
        out.append(line)
    return "".join(out)


def pytorchjob(
    worker: str = "", master: str = "", replicas: int = 4, worker_labels: str = "app: train"
) -> str:
    def spec(extra: str) -> str:
        return "{" + (extra + ", " if extra else "") + "containers: [{name: t, image: x}]}"

    return f"""---
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: j, namespace: ml}}
spec:
  pytorchReplicaSpecs:
    Master: {{replicas: 1, template: {{metadata: {{labels: {{app: train, role: master}}}}, spec: {spec(master)}}}}}
    Worker: {{replicas: {replicas}, template: {{metadata: {{labels: {{{worker_labels}}}}}, spec: {spec(worker)}}}}}
"""


def placed(text: str, settings: Settings | None = None) -> tuple[dict[str, RolePlacement], PairContext]:
    found, ctx, _ = support.placed(text, settings=settings)
    return found, ctx


def split(text: str, src: str, dst: str) -> str | None:
    p, ctx = placed(text)
    return pair_placement(p[src], p[dst], ctx).split


W, M = "ml/j/Worker", "ml/j/Master"
ZONE_SPREAD = (
    "topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, "
    "whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: worker}}WHAT}]"
)


def spread(extra: str = "") -> str:
    return ZONE_SPREAD.replace("WHAT", extra)


# --- PodTopologySpread is a filter -----------------------------------------------------------------


def test_a_node_lacking_a_hard_spread_key_is_rejected() -> None:
    # filtering.go: a node without the constraint's key fails with UnschedulableAndUnresolvable.
    # The GPU node a1 carries no `block` label, and the worker must land on a GPU node.
    worker = (
        "nodeSelector: {gpu: 'true'}, topologySpreadConstraints: [{maxSkew: 1, topologyKey: block, "
        "whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: worker}}}]"
    )
    p, _ = placed(NODES + pytorchjob(worker, worker_labels="app: worker"))
    assert p[W].unschedulable
    assert {(r.plugin, r.code) for r in p[W].rejected if r.node == "a1"} == {
        ("PodTopologySpread", "UnschedulableAndUnresolvable")
    }
    # ScheduleAnyway only scores: the node stays.
    soft = worker.replace("DoNotSchedule", "ScheduleAnyway")
    assert placed(NODES + pytorchjob(soft, worker_labels="app: worker"))[0][W].nodes == ("a1",)


def test_hard_zone_spread_forces_the_workers_apart_from_a_single_coordinator() -> None:
    job = pytorchjob(spread(), worker_labels="app: worker")
    p, _ = placed(NODES + job)
    assert p[W].forced_spread and p[W].max_replicas is None
    assert split(NODES + job, W, M) == "always"
    assert split(NODES + job, W, W) == "always"
    # Replicas within maxSkew of one zone are not forced (4 replicas, maxSkew 4).
    relaxed = job.replace("maxSkew: 1", "maxSkew: 4")
    assert split(NODES + relaxed, W, M) == "likely"
    # Node affinity leaving one zone: the spread's domains honour it (nodeAffinityPolicy: Honor).
    pinned = pytorchjob(
        "nodeSelector: {topology.kubernetes.io/zone: za}, " + spread(),
        "nodeSelector: {topology.kubernetes.io/zone: za}",
        worker_labels="app: worker",
    )
    assert split(NODES + pinned, W, M) is None


def test_hostname_anti_affinity_needing_more_nodes_than_a_zone_has_crosses_zones() -> None:
    anti = (
        "affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{labelSelector: "
        "{matchLabels: {app: worker}}, topologyKey: kubernetes.io/hostname}]}}"
    )
    three = pytorchjob(anti, replicas=3, worker_labels="app: worker")
    assert split(NODES + three, W, M) == "always"  # two nodes per zone: a third worker is elsewhere
    two = pytorchjob(anti, replicas=2, worker_labels="app: worker")
    assert split(NODES + two, W, M) == "likely"
    seven = pytorchjob(anti, replicas=7, worker_labels="app: worker")
    p, _ = placed(NODES + seven)
    assert p[W].max_replicas == 6  # one per node, six nodes


def test_spread_domains_a_pod_cannot_reach_cap_each_domain_at_max_skew() -> None:
    # Taints are ignored when counting domains (nodeTaintsPolicy: Ignore, the default): zb and zc
    # count but stay empty, so the global minimum stays 0 and za takes maxSkew pods.
    text = tainted_nodes({"zb", "zc"}) + pytorchjob(spread(), worker_labels="app: worker")
    p, _ = placed(text)
    assert p[W].zones == ("za",) and p[W].max_replicas == 1
    got = [f for f in findings(text) if f[0] == "role-unschedulable"]
    assert got == [("role-unschedulable", "always", "j")]
    # nodeTaintsPolicy: Honor leaves the tainted zones out of the count: all four fit in za.
    honor = text.replace(
        "matchLabels: {app: worker}}}]", "matchLabels: {app: worker}}, nodeTaintsPolicy: Honor}]"
    )
    assert placed(honor)[0][W].max_replicas is None


def test_min_domains_keeps_the_minimum_at_zero() -> None:
    # Node affinity leaves two zones; minDomains 3 means the global minimum is 0: one per zone.
    worker = (
        "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [za, zb]}]}]}}}, "
        + spread(", minDomains: 3")
    )
    p, _ = placed(NODES + pytorchjob(worker, worker_labels="app: worker"))
    assert p[W].max_replicas == 2
    without = worker.replace(", minDomains: 3", "")
    assert placed(NODES + pytorchjob(without, worker_labels="app: worker"))[0][W].max_replicas is None


# --- InterPodAffinity ------------------------------------------------------------------------------

NAMESPACES = """---
apiVersion: v1
kind: Namespace
metadata: {name: infra, labels: {team: TEAM}}
---
apiVersion: v1
kind: Namespace
metadata: {name: ml}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: store, namespace: infra}
spec:
  replicas: 1
  selector: {matchLabels: {app: store}}
  template: {metadata: {labels: {app: store}}, spec: {containers: [{name: s, image: x}]}}
"""


def follower(scope: str) -> str:
    return (
        "affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{labelSelector: "
        f"{{matchLabels: {{app: store}}}}, {scope}topologyKey: topology.kubernetes.io/zone}}]}}}}"
    )


@pytest.mark.parametrize(
    ("scope", "team", "follows"),
    [
        ("", "ml", False),  # no namespaces, no namespaceSelector: the pod's own namespace only
        ("namespaceSelector: {}, ", "ml", True),  # an empty selector: every namespace
        ("namespaceSelector: {matchLabels: {team: ml}}, ", "ml", True),
        ("namespaceSelector: {matchLabels: {team: ml}}, ", "other", False),
        ("namespaces: [infra], ", "other", True),
    ],
    ids=["own-namespace", "empty-selector", "selector-matches", "selector-does-not", "namespaces-list"],
)
def test_required_pod_affinity_honours_namespaces(scope: str, team: str, follows: bool) -> None:
    text = NODES + NAMESPACES.replace("TEAM", team) + pytorchjob(follower(scope))
    p, ctx = placed(text)
    if follows:
        assert not p[W].unschedulable
        pp = pair_placement(p[W], p["infra/store"], ctx)
        assert pp.split is None and all(a == b for a, b in pp.pairs)
    else:
        # No pod the term selects exists among the manifests and the worker does not match its own
        # term: it waits (InterPodAffinity, UnschedulableAndUnresolvable).
        assert p[W].unschedulable
        assert {r.plugin for r in p[W].rejected} == {"InterPodAffinity"}


def test_first_pod_exemption_a_follower_matching_its_own_term_does_not_necessarily_follow() -> None:
    to_master = follower("").replace("app: store", "role: master")
    assert split(NODES + pytorchjob(to_master), W, M) is None  # waits for the master, then joins it
    to_everyone = follower("").replace("app: store", "app: train")  # selects the master and itself
    assert split(NODES + pytorchjob(to_everyone), W, M) == "possible"
    # Both roles follow the group's pods: after the first pod, every pod joins its zone.
    both = pytorchjob(to_everyone, to_everyone)
    assert split(NODES + both, W, M) is None and split(NODES + both, W, W) is None


def test_anti_affinity_separates_zones_only_on_a_key_whose_domains_are_zones() -> None:
    anti = (
        "affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{labelSelector: "
        "{matchLabels: {role: master}}, topologyKey: KEY}]}}"
    )
    assert split(NODES + pytorchjob(anti.replace("KEY", "topology.kubernetes.io/zone")), W, M) == "always"
    assert split(NODES + pytorchjob(anti.replace("KEY", "rack")), W, M) == "likely"


def test_affinity_on_a_key_spanning_zones_does_not_keep_a_group_in_one_zone() -> None:
    to_master = follower("").replace("app: store", "role: master")
    assert split(NODES + pytorchjob(to_master.replace("topology.kubernetes.io/zone", "rack")), W, M) is None
    assert (
        split(NODES + pytorchjob(to_master.replace("topology.kubernetes.io/zone", "pool")), W, M) == "likely"
    )


# --- exclusive topology ----------------------------------------------------------------------------

JOBSET = """---
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: js
  namespace: ml
  annotations: {alpha.jobset.sigs.k8s.io/exclusive-topology: KEY}
spec:
  replicatedJobs:
  - name: workers
    replicas: JOBS
    template: {spec: {parallelism: 2, template: {spec: {containers: [{name: c, image: x}]}}}}
"""


@pytest.mark.parametrize(
    ("key", "jobs", "want"),
    [
        ("topology.kubernetes.io/zone", 1, None),
        ("topology.kubernetes.io/zone", 2, "always"),  # each child Job in its own zone
        ("rack", 1, None),  # racks nest in zones: one Job, one rack, one zone
        ("rack", 2, "likely"),  # two racks may or may not share a zone
        ("pool", 1, "likely"),  # pool p-ab spans za and zb: one pool is not one zone
    ],
)
def test_jobset_exclusive_topology_couples_on_its_own_key(key: str, jobs: int, want: str | None) -> None:
    text = NODES + JOBSET.replace("KEY", key).replace("JOBS", str(jobs))
    assert split(text, "ml/js/workers", "ml/js/workers") == want


LWS = """---
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  name: lws
  namespace: ml
  annotations: {ANNOTATIONS}
spec:
  replicas: 1
  leaderWorkerTemplate:
    size: 4
    SUBGROUP
    workerTemplate: {spec: {containers: [{name: w, image: x, ports: [{containerPort: 8080}]}]}}
"""


@pytest.mark.parametrize(
    ("annotations", "subgroup", "want"),
    [
        ("", "", "likely"),
        ("leaderworkerset.sigs.k8s.io/exclusive-topology: rack", "", None),
        ("leaderworkerset.sigs.k8s.io/exclusive-topology: pool", "", "likely"),
        (
            "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology: topology.kubernetes.io/zone",
            "subGroupPolicy: {subGroupSize: 2}",
            "always",
        ),
    ],
    ids=["none", "rack", "pool-spans-zones", "subgroups-per-zone"],
)
def test_leaderworkerset_exclusive_topology(annotations: str, subgroup: str, want: str | None) -> None:
    text = NODES + LWS.replace("ANNOTATIONS", annotations).replace("SUBGROUP", subgroup)
    assert split(text, "ml/lws/worker", "ml/lws/leader") == want


# --- admission ------------------------------------------------------------------------------------


def test_extended_resource_toleration_is_a_setting_and_named_when_it_would_matter() -> None:
    gpu = "nodeSelector: {gpu: 'true'}, containers: [{name: t, image: x, resources: {limits: {nvidia.com/gpu: 1}}}]"
    job = pytorchjob().replace("spec: {containers: [{name: t, image: x}]}}}}\n", "spec: {" + gpu + "}}}\n", 1)
    job = job.replace(
        "Worker: {replicas: 4, template: {metadata: {labels: {app: train}}, spec: {containers: [{name: t, image: x}]}}}",
        "Worker: {replicas: 4, template: {metadata: {labels: {app: train}}, spec: {" + gpu + "}}}",
    )
    text = tainted_nodes({"za"}, "nvidia.com/gpu=present:NoSchedule") + job
    p, _ = placed(text)
    assert p[W].unschedulable and any("ExtendedResourceToleration" in n for n in p[W].notes)
    inv = inventory(text=text)
    from auditor.audit.scan import scan

    messages = [f.message for f in scan(inv).findings if f.rule == "role-unschedulable"]
    assert messages and all("ExtendedResourceToleration" in m for m in messages)
    on = Settings(kubernetes=replace(KubernetesSettings(), extended_resource_toleration=True))
    p, _ = placed(text, on)
    assert p[W].nodes == ("a1",)


def test_replicas_following_pods_of_several_roles_may_split() -> None:
    # The workers' term selects the master's pods and their own: each worker joins a zone holding
    # one of them, the first worker may start before the master (first-pod exemption), so workers
    # can end up in two zones — possible, not forced together, not merely nudged apart.
    to_everyone = follower("").replace("app: store", "app: train")
    assert split(NODES + pytorchjob(to_everyone), W, W) == "possible"


# --- NodeResourcesFit as a bound on how many replicas a zone holds -----------------------------------

# Three zones of two 8-GPU nodes each (noderesources/fit.go: a pod fits while every requested
# resource's allocatable, less what the node's pods request, covers it; each pod takes a pods slot).
GPU_NODES = """\
apiVersion: v1
kind: NodeList
items:
""" + "".join(
    f"- {{apiVersion: v1, kind: Node, metadata: {{name: {n}, labels: {{topology.kubernetes.io/zone: {z}, "
    f"kubernetes.io/hostname: {n}}}}}, status: {{allocatable: {{cpu: '96', memory: 1Ti, pods: '110', "
    "nvidia.com/gpu: '8'}}}\n"
    for n, z in [("a1", "za"), ("a2", "za"), ("b1", "zb"), ("b2", "zb"), ("c1", "zc"), ("c2", "zc")]
)


def gpu_job(replicas: int, gpus: int = 8) -> str:
    """The PyTorchJob above, each worker requesting `gpus` GPUs."""
    head, _, tail = pytorchjob(replicas=replicas).rpartition("containers: [{name: t, image: x}]")
    return (
        head
        + f"containers: [{{name: t, image: x, resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}}}]"
        + tail
    )


def test_workers_needing_more_gpu_nodes_than_a_zone_has_cross_zones() -> None:
    # Three whole-node workers on two 8-GPU nodes per zone: one of them lands in another zone.
    p, _ = placed(GPU_NODES + gpu_job(3))
    assert (
        "NodeResourcesFit" in p[W].forced_spread
        and "nvidia.com/gpu: at most 1 per node" in p[W].forced_spread
    )
    assert p[W].max_replicas is None
    assert split(GPU_NODES + gpu_job(3), W, M) == "always"
    assert split(GPU_NODES + gpu_job(3), W, W) == "always"
    # Two whole-node workers, or four half-node ones, fit one zone: nothing forces them apart.
    assert split(GPU_NODES + gpu_job(2), W, M) == "likely"
    assert split(GPU_NODES + gpu_job(4, gpus=4), W, M) == "likely"
    assert not placed(GPU_NODES + gpu_job(4, gpus=4))[0][W].forced_spread


def test_more_whole_node_workers_than_gpu_nodes_leave_the_rest_pending() -> None:
    p, _ = placed(GPU_NODES + gpu_job(8))
    assert p[W].max_replicas == 6 and p[W].partly_unschedulable  # six nodes, one worker each
    assert "nvidia.com/gpu" in p[W].capacity_reason
    found = findings(GPU_NODES + gpu_job(8))
    assert ("role-unschedulable", "always", "j") in found


def test_nodes_of_unknown_capacity_bound_nothing() -> None:
    # Node objects without status.allocatable (hand-written, trimmed): unknown means it fits.
    assert not placed(NODES + gpu_job(3).replace("nvidia.com/gpu: 8", "cpu: 1"))[0][W].forced_spread
    mixed = GPU_NODES.replace(
        ", status: {allocatable: {cpu: '96', memory: 1Ti, pods: '110', nvidia.com/gpu: '8'}}", "", 1
    )
    p, _ = placed(mixed + gpu_job(3).replace("nvidia.com/gpu: 8", "cpu: 64"))
    assert not p[W].forced_spread  # a1's capacity is unknown: zone za might hold all three
