"""The live-cluster world: a cluster as the API server reports it (see bench_cluster.py for what
it holds), deterministic for a seed. `generate` returns the objects (as list items, with apiVersion
and kind) and the counts of what was planted (`Stats`); CRDS names the custom resources served.

Shared with gen_repo.py: the app namespaces and NetworkPolicy shapes (`world.netpol`), the nodes'
sites, pool labels and taints (`world.nodes`, `world.vocabulary`), object envelopes, Namespaces and
Service ports (`world.objects`), containers and the training pod template (`world.pods`), the
PyTorchJob (`world.jobs`) and the training namespaces' policies (`world.policies`). What this
module adds is what a running cluster has: stored metadata, defaults, status, pods bound to nodes.
"""

from __future__ import annotations

import math
import random
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from world import netpol as synth
from world.jobs import KIND, PYTORCH_PORT, pytorchjob
from world.nodes import sites
from world.objects import (
    COREDNS_PORTS,
    KUBE_DNS_PORTS,
    ServicePort,
    config_map,
    env_values,
    manifest,
    metadata,
    namespace,
    service_ports,
    zone_node_affinity,
)
from world.pods import (
    APP_ENV,
    SHM_VOLUME,
    ContainerPort,
    Placement,
    container,
    dataset_env,
    gpu_tolerations,
    pod_template,
    prometheus,
    scrape_annotations,
    zone_spread,
)
from world.policies import allow_dns, namespace_peer, peers_only, pod_policy
from world.vocabulary import (
    GRADIENT,
    JOB_NAME,
    REGION,
    STEPS,
    ZONE_KEY,
    ZONES,
    Pool,
)

Obj = dict[str, Any]
NOW = 1_763_640_000.0  # 2025-11-20T12:00:00Z: every timestamp is before it
SUFFIX = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet of generated name suffixes
MAX_PODS = 110
CRDS = {
    "/apis/kubeflow.org/v1/pytorchjobs",
    "/apis/cilium.io/v2/ciliumnetworkpolicies",
    "/apis/cilium.io/v2/ciliumclusterwidenetworkpolicies",
}
KUBE_PROXY_IMAGE = "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/kube-proxy:v1.33.4-minimal-eksbuild.2"


POOLS = (
    Pool("system", "m6i.2xlarge", 0.04, ZONES, "7910m", "28069496Ki", system=True, capacity_cpu="8"),
    Pool("general", "m6i.8xlarge", 0.50, ZONES, "31750m", "124137528Ki", capacity_cpu="32"),
    Pool("highmem", "r6i.8xlarge", 0.16, ZONES, "31750m", "253926712Ki", capacity_cpu="32"),
    Pool(
        "gpu-a100",
        "p4d.24xlarge",
        0.20,
        ZONES,
        "95",
        "1126155164Ki",
        8,
        "NVIDIA-A100-SXM4-40GB",
        capacity_cpu="96",
    ),
    # H100 capacity exists in two of the three zones only.
    Pool(
        "gpu-h100",
        "p5.48xlarge",
        0.10,
        ZONES[:2],
        "191",
        "1992366940Ki",
        8,
        "NVIDIA-H100-80GB-HBM3",
        capacity_cpu="192",
    ),
)


def _stamp(seconds_ago: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW - seconds_ago))


