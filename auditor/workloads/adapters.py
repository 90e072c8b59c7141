"""Adapters from workload manifests to roles, one function per kind, listed explicitly below.

Each role carries the labels its controller or operator adds to the pods, because policies
select on them (`job-name`, `training.kubeflow.org/replica-type`, ...).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from auditor import yamlio
from auditor.model.objects import (
    Annotations,
    Claim,
    OperatorOptions,
    ReplicaLabel,
    Role,
    Workload,
    WorkloadRef,
    freeze_labels,
)
from auditor.reachability import specs
from auditor.reachability.endpoints import parse_ip
from auditor.workloads import operators, replicas
from auditor.workloads.operators import replica_count, source_of
from auditor.workloads.podspec import parse_pod, parse_pod_template

Adapter = Callable[[Mapping[str, Any], WorkloadRef], list[Role]]


def _pod(obj: Mapping[str, Any], ref: WorkloadRef) -> list[Role]:
    meta = specs.mapping(obj.get("metadata"), "metadata")
    spec = specs.mapping(obj.get("spec"), "spec")
    template = parse_pod(meta, spec, "")
    status = specs.mapping(obj.get("status"), "status")
    ips = [
        str(p.get("ip")) for p in specs.seq(status.get("podIPs"), "status.podIPs") if isinstance(p, Mapping)
    ]
    if not ips and status.get("podIP"):
        ips = [str(status["podIP"])]
    for i, ip in enumerate(ips):
        try:
            parse_ip(ip)
        except ValueError:
            raise specs.PolicyError(f"status.podIPs[{i}]", f"{ip!r} is not an IP address") from None
    template = dataclasses.replace(template, pod_ips=tuple(ips))
    return [Role(ref, ref.name, 1, template, ref.source)]


def _single_template(replicas_field: str | None, default_replicas: int) -> Adapter:
    """Kinds with one `spec.template` (Deployment, StatefulSet, DaemonSet, ...)."""

    def adapt(obj: Mapping[str, Any], ref: WorkloadRef) -> list[Role]:
        spec = specs.mapping(obj.get("spec"), "spec")
        replicas = default_replicas
        if replicas_field:
            replicas = replica_count(spec.get(replicas_field), f"spec.{replicas_field}", default_replicas)
        claims = specs.seq(spec.get("volumeClaimTemplates"), "spec.volumeClaimTemplates")
        template = parse_pod_template(spec.get("template"), "spec.template")
        if claims:
            mounted = _claim_volumes(claims, ref.name, ref.kind == "StatefulSet")
            template = dataclasses.replace(template, claims=(*template.claims, *mounted))
        return [Role(ref, ref.name, replicas, template, ref.source, _per_pod_labels(ref, spec))]

    return adapt


def _per_pod_labels(ref: WorkloadRef, spec: Mapping[str, Any]) -> tuple[ReplicaLabel, ...]:
    """A StatefulSet's pods are <set>-<ordinal>, ordinals from `spec.ordinals.start` (default 0)."""
    if ref.kind != "StatefulSet":
        return ()
    ordinals = specs.mapping(spec.get("ordinals"), "spec.ordinals")
    start = replica_count(ordinals.get("start"), "spec.ordinals.start", 0)
    return (
        ReplicaLabel(replicas.POD_NAME, f"{ref.name}-", offset=start),
        ReplicaLabel(replicas.POD_INDEX, offset=start, since=replicas.POD_INDEX_LABEL_SINCE),
    )


def _claim_volumes(claims: list[Any], owner: str, provisioned: bool) -> list[Claim]:
    """The StatefulSet controller mounts one claim per template and replica (<template>-<set>-<ordinal>),
    `provisioned` from the template's storage class; the scheduler's volume filters see them."""
    out = []
    for claim in claims:
        if not isinstance(claim, Mapping):
            continue
        name = str((claim.get("metadata") or {}).get("name", ""))
        spec = claim.get("spec")
        storage_class = spec.get("storageClassName") if isinstance(spec, Mapping) else None
        if name:
            out.append(Claim(f"{name}-{owner}", str(storage_class or "") if provisioned else None))
    return out


