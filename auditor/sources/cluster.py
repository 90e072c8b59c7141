"""Live clusters and snapshots of them: what the reader saw, as documents for the inventory.

`auditor cluster` audits the objects read from the API server; `auditor snapshot` writes the
same objects to one YAML file (a `ClusterSnapshot` header, then a `List`) that `auditor scan FILE`
audits offline with the same findings. A snapshot leaves the cluster, so it carries only what the
audit reads (`reduce_for_snapshot`; which annotations, env values, words and volume fields:
docs/cluster.md, "What a snapshot keeps"), never a Secret nor a ConfigMap but `cilium-config`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from auditor import yamlio
from auditor.inventory import Inventory
from auditor.model.source import LoadError, SourceRef
from auditor.settings.config import Settings
from auditor.sources.kubeapi import ClusterRead, Reader, ReadOptions
from auditor.sources.objects import SNAPSHOT_KIND, build_inventory
from auditor.workloads import dataports

SNAPSHOT_API_VERSION = "placement-auditor.io/v1alpha1"


def allowed(obj: Mapping[str, Any]) -> bool:
    """Never a Secret; of the ConfigMaps only cilium-config."""
    kind = obj.get("kind")
    if kind == "Secret":
        return False
    if kind == "ConfigMap":
        meta = obj.get("metadata")
        return isinstance(meta, Mapping) and meta.get("name") == "cilium-config"
    return True


# Annotations the audit reads (placement, coupling, edges, cost, waivers, replica indexes).
AUDITED_ANNOTATIONS: tuple[str, ...] = (
    "placement-auditor.io/",
    "kueue.x-k8s.io/",
    "alpha.jobset.sigs.k8s.io/",
    "jobset.sigs.k8s.io/",
    "leaderworkerset.sigs.k8s.io/",
    "volcano.sh/",
    "batch.kubernetes.io/job-completion-index",
)
# Environment variables whose value the audit reads as such (a port or a port count).
AUDITED_ENV = frozenset(
    {
        "MASTER_PORT",
        "PET_MASTER_PORT",
        f"OMPI_MCA_{dataports.OMPI_PORT_MIN}",
        f"OMPI_MCA_{dataports.OMPI_PORT_RANGE}",
    }
)
_MCA_KEPT = frozenset({dataports.OMPI_PORT_MIN, dataports.OMPI_PORT_RANGE})
_CONTAINER_KEYS = ("name", "ports", "resources", "restartPolicy")
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
# The tokenisers of auditor/workloads/edges.py: a host[:port], and a run that can be a pod name.
_HOST = re.compile(
    r"(?<![\w.-])([a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*)(?::(\d+))?(?![\w-])",
    re.IGNORECASE,
)
_POD_RUN = re.compile(r"(?<![\w-])[a-z0-9-]+-\d+-\d+(?![\w-])")


class _Referents:
    """What a text may name that the audit turns into an edge: Service DNS names, pod names."""

    def __init__(self, objects: Iterable[Mapping[str, Any]]) -> None:
        self.hosts: set[str] = set()
        self.owners: set[str] = set()
        for obj in objects:
            meta = obj.get("metadata")
            if not isinstance(meta, Mapping) or not meta.get("name"):
                continue
            name, ns = str(meta["name"]), str(meta.get("namespace") or "")
            if obj.get("kind") == "Service":
                self.hosts.update(
                    {name.lower(), f"{name}.{ns}", f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local"}
                )
            else:
                self.owners.add(f"{name}-")

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where the text names something an edge is derived from (character spans)."""
        hosts = [(m.start(), m.end(), m.group(1).lower()) for m in _HOST.finditer(text)]
        found = [(start, end) for start, end, host in hosts if host in self.hosts]
        for m in _POD_RUN.finditer(text):
            if not m.group(0).startswith(tuple(self.owners)):
                continue
            # The whole host the pod name is part of, so Service lookups see the same token.
            around = next(((a, b) for a, b, _ in hosts if a <= m.start() and m.end() <= b), None)
            found.append(around or (m.start(), m.end()))
        return found


def _reduce_words(items: Sequence[Any], referents: _Referents, mca: set[int], offset: int) -> list[str]:
    """Each text reduced to its spans that name Services or pods and the kept `--mca` words
    (indexes `mca` into the container's whitespace-split command + args), in their order."""
    out = []
    index = offset
    for item in items:
        if not isinstance(item, str):
            continue
        spans = referents.spans(item)
        for m in re.finditer(r"\S+", item):
            if index in mca:
                spans.append((m.start(), m.end()))
            index += 1
        kept: list[str] = []
        last_end = -1
        for start, end in sorted(set(spans)):
            if start >= last_end:
                kept.append(item[start:end])
                last_end = end
        if kept:
            out.append(" ".join(kept))
    return out


def _mca_indexes(words: Sequence[str]) -> set[int]:
    """Word indexes of `--mca NAME VALUE` settings the data-port model reads."""
    kept: set[int] = set()
    for i, word in enumerate(words[:-2]):
        if word in ("--mca", "-mca") and words[i + 1] in _MCA_KEPT:
            kept.update((i, i + 1, i + 2))
    return kept


