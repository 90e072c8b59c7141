"""Dynamic Resource Allocation (issue 35): where the devices a pod claims exist bounds where it lands.

Test data: tests/data/dra (kubernetes-sigs/dra-example-driver's demo examples and the
ResourceSlices its driver publishes; origin in its README). worker-a (zone-a) and worker-b
(zone-b) publish two GPUs each of both example drivers; worker-c (zone-c) none.
"""

from __future__ import annotations

import pytest
import support
from support import DATA, inventory

from auditor.placement.coupling import PairContext, RolePlacement, pair_placement

DRA = DATA / "dra"
BASE = [DRA / "nodes.yaml", DRA / "deviceclass.yaml", DRA / "slices.yaml"]


def placed(
    example: str = "", text: str = "", base: list | None = None
) -> tuple[dict[str, RolePlacement], PairContext, list[str]]:
    paths = [*(BASE if base is None else base), *([DRA / example] if example else [])]
    return support.placed(text, paths)


def test_a_claim_template_keeps_each_pod_to_nodes_with_a_matching_device() -> None:
    p, ctx, _ = placed("resourceclaimtemplate.yaml")
    for pod in ("pod0", "pod1"):
        role = p[f"basic-resourceclaimtemplate/{pod}"]
        assert role.zones == ("zone-a", "zone-b") and role.nodes == ("worker-a", "worker-b")
        (why,) = [r for r in role.rejected if r.node == "worker-c"]
        assert why.plugin == "DynamicResources"
        assert "request gpu of ResourceClaimTemplate single-gpu (DeviceClass gpu.example.com)" in why.reason
        assert not role.one_zone and not role.shared_claims
    # One claim per pod: nothing ties the two pods together.
    a, b = p["basic-resourceclaimtemplate/pod0"], p["basic-resourceclaimtemplate/pod1"]
    assert pair_placement(a, b, ctx).split == "likely"


def test_a_shared_claim_of_node_local_devices_puts_every_pod_in_one_zone() -> None:
    # Upstream: pod0 and pod1 share one GPU, so one node.
    p, ctx, _ = placed("shared-claim-across-pods.yaml")
    a, b = p["basic-shared-claim-across-pods/pod0"], p["basic-shared-claim-across-pods/pod1"]
    assert a.zones == b.zones == ("zone-a", "zone-b")
    assert a.shared_claims == (("basic-shared-claim-across-pods", "single-gpu"),)
    pair = pair_placement(a, b, ctx)
    assert pair.split is None
    assert "share ResourceClaim basic-shared-claim-across-pods/single-gpu" in pair.coupling
    assert "reachable from one zone only" in pair.coupling


NETWORK_SLICE = """
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: fabric}
spec:
  driver: gpu.example.com
  pool: {name: fabric, generation: 0, resourceSliceCount: 1}
  nodeSelector:
    nodeSelectorTerms:
    - matchExpressions:
      - {key: topology.kubernetes.io/zone, operator: In, values: [zone-b, zone-c]}
  devices:
  - name: fabric-0
    attributes: {model: {string: FABRIC}}
"""


def test_a_shared_claim_on_a_device_reachable_across_zones_may_split() -> None:
    # Only the fabric device (reachable from zone-b and zone-c) matches: no one-zone guarantee.
    claim = (DRA / "shared-claim-across-pods.yaml").read_text()
    claim = claim.replace(
        "deviceClassName: gpu.example.com",
        "deviceClassName: gpu.example.com\n          selectors:\n"
        "          - cel: {expression: \"device.attributes['gpu.example.com'].model == 'FABRIC'\"}",
    )
    p, ctx, _ = placed(text=NETWORK_SLICE + "---\n" + claim)
    a, b = p["basic-shared-claim-across-pods/pod0"], p["basic-shared-claim-across-pods/pod1"]
    assert a.zones == ("zone-b", "zone-c") and not a.claim_one_zone
    assert pair_placement(a, b, ctx).split == "likely"


def test_cel_selectors_with_quantities_are_evaluated() -> None:
    p, _, notes = placed("cel-selector.yaml")
    assert p["cel-selector/pod0"].zones == ("zone-a", "zone-b")
    assert not [n for n in notes if "not evaluated" in n]
    # worker-b's GPUs of that driver have 2Gi: under the 4Gi the selector asks.
    slices = (DRA / "slices.yaml").read_text()
    parts = slices.split("---\n")
    parts[3] = parts[3].replace("80Gi", "2Gi")
    p, _, _ = placed(
        "cel-selector.yaml", text="---\n".join(parts), base=[DRA / "nodes.yaml", DRA / "deviceclass.yaml"]
    )
    role = p["cel-selector/pod0"]
    assert role.zones == ("zone-a",)
    assert {r.node for r in role.rejected if r.plugin == "DynamicResources"} == {"worker-b", "worker-c"}


