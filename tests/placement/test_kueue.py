"""Kueue (issue 35): LocalQueue → ClusterQueue → ResourceFlavors, and Topology-Aware Scheduling.

Test data: tests/data/kueue (the Kueue documentation's examples; origins in its README).
Expectations follow Kueue's documented semantics: a pod set is admitted under one flavor per
resource group, whose nodeLabels are injected into its nodeSelector and whose tolerations into its
pods; a flavor whose nodeTaints the pod set does not tolerate is not chosen; a TAS level at or
below the zone keeps a pod set in one zone, a preferred or sliced one does not.
"""

from __future__ import annotations

from support import DATA, inventory, placed
from support import node_yaml as node

from auditor.placement.coupling import pair_placement

KUEUE = DATA / "kueue"


def job(labels: str = "{kueue.x-k8s.io/queue-name: team-queue}", worker_spec: str = "") -> str:
    spec = (
        "{"
        + (worker_spec + ", " if worker_spec else "")
        + "containers: [{name: t, image: x, resources: {requests: {cpu: '1', nvidia.com/gpu: '1'}, "
        "limits: {nvidia.com/gpu: '1'}}}]}"
    )
    return f"""---
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: j, namespace: ml, labels: {labels}}}
spec:
  pytorchReplicaSpecs:
    Master: {{replicas: 1, template: {{metadata: {{labels: {{app: train}}}}, spec: {spec}}}}}
    Worker: {{replicas: 4, template: {{metadata: {{labels: {{app: train}}}}, spec: {spec}}}}}
"""


W, M = "ml/j/Worker", "ml/j/Master"
TWO_ZONES = node("a1", "zone-a") + node("a2", "zone-a") + node("b1", "zone-b") + node("b2", "zone-b")


def test_per_zone_flavors_keep_each_pod_set_in_one_zone_but_not_the_pair() -> None:
    p, ctx, _ = placed(TWO_ZONES + job(), (KUEUE / "zone-flavors.yaml",))
    assert p[W].zones == ("zone-a", "zone-b")  # either flavor
    assert "admitted by Kueue under one ResourceFlavor of ClusterQueue gpu-queue" in p[W].one_zone
    assert pair_placement(p[W], p[W], ctx).split is None
    pair = pair_placement(p[M], p[W], ctx)
    assert pair.split == "possible"
    assert "both take the first with quota for them" in pair.coupling
    # Without the queue label Kueue does not manage the job: nothing keeps the workers together.
    p, ctx, _ = placed(TWO_ZONES + job("{app: train}"), (KUEUE / "zone-flavors.yaml",))
    assert not p[W].one_zone
    assert pair_placement(p[W], p[W], ctx).split == "likely"
    assert pair_placement(p[M], p[W], ctx).split == "likely"


def test_a_flavor_narrows_the_zones_a_pod_set_can_land_in() -> None:
    one = "---\n" + (KUEUE / "zone-flavors.yaml").read_text().replace(
        "    - name: zone-b\n      resources:\n      - {name: cpu, nominalQuota: 64}\n      - {name: memory, nominalQuota: 256Gi}\n      - {name: nvidia.com/gpu, nominalQuota: 16}\n",
        "",
    )
    p, ctx, _ = placed(TWO_ZONES + one + job())
    assert p[W].zones == ("zone-a",)
    assert p[W].role.template.node_selector == (("topology.kubernetes.io/zone", "zone-a"),)
    assert pair_placement(p[M], p[W], ctx).split is None


def test_the_namespace_default_local_queue_manages_unlabelled_jobs() -> None:
    default = "---\n" + (KUEUE / "zone-flavors.yaml").read_text().replace("name: team-queue", "name: default")
    p, _, _ = placed(TWO_ZONES + default + job("{app: train}"))
    assert p[W].one_zone
    # A job naming a queue that is not there: as written, with a note.
    p, _, notes = placed(
        TWO_ZONES + job("{kueue.x-k8s.io/queue-name: other}"), (KUEUE / "zone-flavors.yaml",)
    )
    assert not p[W].one_zone
    assert (
        "PyTorchJob ml/j: LocalQueue ml/other is not among the objects read: Kueue's flavors are not "
        "applied to Master, Worker" in notes
    )


def test_a_flavor_whose_taints_the_pod_set_does_not_tolerate_is_never_chosen() -> None:
    cq = """---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: spot-queue}
spec:
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - {name: spot, resources: [{name: cpu, nominalQuota: 9}]}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {namespace: ml, name: team-queue}
spec: {clusterQueue: spot-queue}
"""
    nodes = node("s1", "zone-a", **{"instance-type": "spot"}) + node("o1", "zone-b")
    p, _, notes = placed(nodes + cq + job(), (KUEUE / "resource-flavor-taints.yaml",))
    assert p[W].unschedulable
    assert any("no ResourceFlavor of ClusterQueue spot-queue admits it" in n for n in notes)
    tolerates = "tolerations: [{key: spot, operator: Equal, value: 'true', effect: NoSchedule}]"
    p, _, _ = placed(nodes + cq + job(worker_spec=tolerates), (KUEUE / "resource-flavor-taints.yaml",))
    assert p[W].nodes == ("s1",)  # the flavor's nodeLabels: instance-type=spot


