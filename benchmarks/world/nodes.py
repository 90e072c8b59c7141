"""Where the nodes of both synthetic worlds are: `sites` lays `count` nodes over the pools (each
pool its share, the last one the rest), round-robin over the pool's zones, with the EC2-style
names, IPs, pod CIDRs and GPU racks gen_repo.py writes into manifests and world.cluster into the
API server's lists. The objects themselves differ (a manifest vs what the kubelet reports)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from world.vocabulary import GPU_TAINT, HOST_KEY, REGION, SYSTEM_TAINT, ZONE_KEY, Pool


@dataclass(frozen=True)
class Site:
    """One node's place: its pool, zone, position in the pool (`ordinal`) and in the cluster
    (`index`), InternalIP, name and pod CIDR."""

    pool: Pool
    zone: str
    ordinal: int
    index: int

    @property
    def ip(self) -> str:
        return f"10.{16 + self.index // 250}.{self.index % 250 + 1}.{10 + self.ordinal % 200}"

    @property
    def name(self) -> str:
        return f"ip-{self.ip.replace('.', '-')}.ec2.internal"

    @property
    def cidr_prefix(self) -> str:
        """The pod CIDR without its last octet and length ("10.100.7." of 10.100.7.0/24)."""
        return f"10.{100 + self.index // 256}.{self.index % 256}."

    @property
    def pod_cidr(self) -> str:
        return f"{self.cidr_prefix}0/24"

    @property
    def rack(self) -> int:
        """The GPU rack of the node within its pool and zone's series (eight nodes a rack)."""
        return self.ordinal // 8

    def gpu_labels(self) -> dict[str, str]:
        """The NVIDIA GPU feature labels of a GPU pool's node (none for a CPU pool)."""
        pool = self.pool
        if not pool.gpus:
            return {}
        return {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": pool.product,
            "nvidia.com/gpu.count": str(pool.gpus),
        }

    def labels(self) -> dict[str, str]:
        """The well-known labels of the node (kubelet's, its zone and region, its node group)."""
        pool, zone = self.pool, self.zone
        return {
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            HOST_KEY: self.name,
            "node.kubernetes.io/instance-type": pool.instance_type,
            "topology.kubernetes.io/region": REGION,
            ZONE_KEY: zone,
            "eks.amazonaws.com/nodegroup": f"{pool.name}-{zone[-1]}",
            "node-pool": pool.name,
        }

    def pool_labels(self) -> dict[str, str]:
        """The labels the pool gives its nodes: the system role or the GPU features."""
        return {"node-role.kubernetes.io/system": ""} if self.pool.system else self.gpu_labels()

    def taints(self) -> list[dict[str, Any]]:
        """The pool's taints: system nodes keep ordinary pods away, GPU nodes CPU pods."""
        return [dict(SYSTEM_TAINT)] * self.pool.system + [dict(GPU_TAINT)] * bool(self.pool.gpus)

    def devices(self) -> dict[str, str]:
        """The extended resources the node's devices add to its allocatable (GPUs and EFA)."""
        return {"nvidia.com/gpu": str(self.pool.gpus), "vpc.amazonaws.com/efa": "4"} if self.pool.gpus else {}


def sites(pools: Sequence[Pool], count: int) -> Iterator[Site]:
    """`count` node sites over `pools`, pool by pool."""
    made = 0
    for pi, pool in enumerate(pools):
        pool_count = count - made if pi == len(pools) - 1 else round(count * pool.share)
        for i in range(pool_count):
            yield Site(pool, pool.zones[i % len(pool.zones)], i, made + i)
        made += pool_count
