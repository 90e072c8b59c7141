"""A generated infrastructure repository for the scan benchmark: nodes, namespaces, training jobs of
every kind we audit, the Services and apps around them, and network policies, written as YAML files
laid out the way platform teams keep them (`clusters/<team>/<namespace>/...`).

With the defaults it holds about 20,000 objects: 500 Nodes over three zones (CPU pools, A100 and
H100 GPU pools behind the `nvidia.com/gpu=present:NoSchedule` taint, a few cordoned nodes),
2,000 training jobs (PyTorchJob, TFJob, MPIJob v2beta1, XGBoostJob, JobSet, TrainJob on
ClusterTrainingRuntimes, RayJob, LeaderWorkerSet, and coordinator Deployment + worker Job pairs
that find each other through a Service's DNS name), 5,000 policies (NetworkPolicy mostly,
CiliumNetworkPolicy, a few CiliumClusterwideNetworkPolicies, zone-boundary policies on a pod label
`zone` as in the seed scenario), and the apps, Services, ConfigMaps, ServiceAccounts and Kueue
queues around them. A small share of jobs and policies carry the mistakes the auditor looks for
(a coordinator without the GPU toleration, a zone label that disagrees with the pinned zone, an
H100 job pinned to a zone without H100 nodes, a policy selecting a label the pods do not carry).

Deterministic for a seed. Every object is one the auditor reads without a load error. The
builders world/cluster.py uses too live in `world/` (objects, pods, jobs, policies, nodes); this
module decides what the repository holds and how it is laid out and written.

    python benchmarks/gen_repo.py DIR [--jobs 2000 --policies 5000 --nodes 500 --seed 1]
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from world.jobs import KIND, KINDS, PYTORCH_PORT, pytorchjob, replica
from world.nodes import sites
from world.objects import (
    COREDNS_PORTS,
    KUBE_DNS_PORTS,
    ServicePort,
    cilium_policy,
    config_map,
    manifest,
    metadata,
    namespace,
    service_ports,
)
from world.pods import (
    APP_ENV,
    SHM_VOLUME,
    Placement,
    container,
    dataset_env,
    pod_template,
    prometheus,
    scrape_annotations,
    zone_spread,
)
from world.policies import allow_dns, namespace_peer, peers_only, pod_policy
from world.vocabulary import (
    BLOCK_KEY,
    EXCLUSIVE,
    GRADIENT,
    HOST_KEY,
    JOB_NAME,
    RACK_KEY,
    STEPS,
    ZONE_KEY,
    ZONES,
    Pool,
)

Obj = dict[str, Any]

TEAMS = (
    "vision",
    "nlp",
    "speech",
    "recsys",
    "search",
    "ads",
    "llm",
    "research",
    "fraud",
    "maps",
    "robotics",
    "forecasting",
)
# Namespace purposes: (suffix, weight for training jobs, weight for apps).
PURPOSES = (
    ("train", 4, 1),
    ("research", 3, 1),
    ("dev", 1, 2),
    ("serving", 0, 4),
    ("eval", 1, 1),
    ("data", 0, 3),
)
PLATFORM_NAMESPACES = ("kube-system", "monitoring", "ingress-nginx", "kueue-system", "kubeflow", "ray-system")


POOLS = (
    Pool("system", "m6i.2xlarge", 0.06, ZONES, "7910m", "28Gi", system=True),
    Pool("general", "m6i.8xlarge", 0.34, ZONES, "31750m", "120Gi"),
    Pool("highmem", "r6i.8xlarge", 0.10, ZONES, "31750m", "245Gi"),
    Pool("gpu-a100", "p4d.24xlarge", 0.32, ZONES, "95", "1100Gi", 8, "NVIDIA-A100-SXM4-40GB"),
    # H100 capacity exists in two of the three zones only.
    Pool("gpu-h100", "p5.48xlarge", 0.18, ZONES[:2], "191", "1900Gi", 8, "NVIDIA-H100-80GB-HBM3"),
)
GPU_POOLS = tuple(p for p in POOLS if p.gpus)

APP_NAMES = (
    "feature-store",
    "model-registry",
    "inference-gateway",
    "embedding-service",
    "ranker",
    "tokenizer",
    "redis",
    "postgres",
    "tensorboard",
    "mlflow",
    "label-studio",
    "notebook-proxy",
    "dataset-cache",
    "metrics-exporter",
    "batch-scorer",
    "vector-db",
    "triton",
    "kserve-router",
    "ab-router",
    "annotation-api",
)
# (container port, port name) per app family; the ones that hold state run as StatefulSets.
APP_PORTS = {
    "redis": (6379, "redis"),
    "postgres": (5432, "postgres"),
    "vector-db": (6333, "grpc"),
    "tensorboard": (6006, "http"),
    "mlflow": (5000, "http"),
    "triton": (8001, "grpc"),
}
STATEFUL = ("redis", "postgres", "vector-db", "dataset-cache")


class _Dumper(yaml.CSafeDumper):
    """Block scalars (`|`) for multi-line strings, as people write embedded files and scripts; no
    anchors and aliases (objects share selector dicts here, hand-written manifests repeat them)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: _Dumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _dump(docs: list[Obj]) -> str:
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)


@dataclass
class Namespace:
    name: str
    team: str
    purpose: str
    job_weight: int
    app_weight: int
    cilium: bool  # the team writes CiliumNetworkPolicies rather than NetworkPolicies
    zone_policies: bool  # seed-scenario zone boundaries on the pod label `zone`
    deny_egress: bool  # default deny in both directions (else ingress only)
    dir: str


@dataclass
class App:
    ns: Namespace
    name: str
    port: int
    port_name: str
    callers: list[App] = field(default_factory=list)
    calls: list[App] = field(default_factory=list)


@dataclass
class Job:
    ns: Namespace
    kind: str
    name: str
    selector: tuple[str, str]  # a label every pod of the job carries (for intra-job policies)
    gpu: bool


class Repo:
    """Objects to write, by file path relative to the repository root."""

    def __init__(self) -> None:
        self.files: dict[str, list[Obj]] = {}

    def add(self, path: str, *objs: Obj) -> None:
        self.files.setdefault(path, []).extend(objs)

    def counts(self) -> Counter[str]:
        return Counter(o["kind"] for docs in self.files.values() for o in docs)


# --- nodes ---------------------------------------------------------------------------------------


def nodes(count: int, rng: random.Random) -> Iterator[tuple[str, Obj]]:
    for site in sites(POOLS, count):
        pool, zone, name = site.pool, site.zone, site.name
        capacity = "on-demand" if pool.gpus or pool.system else "spot"
        labels = site.labels() | {"karpenter.sh/capacity-type": capacity}
        spec: Obj = {
            "podCIDR": site.pod_cidr,
            "providerID": f"aws:///{zone}/i-0{rng.getrandbits(60):015x}",
        }
        taints = site.taints()
        allocatable = {"cpu": pool.cpu, "memory": pool.memory, "pods": "110", "ephemeral-storage": "95Gi"}
        allocatable |= site.devices()
        labels |= site.pool_labels()
        if pool.gpus:
            labels |= {BLOCK_KEY: f"{zone}-block-{site.rack // 4}", RACK_KEY: f"{zone}-rack-{site.rack}"}
        if rng.random() < 0.02:  # cordoned for maintenance
            spec["unschedulable"] = True
            taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
        if taints:
            spec["taints"] = taints
        node: Obj = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            },
            "spec": spec,
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": site.ip},
                    {"type": "Hostname", "address": name},
                ],
                "allocatable": allocatable,
                "capacity": dict(allocatable),
                "nodeInfo": {
                    "kubeletVersion": "v1.33.4-eks-a737599",
                    "containerRuntimeVersion": "containerd://1.7.27",
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                },
            },
        }
        yield f"clusters/platform/nodes/{pool.name}/{zone}.yaml", node