RACKS = node(
    "a1",
    "zone-a",
    **{"cloud.provider.com/topology-rack": "r1", "cloud.provider.com/node-group": "tas-node-group"},
) + node(
    "b1",
    "zone-b",
    **{"cloud.provider.com/topology-rack": "r1", "cloud.provider.com/node-group": "tas-node-group"},
)


def _jobset(name: str, queue: str) -> str:
    return "---\n" + (KUEUE / name).read_text().replace("queue-name: user-queue", f"queue-name: {queue}")


def test_a_required_level_below_the_zone_in_the_topology_keeps_the_pod_set_in_one_zone() -> None:
    # Rack r1 has nodes in both zones: the nodes alone do not say a rack nests in a zone. Kueue's
    # Topology `zoned` lists the zone above the rack, so a rack domain is inside one zone.
    text = RACKS + _jobset("sample-jobset-tas-required.yaml", "tas-zoned-queue")
    p, ctx, _ = placed(text, (KUEUE / "tas-sample-queues.yaml",))
    (workers,) = [k for k in p if "jobset-tas-required" in k]
    assert "podset-required-topology" in p[workers].one_zone
    assert "at or below the zone level of Topology zoned" in p[workers].one_zone
    assert pair_placement(p[workers], p[workers], ctx).split is None
    # Topology `default` has no zone level: the rack can span zones.
    text = RACKS + _jobset("sample-jobset-tas-required.yaml", "tas-user-queue")
    p, ctx, _ = placed(text, (KUEUE / "tas-sample-queues.yaml",))
    assert not p[workers].one_zone
    assert pair_placement(p[workers], p[workers], ctx).split == "likely"


def test_preferred_and_sliced_topologies_leave_a_split_possible() -> None:
    nested = node(
        "a1",
        "zone-a",
        **{
            "cloud.provider.com/topology-block": "ba",
            "cloud.provider.com/topology-rack": "ra",
            "cloud.provider.com/node-group": "tas-node-group",
        },
    ) + node(
        "b1",
        "zone-b",
        **{
            "cloud.provider.com/topology-block": "bb",
            "cloud.provider.com/topology-rack": "rb",
            "cloud.provider.com/node-group": "tas-node-group",
        },
    )
    p, ctx, _ = placed(nested, (KUEUE / "tas-sample-queues.yaml", KUEUE / "sample-job-preferred.yaml"))
    (job_,) = p
    assert pair_placement(p[job_], p[job_], ctx).split == "possible"
    assert "podset-preferred-topology" in pair_placement(p[job_], p[job_], ctx).coupling
    text = nested + _jobset("sample-jobset-tas-sliced.yaml", "tas-user-queue")
    p, ctx, _ = placed(text, (KUEUE / "tas-sample-queues.yaml",))
    (workers,) = p
    pair = pair_placement(p[workers], p[workers], ctx)
    assert pair.split == "possible" and "each slice of 4 pods keeps to one domain" in pair.coupling


def test_the_documentations_single_queue_setup_changes_nothing_but_admission() -> None:
    job_ = "---\n" + (KUEUE / "sample-job-preferred.yaml").read_text().replace("tas-user-queue", "user-queue")
    job_ = job_.replace(
        '        kueue.x-k8s.io/podset-preferred-topology: "cloud.provider.com/topology-block"\n',
        "        x: y\n",
    )
    p, ctx, notes = placed(TWO_ZONES + job_, (KUEUE / "single-clusterqueue-setup.yaml",))
    (only,) = p
    assert p[only].zones == ("zone-a", "zone-b") and not p[only].one_zone and not notes
    assert pair_placement(p[only], p[only], ctx).split == "likely"


def test_a_bad_cluster_queue_is_an_error_naming_file_object_and_field() -> None:
    text = (
        (
            "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: broken}\n"
            "spec: {resourceGroups: [{coveredResources: [cpu], flavors: [{resources: []}]}]}\n"
        )
        + TWO_ZONES
        + job()
    )
    inv = inventory(text=text)
    assert [(e.object, e.field) for e in inv.errors] == [
        ("ClusterQueue broken", "spec.resourceGroups[0].flavors[0].name")
    ]
    assert len(inv.workloads) == 1


def test_a_flavor_contradicting_the_pod_sets_own_node_selection_is_not_chosen() -> None:
    # Kueue matches the pod set's nodeSelector / required affinity, on the keys the flavors
    # define, against each flavor's nodeLabels: a job pinned to zone-b is admitted under zone-b.
    pinned = "nodeSelector: {topology.kubernetes.io/zone: zone-b}"
    p, ctx, _ = placed(TWO_ZONES + job(worker_spec=pinned), (KUEUE / "zone-flavors.yaml",))
    assert p[W].zones == ("zone-b",)
    adm = ctx.options.admission(p[W].role)
    assert adm is not None and adm.flavor_names == ("zone-b",)
    # Pinned to a zone no flavor names: no flavor, never admitted.
    nowhere = "nodeSelector: {topology.kubernetes.io/zone: zone-c}"
    p, _, notes = placed(TWO_ZONES + job(worker_spec=nowhere), (KUEUE / "zone-flavors.yaml",))
    assert p[W].unschedulable and any("Kueue never admits it" in n for n in notes)