def test_a_model_no_device_has_leaves_the_pod_unschedulable() -> None:
    text = (DRA / "cel-selector.yaml").read_text().replace("== 'LATEST-GPU-MODEL'", "== 'H200'")
    p, _, _ = placed(text=text)
    assert p["cel-selector/pod0"].unschedulable


def test_a_selector_this_runtime_cannot_compile_counts_every_device_and_says_so() -> None:
    text = (DRA / "cel-selector.yaml").read_text()
    text = text.replace(
        "device.attributes['gpu.dra-example-driver.sigs.k8s.io'].model == 'LATEST-GPU-MODEL'",
        "device.attributes['gpu.dra-example-driver.sigs.k8s.io'].driverVersion.isGreaterThan(semver('0.1.0'))",
    )
    p, _, _ = placed(text=text)
    role = p["cel-selector/pod0"]
    assert role.zones == ("zone-a", "zone-b")
    assert any("not evaluated" in n and "semver" in n and "counted as matching" in n for n in role.notes)


def test_a_selector_failing_on_a_device_does_not_match_it() -> None:
    # No device has a `vram` attribute: the lookup fails on each, as the allocator refuses them.
    text = (DRA / "cel-selector.yaml").read_text().replace("].model ==", "].vram ==")
    p, _, _ = placed(text=text)
    role = p["cel-selector/pod0"]
    assert role.unschedulable
    assert any("fails on 4 device(s)" in n for n in role.notes)


def test_an_allocated_claim_keeps_its_pods_where_it_was_allocated() -> None:
    claim = (DRA / "shared-claim-across-pods.yaml").read_text()
    status = """status:
  allocation:
    devices:
      results:
      - {request: gpu, driver: gpu.example.com, pool: worker-b, device: gpu-1}
    nodeSelector:
      nodeSelectorTerms:
      - matchFields:
        - {key: metadata.name, operator: In, values: [worker-b]}
"""
    claim = claim.replace(
        "\n---\napiVersion: v1\nkind: Pod", "\n" + status + "\n---\napiVersion: v1\nkind: Pod", 1
    )
    p, ctx, _ = placed(text=claim)
    a, b = p["basic-shared-claim-across-pods/pod0"], p["basic-shared-claim-across-pods/pod1"]
    assert a.nodes == b.nodes == ("worker-b",)
    (why,) = [r for r in a.rejected if r.node == "worker-a"]
    assert "allocated to devices not reachable from it" in why.reason
    assert pair_placement(a, b, ctx).split is None


FIRST_AVAILABLE = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {namespace: ml, name: any-gpu}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        firstAvailable:
        - name: big
          deviceClassName: gpu.example.com
          count: 2
          selectors:
          - cel: {expression: "device.attributes['gpu.example.com'].index == 1"}
        - name: small
          deviceClassName: gpu.example.com
---
apiVersion: v1
kind: Pod
metadata: {namespace: ml, name: trainer}
spec:
  containers: [{name: c, image: x}]
  resourceClaims: [{name: gpu, resourceClaimTemplateName: any-gpu}]
"""


def test_first_available_takes_any_alternative_that_can_be_met() -> None:
    p, _, _ = placed(text=FIRST_AVAILABLE)
    assert p["ml/trainer"].zones == ("zone-a", "zone-b")  # "big" fails everywhere, "small" does not
    small = "        - name: small\n          deviceClassName: gpu.example.com\n"
    only_big = FIRST_AVAILABLE.replace(small, "")
    assert placed(text=only_big)[0]["ml/trainer"].unschedulable
    # Two of a node's devices: index >= 0 selects both of worker-a's and both of worker-b's.
    both = only_big.replace("index == 1", "index >= 0")
    assert placed(text=both)[0]["ml/trainer"].zones == ("zone-a", "zone-b")
    # Three: more than any node has.
    assert placed(text=both.replace("count: 2", "count: 3"))[0]["ml/trainer"].unschedulable


V1BETA1 = """
apiVersion: resource.k8s.io/v1beta1
kind: ResourceSlice
metadata: {name: old}
spec:
  driver: npu.example.com
  nodeName: worker-c
  pool: {name: worker-c, generation: 1}
  devices:
  - name: npu0
    basic:
      attributes: {productName: {string: 910B3}, npu.example.com/numa: {int: 0}}
      capacity: {memory: {value: 32Gi}}
---
apiVersion: resource.k8s.io/v1beta1
kind: DeviceClass
metadata: {name: npu}
spec:
  selectors: [{cel: {expression: "device.driver == 'npu.example.com'"}}]