# --- namespaces and per-namespace scaffolding ---------------------------------------------------


def namespaces(count: int, rng: random.Random) -> list[Namespace]:
    out: list[Namespace] = []
    i = 0
    while len(out) < count:
        team = TEAMS[i % len(TEAMS)]
        suffix, jw, aw = PURPOSES[(i // len(TEAMS)) % len(PURPOSES)]
        generation = i // (len(TEAMS) * len(PURPOSES))
        name = f"{team}-{suffix}" + (f"-{generation + 1}" if generation else "")
        cilium = rng.random() < 0.2
        out.append(
            Namespace(
                name,
                team,
                suffix,
                jw,
                aw,
                cilium,
                zone_policies=jw > 0 and rng.random() < 0.18,
                deny_egress=rng.random() < 0.7,
                dir=f"clusters/{team}/{name}",
            )
        )
        i += 1
    return out


def namespace_objects(ns: Namespace) -> list[Obj]:
    labels = {"team": ns.team, "purpose": ns.purpose, "pod-security.kubernetes.io/enforce": "baseline"}
    if ns.zone_policies:
        labels["placement.example.com/zone-boundaries"] = "enforced"
    role = f"arn:aws:iam::123456789012:role/{ns.name}-training"
    return [
        namespace(ns.name, labels, {"owner": f"{ns.team}@example.com"}),
        manifest(
            "v1",
            "ServiceAccount",
            metadata("training-sa", ns.name, annotations={"eks.amazonaws.com/role-arn": role}),
        ),
        manifest(
            "kueue.x-k8s.io/v1beta1",
            "LocalQueue",
            metadata(f"{ns.name}-queue", ns.name),
            spec={"clusterQueue": f"{ns.team}-cluster-queue"},
        ),
        manifest(
            "v1",
            "ResourceQuota",
            metadata("compute", ns.name),
            spec={
                "hard": {"requests.cpu": "2000", "requests.memory": "16Ti", "requests.nvidia.com/gpu": "256"}
            },
        ),
    ]


def platform_objects(repo: Repo) -> None:
    for name in PLATFORM_NAMESPACES:
        repo.add("clusters/platform/namespaces.yaml", namespace(name, {"team": "platform"}))
    repo.add(
        "clusters/platform/cilium/cilium-config.yaml",
        config_map(
            "cilium-config",
            "kube-system",
            {
                "cluster-name": "ml-prod-use1",
                "enable-policy": "default",
                "identity-allocation-mode": "crd",
                "ipam": "eni",
                "enable-ipv4": "true",
                "tunnel-protocol": "",
                "routing-mode": "native",
                "policy-audit-mode": "false",
            },
        ),
    )
    repo.add(
        "clusters/platform/kube-system/coredns.yaml",
        _deployment(
            "coredns",
            "kube-system",
            {"k8s-app": "kube-dns"},
            2,
            container(
                "coredns",
                "registry.k8s.io/coredns/coredns:v1.11.3",
                "100m",
                "70Mi",
                COREDNS_PORTS,
            ),
            tolerations=[{"key": "CriticalAddonsOnly", "operator": "Exists"}],
        ),
        _service(
            "kube-dns",
            "kube-system",
            {"k8s-app": "kube-dns"},
            KUBE_DNS_PORTS,
        ),
    )
    repo.add(
        "clusters/platform/monitoring/prometheus.yaml",
        _statefulset(
            "prometheus",
            "monitoring",
            {"app.kubernetes.io/name": "prometheus"},
            2,
            prometheus(),
        ),
        _service(
            "prometheus",
            "monitoring",
            {"app.kubernetes.io/name": "prometheus"},
            [(9090, "web", "TCP", "web")],
        ),
    )
    repo.add(
        "clusters/platform/ingress-nginx/controller.yaml",
        _deployment(
            "ingress-nginx-controller",
            "ingress-nginx",
            {"app.kubernetes.io/name": "ingress-nginx", "app.kubernetes.io/component": "controller"},
            3,
            container(
                "controller",
                "registry.k8s.io/ingress-nginx/controller:v1.13.1",
                "500m",
                "512Mi",
                [(80, "http", "TCP"), (443, "https", "TCP")],
            ),
        ),
    )
    for team in TEAMS:
        repo.add(
            "clusters/platform/kueue/cluster-queues.yaml",
            manifest(
                "kueue.x-k8s.io/v1beta1",
                "ClusterQueue",
                metadata(f"{team}-cluster-queue"),
                spec={
                    "namespaceSelector": {"matchLabels": {"team": team}},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                            "flavors": [
                                {
                                    "name": "gpu-a100",
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": 1000},
                                        {"name": "memory", "nominalQuota": "8Ti"},
                                        {"name": "nvidia.com/gpu", "nominalQuota": 128},
                                    ],
                                }
                            ],
                        }
                    ],
                },
            ),
        )
    repo.add(
        "clusters/platform/kueue/topology.yaml",
        manifest(
            "kueue.x-k8s.io/v1beta1",
            "Topology",
            metadata("aws-topology"),
            spec={"levels": [{"nodeLabel": BLOCK_KEY}, {"nodeLabel": RACK_KEY}, {"nodeLabel": HOST_KEY}]},
        ),
    )
    for runtime in training_runtimes():
        repo.add(f"clusters/platform/training-runtimes/{runtime['metadata']['name']}.yaml", runtime)


# --- pod building blocks -------------------------------------------------------------------------


def _deployment(
    name: str,
    ns: str,
    labels: dict[str, str],
    replicas: int,
    container: Obj,
    *,
    tolerations: list[Obj] | None = None,
    annotations: dict[str, str] | None = None,
    spec_extra: Obj | None = None,
    kind: str = "Deployment",
) -> Obj:
    pod_spec: Obj = {"containers": [container]}
    if tolerations:
        pod_spec["tolerations"] = tolerations
    if spec_extra:
        pod_spec.update(spec_extra)
    tmeta: Obj = {"labels": dict(labels)}
    if annotations:
        tmeta["annotations"] = annotations
    spec: Obj = {
        "replicas": replicas,
        "selector": {"matchLabels": dict(labels)},
        "template": {"metadata": tmeta, "spec": pod_spec},
    }
    if kind == "StatefulSet":
        spec["serviceName"] = name
    return manifest("apps/v1", kind, metadata(name, ns, labels=dict(labels)), spec=spec)


