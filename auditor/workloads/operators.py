"""Adapters for operator kinds built from JobSet-like templates: JobSet, TrainJob (through its
(Cluster)TrainingRuntime and runtime patches), RayCluster/RayJob, LeaderWorkerSet, Volcano Job.

Each role carries the labels and annotations the operator puts on its pods, because policies and
placement read them (`jobset.sigs.k8s.io/*`, `ray.io/*`, `leaderworkerset.sigs.k8s.io/*`,
`volcano.sh/*`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from auditor.model.objects import ReplicaLabel, Role, WorkloadRef
from auditor.model.source import SourceRef
from auditor.reachability import specs
from auditor.reachability.specs import PolicyError
from auditor.workloads import replicas
from auditor.workloads.podspec import parse_pod_template

EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
RJOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
RJOB_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
LWS_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/exclusive-topology"
LWS_SUBGROUP_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"
LWS_SUBGROUP_SIZE = "leaderworkerset.sigs.k8s.io/subgroup-size"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"


def replica_count(raw: Any, field: str, default: int = 1) -> int:
    """A replica (or size) count, 0 to 1,000,000; `default` when the field is absent."""
    return default if raw is None else specs.integer(raw, field, 0, 1_000_000)


def source_of(node: Any, ref: WorkloadRef) -> SourceRef:
    """Where a part of the workload's manifest starts (the workload's own line when unknown)."""
    return SourceRef(ref.source.file, int(getattr(node, "line", ref.source.line)), ref.source.document)


def job_count(role: Role) -> int:
    """The child Jobs of a JobSet role's replicated job (its `replicatedjob-replicas` label)."""
    text = role.template.label_map.get(RJOB_REPLICAS, "1")
    return int(text) if text.isdigit() else 1


def _with_annotations(template: Any, extra: Mapping[str, str]) -> dict[str, Any]:
    """A copy of a pod template with annotations added (what a controller propagates)."""
    body = dict(template) if isinstance(template, Mapping) else {}
    meta = dict(body.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), **extra}
    body["metadata"] = meta
    return body


def jobset_roles(
    spec: Mapping[str, Any],
    ref: WorkloadRef,
    annotations: Mapping[str, str],
    field: str = "spec",
    pod_counts: Mapping[str, int] | None = None,
) -> list[Role]:
    """One role per replicatedJob: jobs (replicas) × pods per job (parallelism)."""
    name = ref.name
    exclusive = annotations.get(EXCLUSIVE, "")
    roles = []
    jobs_before = 0  # child jobs of the earlier replicated jobs: job-global-index counts across them
    for i, rjob in enumerate(specs.seq(spec.get("replicatedJobs"), f"{field}.replicatedJobs")):
        rf = f"{field}.replicatedJobs[{i}]"
        body = specs.mapping(rjob, rf)
        rname = specs.string(body.get("name"), f"{rf}.name")
        jobs = replica_count(body.get("replicas"), f"{rf}.replicas", 1)
        job_template = specs.mapping(body.get("template"), f"{rf}.template")
        job_meta = specs.mapping(job_template.get("metadata"), f"{rf}.template.metadata")
        job_spec = specs.mapping(job_template.get("spec"), f"{rf}.template.spec")
        parallelism = replica_count(job_spec.get("parallelism"), f"{rf}.template.spec.parallelism", 1)
        completions = job_spec.get("completions")
        if completions is not None:
            parallelism = min(parallelism, replica_count(completions, f"{rf}.template.spec.completions", 1))
        if pod_counts and rname in pod_counts:
            parallelism = pod_counts[rname]
        job_annotations = {str(k): str(v) for k, v in (job_meta.get("annotations") or {}).items()}
        extra_annotations = (
            {EXCLUSIVE: job_annotations.get(EXCLUSIVE, exclusive)}
            if (job_annotations.get(EXCLUSIVE) or exclusive)
            else {}
        )
        template = job_spec.get("template")
        if extra_annotations:
            template = _with_annotations(template, extra_annotations)
        labels = {JOBSET_LABEL: name, RJOB_LABEL: rname, RJOB_REPLICAS: str(jobs)}
        pod_template = parse_pod_template(template, f"{rf}.template.spec.template", labels)
        per_pod = _jobset_pod_labels(name, rname, jobs, parallelism, jobs_before, job_spec)
        jobs_before += jobs
        roles.append(Role(ref, rname, jobs * parallelism, pod_template, source_of(rjob, ref), per_pod))
    if not roles:
        raise PolicyError(f"{field}.replicatedJobs", "must list at least one replicated job")
    return roles


