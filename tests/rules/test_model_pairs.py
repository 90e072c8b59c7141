"""build_model's zone verdicts equal the engine's, pair by pair, whether or not a policy can tell
the replicas of a role apart by zone (the model takes one pair's verdicts for all pairs only when
it cannot: PolicyEngine.verdict_class)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import inventory

from auditor.inventory import Inventory, policy_engine
from auditor.model.objects import ZONE_KEY
from auditor.reachability.engine import FlowVerdict
from auditor.reachability.policy import Direction
from auditor.resources import examples_dir
from auditor.rules.model import RoleEndpoints, ZoneVerdict, build_model, zone_verdict
from auditor.settings.config import NetworkConfig, Settings, TopologySettings

NODES = "\n---\n".join(
    f"""apiVersion: v1
kind: Node
metadata: {{name: {name}, labels: {{topology.kubernetes.io/zone: {zone}, kubernetes.io/hostname: {name}}}}}
status: {{allocatable: {{cpu: "64", memory: 256Gi, nvidia.com/gpu: "8"}}}}"""
    for name, zone in (("a1", "za"), ("b1", "zb"), ("c1", "zc"))
)

JOB = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: bert, namespace: ml}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        metadata: {labels: {app: bert}}
        spec:
          containers: [{name: pytorch, image: x, ports: [{name: pytorchjob-port, containerPort: 23456}]}]
    Worker:
      replicas: 3
      template:
        metadata: {labels: {app: bert}}
        spec:
          containers: [{name: pytorch, image: x}]
"""

# Workers may reach the master only from zone zb: the verdict depends on the worker's zone once
# the zone label is copied onto the pod at binding. (A NetworkPolicy: Cilium's default identity
# labels leave out every *.kubernetes.io label, the zone too.)
ZONE_POLICY = """\
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: master-from-zb, namespace: ml}
spec:
  podSelector: {matchLabels: {training.kubeflow.org/replica-type: master}}
  policyTypes: [Ingress]
  ingress:
  - from:
    - podSelector: {matchLabels: {topology.kubernetes.io/zone: zb}}
"""

# A host-network agent calls the master through its Service; the master admits only its own
# node's host (Cilium's `host` entity; other nodes are `remote-node`): the verdict depends on the
# node the agent runs on, which no verdict class can hide.
HOST_AGENT = """\
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: ml}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata:
      labels: {app: agent}
      annotations: {placement-auditor.io/talks-to: "bert-master:23456"}
    spec:
      hostNetwork: true
      containers: [{name: agent, image: x}]
---
apiVersion: v1
kind: Service
metadata: {name: bert-master, namespace: ml}
spec:
  selector: {training.kubeflow.org/replica-type: master}
  ports: [{port: 23456, targetPort: 23456}]
---
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: master-from-its-host, namespace: ml}
spec:
  endpointSelector: {matchLabels: {training.kubeflow.org/replica-type: master}}
  ingress:
  - fromEntities: [host]
"""


def pair_by_pair(inv: Inventory) -> list[tuple[str, str, tuple[ZoneVerdict, ...]]]:
    """Every analysed edge's zone verdicts, each pair evaluated on its own by a fresh engine."""
    model = build_model(inv)
    engine = policy_engine(inv)
    endpoints = RoleEndpoints(inv)
    out = []
    for analysis in model.edges:
        edge = analysis.edge
        a, b = model.placements[edge.source], model.placements[edge.destination]
        expected = []
        for za, zb in analysis.placement.pairs:
            src = endpoints.get(edge.source, za, a)
            dst = endpoints.get(edge.destination, zb, b)
            flow = FlowVerdict(
                str(src),
                str(dst),
                engine.directional(src, Direction.EGRESS, dst),
                engine.directional(dst, Direction.INGRESS, src),
            )
            expected.append(zone_verdict(edge, flow, za, zb))
        assert analysis.verdicts == tuple(expected), edge
        out.append((str(edge.source), str(edge.destination), analysis.verdicts))
    return out


def verdicts_between(
    analysed: list[tuple[str, str, tuple[ZoneVerdict, ...]]], source: str, destination: str
) -> list[ZoneVerdict]:
    """The zone verdicts of the edges from a role whose name holds `source` to one holding `destination`."""
    return [v for s, d, verdicts in analysed if source in s and destination in d for v in verdicts]


def copying(*labels: str) -> Settings:
    """Settings where binding copies these node labels onto the pod (PodTopologyLabels)."""
    return Settings(topology=TopologySettings(pod_zone_labels=tuple((k, k) for k in labels)))


def test_a_zone_reading_policy_gives_each_pair_its_own_verdict() -> None:
    inv = inventory(text="\n---\n".join((NODES, JOB, ZONE_POLICY)), settings=copying(ZONE_KEY))
    analysed = pair_by_pair(inv)
    allowed = {(v.source_zone, v.allowed) for v in verdicts_between(analysed, "Worker", "Master")}
    # Workers in zb reach the master; workers in the other zones do not.
    assert ("zb", True) in allowed and ("za", False) in allowed


def test_without_zone_labels_every_pair_shares_the_verdict() -> None:
    inv = inventory(text="\n---\n".join((NODES, JOB, ZONE_POLICY)), settings=copying())
    analysed = pair_by_pair(inv)
    worker = verdicts_between(analysed, "Worker", "Master")
    assert len(worker) > 1 and len({v.allowed for v in worker}) == 1


def test_a_host_network_end_is_evaluated_pair_by_pair() -> None:
    settings = Settings(topology=TopologySettings(pod_zone_labels=()), network=NetworkConfig(cni="cilium"))
    inv = inventory(text="\n---\n".join((NODES, JOB, HOST_AGENT)), settings=settings)
    engine = policy_engine(inv)
    agent = next(r for w in inv.workloads for r in w.roles if w.ref.name == "agent")
    placement = build_model(inv).placements[agent]
    endpoint = RoleEndpoints(inv).get(agent, placement.zones[0], placement)
    assert engine.verdict_class(endpoint) is None
    into_master = verdicts_between(pair_by_pair(inv), "agent", "Master")
    # The agent on the master's node reaches it; from the other zones' nodes it does not.
    assert {(v.source_zone == v.destination_zone, v.allowed) for v in into_master} == {
        (True, True),
        (False, False),
    }


@pytest.mark.parametrize("where", ["before", "after"])
def test_the_seed_lab_pairs(where: str) -> None:
    seed: Path = examples_dir() / "seed-lab"
    inv = inventory([seed / where, seed / "nodes.yaml", seed / "policies.yaml"])
    assert pair_by_pair(inv)