def _statefulset(name: str, ns: str, labels: dict[str, str], replicas: int, container: Obj) -> Obj:
    return _deployment(name, ns, labels, replicas, container, kind="StatefulSet")


def _service(
    name: str,
    ns: str,
    selector: dict[str, str],
    ports: list[ServicePort],
    headless: bool = False,
) -> Obj:
    spec: Obj = {"selector": dict(selector), "ports": service_ports(ports)}
    spec = {"clusterIP": "None", **spec} if headless else {"type": "ClusterIP", **spec}
    return manifest("v1", "Service", metadata(name, ns, labels={"app": name}), spec=spec)


def choose_placement(ns: Namespace, rng: random.Random, gpu: bool) -> Placement:
    pool = None
    if gpu:
        pool = GPU_POOLS[0] if rng.random() < 0.7 else GPU_POOLS[1]
    p = Placement(pool, rng.randrange(3), rng.randrange(2))
    zones = pool.zones if pool is not None else ZONES
    if ns.zone_policies:
        # Seed scenario: pods carry `zone` and are pinned there; some coordinators are not.
        zone = rng.choice(zones)
        p.pin_zone = p.zone_label = zone
        r = rng.random()
        if r < 0.12:
            p.stray_zone = rng.choice([z for z in ZONES if z != zone])
            p.drop_toleration = pool is not None
        elif r < 0.18:
            p.stray_zone = rng.choice([z for z in ZONES if z != zone])
            p.stray_label_only = True
        return p
    r = rng.random()
    if r < 0.30:
        pass  # GPU selector and toleration only: roles may be spread over zones
    elif r < 0.50:
        p.pin_zone = rng.choice(zones)
        if pool is not None and pool.name == "gpu-h100" and rng.random() < 0.05:
            p.pin_zone = ZONES[2]  # no H100 capacity there: unschedulable
    elif r < 0.65:
        p.pod_affinity = True
    elif r < 0.80:
        p.kueue_topology = ZONE_KEY if rng.random() < 0.6 else (RACK_KEY if gpu else HOST_KEY)
        p.kueue_group = rng.random() < 0.5
    elif r < 0.90:
        p.preferred_affinity = True
    if pool is not None and rng.random() < 0.04:
        p.drop_toleration = True  # the seed-lab mistake: the coordinator lacks the GPU toleration
    return p


def job_meta(job: Job, rng: random.Random, extra_labels: dict[str, str] | None = None) -> Obj:
    labels = {
        "app.kubernetes.io/part-of": job.ns.team,
        "team": job.ns.team,
        "kueue.x-k8s.io/queue-name": f"{job.ns.name}-queue",
        **(extra_labels or {}),
    }
    annotations: dict[str, str] = {}
    if rng.random() < 0.55:
        # bf16 gradients of models from 110M to 7B parameters, at the step rates such models reach.
        gradient, steps = rng.choice(
            ((220_000_000, "4"), (700_000_000, "2"), (2_800_000_000, "0.8"), (14_000_000_000, "0.25"))
        )
        annotations[GRADIENT] = str(gradient)
        annotations[STEPS] = steps
    return metadata(job.name, job.ns.name, labels=labels, annotations=annotations)


def _workers(rng: random.Random, gpu: bool) -> int:
    return rng.choice((2, 2, 3, 4, 4, 8, 8, 16, 32) if gpu else (1, 2, 2, 3, 4))


def _resources(gpu: bool, rng: random.Random) -> tuple[str, str, int]:
    if gpu:
        return rng.choice((("32", "256Gi", 8), ("16", "128Gi", 4), ("8", "64Gi", 1)))
    return rng.choice((("4", "16Gi", 0), ("8", "32Gi", 0), ("2", "8Gi", 0)))


def _data_volume(job: Job, rng: random.Random) -> tuple[list[Obj], list[Obj]]:
    """Volumes for a job (shared memory, checkpoints on a PVC) and the PVC object if any."""
    volumes: list[Obj] = [dict(SHM_VOLUME)]
    extra: list[Obj] = []
    if rng.random() < 0.15:
        claim = f"{job.name}-checkpoints"
        volumes.append({"name": "checkpoints", "persistentVolumeClaim": {"claimName": claim}})
        extra.append(
            manifest(
                "v1",
                "PersistentVolumeClaim",
                metadata(claim, job.ns.name),
                spec={
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": "efs-sc",
                    "resources": {"requests": {"storage": "500Gi"}},
                },
            )
        )
    return volumes, extra


# --- training kinds ------------------------------------------------------------------------------


def kubeflow_job(job: Job, rng: random.Random) -> list[Obj]:
    p = choose_placement(job.ns, rng, job.gpu)
    cpu, mem, gpus = _resources(job.gpu, rng)
    image = KIND[job.kind].image
    volumes, extra = _data_volume(job, rng)
    n = _workers(rng, job.gpu)
    op_key = (JOB_NAME, job.name)

    def tmpl(role: str, coordinator: bool, ports: list[tuple[int, str, str]], gpu: bool = True) -> Obj:
        c = container(
            job.kind.lower().removesuffix("job") or "trainer",
            image,
            cpu if gpu else "2",
            mem if gpu else "8Gi",
            ports,
            gpu=gpus if gpu else 0,
            env=[("NCCL_DEBUG", "WARN"), dataset_env(job.ns.team, job.name)],
            args=["--epochs", str(rng.choice((10, 30, 90))), "--batch-size", str(rng.choice((64, 128, 256)))],
        )
        return pod_template(
            job.name,
            p,
            [c],
            labels={"role": role.lower()},
            coordinator=coordinator,
            gpu=gpu and job.gpu,
            volumes=volumes,
            affinity_key=op_key if rng.random() < 0.5 else None,
        )

    meta = job_meta(job, rng)
    spec: Obj
    if job.kind == "PyTorchJob":
        port = [PYTORCH_PORT]
        if rng.random() < 0.15:  # elastic, workers only
            spec = {
                "elasticPolicy": {
                    "rdzvBackend": "c10d",
                    "minReplicas": 1,
                    "maxReplicas": n,
                    "maxRestarts": 100,
                    "nProcPerNode": max(gpus, 1),
                },
                "pytorchReplicaSpecs": {"Worker": replica(n, tmpl("Worker", False, port), "OnFailure")},
            }
        else:
            run_policy = {"cleanPodPolicy": "None", "backoffLimit": 3}
            master = tmpl("Master", True, port)
            return [pytorchjob(meta, master, tmpl("Worker", False, port), n, run_policy), *extra]
    elif job.kind == "TFJob":
        port = [(2222, "tfjob-port", "TCP")]
        if rng.random() < 0.5:
            replica_specs = {
                "Chief": replica(1, tmpl("Chief", True, port), "Never"),
                "PS": replica(rng.choice((1, 2)), tmpl("PS", False, port, False), "Never"),
                "Worker": replica(n, tmpl("Worker", False, port), "Never"),
            }
        else:
            replica_specs = {"Worker": replica(n, tmpl("Worker", False, port), "OnFailure")}
        spec = {"runPolicy": {"cleanPodPolicy": "Running"}, "tfReplicaSpecs": replica_specs}
    elif job.kind == "MPIJob":
        spec = {
            "slotsPerWorker": max(gpus, 1),
            "runPolicy": {"cleanPodPolicy": "Running", "ttlSecondsAfterFinished": 3600},
            "sshAuthMountPath": "/home/mpiuser/.ssh",
            "mpiImplementation": "OpenMPI",
            "mpiReplicaSpecs": {
                "Launcher": replica(1, tmpl("Launcher", True, [], gpu=False)),
                "Worker": replica(n, tmpl("Worker", False, [(2222, "ssh", "TCP")])),
            },
        }
    else:  # XGBoostJob
        port = [(9991, "xgboostjob-port", "TCP")]
        spec = {
            "xgbReplicaSpecs": {
                "Master": replica(1, tmpl("Master", True, port, False), "Never"),
                "Worker": replica(n, tmpl("Worker", False, port, False), "ExitCode"),
            }
        }
    return [manifest(KIND[job.kind].api_version, job.kind, meta, spec=spec), *extra]