def _job(obj: Mapping[str, Any], ref: WorkloadRef) -> list[Role]:
    spec = specs.mapping(obj.get("spec"), "spec")
    parallelism = spec.get("parallelism")
    completions = spec.get("completions")
    count = replica_count(parallelism if parallelism is not None else completions, "spec.parallelism", 1)
    if completions is not None:
        count = min(count, replica_count(completions, "spec.completions", 1))
    labels = {"job-name": ref.name, "batch.kubernetes.io/job-name": ref.name}
    template = parse_pod_template(spec.get("template"), "spec.template", labels)
    indexed = spec.get("completionMode") == "Indexed"
    per_pod = (
        (ReplicaLabel(replicas.COMPLETION_INDEX, since=replicas.POD_INDEX_LABEL_SINCE),) if indexed else ()
    )
    return [Role(ref, ref.name, count, template, ref.source, per_pod)]


def _cronjob(obj: Mapping[str, Any], ref: WorkloadRef) -> list[Role]:
    spec = specs.mapping(obj.get("spec"), "spec")
    job_template = specs.mapping(spec.get("jobTemplate"), "spec.jobTemplate")
    job_spec = specs.mapping(job_template.get("spec"), "spec.jobTemplate.spec")
    count = replica_count(job_spec.get("parallelism"), "spec.jobTemplate.spec.parallelism", 1)
    template = parse_pod_template(job_spec.get("template"), "spec.jobTemplate.spec.template", {})
    return [Role(ref, ref.name, count, template, ref.source)]


# Kubeflow training operator kinds: field holding the replica specs, and pod label conventions.
KUBEFLOW_REPLICA_SPECS = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "PaddleJob": "paddleReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
}


def _kubeflow(obj: Mapping[str, Any], ref: WorkloadRef) -> list[Role]:
    key = KUBEFLOW_REPLICA_SPECS[ref.kind]
    spec = specs.mapping(obj.get("spec"), "spec")
    replica_specs = specs.mapping(spec.get(key), f"spec.{key}", optional=False)
    roles = []
    for rtype, rspec in replica_specs.items():
        field = f"spec.{key}.{rtype}"
        body = specs.mapping(rspec, field)
        extra = {
            "training.kubeflow.org/job-name": ref.name,
            "training.kubeflow.org/operator-name": _operator(ref.kind),
            "training.kubeflow.org/replica-type": str(rtype).lower(),
        }
        if str(rtype).lower() in ("master", "chief", "launcher"):
            extra["training.kubeflow.org/job-role"] = "master"
        template = parse_pod_template(body.get("template"), f"{field}.template", extra)
        count = replica_count(body.get("replicas"), f"{field}.replicas", 1)
        per_pod = (ReplicaLabel(replicas.KUBEFLOW_INDEX),)
        roles.append(Role(ref, str(rtype), count, template, source_of(rspec, ref), per_pod))
    return roles


def _operator(kind: str) -> str:
    return {"MPIJob": "mpijob-controller"}.get(kind, f"{kind.lower().removesuffix('job')}job-controller")


ADAPTERS: dict[str, Adapter] = {
    "Pod": _pod,
    "Deployment": _single_template("replicas", 1),
    "ReplicaSet": _single_template("replicas", 1),
    "ReplicationController": _single_template("replicas", 1),
    "StatefulSet": _single_template("replicas", 1),
    "DaemonSet": _single_template(None, 1),
    "Job": _job,
    "CronJob": _cronjob,
    **dict.fromkeys(KUBEFLOW_REPLICA_SPECS, _kubeflow),
    "JobSet": operators.jobset,
    "RayCluster": operators.raycluster,
    "RayJob": operators.rayjob,
    "LeaderWorkerSet": operators.leaderworkerset,
}
# Kinds whose adapter needs other objects (TrainJob reads its runtime) or shares a kind name.
CONTEXT_KINDS = ("TrainJob",)
VOLCANO_API = "batch.volcano.sh/v1alpha1"