---
apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaimTemplate
metadata: {namespace: ml, name: npu}
spec:
  spec:
    devices:
      requests:
      - name: npu
        deviceClassName: npu
        selectors:
        - cel:
            expression: >-
              device.attributes['npu.example.com'].productName == '910B3' &&
              device.attributes['npu.example.com'].numa == 0 &&
              device.capacity['npu.example.com'].memory.isGreaterThan(quantity('16Gi'))
---
apiVersion: v1
kind: Pod
metadata: {namespace: ml, name: npu-job}
spec:
  containers: [{name: c, image: x}]
  resourceClaims: [{name: npu, resourceClaimTemplateName: npu}]
"""


def test_v1beta1_objects_are_read() -> None:
    p, _, _ = placed(text=V1BETA1, base=[DRA / "nodes.yaml"])
    assert p["ml/npu-job"].nodes == ("worker-c",)


def test_all_nodes_devices_are_reachable_everywhere() -> None:
    text = V1BETA1.replace("nodeName: worker-c", "allNodes: true")
    assert placed(text=text, base=[DRA / "nodes.yaml"])[0]["ml/npu-job"].zones == (
        "zone-a",
        "zone-b",
        "zone-c",
    )


PYTORCH_SHARED = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {namespace: ml, name: shared-gpu}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.example.com}
---
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {namespace: ml, name: ddp}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers: [{name: pytorch, image: x, ports: [{containerPort: 23456, name: pytorchjob-port}]}]
          resourceClaims: [{name: gpu, resourceClaimName: shared-gpu}]
    Worker:
      replicas: 3
      template:
        spec:
          containers: [{name: pytorch, image: x}]
          resourceClaims: [{name: gpu, resourceClaimName: shared-gpu}]
"""


def test_roles_of_a_training_job_sharing_one_claim_never_split() -> None:
    p, ctx, _ = placed(text=PYTORCH_SHARED)
    master, worker = p["ml/ddp/Master"], p["ml/ddp/Worker"]
    assert worker.one_zone and "ResourceClaim shared-gpu" in worker.one_zone
    assert pair_placement(master, worker, ctx).split is None
    assert pair_placement(worker, worker, ctx).split is None
    # With a claim template each pod has its own GPU: the split is back.
    text = PYTORCH_SHARED.replace("resourceClaimName: shared-gpu", "resourceClaimTemplateName: gpu")
    text = text.replace(
        "kind: ResourceClaim\nmetadata: {namespace: ml, name: shared-gpu}\nspec:",
        "kind: ResourceClaimTemplate\nmetadata: {namespace: ml, name: gpu}\nspec:\n spec:",
    )
    text = text.replace(
        "\n  devices:\n    requests:\n    - name: gpu\n      exactly:",
        "\n  devices:\n   requests:\n   - name: gpu\n     exactly:",
    )
    p, ctx, _ = placed(text=text)
    assert pair_placement(p["ml/ddp/Master"], p["ml/ddp/Worker"], ctx).split == "likely"


def test_a_claim_not_among_the_objects_read_changes_nothing_and_says_so() -> None:
    text = (DRA / "resourceclaimtemplate.yaml").read_text().split("---\n", 1)[1]
    p, _, _ = placed(text=text)
    role = p["basic-resourceclaimtemplate/pod0"]
    assert role.zones == ("zone-a", "zone-b", "zone-c")
    assert any("ResourceClaimTemplate basic-resourceclaimtemplate/single-gpu" in n for n in role.notes)


def test_without_dra_objects_placement_is_unchanged() -> None:
    text = (DRA / "resourceclaimtemplate.yaml").read_text().split("---\n", 1)[1]
    p, _, _ = placed(text=text, base=[DRA / "nodes.yaml"])
    assert p["basic-resourceclaimtemplate/pod0"].zones == ("zone-a", "zone-b", "zone-c")


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (
            "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: s}\n"
            "spec: {driver: d, pool: {name: p}, devices: [{name: x}]}\n",
            "spec",
        ),
        (
            "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: s}\n"
            "spec: {driver: d, nodeName: n, pool: {name: p}, devices: [{name: x, capacity: {m: {value: lots}}}]}\n",
            "spec.devices[0].capacity.m.value",
        ),
        (
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c, namespace: ml}\n"
            "spec: {devices: {requests: [{name: g, exactly: {deviceClassName: x, allocationMode: Some}}]}}\n",
            "spec.devices.requests[0].exactly.allocationMode",
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ml}\nspec:\n  containers: [{name: c}]\n"
            "  resourceClaims: [{name: g, resourceClaimName: a, resourceClaimTemplateName: b}]\n",
            "spec.resourceClaims[0]",
        ),
    ],
)
def test_objects_that_cannot_be_read_are_errors_naming_the_field(text: str, field: str) -> None:
    inv = inventory(text=text)
    assert any(field in e.message or field == e.field for e in inv.errors), inv.errors