def jobset(job: Job, rng: random.Random) -> list[Obj]:
    p = choose_placement(job.ns, rng, job.gpu)
    if rng.random() < 0.15:
        p.exclusive = rng.choice((RACK_KEY, ZONE_KEY)) if job.gpu else HOST_KEY
    cpu, mem, gpus = _resources(job.gpu, rng)
    volumes, extra = _data_volume(job, rng)
    jobs_n = rng.choice((1, 1, 2, 4))
    par = rng.choice((2, 4, 8))
    port = 3389
    key = ("jobset.sigs.k8s.io/jobset-name", job.name)
    worker_container = container(
        "pytorch",
        KIND["JobSet"].image,
        cpu,
        mem,
        [(port, "rdzv", "TCP")],
        gpu=gpus,
        env=[
            ("MASTER_ADDR", f"{job.name}-workers-0-0.{job.name}"),
            ("MASTER_PORT", str(port)),
            ("PYTHONUNBUFFERED", "0"),
        ],
        command=["bash", "-xc", "torchrun --nproc_per_node=$GPUS --master_addr=$MASTER_ADDR train.py"],
    )
    replicated: list[Obj] = []
    with_driver = rng.random() < 0.3
    if with_driver:
        driver = container(
            "driver",
            "python:3.12-slim",
            "1",
            "2Gi",
            [(8080, "http", "TCP")],
            command=["python", "-m", "driver"],
        )
        replicated.append(
            {
                "name": "driver",
                "replicas": 1,
                "template": {
                    "spec": {
                        "parallelism": 1,
                        "completions": 1,
                        "backoffLimit": 0,
                        "template": pod_template(
                            job.name,
                            p,
                            [driver],
                            coordinator=True,
                            gpu=False,
                            restart="Never",
                            affinity_key=key,
                        ),
                    }
                },
            }
        )
    replicated.append(
        {
            "name": "workers",
            "replicas": jobs_n,
            "template": {
                "spec": {
                    "parallelism": par,
                    "completions": par,
                    "backoffLimit": 0,
                    "template": pod_template(
                        job.name,
                        p,
                        [worker_container],
                        coordinator=False,
                        restart="Never",
                        volumes=volumes,
                        affinity_key=key,
                    ),
                }
            },
        }
    )
    spec: Obj = {
        "network": {"enableDNSHostnames": True, "subdomain": job.name},
        "successPolicy": {"operator": "All", "targetReplicatedJobs": ["workers"]},
        "failurePolicy": {"maxRestarts": 3},
        "replicatedJobs": replicated,
    }
    if with_driver:
        spec = {"coordinator": {"replicatedJob": "driver", "jobIndex": 0, "podIndex": 0}, **spec}
    meta = job_meta(job, rng)
    if p.exclusive:
        meta.setdefault("annotations", {})[EXCLUSIVE] = p.exclusive
    return [manifest(KIND["JobSet"].api_version, "JobSet", meta, spec=spec), *extra]


def training_runtimes() -> list[Obj]:
    def runtime(name: str, framework: str, jobs: list[Obj], ml: Obj) -> Obj:
        meta = metadata(name, labels={"trainer.kubeflow.org/framework": framework})
        spec = {"mlPolicy": ml, "template": {"spec": {"replicatedJobs": jobs}}}
        return manifest("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime", meta, spec=spec)

    def rjob(name: str, image: str, ports: list[Obj] | None = None) -> Obj:
        container: Obj = {"name": name, "image": image}
        if ports:
            container["ports"] = ports
        return {
            "name": name,
            "template": {
                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                "spec": {"template": {"spec": {"containers": [container]}}},
            },
        }

    return [
        runtime(
            "torch-distributed",
            "torch",
            [rjob("node", "pytorch/pytorch:2.8.0-cuda12.8-cudnn9-runtime")],
            {"numNodes": 1, "torch": {}},
        ),
        runtime(
            "deepspeed-distributed",
            "deepspeed",
            [
                rjob("launcher", "ghcr.io/kubeflow/trainer/deepspeed-runtime:latest"),
                rjob(
                    "node",
                    "ghcr.io/kubeflow/trainer/deepspeed-runtime:latest",
                    [{"containerPort": 2222, "name": "ssh"}],
                ),
            ],
            {
                "numNodes": 1,
                "mpi": {
                    "numProcPerNode": 1,
                    "mpiImplementation": "OpenMPI",
                    "sshAuthMountPath": "/home/mpiuser/.ssh",
                },
            },
        ),
        runtime(
            "jax-distributed",
            "jax",
            [rjob("node", "nvcr.io/nvidia/jax:25.04-py3")],
            {"numNodes": 1, "jax": {}},
        ),
    ]


def trainjob(job: Job, rng: random.Random) -> list[Obj]:
    p = choose_placement(job.ns, rng, job.gpu)
    # TrainJobs have one training pod set: the coordinator mistakes do not apply.
    p.drop_toleration = False
    p.stray_zone = None
    cpu, mem, gpus = _resources(job.gpu, rng)
    runtime = rng.choice(
        ("torch-distributed", "torch-distributed", "deepspeed-distributed", "jax-distributed")
    )
    trainer: Obj = {
        "numNodes": _workers(rng, job.gpu),
        "command": ["torchrun", "train.py"] if runtime != "jax-distributed" else ["python", "train.py"],
        "env": [{"name": "DATASET_URI", "value": f"s3://{job.ns.team}-datasets/{job.name}/"}],
        "resourcesPerNode": {
            "requests": {"cpu": cpu, "memory": mem},
            "limits": {"memory": mem, **({"nvidia.com/gpu": gpus} if gpus else {})},
        },
    }
    spec: Obj = {
        "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": runtime},
        "trainer": trainer,
    }
    pod_spec = pod_template(
        job.name, p, [], gpu=job.gpu, affinity_key=("jobset.sigs.k8s.io/jobset-name", job.name)
    )
    pod_spec["spec"].pop("containers")
    patch_spec = {
        k: v
        for k, v in pod_spec["spec"].items()
        if k in ("nodeSelector", "tolerations", "affinity", "serviceAccountName")
    }
    if patch_spec or pod_spec["metadata"].get("annotations"):
        template: Obj = {"spec": patch_spec}
        if pod_spec["metadata"].get("annotations"):
            template["metadata"] = {"annotations": pod_spec["metadata"]["annotations"]}
        if pod_spec["metadata"]["labels"].get("zone"):
            template.setdefault("metadata", {})["labels"] = {"zone": pod_spec["metadata"]["labels"]["zone"]}
        spec["runtimePatches"] = [
            {
                "manager": "platform.example.com/placement",
                "trainingRuntimeSpec": {
                    "template": {
                        "metadata": {"labels": {"team": job.ns.team}},
                        "spec": {
                            "replicatedJobs": [{"name": "node", "template": {"spec": {"template": template}}}]
                        },
                    }
                },
            }
        ]
    return [manifest(KIND["TrainJob"].api_version, "TrainJob", job_meta(job, rng), spec=spec)]


