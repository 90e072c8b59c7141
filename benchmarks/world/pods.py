"""Pod building blocks both synthetic worlds use: containers, the GPU toleration and shared-memory
volume of training pods, and a training pod template steered by a `Placement` (GPU node selector
and toleration, a pinned zone, pod affinity to the job's own pods, Kueue topology annotations) with
the mistakes the auditor looks for (a coordinator without the GPU toleration or in another zone).

gen_repo.py writes the templates into manifests as they are; world.cluster fills in the API
server's defaults and admission's additions around them (`ClusterBuilder.defaulted`, `pod_spec`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from world.objects import env_values, zone_node_affinity
from world.vocabulary import KUEUE_GROUP, KUEUE_REQUIRED, ZONE_KEY, Pool

Obj = dict[str, Any]
ContainerPort = tuple[int, str, str]  # containerPort, name, protocol
APP_ENV = (("LOG_LEVEL", "info"), ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel-collector.monitoring:4317"))
SHM_VOLUME: Obj = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}


def gpu_tolerations() -> list[Obj]:
    """Tolerations of the GPU nodes' taint (any value)."""
    return [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def zone_spread(labels: dict[str, str]) -> list[Obj]:
    """topologySpreadConstraints: the pods with `labels` spread over zones, as far as they fit."""
    return [
        {
            "maxSkew": 1,
            "topologyKey": ZONE_KEY,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": labels},
        }
    ]


def scrape_annotations(port: int) -> dict[str, str]:
    """The annotations that have Prometheus scrape a pod's metrics port."""
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(port)}


def prometheus(memory_limit: str | None = None) -> Obj:
    """The Prometheus server's container (both worlds scrape with the same server)."""
    image = "quay.io/prometheus/prometheus:v3.5.0"
    return container("prometheus", image, "2", "16Gi", [(9090, "web", "TCP")], memory_limit=memory_limit)


def dataset_env(team: str, job: str) -> tuple[str, str]:
    """Where a training job reads its data from."""
    return ("DATASET_URI", f"s3://{team}-datasets/{job}/")


def container(
    name: str,
    image: str,
    cpu: str,
    memory: str,
    ports: list[ContainerPort] | None = None,
    *,
    gpu: int = 0,
    env: list[tuple[str, str]] | None = None,
    command: list[str] | None = None,
    args: list[str] | None = None,
    memory_limit: str | None = None,
) -> Obj:
    """A container as teams write it: requests, a memory limit, GPUs as a limit (which the API
    server copies to the requests), ports from (containerPort, name, protocol). The memory limit
    is the request unless `memory_limit` says otherwise."""
    c: Obj = {"name": name, "image": image}
    if command:
        c["command"] = command
    if args:
        c["args"] = args
    if env:
        c["env"] = env_values(*env)
    if ports:
        c["ports"] = [{"name": n, "containerPort": p, "protocol": proto} for p, n, proto in ports]
    resources: Obj = {"requests": {"cpu": cpu, "memory": memory}}
    limit = memory_limit or memory
    resources["limits"] = {"nvidia.com/gpu": gpu, "memory": limit} if gpu else {"memory": limit}
    c["resources"] = resources
    return c


@dataclass
class Placement:
    """How one job's pods are steered onto nodes and kept together."""

    gpu_pool: Pool | None
    selector_style: int
    toleration_style: int
    pin_zone: str | None = None
    zone_label: str | None = None
    pod_affinity: bool = False  # required podAffinity on the zone key to the job's own pods
    preferred_affinity: bool = False
    kueue_topology: str | None = None
    kueue_group: bool = False
    exclusive: str | None = None  # JobSet exclusive topology key
    # Mistakes, each on one role (the coordinator-like one): no GPU toleration; another zone.
    drop_toleration: bool = False
    stray_zone: str | None = None
    stray_label_only: bool = False

    def node_selector(self) -> dict[str, str]:
        pool = self.gpu_pool
        if pool is None:
            return {}
        return [
            {"nvidia.com/gpu.product": pool.product},
            {"node.kubernetes.io/instance-type": pool.instance_type},
            {"node-pool": pool.name},
        ][self.selector_style]

    def tolerations(self) -> list[Obj]:
        if self.gpu_pool is None:
            return []
        if self.toleration_style == 0:
            return gpu_tolerations()
        return [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}]


def without_gpu(container: Obj) -> Obj:
    """The container as a small CPU pod (how a coordinator written without the GPU spec looks)."""
    return {
        **container,
        "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "8Gi"}},
    }


def pod_template(
    job_name: str,
    p: Placement,
    containers: list[Obj],
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    coordinator: bool = False,
    gpu: bool = True,
    restart: str | None = None,
    service_account: str | None = "training-sa",
    volumes: list[Obj] | None = None,
    affinity_key: tuple[str, str] | None = None,
) -> Obj:
    """A pod template steered by the placement. `coordinator` marks the role the mistakes hit."""
    lab = {"app": job_name, **(labels or {})}
    ann = dict(annotations or {})
    spec: Obj = {}
    if restart:
        spec["restartPolicy"] = restart
    if service_account:
        spec["serviceAccountName"] = service_account
    zone = p.pin_zone
    zone_label = p.zone_label
    if coordinator and p.stray_zone:
        zone_label = p.stray_zone
        if not p.stray_label_only:
            zone = p.stray_zone
    if zone_label:
        lab["zone"] = zone_label
    if coordinator and p.drop_toleration:
        # Written as a CPU pod: no GPU selector, toleration or request, so it lands on CPU nodes
        # (in the seed scenario, in another zone than the workers it coordinates).
        containers = [without_gpu(c) for c in containers]
    elif gpu and p.gpu_pool is not None:
        spec["nodeSelector"] = p.node_selector()
        spec["tolerations"] = p.tolerations()
    affinity: Obj = {}
    if zone:
        affinity["nodeAffinity"] = zone_node_affinity(zone)
    key, value = affinity_key or ("app", job_name)
    term = {"labelSelector": {"matchLabels": {key: value}}, "topologyKey": ZONE_KEY}
    if p.pod_affinity:
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    elif p.preferred_affinity:
        affinity["podAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]
        }
    if affinity:
        spec["affinity"] = affinity
    if p.kueue_topology:
        ann[KUEUE_REQUIRED] = p.kueue_topology
        if p.kueue_group:
            ann[KUEUE_GROUP] = f"{job_name}-group"
    spec["containers"] = containers
    if volumes:
        spec["volumes"] = volumes
    meta: Obj = {"labels": lab}
    if ann:
        meta["annotations"] = ann
    return {"metadata": meta, "spec": spec}
