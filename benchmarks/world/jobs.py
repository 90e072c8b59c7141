"""The training job kinds both synthetic worlds run: per kind its API version, image, the label
every pod of a job carries (what an intra-job policy selects), the stems job names are made of and
its share of gen_repo.py's jobs; and the pieces of a job both worlds write alike (a replica spec,
the Kubeflow rendezvous port, a PyTorchJob of a Master and Workers).

gen_repo.py writes every kind as a manifest; world.cluster runs PyTorchJobs with the status, pods
and Services the training operator adds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from world.objects import manifest
from world.vocabulary import JOB_NAME

Obj = dict[str, Any]

PYTORCH_PORT = (23456, "pytorchjob-port", "TCP")  # the training operator's default
PYTORCH_IMAGE = "nvcr.io/nvidia/pytorch:25.08-py3"


@dataclass(frozen=True)
class TrainingKind:
    kind: str
    api_version: str
    image: str
    job_label: str  # the pods' label naming their job
    stems: tuple[str, ...]
    share: int  # weight among gen_repo.py's jobs


KINDS = (
    TrainingKind(
        "PyTorchJob",
        "kubeflow.org/v1",
        PYTORCH_IMAGE,
        JOB_NAME,
        ("resnet", "bert", "llama-ft", "vit", "whisper", "dlrm", "t5", "gpt-neox", "clip", "detr"),
        22,
    ),
    TrainingKind(
        "TFJob",
        "kubeflow.org/v1",
        "tensorflow/tensorflow:2.19.0-gpu",
        JOB_NAME,
        ("mnist", "wide-deep", "efficientnet", "transformer"),
        8,
    ),
    TrainingKind(
        "MPIJob",
        "kubeflow.org/v2beta1",
        "mpioperator/tensorflow-benchmarks:latest",
        JOB_NAME,
        ("horovod-resnet", "nccl-tests", "allreduce-bench", "hpl"),
        10,
    ),
    TrainingKind(
        "XGBoostJob",
        "kubeflow.org/v1",
        "docker.io/kubeflow/xgboost-dist-iris:latest",
        JOB_NAME,
        ("xgb-ctr", "xgb-churn", "xgb-fraud"),
        4,
    ),
    TrainingKind(
        "JobSet",
        "jobset.x-k8s.io/v1alpha2",
        PYTORCH_IMAGE,
        "jobset.sigs.k8s.io/jobset-name",
        ("jax-pretrain", "maxtext", "resnet-cifar", "megatron"),
        14,
    ),
    TrainingKind(
        "TrainJob",
        "trainer.kubeflow.org/v1alpha1",
        "pytorch/pytorch:2.8.0-cuda12.8-cudnn9-runtime",
        "jobset.sigs.k8s.io/jobset-name",
        ("llama-sft", "mistral-lora", "qwen-dpo", "gemma-ft"),
        12,
    ),
    TrainingKind(
        "RayJob",
        "ray.io/v1",
        "rayproject/ray:2.49.1-py311-gpu",
        "app",
        ("ray-tune", "ray-train", "ray-data-prep", "ray-rl"),
        8,
    ),
    TrainingKind(
        "LeaderWorkerSet",
        "leaderworkerset.x-k8s.io/v1",
        "vllm/vllm-openai:v0.10.1",
        "leaderworkerset.sigs.k8s.io/name",
        ("vllm-70b", "sglang-405b", "vllm-mixtral"),
        8,
    ),
    # A coordinator Deployment + Service + a worker Job that dials it.
    TrainingKind(
        "Pair", "batch/v1", PYTORCH_IMAGE, "app", ("trainer", "seq2seq", "ctr-model", "speech-ft"), 14
    ),
)
KIND = {k.kind: k for k in KINDS}


def replica(replicas: int, template: Obj, restart: str | None = None) -> Obj:
    """One entry of a Kubeflow job's replica specs."""
    spec: Obj = {"replicas": replicas}
    if restart:
        spec["restartPolicy"] = restart
    spec["template"] = template
    return spec


def pytorchjob(meta: Obj, master: Obj, worker: Obj, workers: int, run_policy: Obj) -> Obj:
    """A PyTorchJob of one Master and `workers` Workers, restarted on failure."""
    specs = {"Master": replica(1, master, "OnFailure"), "Worker": replica(workers, worker, "OnFailure")}
    spec = {"runPolicy": run_policy, "pytorchReplicaSpecs": specs}
    return manifest(KIND["PyTorchJob"].api_version, "PyTorchJob", meta, spec=spec)