def rayjob(job: Job, rng: random.Random) -> list[Obj]:
    p = choose_placement(job.ns, rng, job.gpu)
    cpu, mem, gpus = _resources(job.gpu, rng)
    image = KIND["RayJob"].image
    key = ("ray.io/cluster", job.name)
    head = container(
        "ray-head",
        image,
        "4",
        "16Gi",
        [(6379, "gcs-server", "TCP"), (8265, "dashboard", "TCP"), (10001, "client", "TCP")],
    )
    worker = container("ray-worker", image, cpu, mem, gpu=gpus)
    n = _workers(rng, job.gpu)
    spec: Obj = {
        "entrypoint": f"python /home/ray/jobs/{job.name}.py",
        "shutdownAfterJobFinishes": True,
        "ttlSecondsAfterFinished": 600,
        "runtimeEnvYAML": "pip:\n  - torch==2.8.0\nenv_vars:\n  NCCL_DEBUG: WARN\n",
        "rayClusterSpec": {
            "rayVersion": "2.49.1",
            "headGroupSpec": {
                "rayStartParams": {"dashboard-host": "0.0.0.0", "num-cpus": "0"},
                "template": pod_template(job.name, p, [head], coordinator=True, gpu=False, affinity_key=key),
            },
            "workerGroupSpecs": [
                {
                    "groupName": "gpu-group" if job.gpu else "cpu-group",
                    "replicas": n,
                    "minReplicas": 1,
                    "maxReplicas": n * 2,
                    "rayStartParams": {},
                    "template": pod_template(job.name, p, [worker], gpu=job.gpu, affinity_key=key),
                }
            ],
        },
    }
    return [manifest(KIND["RayJob"].api_version, "RayJob", job_meta(job, rng), spec=spec)]


def leaderworkerset(job: Job, rng: random.Random) -> list[Obj]:
    p = choose_placement(job.ns, rng, job.gpu)
    if p.kueue_topology is None and rng.random() < 0.4:
        p.kueue_topology = RACK_KEY if job.gpu else ZONE_KEY
        p.kueue_group = True
    cpu, mem, gpus = _resources(job.gpu, rng)
    image = KIND["LeaderWorkerSet"].image
    key = ("leaderworkerset.sigs.k8s.io/name", job.name)
    leader = container(
        "vllm-leader",
        image,
        cpu,
        mem,
        [(8080, "http", "TCP"), (6379, "ray", "TCP")],
        gpu=gpus,
        command=["sh", "-c", "ray start --head --port=6379 && vllm serve $MODEL --tensor-parallel-size 8"],
    )
    worker = container(
        "vllm-worker",
        image,
        cpu,
        mem,
        gpu=gpus,
        command=["sh", "-c", "ray start --address=$LWS_LEADER_ADDRESS:6379 --block"],
    )
    spec: Obj = {
        "replicas": rng.choice((1, 2, 3)),
        "startupPolicy": "LeaderCreated",
        "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxUnavailable": 1}},
        "leaderWorkerTemplate": {
            "size": rng.choice((2, 2, 4)),
            "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": pod_template(
                job.name, p, [leader], coordinator=True, gpu=job.gpu, affinity_key=key
            ),
            "workerTemplate": pod_template(job.name, p, [worker], gpu=job.gpu, affinity_key=key),
        },
    }
    return [manifest(KIND["LeaderWorkerSet"].api_version, "LeaderWorkerSet", job_meta(job, rng), spec=spec)]


def pair(job: Job, rng: random.Random) -> list[Obj]:
    """The seed-lab shape: a coordinator Deployment behind a Service, a Job of workers dialling it."""
    p = choose_placement(job.ns, rng, job.gpu)
    cpu, mem, gpus = _resources(job.gpu, rng)
    port = rng.choice((9999, 29500, 7777))
    coord_name = f"{job.name}-coordinator"
    coordinator = container(
        "coordinator",
        KIND["Pair"].image,
        "1",
        "2Gi",
        [(port, "rendezvous", "TCP")],
        command=["python", "-m", "rendezvous", "--port", str(port)],
    )
    dep = _deployment(
        coord_name,
        job.ns.name,
        {"app": job.name, "role": "coordinator"},
        1,
        coordinator,
    )
    dep["spec"]["template"] = pod_template(
        job.name, p, [coordinator], labels={"role": "coordinator"}, coordinator=True, gpu=job.gpu
    )
    dep["spec"]["selector"] = {"matchLabels": {"app": job.name, "role": "coordinator"}}
    dep["metadata"]["annotations"] = job_meta(job, rng).get("annotations", {})
    if not dep["metadata"]["annotations"]:
        del dep["metadata"]["annotations"]
    svc = _service(
        coord_name,
        job.ns.name,
        {"app": job.name, "role": "coordinator"},
        [(port, "rendezvous", "TCP", str(port))],
        True,
    )
    dns = rng.choice(
        (
            f"{coord_name}.{job.ns.name}.svc.cluster.local:{port}",
            f"{coord_name}.{job.ns.name}.svc:{port}",
            f"{coord_name}:{port}",
        )
    )
    workers = rng.choice((2, 4, 8))
    worker = container(
        "worker",
        KIND["Pair"].image,
        cpu,
        mem,
        gpu=gpus,
        env=[("COORDINATOR_ADDR", dns), ("WORLD_SIZE", str(workers))],
        command=["python", "train.py", "--rendezvous", dns],
    )
    work = manifest(
        "batch/v1",
        "Job",
        job_meta(job, rng, {"app": job.name}),
        spec={
            "completions": workers,
            "parallelism": workers,
            "completionMode": "Indexed",
            "backoffLimit": 4,
            "template": pod_template(
                job.name,
                p,
                [worker],
                labels={"role": "gpu-worker" if job.gpu else "worker"},
                gpu=job.gpu,
                restart="Never",
            ),
        },
    )
    return [dep, svc, work]


BUILDERS = {
    "PyTorchJob": kubeflow_job,
    "TFJob": kubeflow_job,
    "MPIJob": kubeflow_job,
    "XGBoostJob": kubeflow_job,
    "JobSet": jobset,
    "TrainJob": trainjob,
    "RayJob": rayjob,
    "LeaderWorkerSet": leaderworkerset,
    "Pair": pair,
}


