"""The words both synthetic worlds use: the region and its zones, the well-known node label keys,
the GPU taint, the annotations the auditor reads, and node pools. gen_repo.py writes them into a
Git repository (manifests as platform teams keep them), world.cluster into a live API server's
lists (as kube-apiserver reports them), so a pool or a key means the same in both."""

from __future__ import annotations

from dataclasses import dataclass

REGION = "us-east-1"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
ZONE_KEY = "topology.kubernetes.io/zone"
HOST_KEY = "kubernetes.io/hostname"
RACK_KEY = "cloud.provider.com/topology-rack"
BLOCK_KEY = "cloud.provider.com/topology-block"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
SYSTEM_TAINT = {"key": "CriticalAddonsOnly", "value": "true", "effect": "NoSchedule"}
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_GROUP = "kueue.x-k8s.io/podset-group-name"
GRADIENT = "placement-auditor.io/gradient-bytes"
STEPS = "placement-auditor.io/steps-per-second"
EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
JOB_NAME = "training.kubeflow.org/job-name"


@dataclass(frozen=True)
class Pool:
    """A node pool: `share` of the nodes, in `zones`; `cpu`/`memory` allocatable (as the world
    writes them: Gi in manifests, Ki as the kubelet reports), `capacity_cpu` where it differs."""

    name: str
    instance_type: str
    share: float
    zones: tuple[str, ...]
    cpu: str
    memory: str
    gpus: int = 0
    product: str = ""
    system: bool = False
    capacity_cpu: str = ""