def _reduce_container(c: Mapping[str, Any], referents: _Referents) -> dict[str, Any]:
    out = {k: c[k] for k in _CONTAINER_KEYS if k in c}
    env = []
    for e in c.get("env") or []:
        if not isinstance(e, Mapping) or not e.get("name"):
            continue
        name = str(e["name"])
        value = e.get("value")
        kept: dict[str, Any] = {"name": name}
        if isinstance(value, str):
            if name in AUDITED_ENV and value.strip().isdigit():
                kept["value"] = value
            else:
                reduced = _reduce_words([value], referents, set(), 0)
                if reduced:
                    kept["value"] = reduced[0]
        env.append(kept)
    if env:
        out["env"] = env
    command = [a for a in c.get("command") or [] if isinstance(a, str)]
    args = [a for a in c.get("args") or [] if isinstance(a, str)]
    mca = _mca_indexes([w for a in (*command, *args) for w in a.split()])
    n_command = sum(len(a.split()) for a in command)
    for key, items, offset in (("command", command, 0), ("args", args, n_command)):
        reduced = _reduce_words(items, referents, mca, offset)
        if reduced:
            out[key] = reduced
    return out


def _kept_annotation(key: str, keep: Sequence[str]) -> bool:
    return any(key == k or (k.endswith("/") and key.startswith(k)) for k in keep)


def _reduce(value: Any, referents: _Referents, keep: Sequence[str]) -> Any:
    if isinstance(value, list):
        return [_reduce(v, referents, keep) for v in value]
    if not isinstance(value, Mapping):
        return value
    out: dict[str, Any] = {}
    for key, v in value.items():
        if key == "metadata" and isinstance(v, Mapping):
            meta = dict(_reduce(v, referents, keep))
            annotations = v.get("annotations")
            if isinstance(annotations, Mapping):
                kept = {k: a for k, a in annotations.items() if _kept_annotation(str(k), keep)}
                if kept:
                    meta["annotations"] = kept
                else:
                    meta.pop("annotations", None)
            out[key] = meta
        elif key in _CONTAINER_LISTS and isinstance(v, list):
            out[key] = [_reduce_container(c, referents) for c in v if isinstance(c, Mapping)]
        elif key == "volumes" and isinstance(v, list):
            out[key] = [
                {k: vol[k] for k in ("name", "persistentVolumeClaim") if k in vol}
                for vol in v
                if isinstance(vol, Mapping)
            ]
        else:
            out[key] = _reduce(v, referents, keep)
    return out


def reduce_for_snapshot(
    objects: Sequence[Mapping[str, Any]], extra_annotations: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The objects with only what the audit reads (see the module docstring)."""
    referents = _Referents(objects)
    keep = (*AUDITED_ANNOTATIONS, *extra_annotations)
    out = []
    for obj in objects:
        if obj.get("kind") == "ConfigMap":  # cilium-config: its data is the CNI's settings
            meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
            assert isinstance(meta, Mapping)
            out.append({**obj, "metadata": {k: meta[k] for k in ("name", "namespace", "uid") if k in meta}})
        else:
            out.append(_reduce(obj, referents, keep))
    return out


def _origin(context: str, obj: Mapping[str, Any]) -> SourceRef:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    ns = meta.get("namespace")
    where = f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))
    return SourceRef(f"cluster:{context}/{obj.get('kind')}/{where}", 0, 0)


def problem_errors(read: ClusterRead) -> list[LoadError]:
    """Incomplete reads as errors (they make the audit partial); absent CRDs are notes."""
    out = []
    for p in read.incomplete:
        grant = f"; grant it with: {p.rbac}" if p.rbac else ""
        out.append(LoadError(f"cluster:{read.context}", 0, f"{p.what}: {p.problem}: {p.message}{grant}"))
    return out


def read_cluster(
    context: str | None, kubeconfig: str | None, in_cluster: bool, options: ReadOptions | None = None
) -> ClusterRead:
    from auditor.sources.kubeapi import KubernetesTransport, connect

    api_client, name = connect(context, kubeconfig, in_cluster)
    try:
        read = Reader(KubernetesTransport(api_client), options or ReadOptions()).read(name)
    finally:
        api_client.close()
    read.objects = [o for o in read.objects if allowed(o)]
    return read


def inventory_from_read(read: ClusterRead, settings: Settings) -> Inventory:
    documents = [yamlio.Document(obj, _origin(read.context, obj)) for obj in read.objects if allowed(obj)]
    inv = build_inventory(documents, settings, problem_errors(read))
    inv.notes[:0] = [
        f"live cluster {read.context} ({read.server_version or 'version unknown'}): "
        f"{len(read.objects)} objects, {len(inv.live_pods)} pods",
        *(f"{p.what}: {p.message}" for p in read.absent),
    ]
    return inv


def snapshot_documents(
    read: ClusterRead, now: datetime, extra_annotations: Sequence[str] = ()
) -> list[dict[str, Any]]:
    header = {
        "apiVersion": SNAPSHOT_API_VERSION,
        "kind": SNAPSHOT_KIND,
        "metadata": {"name": read.context},
        "spec": {
            "context": read.context,
            "serverVersion": read.server_version,
            "readAt": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "counts": dict(read.counts),
            "problems": [p.to_json() for p in read.problems],
        },
    }
    items = reduce_for_snapshot([o for o in read.objects if allowed(o)], extra_annotations)
    return [header, {"apiVersion": "v1", "kind": "List", "items": items}]


def write_snapshot(
    read: ClusterRead, path: Path, now: datetime, extra_annotations: Sequence[str] = ()
) -> None:
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(
            f"# Cluster snapshot written by placement-auditor; audit it with: auditor scan {path.name}\n"
        )
        yaml.dump_all(
            snapshot_documents(read, now, extra_annotations),
            handle,
            Dumper=dumper,
            sort_keys=False,
            allow_unicode=True,
        )
    tmp.replace(path)