def _weighted(items: list[tuple[Any, int]], rng: random.Random) -> Any:
    total = sum(w for _, w in items)
    r = rng.uniform(0, total)
    for item, w in items:
        r -= w
        if r <= 0:
            return item
    return items[-1][0]


def _kind_sequence(count: int, rng: random.Random) -> list[str]:
    """Exactly proportional kinds (largest remainder), shuffled."""
    total = sum(k.share for k in KINDS)
    exact = [(k.kind, count * k.share / total) for k in KINDS]
    out = {k: int(x) for k, x in exact}
    rest = count - sum(out.values())
    for k, _ in sorted(exact, key=lambda e: e[1] - int(e[1]), reverse=True)[:rest]:
        out[k] += 1
    seq = [k.kind for k in KINDS for _ in range(out[k.kind])]
    rng.shuffle(seq)
    return seq


def training_jobs(count: int, spaces: list[Namespace], repo: Repo, rng: random.Random) -> list[Job]:
    weighted = [(ns, ns.job_weight) for ns in spaces if ns.job_weight]
    jobs: list[Job] = []
    for i, kind in enumerate(_kind_sequence(count, rng)):
        ns = _weighted(weighted, rng)
        name = f"{rng.choice(KIND[kind].stems)}-{i:05d}"
        gpu = kind in ("LeaderWorkerSet", "TrainJob", "JobSet") or rng.random() < (
            0.2 if kind == "XGBoostJob" else 0.7
        )
        if kind == "XGBoostJob":
            gpu = False
        job = Job(ns, kind, name, (KIND[kind].job_label, name), gpu)
        objs = BUILDERS[kind](job, rng)
        if rng.random() < 0.5:
            train = (
                f"model: {name.rsplit('-', 1)[0]}\nlr: {rng.choice(('3e-4', '1e-4', '5e-5'))}\n"
                f"global_batch_size: {rng.choice((256, 512, 1024))}\nprecision: bf16\n"
            )
            objs.append(config_map(f"{name}-config", ns.name, {"train.yaml": train}, {"app": name}))
        if kind == "Pair":
            base = f"{ns.dir}/training/{name}"
            repo.add(f"{base}/coordinator.yaml", objs[0], objs[1])
            repo.add(f"{base}/workers.yaml", *objs[2:])
        else:
            repo.add(f"{ns.dir}/training/{name}.yaml", *objs)
        jobs.append(job)
    return jobs


# --- apps ----------------------------------------------------------------------------------------


def apps(count: int, spaces: list[Namespace], repo: Repo, rng: random.Random) -> list[App]:
    weighted = [(ns, ns.app_weight) for ns in spaces]
    out: list[App] = []
    by_ns: dict[str, list[App]] = {}
    for i in range(count):
        ns = _weighted(weighted, rng)
        stem = APP_NAMES[i % len(APP_NAMES)]
        name = f"{stem}-{i:04d}"
        port, port_name = APP_PORTS.get(stem, (8080, "http"))
        app = App(ns, name, port, port_name)
        peers = by_ns.setdefault(ns.name, [])
        for callee in rng.sample(peers, min(len(peers), rng.choice((0, 1, 1, 2)))):
            app.calls.append(callee)
            callee.callers.append(app)
        peers.append(app)
        out.append(app)
        env = list(APP_ENV)
        for callee in app.calls:
            host = rng.choice(
                (
                    f"{callee.name}.{ns.name}.svc.cluster.local:{callee.port}",
                    f"{callee.name}:{callee.port}",
                    f"{callee.name}.{ns.name}:{callee.port}",
                )
            )
            env.append((f"{callee.name.rsplit('-', 1)[0].upper().replace('-', '_')}_ADDR", host))
        labels = {"app": name, "app.kubernetes.io/name": stem, "app.kubernetes.io/part-of": ns.team}
        main = container(
            stem,
            f"ghcr.io/example/{stem}:1.{i % 17}.{i % 5}",
            rng.choice(("250m", "500m", "1", "2")),
            rng.choice(("512Mi", "1Gi", "4Gi")),
            [(port, port_name, "TCP"), (9102, "metrics", "TCP")],
            env=env,
        )
        kind = "StatefulSet" if stem in STATEFUL else "Deployment"
        spread = {"topologySpreadConstraints": zone_spread({"app": name})}
        workload = _deployment(
            name,
            ns.name,
            labels,
            rng.choice((1, 2, 3)),
            main,
            annotations=scrape_annotations(9102),
            spec_extra={"serviceAccountName": name, **(spread if rng.random() < 0.5 else {})},
            kind=kind,
        )
        service = _service(
            name,
            ns.name,
            {"app": name},
            [(port, port_name, "TCP", port_name)],
            headless=kind == "StatefulSet",
        )
        sa = manifest("v1", "ServiceAccount", metadata(name, ns.name, labels={"app": name}))
        listen = f"listen: :{port}\nmetrics: :9102\ntimeout: {rng.choice((5, 10, 30))}s\n"
        config = config_map(f"{name}-config", ns.name, {"config.yaml": listen}, {"app": name})
        base = f"{ns.dir}/apps/{name}"
        repo.add(f"{base}/{kind.lower()}.yaml", workload)
        repo.add(f"{base}/service.yaml", service)
        repo.add(f"{base}/serviceaccount.yaml", sa)
        repo.add(f"{base}/configmap.yaml", config)
    return out


# --- policies ------------------------------------------------------------------------------------


CILIUM_DNS = {
    "toEndpoints": [
        {"matchLabels": {"k8s:io.kubernetes.pod.namespace": "kube-system", "k8s:k8s-app": "kube-dns"}}
    ],
    "toPorts": [{"ports": [{"port": "53", "protocol": "ANY"}], "rules": {"dns": [{"matchPattern": "*"}]}}],
}


def clusterwide_policies() -> list[tuple[str, Obj]]:
    base = "clusters/platform/policies/clusterwide"
    additive = {"enableDefaultDeny": {"ingress": False, "egress": False}}
    return [
        (
            f"{base}/allow-kube-dns.yaml",
            cilium_policy(
                "allow-kube-dns", None, {"endpointSelector": {}, **additive, "egress": [CILIUM_DNS]}
            ),
        ),
        (
            f"{base}/deny-instance-metadata.yaml",
            cilium_policy(
                "deny-instance-metadata",
                None,
                {
                    "endpointSelector": {
                        "matchExpressions": [
                            {
                                "key": "k8s:io.kubernetes.pod.namespace",
                                "operator": "NotIn",
                                "values": ["kube-system"],
                            }
                        ]
                    },
                    **additive,
                    "egressDeny": [{"toCIDR": ["169.254.169.254/32"]}],
                },
            ),
        ),
        (
            f"{base}/allow-prometheus-scrape.yaml",
            cilium_policy(
                "allow-prometheus-scrape",
                None,
                {
                    "endpointSelector": {},
                    **additive,
                    "ingress": [
                        {
                            "fromEndpoints": [
                                {
                                    "matchLabels": {
                                        "k8s:io.kubernetes.pod.namespace": "monitoring",
                                        "app.kubernetes.io/name": "prometheus",
                                    }
                                }
                            ],
                            "toPorts": [
                                {
                                    "ports": [
                                        {"port": "9102", "protocol": "TCP"},
                                        {"port": "8080", "protocol": "TCP"},
                                    ]
                                }
                            ],
                        }
                    ],
                },
            ),
        ),
        (
            f"{base}/allow-health-checks.yaml",
            cilium_policy(
                "allow-health-checks",
                None,
                {
                    "endpointSelector": {},
                    **additive,
                    "ingress": [{"fromEntities": ["host", "remote-node", "health"]}],
                },
            ),
        ),
        (
            f"{base}/kube-system-baseline.yaml",
            cilium_policy(
                "kube-system-baseline",
                None,
                {
                    "endpointSelector": {"matchLabels": {"k8s:io.kubernetes.pod.namespace": "kube-system"}},
                    "ingress": [{"fromEntities": ["cluster"]}],
                    "egress": [{"toEntities": ["cluster", "kube-apiserver", "world"]}],
                },
            ),
        ),
    ]