def _split(total: int, weights: list[float], minimum: int = 1) -> list[int]:
    """`total` split in proportion to `weights`, each part at least `minimum`, summing to `total`."""
    n = len(weights)
    rest = total - n * minimum
    if n == 0:
        return []
    if rest <= 0:
        return [minimum if i < total // max(minimum, 1) else 0 for i in range(n)]
    scale = rest / sum(weights)
    raw = [w * scale for w in weights]
    parts = [minimum + math.floor(r) for r in raw]
    short = total - sum(parts)
    for i in sorted(range(n), key=lambda i: raw[i] - math.floor(raw[i]), reverse=True)[:short]:
        parts[i] += 1
    return parts


@dataclass
class NodeSlot:
    """A node as the generator's scheduler sees it: where pods fit, and their IPs."""

    name: str
    zone: str
    pool: Pool
    ip: str
    cidr_prefix: str  # "10.100.7." of 10.100.7.0/24
    gpus_free: int
    pods: int = 0

    def bind(self, gpus: int = 0, host_network: bool = False) -> str:
        """Counts one more pod (holding `gpus`) and returns its pod IP (the node's on the host network)."""
        self.pods += 1
        self.gpus_free -= gpus
        return self.ip if host_network else f"{self.cidr_prefix}{self.pods + 1}"


@dataclass
class Stats:
    deployments: int = 0
    replicasets: int = 0
    deployment_pods: int = 0
    rollouts: int = 0
    daemonsets: int = 0
    daemonset_pods: int = 0
    jobs: int = 0
    job_pods: int = 0
    split_jobs: int = 0
    pending_jobs: int = 0
    finished_jobs: int = 0
    fenced_jobs: int = 0
    stray_masters: int = 0
    pending_pods: int = 0
    edges_named: int = 0


@dataclass
class JobPlan:
    name: str
    namespace: str
    team: str
    pool: Pool
    workers: int
    gpus: int  # per pod
    cpu: str
    memory: str
    finished: bool
    pin: str | None = None  # the zone the pods are pinned to (required nodeAffinity)
    master_pin: str | None = None  # the master's pin: another zone when it strayed
    zone_label: str | None = None  # the pods' `zone` label (zone-fenced namespaces)
    master_label: str | None = None
    coupling: str = "none"  # none | affinity (required podAffinity on the zone) | kueue
    unschedulable: bool = False  # pinned where its GPU pool has no nodes
    zones: list[str] = field(default_factory=list)  # where the scheduler put the pods


class ClusterBuilder:
    """Builds the objects of the cluster, placing every pod on a node as a scheduler would have."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.objects: list[Obj] = []
        self.slots: list[NodeSlot] = []
        self.by_pool_zone: dict[tuple[str, str], list[NodeSlot]] = defaultdict(list)
        self.stats = Stats()
        self._images: dict[str, list[Obj]] = {}

    # -- small helpers ---------------------------------------------------------------------

    def uid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def suffix(self, k: int = 5) -> str:
        return "".join(self.rng.choices(SUFFIX, k=k))

    def meta(self, name: str, namespace: str | None = None, age_days: float = 120.0, **extra: Any) -> Obj:
        return self.stored(metadata(name, namespace, **extra), age_days)

    def stored(self, meta: Obj, age_days: float = 120.0) -> Obj:
        """A manifest's metadata as the API server stores it: uid, resourceVersion and
        creationTimestamp after the name and namespace."""
        head: Obj = {k: meta[k] for k in ("name", "namespace") if k in meta}
        head["uid"] = self.uid()
        head["resourceVersion"] = str(self.rng.randrange(10_000_000, 900_000_000))
        head["creationTimestamp"] = _stamp(self.rng.uniform(3600, age_days * 86400))
        return head | {k: v for k, v in meta.items() if k not in ("name", "namespace")}

    @staticmethod
    def owner(obj: Obj) -> Obj:
        return {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }

    def add(self, *objs: Obj) -> None:
        self.objects.extend(objs)

    def pick(self, pool: Pool, zone: str, gpus: int = 0) -> NodeSlot | None:
        """A random node of the pool in the zone with room for one more pod (and its GPUs)."""
        slots = self.by_pool_zone.get((pool.name, zone), [])
        if not slots:
            return None
        for _ in range(12):
            s = slots[self.rng.randrange(len(slots))]
            if s.pods < MAX_PODS and s.gpus_free >= gpus:
                return s
        return next((s for s in slots if s.pods < MAX_PODS and s.gpus_free >= gpus), None)

    # -- nodes -----------------------------------------------------------------------------

    def images(self, pool: Pool) -> list[Obj]:
        """status.images: the images the kubelet holds (shared per pool: only their bytes matter)."""
        if pool.name not in self._images:
            names = [
                KUBE_PROXY_IMAGE,
                "quay.io/prometheus/node-exporter:v1.9.1",
                "quay.io/cilium/cilium:v1.18.2",
                *(f"registry.example.com/apps/app-{i}:v1.{i % 7}.{i % 11}" for i in range(24)),
            ]
            if pool.gpus:
                names += ["nvcr.io/nvidia/pytorch:25.08-py3", "nvcr.io/nvidia/k8s-device-plugin:v0.17.4"]
            self._images[pool.name] = [
                {
                    "names": [
                        f"{n.rsplit(':', 1)[0]}@sha256:{self.rng.getrandbits(256):064x}",
                        n,
                    ],
                    "sizeBytes": self.rng.randrange(5_000_000, 9_000_000_000 if pool.gpus else 900_000_000),
                }
                for n in names
            ]
        return self._images[pool.name]

    def nodes(self, count: int) -> None:
        conditions = [
            {
                "type": t,
                "status": "False",
                "reason": f"KubeletHasSufficient{t.removesuffix('Pressure')}",
                "message": f"kubelet has sufficient {t.removesuffix('Pressure').lower()} available",
                "lastHeartbeatTime": _stamp(30),
                "lastTransitionTime": _stamp(86400 * 40),
            }
            for t in ("MemoryPressure", "DiskPressure", "PIDPressure")
        ] + [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": _stamp(30),
                "lastTransitionTime": _stamp(86400 * 40),
            }
        ]
        for site in sites(POOLS, count):
            pool, zone, ip, name = site.pool, site.zone, site.ip, site.name
            labels = {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/instance-type": pool.instance_type,
                "beta.kubernetes.io/os": "linux",
                "eks.amazonaws.com/capacityType": "ON_DEMAND",
                "eks.amazonaws.com/nodegroup-image": "ami-0c1f2a3b4d5e6f708",
                "failure-domain.beta.kubernetes.io/region": REGION,
                "failure-domain.beta.kubernetes.io/zone": zone,
                "k8s.io/cloud-provider-aws": "a94967527effcefb5f5829f529c0a1b9",
                "topology.k8s.aws/zone-id": f"use1-az{ZONES.index(zone) + 1}",
                **site.labels(),
            }
            spec: Obj = {
                "podCIDR": site.pod_cidr,
                "podCIDRs": [site.pod_cidr],
                "providerID": f"aws:///{zone}/i-0{self.rng.getrandbits(60):015x}",
            }
            taints = site.taints()
            allocatable = {
                "cpu": pool.cpu,
                "ephemeral-storage": "95491281146",
                "hugepages-1Gi": "0",
                "hugepages-2Mi": "0",
                "memory": pool.memory,
                "pods": str(MAX_PODS),
            }
            allocatable |= site.devices()
            labels |= site.pool_labels()
            if pool.gpus:
                labels |= {
                    "topology.k8s.aws/network-node-layer-1": f"nn-{zone[-1]}{site.rack // 16:03d}",
                    "topology.k8s.aws/network-node-layer-2": f"nn-{zone[-1]}{site.rack // 4:04d}",
                    "topology.k8s.aws/network-node-layer-3": f"nn-{zone[-1]}{site.rack:05d}",
                }
            if self.rng.random() < 0.01:  # cordoned for maintenance, pods not drained yet
                spec["unschedulable"] = True
                taints.append(
                    {
                        "key": "node.kubernetes.io/unschedulable",
                        "effect": "NoSchedule",
                        "timeAdded": _stamp(7200),
                    }
                )
            if taints:
                spec["taints"] = taints
            node: Obj = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": self.meta(
                    name,
                    None,
                    90,
                    labels=labels,
                    annotations={
                        "alpha.kubernetes.io/provided-node-ip": ip,
                        "node.alpha.kubernetes.io/ttl": "0",
                        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                    },
                ),
                "spec": spec,
                "status": {
                    "addresses": [
                        {"type": "InternalIP", "address": ip},
                        {"type": "InternalDNS", "address": name},
                        {"type": "Hostname", "address": name},
                    ],
                    "allocatable": allocatable,
                    "capacity": {**allocatable, "cpu": pool.capacity_cpu},
                    "conditions": conditions,
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                    "images": self.images(pool),
                    "nodeInfo": {
                        "architecture": "amd64",
                        "bootID": self.uid(),
                        "containerRuntimeVersion": "containerd://1.7.27",
                        "kernelVersion": "6.1.147-172.266.amzn2023.x86_64",
                        "kubeProxyVersion": "v1.33.4-eks-a737599",
                        "kubeletVersion": "v1.33.4-eks-a737599",
                        "machineID": f"{self.rng.getrandbits(128):032x}",
                        "operatingSystem": "linux",
                        "osImage": "Amazon Linux 2023.8.20250818",
                        "systemUUID": f"ec2{self.rng.getrandbits(116):029x}",
                    },
                },
            }
            self.add(node)
            slot = NodeSlot(name, zone, pool, ip, site.cidr_prefix, pool.gpus)
            self.slots.append(slot)
            self.by_pool_zone[(pool.name, zone)].append(slot)

    # -- namespaces, config, storage -------------------------------------------------------

    def namespace(self, name: str, labels: dict[str, str]) -> Obj:
        ns = namespace(name, labels)
        ns["metadata"] = self.stored(ns["metadata"], 300)
        ns |= {"spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}
        self.add(ns)
        return ns

    def cluster_basics(self, cilium: bool) -> None:
        for name in ("default", "kube-public", "kube-node-lease", "kubeflow"):
            self.namespace(name, {})
        default_class = {"storageclass.kubernetes.io/is-default-class": "true"}
        self.add(
            manifest(
                "storage.k8s.io/v1",
                "StorageClass",
                self.meta("gp3", None, 300, annotations=default_class),
                provisioner="ebs.csi.aws.com",
                parameters={"type": "gp3", "encrypted": "true"},
                reclaimPolicy="Delete",
                volumeBindingMode="WaitForFirstConsumer",
                allowVolumeExpansion=True,
            )
        )
        if cilium:
            config = config_map(
                "cilium-config",
                "kube-system",
                {
                    "cluster-name": "bench",
                    "cluster-id": "1",
                    "enable-policy": "default",
                    "identity-allocation-mode": "crd",
                    "ipam": "eni",
                    "kube-proxy-replacement": "false",
                    "policy-audit-mode": "false",
                },
            )
            config["metadata"] = self.stored(config["metadata"], 300)
            self.add(config)

    # -- pods ------------------------------------------------------------------------------

    @staticmethod
    def defaulted(spec: Obj, restart: str = "Always") -> Obj:
        """A pod spec as the API server stores it in a template (defaults filled in)."""

        def container(c: Obj) -> Obj:
            return {
                **c,
                "imagePullPolicy": "IfNotPresent",
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
            }

        out = {**spec, "containers": [container(c) for c in spec["containers"]]}
        if "initContainers" in spec:
            out["initContainers"] = [container(c) for c in spec["initContainers"]]
        out.setdefault("restartPolicy", restart)
        out.setdefault("securityContext", {})
        out.update(
            dnsPolicy="ClusterFirst", schedulerName="default-scheduler", terminationGracePeriodSeconds=30
        )
        return out

    def pod_spec(self, template_spec: Obj) -> Obj:
        """The spec of a pod created from a (defaulted) template: admission adds the service
        account token volume and the not-ready/unreachable tolerations."""
        sa = str(template_spec.get("serviceAccountName") or "default")
        token = f"kube-api-access-{self.suffix()}"
        mount = {
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            "name": token,
            "readOnly": True,
        }

        def container(c: Obj) -> Obj:
            return {**c, "volumeMounts": [*c.get("volumeMounts", []), mount]}

        spec = {
            **template_spec,
            "containers": [container(c) for c in template_spec["containers"]],
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": template_spec.get("priority", 0),
            "serviceAccount": sa,
            "serviceAccountName": sa,
            "tolerations": [
                *template_spec.get("tolerations", []),
                {
                    "effect": "NoExecute",
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "tolerationSeconds": 300,
                },
                {
                    "effect": "NoExecute",
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "tolerationSeconds": 300,
                },
            ],
            "volumes": [
                *template_spec.get("volumes", []),
                {
                    "name": token,
                    "projected": {
                        "defaultMode": 420,
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {
                                "configMap": {
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                    "name": "kube-root-ca.crt",
                                }
                            },
                            {
                                "downwardAPI": {
                                    "items": [
                                        {
                                            "fieldRef": {
                                                "apiVersion": "v1",
                                                "fieldPath": "metadata.namespace",
                                            },
                                            "path": "namespace",
                                        }
                                    ]
                                }
                            },
                        ],
                    },
                },
            ],
        }
        if "initContainers" in template_spec:
            spec["initContainers"] = [container(c) for c in template_spec["initContainers"]]
        return spec

    @staticmethod
    def managed_fields(labels: dict[str, str], spec: Obj, owner_uid: str, manager: str, at: str) -> list[Obj]:
        """metadata.managedFields of a controller-created pod (the reader drops them on arrival)."""

        def keys(d: Obj) -> Obj:
            return {".": {}, **{f"f:{k}": {} for k in d}}

        containers = {
            f'k:{{"name":"{c["name"]}"}}': {
                ".": {},
                **{f"f:{k}": {} for k in c if k not in ("ports", "env")},
                **(
                    {
                        "f:ports": {
                            ".": {},
                            **{
                                f'k:{{"containerPort":{p["containerPort"]},"protocol":"TCP"}}': keys(p)
                                for p in c["ports"]
                            },
                        }
                    }
                    if c.get("ports")
                    else {}
                ),
                **(
                    {"f:env": {".": {}, **{f'k:{{"name":"{e["name"]}"}}': keys(e) for e in c["env"]}}}
                    if c.get("env")
                    else {}
                ),
            }
            for c in spec["containers"]
        }
        return [
            {
                "apiVersion": "v1",
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {
                        "f:generateName": {},
                        "f:labels": keys(labels),
                        "f:ownerReferences": {".": {}, f'k:{{"uid":"{owner_uid}"}}': {}},
                    },
                    "f:spec": {
                        "f:containers": containers,
                        **{f"f:{k}": {} for k in spec if k not in ("containers", "volumes")},
                    },
                },
                "manager": manager,
                "operation": "Update",
                "time": at,
            },
            {
                "apiVersion": "v1",
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:status": {
                        "f:conditions": {
                            f'k:{{"type":"{t}"}}': {
                                ".": {},
                                "f:lastProbeTime": {},
                                "f:lastTransitionTime": {},
                                "f:status": {},
                                "f:type": {},
                            }
                            for t in ("ContainersReady", "Initialized", "PodReadyToStartContainers", "Ready")
                        },
                        "f:containerStatuses": {},
                        "f:hostIP": {},
                        "f:hostIPs": {},
                        "f:phase": {},
                        "f:podIP": {},
                        "f:podIPs": {},
                        "f:startTime": {},
                    }
                },
                "manager": "kubelet",
                "operation": "Update",
                "subresource": "status",
                "time": at,
            },
        ]

    @staticmethod
    def running_conditions(started: float, completed: bool = False) -> list[Obj]:
        out: list[Obj] = []
        for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"):
            cond: Obj = {
                "lastProbeTime": None,
                "lastTransitionTime": _stamp(started),
                "status": "True",
                "type": t,
            }
            if completed and t in ("PodReadyToStartContainers", "Ready", "ContainersReady"):
                cond.update(status="False", reason="PodCompleted", lastTransitionTime=_stamp(started / 2))
            out.append(cond)
        return out

    def pod(
        self,
        name: str,
        namespace: str,
        labels: dict[str, str],
        owner: Obj,
        spec: Obj,
        slot: NodeSlot | None,
        *,
        gpus: int = 0,
        phase: str = "Running",
        conditions: list[Obj] | None = None,
        managed: list[Obj] | None = None,
        generate_name: str | None = None,
        annotations: dict[str, str] | None = None,
        pending_message: str = "",
        started: float = 86400.0,
    ) -> Obj:
        """One pod. `spec` is shared by the pods of one template (only nodeName differs)."""
        meta: Obj = {"name": name}
        if generate_name:
            meta["generateName"] = generate_name
        meta |= {
            "namespace": namespace,
            "uid": self.uid(),
            "resourceVersion": str(self.rng.randrange(10_000_000, 900_000_000)),
            "creationTimestamp": _stamp(started + 5),
            "labels": labels,
        }
        if annotations:
            meta["annotations"] = annotations
        meta["ownerReferences"] = [owner]
        if managed:
            meta["managedFields"] = managed
        status: Obj
        if slot is None:
            self.stats.pending_pods += 1
            status = {
                "conditions": [
                    {
                        "lastProbeTime": None,
                        "lastTransitionTime": _stamp(started),
                        "message": pending_message,
                        "reason": "Unschedulable",
                        "status": "False",
                        "type": "PodScheduled",
                    }
                ],
                "phase": "Pending",
                "qosClass": "Burstable",
            }
            return manifest("v1", "Pod", meta, spec=spec, status=status)
        ip = slot.bind(gpus, bool(spec.get("hostNetwork")))
        running = phase == "Running"
        status = {
            "conditions": conditions or self.running_conditions(started, completed=not running),
            "containerStatuses": [
                {
                    "containerID": f"containerd://{self.rng.getrandbits(256):064x}",
                    "image": c["image"],
                    "imageID": f"{c['image'].rsplit(':', 1)[0]}@sha256:{self.rng.getrandbits(256):064x}",
                    "lastState": {},
                    "name": c["name"],
                    "ready": running,
                    "restartCount": 0,
                    "started": running,
                    "state": {"running": {"startedAt": _stamp(started - 20)}}
                    if running
                    else {
                        "terminated": {
                            "containerID": "containerd://" + "0" * 64,
                            "exitCode": 0,
                            "finishedAt": _stamp(started / 2),
                            "reason": "Completed",
                            "startedAt": _stamp(started - 20),
                        }
                    },
                }
                for c in spec["containers"]
            ],
            "hostIP": slot.ip,
            "hostIPs": [{"ip": slot.ip}],
            "phase": phase,
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "qosClass": "Burstable",
            "startTime": _stamp(started),
        }
        return manifest("v1", "Pod", meta, spec={**spec, "nodeName": slot.name}, status=status)

    # -- Deployments -----------------------------------------------------------------------

    def container(self, app: str, team: str, tier: str, index: int, upstreams: list[str]) -> Obj:
        """world.pods' container of an app, with its env, probes and a restricted security context."""
        ports: list[ContainerPort] = [(8080, "http", "TCP"), (9090 + index % 3, "metrics", "TCP")]
        if tier == "db":
            ports.append((5432, "postgres", "TCP"))
        pod_name = {
            "name": "POD_NAME",
            "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
        }
        upstream = env_values(*((f"UPSTREAM_{i}_URL", u) for i, u in enumerate(upstreams)))
        probe = {
            "failureThreshold": 3,
            "httpGet": {"path": "/healthz", "port": "http", "scheme": "HTTP"},
            "periodSeconds": 10,
            "successThreshold": 1,
            "timeoutSeconds": 1,
        }
        cpu = self.rng.choice(("100m", "250m", "500m", "1", "2"))
        memory = self.rng.choice(("256Mi", "512Mi", "1Gi", "2Gi", "4Gi"))
        image = f"registry.example.com/{team}/{app}:v1.{index % 7}.{self.rng.randrange(40)}"
        return container(app, image, cpu, memory, ports) | {
            "env": [*env_values(*APP_ENV), pod_name, *upstream],
            "livenessProbe": {**probe, "initialDelaySeconds": 10},
            "readinessProbe": probe,
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
                "readOnlyRootFilesystem": True,
                "runAsNonRoot": True,
            },
        }

    def deployment(
        self,
        name: str,
        namespace: str,
        labels: dict[str, str],
        replicas: int,
        pod_spec: Obj,
        pools: tuple[Pool, ...],
        zones: tuple[str, ...] = ZONES,
        annotations: dict[str, str] | None = None,
    ) -> None:
        """A Deployment, its ReplicaSets (current, old ones at zero, a rollout in progress now and
        then) and its pods spread over `zones` on nodes of `pools`."""
        rng = self.rng
        template_spec = self.defaulted(pod_spec)
        template_meta: Obj = {"labels": dict(labels)}
        if annotations:
            template_meta["annotations"] = annotations
        revision = rng.randint(1, 14)
        dep: Obj = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": self.meta(
                name,
                namespace,
                labels=dict(labels),
                annotations={"deployment.kubernetes.io/revision": str(revision)},
                generation=revision,
            ),
            "spec": {
                "progressDeadlineSeconds": 600,
                "replicas": replicas,
                "revisionHistoryLimit": 10,
                "selector": {"matchLabels": {"app": labels["app"]} if "app" in labels else dict(labels)},
                "strategy": {
                    "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
                    "type": "RollingUpdate",
                },
                "template": {"metadata": template_meta, "spec": template_spec},
            },
            "status": {
                "availableReplicas": replicas,
                "conditions": [
                    {
                        "lastTransitionTime": _stamp(86400 * 20),
                        "lastUpdateTime": _stamp(86400 * 20),
                        "message": "Deployment has minimum availability.",
                        "reason": "MinimumReplicasAvailable",
                        "status": "True",
                        "type": "Available",
                    },
                    {
                        "lastTransitionTime": _stamp(86400 * 60),
                        "lastUpdateTime": _stamp(86400 * 2),
                        "message": f'ReplicaSet "{name}" has successfully progressed.',
                        "reason": "NewReplicaSetAvailable",
                        "status": "True",
                        "type": "Progressing",
                    },
                ],
                "observedGeneration": revision,
                "readyReplicas": replicas,
                "replicas": replicas,
                "updatedReplicas": replicas,
            },
        }
        self.add(dep)
        self.stats.deployments += 1
        rollout = replicas >= 4 and rng.random() < 0.02
        old = min(revision - 1, rng.randint(0, 3))
        # (revision, replicas) of each ReplicaSet, newest first.
        sets = [(revision, replicas)] + [(revision - k, 0) for k in range(1, old + 1)]
        if rollout and old:
            moved = replicas // 3
            sets[0] = (revision, replicas - moved)
            sets[1] = (revision - 1, moved)
            self.stats.rollouts += 1
        owner_dep = self.owner(dep)
        start = rng.randrange(len(zones))
        placed = 0
        for rev, count in sets:
            pod_hash = self.suffix(10)
            rs_name = f"{name}-{pod_hash}"
            pod_labels = {**labels, "pod-template-hash": pod_hash}
            rs_spec = template_spec
            if rev != revision:  # an older image
                rs_spec = {
                    **template_spec,
                    "containers": [
                        {**c, "image": f"{c['image'].rsplit(':', 1)[0]}:v0.{rev}.0"}
                        for c in template_spec["containers"]
                    ],
                }
            rs: Obj = {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": self.meta(
                    rs_name,
                    namespace,
                    labels=dict(pod_labels),
                    annotations={
                        "deployment.kubernetes.io/desired-replicas": str(replicas),
                        "deployment.kubernetes.io/max-replicas": str(replicas + math.ceil(replicas / 4)),
                        "deployment.kubernetes.io/revision": str(rev),
                    },
                    ownerReferences=[owner_dep],
                    generation=2,
                ),
                "spec": {
                    "replicas": count,
                    "selector": {
                        "matchLabels": {
                            **dep["spec"]["selector"]["matchLabels"],
                            "pod-template-hash": pod_hash,
                        }
                    },
                    "template": {"metadata": {**template_meta, "labels": pod_labels}, "spec": rs_spec},
                },
                "status": {
                    "availableReplicas": count,
                    "fullyLabeledReplicas": count,
                    "observedGeneration": 2,
                    "readyReplicas": count,
                    "replicas": count,
                },
            }
            self.add(rs)
            self.stats.replicasets += 1
            if not count:
                continue
            owner_rs = self.owner(rs)
            spec = self.pod_spec(rs_spec)
            started = rng.uniform(3600, 86400 * 20)
            conditions = self.running_conditions(started)
            managed = self.managed_fields(
                pod_labels, spec, rs["metadata"]["uid"], "kube-controller-manager", _stamp(started)
            )
            for _ in range(count):
                zone = zones[(start + placed) % len(zones)]
                placed += 1
                pool = pools[rng.randrange(len(pools))]
                slot = self.pick(pool, zone) or self.pick(pool, rng.choice(pool.zones))
                self.add(
                    self.pod(
                        f"{rs_name}-{self.suffix()}",
                        namespace,
                        pod_labels,
                        owner_rs,
                        spec,
                        slot,
                        conditions=conditions,
                        managed=managed,
                        generate_name=f"{rs_name}-",
                        annotations=annotations,
                        pending_message=f"0/{len(self.slots)} nodes are available: Too many pods.",
                        started=started,
                    )
                )
                self.stats.deployment_pods += 1

    def service(
        self,
        name: str,
        namespace: str,
        selector: dict[str, str],
        ports: list[ServicePort],
        *,
        headless: bool = False,
        owner: Obj | None = None,
        labels: dict[str, str] | None = None,
    ) -> None:
        ip = "None" if headless else f"172.20.{self.rng.randrange(256)}.{self.rng.randrange(1, 255)}"
        meta = self.meta(name, namespace, labels=labels or {}, ownerReferences=[owner] if owner else None)
        spec = {
            "clusterIP": ip,
            "clusterIPs": [ip],
            "internalTrafficPolicy": "Cluster",
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "ports": service_ports(ports),
            "selector": selector,
            "sessionAffinity": "None",
            "type": "ClusterIP",
        }
        self.add(manifest("v1", "Service", meta, spec=spec, status={"loadBalancer": {}}))

    def system_workloads(self) -> None:
        system = next(p for p in POOLS if p.system)
        critical = {
            "nodeSelector": {"node-role.kubernetes.io/system": ""},
            "priorityClassName": "system-cluster-critical",
            "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
        }
        dns = container(
            "coredns",
            "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/coredns:v1.11.4-eksbuild.2",
            "100m",
            "70Mi",
            COREDNS_PORTS,
            args=["-conf", "/etc/coredns/Corefile"],
            memory_limit="170Mi",
        )
        self.deployment(
            "coredns",
            "kube-system",
            {"k8s-app": "kube-dns", "eks.amazonaws.com/component": "coredns"},
            4,
            {**critical, "containers": [dns], "serviceAccountName": "coredns"},
            (system,),
        )
        self.service(
            "kube-dns",
            "kube-system",
            {"k8s-app": "kube-dns"},
            KUBE_DNS_PORTS,
            labels={"k8s-app": "kube-dns"},
        )
        prom = prometheus(memory_limit="24Gi")
        self.deployment(
            "prometheus-server",
            "monitoring",
            {"app": "prometheus", "app.kubernetes.io/name": "prometheus"},
            2,
            {**critical, "containers": [prom], "serviceAccountName": "prometheus"},
            (system,),
        )
        nginx = {
            "name": "controller",
            "image": "registry.k8s.io/ingress-nginx/controller:v1.13.2",
            "args": ["/nginx-ingress-controller", "--election-id=ingress-nginx-leader"],
            "ports": [
                {"containerPort": 80, "name": "http", "protocol": "TCP"},
                {"containerPort": 443, "name": "https", "protocol": "TCP"},
            ],
            "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}},
        }
        self.deployment(
            "ingress-nginx-controller",
            "ingress-nginx",
            {"app": "ingress-nginx", "app.kubernetes.io/name": "ingress-nginx"},
            6,
            {**critical, "containers": [nginx], "serviceAccountName": "ingress-nginx"},
            (system,),
        )

    def app_deployments(self, namespaces: list[Obj], count: int, pods: int) -> None:
        """`count` Deployments with `pods` pods over the app namespaces (skewed sizes), each with a
        Service; most name one or two other apps' Services in their env."""
        rng = self.rng
        general = next(p for p in POOLS if p.name == "general")
        highmem = next(p for p in POOLS if p.name == "highmem")
        per_ns = _split(count, [rng.lognormvariate(0, 0.6) for _ in namespaces], 1)
        replicas = iter(_split(pods, [rng.lognormvariate(0, 1.2) for _ in range(count)], 1))
        for ns_obj, apps in zip(namespaces, per_ns, strict=True):
            ns = ns_obj["metadata"]["name"]
            team = ns_obj["metadata"]["labels"].get("team", "web")
            for a in range(apps):
                app = f"app-{a}"
                tier = synth.TIERS[a % len(synth.TIERS)]
                labels = {
                    "app": app,
                    "tier": tier,
                    "version": f"v{rng.randint(1, 3)}",
                    "app.kubernetes.io/name": app,
                    "app.kubernetes.io/part-of": team,
                }
                upstreams: list[str] = []
                if apps > 1 and rng.random() < 0.6:
                    for b in rng.sample(
                        [b for b in range(apps) if b != a], min(apps - 1, rng.choice((1, 1, 2)))
                    ):
                        upstreams.append(
                            rng.choice(
                                (f"http://app-{b}:8080", f"http://app-{b}.{ns}.svc.cluster.local:8080")
                            )
                        )
                if rng.random() < 0.05:  # a Service in another namespace
                    other = namespaces[rng.randrange(len(namespaces))]["metadata"]["name"]
                    upstreams.append(f"http://app-0.{other}.svc.cluster.local:8080")
                self.stats.edges_named += len(upstreams)
                containers = [self.container(app, team, tier, a, upstreams)]
                if rng.random() < 0.3:
                    containers.append(
                        {
                            "name": "log-shipper",
                            "image": "fluent/fluent-bit:4.0.8",
                            "resources": {
                                "requests": {"cpu": "50m", "memory": "64Mi"},
                                "limits": {"memory": "128Mi"},
                            },
                            "volumeMounts": [{"mountPath": "/var/log/app", "name": "logs"}],
                        }
                    )
                spec: Obj = {
                    "containers": containers,
                    "serviceAccountName": app,
                    "volumes": [{"name": "logs", "emptyDir": {}}],
                }
                zones: tuple[str, ...] = ZONES
                if rng.random() < 0.3:
                    spec["topologySpreadConstraints"] = zone_spread({"app": app})
                elif rng.random() < 0.05:  # pinned to one zone (next to its data)
                    zone = rng.choice(ZONES)
                    zones = (zone,)
                    spec["affinity"] = {"nodeAffinity": zone_node_affinity(zone)}
                pools: tuple[Pool, ...] = (general,)
                if tier == "db":
                    spec["nodeSelector"] = {"node-pool": "highmem"}
                    pools = (highmem,)
                annotations = scrape_annotations(9090 + a % 3)
                self.deployment(app, ns, labels, next(replicas), spec, pools, zones, annotations)
                self.service(
                    app,
                    ns,
                    {"app": app},
                    [(8080, "http", "TCP", "http"), (9090, "metrics", "TCP", "metrics")],
                    labels={"app": app},
                )

    # -- DaemonSets ------------------------------------------------------------------------

    def daemonset(
        self, name: str, namespace: str, labels: dict[str, str], pod_spec: Obj, gpu_only: bool
    ) -> None:
        template_spec = self.defaulted(pod_spec)
        slots = [s for s in self.slots if s.pool.gpus or not gpu_only]
        ds: Obj = {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": self.meta(name, namespace, labels=dict(labels), generation=3),
            "spec": {
                "revisionHistoryLimit": 10,
                "selector": {"matchLabels": dict(labels)},
                "template": {"metadata": {"labels": dict(labels)}, "spec": template_spec},
                "updateStrategy": {
                    "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "10%"},
                    "type": "RollingUpdate",
                },
            },
            "status": {
                "currentNumberScheduled": len(slots),
                "desiredNumberScheduled": len(slots),
                "numberAvailable": len(slots),
                "numberMisscheduled": 0,
                "numberReady": len(slots),
                "observedGeneration": 3,
                "updatedNumberScheduled": len(slots),
            },
        }
        self.add(ds)
        self.stats.daemonsets += 1
        owner = self.owner(ds)
        pod_labels = {**labels, "controller-revision-hash": self.suffix(10), "pod-template-generation": "3"}
        base = self.pod_spec(template_spec)
        started = self.rng.uniform(86400, 86400 * 30)
        conditions = self.running_conditions(started)
        managed = self.managed_fields(
            pod_labels, base, ds["metadata"]["uid"], "kube-controller-manager", _stamp(started)
        )
        for slot in slots:
            # The DaemonSet controller pins each pod to its node with a matchFields term.
            spec = {
                **base,
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchFields": [
                                        {"key": "metadata.name", "operator": "In", "values": [slot.name]}
                                    ]
                                }
                            ]
                        }
                    }
                },
            }
            self.add(
                self.pod(
                    f"{name}-{self.suffix()}",
                    namespace,
                    pod_labels,
                    owner,
                    spec,
                    slot,
                    conditions=conditions,
                    managed=managed,
                    generate_name=f"{name}-",
                    started=started,
                )
            )
            self.stats.daemonset_pods += 1

    def daemonsets(self) -> None:
        everywhere = [{"operator": "Exists"}]
        self.daemonset(
            "kube-proxy",
            "kube-system",
            {"k8s-app": "kube-proxy"},
            {
                "hostNetwork": True,
                "priorityClassName": "system-node-critical",
                "tolerations": everywhere,
                "serviceAccountName": "kube-proxy",
                "containers": [
                    {
                        "name": "kube-proxy",
                        "image": KUBE_PROXY_IMAGE,
                        "command": ["kube-proxy", "--v=2", "--config=/var/lib/kube-proxy-config/config"],
                        "resources": {"requests": {"cpu": "100m"}},
                        "securityContext": {"privileged": True},
                    }
                ],
            },
            False,
        )
        self.daemonset(
            "node-exporter",
            "monitoring",
            {"app": "node-exporter", "app.kubernetes.io/name": "node-exporter"},
            {
                "hostNetwork": True,
                "hostPID": True,
                "tolerations": everywhere,
                "serviceAccountName": "node-exporter",
                "containers": [
                    {
                        "name": "node-exporter",
                        "image": "quay.io/prometheus/node-exporter:v1.9.1",
                        "args": ["--path.rootfs=/host", "--web.listen-address=:9100"],
                        "ports": [{"containerPort": 9100, "name": "metrics", "protocol": "TCP"}],
                        "resources": {
                            "requests": {"cpu": "50m", "memory": "64Mi"},
                            "limits": {"memory": "128Mi"},
                        },
                    }
                ],
            },
            False,
        )
        self.daemonset(
            "nvidia-device-plugin",
            "kube-system",
            {"app.kubernetes.io/name": "nvidia-device-plugin"},
            {
                "nodeSelector": {"nvidia.com/gpu.present": "true"},
                "priorityClassName": "system-node-critical",
                "tolerations": gpu_tolerations(),
                "containers": [
                    {
                        "name": "nvidia-device-plugin-ctr",
                        "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.4",
                        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                    }
                ],
            },
            True,
        )

    # -- PyTorchJobs -----------------------------------------------------------------------

    def plan_job(self, index: int, ns_obj: Obj, fenced: bool) -> JobPlan:
        """One PyTorchJob: its size, GPU pool, how it is kept in one zone (or not), and the zones
        the scheduler put its pods in."""
        rng = self.rng
        team = ns_obj["metadata"]["labels"]["team"]
        gpu_pools = [p for p in POOLS if p.gpus]
        pool = gpu_pools[0] if rng.random() < 0.7 else gpu_pools[1]
        gpus = rng.choice((8, 8, 8, 8, 8, 4, 4, 4, 2, 1))
        per_node_memory = 1000 if pool.name == "gpu-a100" else 1800
        plan = JobPlan(
            name=f"{rng.choice(KIND['PyTorchJob'].stems)}-{team}-{index:04d}",
            namespace=ns_obj["metadata"]["name"],
            team=team,
            pool=pool,
            workers=rng.choice((1, 1, 2, 3, 3, 4, 7, 7, 15)),
            gpus=gpus,
            cpu=str(max(1, int(pool.cpu) * gpus // 8 - 4)),
            memory=f"{max(16, per_node_memory * gpus // 8)}Gi",
            finished=rng.random() < 0.05,
        )
        style = rng.random()
        if fenced:
            # Zone-fenced namespace: pods carry `zone` and are pinned there; some masters are not.
            plan.pin = plan.master_pin = plan.zone_label = plan.master_label = rng.choice(pool.zones)
            self.stats.fenced_jobs += 1
            if rng.random() < 0.15:
                plan.master_pin = plan.master_label = rng.choice([z for z in pool.zones if z != plan.pin])
                self.stats.stray_masters += 1
        elif style < 0.35:
            plan.pin = plan.master_pin = rng.choice(pool.zones)
            if pool.name == "gpu-h100" and rng.random() < 0.1:
                plan.pin = plan.master_pin = ZONES[2]  # no H100 capacity there
                plan.unschedulable = True
        elif style < 0.55:
            plan.coupling = "affinity"
        elif style < 0.7:
            plan.coupling = "kueue"
        if plan.pin is not None:
            plan.zones = [plan.pin]
        elif plan.coupling == "none" and rng.random() < 0.4:  # nothing keeps it together: split
            plan.zones = rng.sample(list(pool.zones), rng.choice((2, len(pool.zones))))
        else:
            plan.zones = [
                max(pool.zones, key=lambda z: sum(s.gpus_free for s in self.by_pool_zone[(pool.name, z)]))
            ]
        return plan

    def training_template(self, plan: JobPlan, role: str, zone: str | None, label_zone: str | None) -> Obj:
        """world.pods' training template (pinned to `zone`, labelled `label_zone`), defaulted."""
        rng = self.rng
        memory, gpus = plan.memory, str(plan.gpus)
        trainer: Obj = {
            "name": "pytorch",
            "image": KIND["PyTorchJob"].image,
            "command": ["torchrun"],
            "args": [
                f"--nproc-per-node={plan.gpus}",
                "/workspace/train.py",
                "--epochs",
                str(rng.choice((10, 30, 90))),
                "--batch-size",
                str(rng.choice((64, 128, 256))),
            ],
            "env": env_values(
                ("NCCL_DEBUG", "WARN"), ("NCCL_SOCKET_IFNAME", "eth0"), dataset_env(plan.team, plan.name)
            ),
            "ports": [{"containerPort": 23456, "name": "pytorchjob-port", "protocol": "TCP"}],
            "resources": {
                "requests": {"cpu": plan.cpu, "memory": memory, "nvidia.com/gpu": gpus},
                "limits": {"memory": memory, "nvidia.com/gpu": gpus},
            },
            "volumeMounts": [{"mountPath": "/dev/shm", "name": "dshm"}],
        }
        placement = Placement(
            plan.pool,
            selector_style=0,
            toleration_style=0,
            pin_zone=zone,
            zone_label=label_zone,
            pod_affinity=plan.coupling == "affinity",
            kueue_topology=ZONE_KEY if plan.coupling == "kueue" else None,
        )
        template = pod_template(
            plan.name,
            placement,
            [trainer],
            labels={"team": plan.team, "role": role},
            annotations={"sidecar.istio.io/inject": "false"},
            volumes=[dict(SHM_VOLUME)],
            affinity_key=(JOB_NAME, plan.name),
        )
        template["spec"] = self.defaulted(template["spec"], "OnFailure")
        return template

    def pending_message(self, plan: JobPlan) -> str:
        """The scheduler's message on a training pod it could not place."""
        total = len(self.slots)
        in_pool = sum(len(self.by_pool_zone[(plan.pool.name, z)]) for z in plan.pool.zones)
        other = total - in_pool
        if plan.unschedulable:
            return (
                f"0/{total} nodes are available: {other} node(s) didn't match Pod's node affinity/selector, "
                f"{in_pool} node(s) had untolerated taint or didn't match Pod's node affinity/selector. "
                f"preemption: 0/{total} nodes are available: {total} Preemption is not helpful for "
                "scheduling."
            )
        return (
            f"0/{total} nodes are available: {in_pool} Insufficient nvidia.com/gpu, {other} node(s) didn't "
            f"match Pod's node affinity/selector. preemption: 0/{total} nodes are available: {in_pool} No "
            f"preemption victims found for incoming pod, {other} Preemption is not helpful for scheduling."
        )

    def pytorchjob(self, plan: JobPlan) -> Obj:
        """A Kubeflow PyTorchJob (Master ×1, Workers ×n) and its pods, owned by the job and labelled
        by the training operator, with the per-replica headless Services the operator creates."""
        rng = self.rng
        name, ns = plan.name, plan.namespace
        t_master = self.training_template(plan, "master", plan.master_pin, plan.master_label)
        t_worker = self.training_template(plan, "worker", plan.pin, plan.zone_label)
        meta = self.meta(name, ns, 30, labels={"team": plan.team, "kueue.x-k8s.io/queue-name": f"{ns}-queue"})
        if rng.random() < 0.5:
            meta["annotations"] = {
                GRADIENT: str(rng.choice((220_000_000, 700_000_000, 2_800_000_000))),
                STEPS: rng.choice(("4", "2", "0.8")),
            }
        started = rng.uniform(600, 86400 * 5)
        done = plan.finished
        state = "Succeeded" if done else "Running"
        run_policy = {"backoffLimit": 3, "cleanPodPolicy": "None", "suspend": False}  # defaulted
        job = pytorchjob(meta, t_master, t_worker, plan.workers, run_policy)
        job["status"] = {
            "conditions": [
                {
                    "lastTransitionTime": _stamp(started + 30),
                    "lastUpdateTime": _stamp(started + 30),
                    "message": f"PyTorchJob {name} is created.",
                    "reason": "PyTorchJobCreated",
                    "status": "True",
                    "type": "Created",
                },
                {
                    "lastTransitionTime": _stamp(started / 2 if done else started),
                    "lastUpdateTime": _stamp(started / 2 if done else started),
                    "message": f"PyTorchJob {ns}/{name} is {state.lower()}.",
                    "reason": f"PyTorchJob{state}",
                    "status": "True",
                    "type": state,
                },
            ],
            "replicaStatuses": {
                "Master": {"succeeded" if done else "active": 1},
                "Worker": {"succeeded" if done else "active": plan.workers},
            },
            "startTime": _stamp(started),
        }
        self.add(job)
        owner = self.owner(job)
        world = plan.workers + 1
        placed: set[str] = set()
        pending = 0
        replicas = [("master", 0, t_master), *(("worker", i, t_worker) for i in range(plan.workers))]
        for rtype, index, template in replicas:
            rank = index if rtype == "master" else index + 1
            operator = {
                JOB_NAME: name,
                "training.kubeflow.org/operator-name": "pytorchjob-controller",
                "training.kubeflow.org/replica-index": str(index),
                "training.kubeflow.org/replica-type": rtype,
            }
            labels = {**template["metadata"]["labels"], **operator}
            if rtype == "master":
                labels["training.kubeflow.org/job-role"] = "master"
            env = env_values(
                ("MASTER_PORT", "23456"),
                ("PET_MASTER_PORT", "23456"),
                ("MASTER_ADDR", f"{name}-master-0"),
                ("PET_MASTER_ADDR", f"{name}-master-0"),
                ("WORLD_SIZE", str(world)),
                ("PET_NNODES", str(world)),
                ("RANK", str(rank)),
                ("PET_NODE_RANK", str(rank)),
                ("PYTHONUNBUFFERED", "1"),
            )
            tspec = template["spec"]
            container = {**tspec["containers"][0], "env": [*tspec["containers"][0]["env"], *env]}
            spec: Obj = {
                **tspec,
                "containers": [container],
                "hostname": f"{name}-{rtype}-{index}",
                "subdomain": name,
            }
            if rtype == "worker":
                wait = (
                    f"err=1;for i in $(seq 100); do if nslookup {name}-master-0; then err=0 && break; fi;"
                    "echo waiting for master; sleep 2; done; exit $err"
                )
                spec["initContainers"] = [
                    {
                        "name": "init-pytorch",
                        "image": "alpine:3.10",
                        "command": ["sh", "-c", wait],
                        "resources": {
                            "limits": {"cpu": "100m", "memory": "20Mi"},
                            "requests": {"cpu": "50m", "memory": "10Mi"},
                        },
                    }
                ]
            spec = self.pod_spec(self.defaulted(spec, "OnFailure"))
            zone = (plan.master_pin if rtype == "master" else None) or plan.zones[index % len(plan.zones)]
            gpus = 0 if done else plan.gpus
            slot = None if plan.unschedulable else self.pick(plan.pool, zone, gpus)
            if slot is None:
                pending += 1
            else:
                placed.add(slot.zone)
            managed = self.managed_fields(labels, spec, meta["uid"], "training-operator", _stamp(started))
            self.add(
                self.pod(
                    f"{name}-{rtype}-{index}",
                    ns,
                    labels,
                    owner,
                    spec,
                    slot,
                    gpus=gpus,
                    phase="Succeeded" if done and slot is not None else "Running",
                    managed=managed,
                    pending_message=self.pending_message(plan) if slot is None else "",
                    started=started,
                )
            )
            self.service(
                f"{name}-{rtype}-{index}",
                ns,
                operator,
                [(*PYTORCH_PORT, 23456)],
                headless=True,
                owner=owner,
                labels={JOB_NAME: name},
            )
            self.stats.job_pods += 1
        self.stats.jobs += 1
        self.stats.finished_jobs += done
        self.stats.split_jobs += len(placed) > 1
        self.stats.pending_jobs += pending > 0
        return job

    # -- policies --------------------------------------------------------------------------

    def live_policy(self, obj: Obj) -> Obj:
        meta = obj["metadata"]
        meta.update(
            uid=self.uid(),
            resourceVersion=str(self.rng.randrange(10_000_000, 900_000_000)),
            generation=1,
            creationTimestamp=_stamp(self.rng.uniform(3600, 86400 * 200)),
        )
        return obj

    def training_policies(self, namespaces: list[Obj], fenced: set[str], jobs: list[Obj]) -> int:
        """Default deny, DNS and monitoring in every training namespace; per-job allows; and in the
        fenced namespaces zone boundaries on the pod label `zone` instead of per-job allows."""
        made = 0

        def add(policy: Obj) -> None:
            nonlocal made
            made += 1
            self.add(self.live_policy(policy))

        for ns_obj in namespaces:
            ns = ns_obj["metadata"]["name"]
            add(pod_policy("default-deny-all", ns, {}, ["Ingress", "Egress"]))
            add(allow_dns(ns))
            add(
                pod_policy(
                    "allow-monitoring", ns, {}, ["Ingress"], [{"from": [namespace_peer("monitoring")]}]
                )
            )
            if ns in fenced:
                for zone in ZONES:
                    add(peers_only(f"{zone}-only", ns, {"matchLabels": {"zone": zone}}))
        for job in jobs:
            ns = job["metadata"]["namespace"]
            if ns not in fenced:
                sel = {"matchLabels": {JOB_NAME: job["metadata"]["name"]}}
                add(peers_only(f"allow-{job['metadata']['name']}-intra", ns, sel))
        return made

    def app_policies(self, namespaces: list[str], count: int, cilium_share: float) -> None:
        """synth.py's NetworkPolicy shapes (and Cilium policies), spread over the app namespaces."""
        n_cilium = round(count * cilium_share)
        n_np = count - n_cilium
        for i, ns in enumerate(namespaces):
            share = n_np // len(namespaces) + (1 if i < n_np % len(namespaces) else 0)
            for obj in synth.network_policies(ns, i, share, self.rng):
                self.add(self.live_policy(obj))
            cshare = n_cilium // len(namespaces) + (1 if i < n_cilium % len(namespaces) else 0)
            for obj in synth.cilium_policies(ns, cshare):
                self.add(self.live_policy(obj))


def generate(
    nodes: int,
    pods: int,
    policies: int,
    cilium_share: float,
    jobs: int | None,
    deployments: int | None,
    seed: int,
) -> tuple[list[Obj], Stats]:
    b = ClusterBuilder(seed)
    rng = b.rng
    b.nodes(nodes)
    b.cluster_basics(cilium_share > 0)
    # Platform namespaces and their workloads.
    for ns in synth.make_namespaces(0, rng):  # kube-system, monitoring, ingress-nginx
        b.namespace(ns["metadata"]["name"], ns["metadata"]["labels"])
    b.system_workloads()
    ds_pods = nodes * 2 + sum(1 for s in b.slots if s.pool.gpus)
    if ds_pods <= pods // 5:
        b.daemonsets()
    # Training namespaces and PyTorchJobs.
    job_count = jobs if jobs is not None else max(1, pods // 500)
    train_ns = [
        b.namespace(
            f"train-{synth.TEAMS[k % len(synth.TEAMS)]}-{k // len(synth.TEAMS)}",
            {"team": synth.TEAMS[k % len(synth.TEAMS)], "env": "prod", "purpose": "training"},
        )
        for k in range(max(1, round(job_count / 15)))
    ]
    fenced = {ns["metadata"]["name"] for k, ns in enumerate(train_ns) if k % 5 == 1}
    job_objs = []
    for j in range(job_count):
        ns_obj = train_ns[j % len(train_ns)]
        job_objs.append(b.pytorchjob(b.plan_job(j, ns_obj, ns_obj["metadata"]["name"] in fenced)))
    # App namespaces and Deployments fill the rest of the pods.
    app_pods = max(0, pods - b.stats.deployment_pods - b.stats.daemonset_pods - b.stats.job_pods)
    dep_count = (deployments if deployments is not None else max(1, round(pods / 60))) - b.stats.deployments
    dep_count = max(1, min(dep_count, app_pods))
    ns_count = max(1, min(dep_count, round(app_pods / synth.PODS_PER_NAMESPACE)))
    app_ns = []
    for ns in synth.make_namespaces(ns_count, rng)[:ns_count]:
        app_ns.append(b.namespace(ns["metadata"]["name"], ns["metadata"]["labels"]))
    if app_pods:
        b.app_deployments(app_ns, dep_count, app_pods)
    # Policies: training namespaces first, synth shapes for the rest.
    made = b.training_policies(train_ns, fenced, job_objs)
    b.app_policies([n["metadata"]["name"] for n in app_ns], max(0, policies - made), cilium_share)
    return b.objects, b.stats