def _jobset_pod_labels(
    jobset_name: str, rjob: str, jobs: int, pods: int, jobs_before: int, job_spec: Mapping[str, Any]
) -> tuple[ReplicaLabel, ...]:
    """Replica i of a replicated job is pod i % pods of child job i // pods, named
    <jobset>-<rjob>-<job>; child jobs are Indexed unless their spec says otherwise."""
    job = f"{jobset_name}-{rjob}-"
    pods = max(pods, 1)
    out = [
        ReplicaLabel(replicas.JOB_INDEX, stride=pods, period=jobs),
        ReplicaLabel(replicas.JOB_GLOBAL_INDEX, stride=pods, period=jobs, offset=jobs_before),
        ReplicaLabel("job-name", job, stride=pods, period=jobs),
        ReplicaLabel("batch.kubernetes.io/job-name", job, stride=pods, period=jobs),
    ]
    if job_spec.get("completionMode", "Indexed") == "Indexed":
        out.append(ReplicaLabel(replicas.COMPLETION_INDEX, period=pods, since=replicas.POD_INDEX_LABEL_SINCE))
    return tuple(out)


def _annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    meta = specs.mapping(obj.get("metadata"), "metadata")
    return {str(k): str(v) for k, v in specs.mapping(meta.get("annotations"), "metadata.annotations").items()}


def jobset(obj: Mapping[str, Any], ref: WorkloadRef) -> list[Role]:
    return jobset_roles(specs.mapping(obj.get("spec"), "spec", optional=False), ref, _annotations(obj))


def _merge(base: Any, patch: Any) -> Any:
    """Strategic-merge-like: mappings merge, lists of named items merge by name, else replace."""
    if isinstance(base, Mapping) and isinstance(patch, Mapping):
        out = dict(base)
        for k, v in patch.items():
            out[k] = _merge(base.get(k), v) if k in base else v
        return out
    if (
        isinstance(base, list)
        and isinstance(patch, list)
        and all(isinstance(x, Mapping) and "name" in x for x in (*base, *patch))
    ):
        merged = {x["name"]: x for x in base}
        for x in patch:
            merged[x["name"]] = _merge(merged.get(x["name"], {}), x)
        return list(merged.values())
    return patch


def trainjob(
    obj: Mapping[str, Any], ref: WorkloadRef, runtimes: Mapping[tuple[str, str, str], Mapping[str, Any]]
) -> list[Role]:
    """TrainJob → its runtime's JobSet template, with numNodes and runtimePatches applied."""
    spec = specs.mapping(obj.get("spec"), "spec", optional=False)
    rref = specs.mapping(spec.get("runtimeRef"), "spec.runtimeRef", optional=False)
    kind = str(rref.get("kind") or "ClusterTrainingRuntime")
    rname = specs.string(rref.get("name"), "spec.runtimeRef.name")
    runtime = runtimes.get((kind, "" if kind == "ClusterTrainingRuntime" else ref.namespace, rname))
    if runtime is None:
        raise PolicyError("spec.runtimeRef.name", f"{kind} {rname!r} is not among the scanned manifests")
    rspec = specs.mapping(runtime.get("spec"), f"{kind} {rname}: spec")
    template = specs.mapping(rspec.get("template"), f"{kind} {rname}: spec.template")
    for i, patch in enumerate(specs.seq(spec.get("runtimePatches"), "spec.runtimePatches")):
        pbody = specs.mapping(patch, f"spec.runtimePatches[{i}]")
        trs = specs.mapping(pbody.get("trainingRuntimeSpec"), f"spec.runtimePatches[{i}].trainingRuntimeSpec")
        if trs.get("template") is not None:
            template = _merge(template, trs["template"])
    trainer = specs.mapping(spec.get("trainer"), "spec.trainer")
    ml = specs.mapping(rspec.get("mlPolicy"), f"{kind} {rname}: spec.mlPolicy")
    nodes = replica_count(trainer.get("numNodes", ml.get("numNodes")), "spec.trainer.numNodes", 1)
    jobset_spec = specs.mapping(template.get("spec"), f"{kind} {rname}: spec.template.spec")
    meta = specs.mapping(template.get("metadata"), f"{kind} {rname}: spec.template.metadata")
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    roles = jobset_roles(
        jobset_spec, ref, annotations, f"{kind} {rname}: spec.template.spec", {"node": nodes}
    )
    extra = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    extra["trainer.kubeflow.org/trainjob-name"] = ref.name
    return [_relabel(r, extra) for r in roles]


def _relabel(role: Role, extra: Mapping[str, str]) -> Role:
    labels = dict(role.template.labels)
    for k, v in extra.items():
        labels.setdefault(k, v)
    return dataclasses.replace(
        role, template=dataclasses.replace(role.template, labels=tuple(sorted(labels.items())))
    )


def _ray_roles(cluster_spec: Mapping[str, Any], ref: WorkloadRef, cluster: str, field: str) -> list[Role]:
    head = specs.mapping(cluster_spec.get("headGroupSpec"), f"{field}.headGroupSpec", optional=False)
    labels = {"ray.io/cluster": cluster, "ray.io/node-type": "head", "ray.io/group": "headgroup"}
    template = parse_pod_template(head.get("template"), f"{field}.headGroupSpec.template", labels)
    roles = [Role(ref, "head", 1, template, source_of(head, ref))]
    for i, group in enumerate(specs.seq(cluster_spec.get("workerGroupSpecs"), f"{field}.workerGroupSpecs")):
        gf = f"{field}.workerGroupSpecs[{i}]"
        body = specs.mapping(group, gf)
        gname = str(body.get("groupName") or f"group-{i}")
        replicas = replica_count(body.get("replicas", body.get("minReplicas")), f"{gf}.replicas", 1)
        labels = {"ray.io/cluster": cluster, "ray.io/node-type": "worker", "ray.io/group": gname}
        template = parse_pod_template(body.get("template"), f"{gf}.template", labels)
        roles.append(Role(ref, gname, replicas, template, source_of(group, ref)))
    return roles