def baseline_policies(ns: Namespace) -> list[Obj]:
    n = ns.name
    out = [
        pod_policy(
            "default-deny",
            n,
            {},
            ["Ingress", "Egress"] if ns.deny_egress else ["Ingress"],
            [],
            [] if ns.deny_egress else None,
        ),
        pod_policy(
            "allow-monitoring",
            n,
            {},
            ["Ingress"],
            [
                {
                    "from": [
                        {
                            **namespace_peer("monitoring"),
                            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
                        }
                    ],
                    "ports": [{"port": "metrics"}],
                }
            ],
            None,
        ),
    ]
    if ns.deny_egress:
        out.append(allow_dns(n))
        out.append(
            pod_policy(
                "allow-object-storage",
                n,
                {},
                ["Egress"],
                None,
                [
                    {
                        "to": [
                            {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "169.254.169.254/32"]}}
                        ],
                        "ports": [{"protocol": "TCP", "port": 443}],
                    }
                ],
            )
        )
    if ns.purpose == "serving":
        out.append(
            pod_policy(
                "allow-ingress-controller",
                n,
                {
                    "matchExpressions": [
                        {"key": "app.kubernetes.io/name", "operator": "In", "values": list(APP_NAMES[:6])}
                    ]
                },
                ["Ingress"],
                [
                    {
                        "from": [
                            {
                                **namespace_peer("ingress-nginx"),
                                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "ingress-nginx"}},
                            }
                        ]
                    }
                ],
                None,
            )
        )
    return out


def zone_policies(ns: Namespace) -> list[Obj]:
    """Seed scenario: pods labelled `zone` may talk only to pods of the same zone."""
    out = []
    for zone in ZONES:
        out.append(
            cilium_policy(
                f"{zone}-only",
                ns.name,
                {
                    "description": f"pods in {zone} talk to {zone} pods only (inter-AZ egress is billed)",
                    "endpointSelector": {"matchLabels": {"zone": zone}},
                    "ingress": [
                        {"fromEndpoints": [{"matchLabels": {"zone": zone}}]},
                        {
                            "fromEndpoints": [
                                {"matchLabels": {"k8s:io.kubernetes.pod.namespace": "monitoring"}}
                            ]
                        },
                    ],
                    "egress": [
                        {"toEndpoints": [{"matchLabels": {"zone": zone}}]},
                        {
                            "toEndpoints": [
                                {"matchLabels": {"k8s:io.kubernetes.pod.namespace": "kube-system"}}
                            ]
                        },
                        {"toEndpoints": [{"matchLabels": {"k8s:io.kubernetes.pod.namespace": "monitoring"}}]},
                    ],
                },
            )
        )
    return out


def job_policy(job: Job, rng: random.Random) -> Obj:
    """Pods of one job talk to each other on every port (NCCL, MPI, rendezvous)."""
    key, value = job.selector
    if rng.random() < 0.02:
        # A selector copied from a Kubeflow job onto another kind: selects nothing.
        key = JOB_NAME if key != JOB_NAME else "job-name"
    sel = {"matchLabels": {key: value}}
    name = f"allow-{job.name}-intra"
    labels = {"app": job.name} if job.ns.cilium else None
    return peers_only(name, job.ns.name, sel, egress=job.ns.deny_egress, cilium=job.ns.cilium, labels=labels)


def app_policies(app: App, rng: random.Random) -> list[Obj]:
    """Ingress to the app from its callers, egress from the app to its callees."""
    out: list[Obj] = []
    ns = app.ns.name
    sel = {"matchLabels": {"app": app.name}}
    if app.callers:
        callers = [c.name for c in app.callers]
        if rng.random() < 0.03:
            # Written before the caller was renamed: the policy names its old label value.
            callers[0] = callers[0].rsplit("-", 1)[0] + "-v1"
        if app.ns.cilium:
            ingress: Obj = {
                "fromEndpoints": [{"matchLabels": {"app": c}} for c in callers]
                or [{"matchLabels": {"app": "none"}}],
                "toPorts": [{"ports": [{"port": str(app.port), "protocol": "TCP"}]}],
            }
            if app.port_name == "http" and rng.random() < 0.5:
                ingress["toPorts"][0]["rules"] = {
                    "http": [{"method": "GET"}, {"method": "POST", "path": "/v1/.*"}]
                }
            out.append(
                cilium_policy(
                    f"{app.name}-ingress",
                    ns,
                    {"endpointSelector": sel, "ingress": [ingress]},
                    {"app": app.name},
                )
            )
        else:
            peers = [
                {"podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": callers}]}}
            ]
            out.append(
                pod_policy(
                    f"{app.name}-ingress",
                    ns,
                    sel,
                    ["Ingress"],
                    [
                        {
                            "from": peers,
                            "ports": [
                                {"protocol": "TCP", "port": app.port_name if rng.random() < 0.5 else app.port}
                            ],
                        }
                    ],
                    None,
                )
            )
    if app.calls and app.ns.deny_egress:
        if app.ns.cilium:
            out.append(
                cilium_policy(
                    f"{app.name}-egress",
                    ns,
                    {
                        "endpointSelector": sel,
                        "egress": [
                            {
                                "toEndpoints": [{"matchLabels": {"app": c.name}}],
                                "toPorts": [{"ports": [{"port": str(c.port), "protocol": "TCP"}]}],
                            }
                            for c in app.calls
                        ],
                    },
                    {"app": app.name},
                )
            )
        else:
            out.append(
                pod_policy(
                    f"{app.name}-egress",
                    ns,
                    sel,
                    ["Egress"],
                    None,
                    [
                        {
                            "to": [{"podSelector": {"matchLabels": {"app": c.name}}}],
                            "ports": [{"protocol": "TCP", "port": c.port}],
                        }
                        for c in app.calls
                    ],
                )
            )
    return out