def adapt(
    obj: Mapping[str, Any],
    ref: WorkloadRef,
    runtimes: Mapping[tuple[str, str, str], Mapping[str, Any]] | None = None,
) -> Workload:
    meta = specs.mapping(obj.get("metadata"), "metadata")
    if ref.kind == "TrainJob":
        roles = operators.trainjob(obj, ref, runtimes or {})
    elif ref.kind == "Job" and ref.api_version == VOLCANO_API:
        roles = operators.volcano_job(obj, ref)
    else:
        roles = ADAPTERS[ref.kind](obj, ref)
    return Workload(
        ref,
        freeze_labels(specs.mapping(meta.get("labels"), "metadata.labels")),
        tuple(roles),
        _annotations(meta.get("annotations")),
        _options(ref, obj.get("spec")),
    )


def _annotations(raw: Any) -> Annotations:
    if not isinstance(raw, Mapping):
        return Annotations()
    return Annotations(
        tuple((str(k), None if v is None else str(v)) for k, v in raw.items()),
        tuple((k, yamlio.key_line(raw, k)) for k in raw if isinstance(k, str) and yamlio.key_line(raw, k)),
        yamlio.line_of(raw),
    )


def _options(ref: WorkloadRef, spec: Any) -> OperatorOptions:
    """The spec fields the built-in edges of the workload's kind read (workloads/edges.py)."""
    spec = spec if isinstance(spec, Mapping) else {}
    if ref.kind == "PyTorchJob" and spec.get("elasticPolicy") is not None:
        elastic = spec.get("elasticPolicy")
        rdzv = elastic.get("rdzvPort") if isinstance(elastic, Mapping) else None
        try:
            return OperatorOptions(elastic=True, rdzv_port=int(rdzv) if rdzv else None)
        except (TypeError, ValueError):
            raise specs.PolicyError("spec.elasticPolicy.rdzvPort", f"must be a port, got {rdzv!r}") from None
    if ref.kind in ("RayCluster", "RayJob"):
        cluster = spec.get("rayClusterSpec", spec) if ref.kind == "RayJob" else spec
        head = cluster.get("headGroupSpec") if isinstance(cluster, Mapping) else None
        params = head.get("rayStartParams") if isinstance(head, Mapping) else None
        port = str(params.get("port", "")) if isinstance(params, Mapping) else ""
        return OperatorOptions(ray_port=int(port) if port.isascii() and port.isdigit() else None)
    coordinator = spec.get("coordinator")
    if ref.kind == "JobSet" and isinstance(coordinator, Mapping):
        return OperatorOptions(coordinator=str(coordinator.get("replicatedJob", "")))
    if ref.kind == "Job" and ref.api_version.startswith("batch.volcano.sh/"):
        plugins = spec.get("plugins")
        return OperatorOptions(
            plugins=tuple((str(name), _plugin_args(args)) for name, args in plugins.items())
            if isinstance(plugins, Mapping)
            else (),
            network_topology=_network_topology(spec.get("networkTopology")),
        )
    return OperatorOptions()


def _network_topology(raw: Any) -> tuple[str, int]:
    """A Volcano Job's spec.networkTopology as (mode, highestTierAllowed or -1)."""
    if raw is None:
        return ("", -1)
    body = specs.mapping(raw, "spec.networkTopology")
    mode = str(body.get("mode") or "hard")
    if mode not in ("hard", "soft"):
        raise specs.PolicyError("spec.networkTopology.mode", f"must be hard or soft, got {mode!r}")
    tier = body.get("highestTierAllowed")
    if tier is None:
        return (mode, -1)
    return (mode, specs.integer(tier, "spec.networkTopology.highestTierAllowed", 0, 1_000_000))


def _plugin_args(args: Any) -> tuple[tuple[str, str], ...]:
    """A Volcano job plugin's `--key=value` arguments."""
    out: list[tuple[str, str]] = []
    for arg in args if isinstance(args, list) else []:
        key, _, value = str(arg).partition("=")
        if key.startswith("--") and value:
            out.append((key[2:], value))
    return tuple(out)