def raycluster(obj: Mapping[str, Any], ref: WorkloadRef) -> list[Role]:
    return _ray_roles(specs.mapping(obj.get("spec"), "spec", optional=False), ref, ref.name, "spec")


def rayjob(obj: Mapping[str, Any], ref: WorkloadRef) -> list[Role]:
    spec = specs.mapping(obj.get("spec"), "spec", optional=False)
    if spec.get("rayClusterSpec") is None:
        raise PolicyError(
            "spec.rayClusterSpec", "is required (clusterSelector jobs run on another RayCluster)"
        )
    return _ray_roles(
        specs.mapping(spec.get("rayClusterSpec"), "spec.rayClusterSpec"), ref, ref.name, "spec.rayClusterSpec"
    )


def leaderworkerset(obj: Mapping[str, Any], ref: WorkloadRef) -> list[Role]:
    spec = specs.mapping(obj.get("spec"), "spec", optional=False)
    groups = replica_count(spec.get("replicas"), "spec.replicas", 1)
    lwt = specs.mapping(spec.get("leaderWorkerTemplate"), "spec.leaderWorkerTemplate", optional=False)
    size = replica_count(lwt.get("size"), "spec.leaderWorkerTemplate.size", 1)
    labels = {"leaderworkerset.sigs.k8s.io/name": ref.name}
    # The LWS pod webhook turns these into pod (anti-)affinity on the key; placement reads them
    # from the pods' annotations, as it does JobSet's.
    own = _annotations(obj)
    placement = {k: own[k] for k in (LWS_EXCLUSIVE, LWS_SUBGROUP_EXCLUSIVE) if own.get(k)}
    policy = specs.mapping(lwt.get("subGroupPolicy"), "spec.leaderWorkerTemplate.subGroupPolicy")
    if policy.get("subGroupSize") is not None:
        subgroup = replica_count(
            policy.get("subGroupSize"), "spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize", 1
        )
        placement[LWS_SUBGROUP_SIZE] = str(subgroup)
    if placement:
        placement[LWS_SIZE] = str(size)
    worker_raw = lwt.get("workerTemplate")
    leader_raw = lwt.get("leaderTemplate") or worker_raw
    leader = parse_pod_template(
        _with_annotations(leader_raw, placement) if placement else leader_raw,
        "spec.leaderWorkerTemplate.leaderTemplate",
        {**labels, "leaderworkerset.sigs.k8s.io/worker-index": "0"},
    )
    # Leaders are the pods <lws>-<group> of one StatefulSet; workers <lws>-<group>-<1..size-1>.
    leader_labels = (
        ReplicaLabel(replicas.LWS_GROUP_INDEX),
        ReplicaLabel(replicas.POD_NAME, f"{ref.name}-"),
    )
    roles = [Role(ref, "leader", groups, leader, source_of(leader_raw, ref), leader_labels)]
    if size > 1:
        worker = parse_pod_template(
            _with_annotations(worker_raw, placement) if placement else worker_raw,
            "spec.leaderWorkerTemplate.workerTemplate",
            labels,
        )
        worker_labels = (
            ReplicaLabel(replicas.LWS_GROUP_INDEX, stride=size - 1),
            ReplicaLabel(replicas.LWS_WORKER_INDEX, period=size - 1, offset=1),
        )
        roles.append(
            Role(ref, "worker", groups * (size - 1), worker, source_of(worker_raw, ref), worker_labels)
        )
    return roles


def volcano_job(obj: Mapping[str, Any], ref: WorkloadRef) -> list[Role]:
    spec = specs.mapping(obj.get("spec"), "spec", optional=False)
    roles = []
    for i, task in enumerate(specs.seq(spec.get("tasks"), "spec.tasks")):
        tf = f"spec.tasks[{i}]"
        body = specs.mapping(task, tf)
        tname = specs.string(body.get("name"), f"{tf}.name")
        labels = {"volcano.sh/job-name": ref.name, "volcano.sh/task-spec": tname}
        template = parse_pod_template(body.get("template"), f"{tf}.template", labels)
        count = replica_count(body.get("replicas"), f"{tf}.replicas", 1)
        per_pod = (ReplicaLabel(replicas.VOLCANO_INDEX),)
        roles.append(Role(ref, tname, count, template, source_of(task, ref), per_pod))
    if not roles:
        raise PolicyError("spec.tasks", "must list at least one task")
    return roles