def extra_policy(app: App, index: int, rng: random.Random) -> Obj:
    """Further policies teams write per app: external APIs, metrics, notebooks, batch clients."""
    ns = app.ns.name
    sel = {"matchLabels": {"app": app.name}}
    shape = index % 4
    if app.ns.cilium:
        if shape == 0:
            return cilium_policy(
                f"{app.name}-egress-fqdn-{index}",
                ns,
                {
                    "endpointSelector": sel,
                    "egress": [
                        CILIUM_DNS,
                        {
                            "toFQDNs": [
                                {"matchPattern": "*.s3.us-east-1.amazonaws.com"},
                                {"matchName": "huggingface.co"},
                            ],
                            "toPorts": [{"ports": [{"port": "443", "protocol": "TCP"}]}],
                        },
                        # The allowlist puts the app in egress default deny: its dependencies too.
                        *(
                            {
                                "toEndpoints": [{"matchLabels": {"app": c.name}}],
                                "toPorts": [{"ports": [{"port": str(c.port), "protocol": "TCP"}]}],
                            }
                            for c in app.calls
                        ),
                    ],
                },
            )
        return cilium_policy(
            f"{app.name}-from-notebooks-{index}",
            ns,
            {
                "endpointSelector": sel,
                "ingress": [
                    {
                        "fromEndpoints": [
                            {
                                "matchLabels": {
                                    "k8s:io.kubernetes.pod.namespace": f"{app.ns.team}-dev",
                                    "component": "notebook",
                                }
                            }
                        ],
                        "toPorts": [{"ports": [{"port": str(app.port), "protocol": "TCP"}]}],
                    }
                ],
            },
        )
    if shape == 0:
        return pod_policy(
            f"{app.name}-egress-external-{index}",
            ns,
            sel,
            ["Egress"],
            None,
            [
                {
                    "to": [
                        {"ipBlock": {"cidr": f"52.{rng.randrange(0, 255)}.0.0/16"}},
                        {"ipBlock": {"cidr": "3.5.0.0/16"}},
                    ],
                    "ports": [{"protocol": "TCP", "port": 443}],
                },
                # The allowlist puts the app in egress default deny: its dependencies too.
                *(
                    {
                        "to": [{"podSelector": {"matchLabels": {"app": c.name}}}],
                        "ports": [{"protocol": "TCP", "port": c.port}],
                    }
                    for c in app.calls
                ),
            ],
        )
    if shape == 1:
        return pod_policy(
            f"{app.name}-from-team-{index}",
            ns,
            sel,
            ["Ingress"],
            [
                {
                    "from": [
                        {
                            "namespaceSelector": {
                                "matchExpressions": [
                                    {"key": "team", "operator": "In", "values": [app.ns.team]},
                                    {"key": "purpose", "operator": "NotIn", "values": ["data"]},
                                ]
                            },
                            "podSelector": {"matchLabels": {"app.kubernetes.io/part-of": app.ns.team}},
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": app.port}],
                }
            ],
            None,
        )
    if shape == 2:
        return pod_policy(
            f"{app.name}-batch-clients-{index}",
            ns,
            sel,
            ["Ingress"],
            [
                {
                    "from": [
                        {
                            "podSelector": {
                                "matchExpressions": [
                                    {"key": "batch.kubernetes.io/job-name", "operator": "Exists"}
                                ]
                            }
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": app.port}],
                }
            ],
            None,
        )
    return pod_policy(
        f"{app.name}-ephemeral-{index}",
        ns,
        sel,
        ["Ingress"],
        [
            {
                "from": [{"podSelector": {"matchLabels": {"app": app.name}}}],
                "ports": [{"protocol": "TCP", "port": 32768, "endPort": 60999}],
            }
        ],
        None,
    )


def policies_for(
    count: int, spaces: list[Namespace], jobs: list[Job], applist: list[App], repo: Repo, rng: random.Random
) -> None:
    """Exactly `count` policies, taken in priority order: cluster-wide, namespace baselines and
    zone boundaries, one per training job, per-app ingress/egress, then further per-app rules."""
    placed = 0

    def put(path: str, obj: Obj) -> bool:
        nonlocal placed
        if placed >= count:
            return False
        repo.add(path, obj)
        placed += 1
        return True

    for path, obj in clusterwide_policies():
        put(path, obj)
    for ns in spaces:
        for obj in baseline_policies(ns):
            put(f"{ns.dir}/network-policies/baseline.yaml", obj)
        if ns.zone_policies:
            for obj in zone_policies(ns):
                put(f"{ns.dir}/network-policies/zone-boundaries.yaml", obj)
    for job in jobs:
        put(f"{job.ns.dir}/network-policies/training/{job.name}.yaml", job_policy(job, rng))
    for app in applist:
        for obj in app_policies(app, rng):
            put(f"{app.ns.dir}/apps/{app.name}/network-policy.yaml", obj)
    index = 0
    while placed < count and applist:
        app = applist[index % len(applist)]
        put(f"{app.ns.dir}/apps/{app.name}/network-policy-extra.yaml", extra_policy(app, index, rng))
        index += 1


# --- the repository ------------------------------------------------------------------------------


def build(
    jobs: int = 2000,
    policies: int = 5000,
    nodes_count: int = 500,
    seed: int = 1,
    objects: int | None = None,
) -> Repo:
    rng = random.Random(seed)
    repo = Repo()
    target = objects if objects is not None else 10 * jobs
    for path, node in nodes(nodes_count, rng):
        repo.add(path, node)
    platform_objects(repo)
    spaces = namespaces(max(len(TEAMS), round(jobs / 20)), rng)
    for ns in spaces:
        repo.add(f"{ns.dir}/namespace.yaml", *namespace_objects(ns))
    joblist = training_jobs(jobs, spaces, repo, rng)
    # Apps (workload, Service, ServiceAccount, ConfigMap: four objects each) fill up to the target.
    so_far = sum(repo.counts().values()) + policies
    applist = apps(max(0, (target - so_far) // 4), spaces, repo, rng)
    policies_for(policies, spaces, joblist, applist, repo, rng)
    return repo


def generate_repo(
    directory: Path,
    jobs: int = 2000,
    policies: int = 5000,
    nodes: int = 500,
    seed: int = 1,
    *,
    objects: int | None = None,
) -> dict[str, int]:
    """Write the repository under `directory`; return counts: `objects`, `files`, `jobs`,
    `policies`, `nodes` and one entry per kind. `objects` (default 10 × jobs) is the total aimed at:
    apps fill what the jobs, policies and nodes leave."""
    repo = build(jobs, policies, nodes, seed, objects)
    for rel, docs in repo.files.items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_dump(docs), encoding="utf-8")
    kinds = repo.counts()
    policy_kinds = ("NetworkPolicy", "CiliumNetworkPolicy", "CiliumClusterwideNetworkPolicy")
    out = {
        "objects": sum(kinds.values()),
        "files": len(repo.files),
        "jobs": jobs,
        "policies": sum(kinds[k] for k in policy_kinds),
        "nodes": kinds["Node"],
    }
    out.update(sorted(kinds.items()))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--policies", type=int, default=5000)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--objects", type=int, default=None, help="total objects aimed at (default 10 × jobs)"
    )
    args = parser.parse_args(argv)
    counts = generate_repo(
        args.directory, args.jobs, args.policies, args.nodes, args.seed, objects=args.objects
    )
    width = max(len(k) for k in counts)
    for key, value in counts.items():
        print(f"{key:<{width}}  {value:>7,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
