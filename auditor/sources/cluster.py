"""Live clusters and snapshots of them: what the reader saw, as documents for the inventory.

`auditor cluster` audits the objects read from the API server; `auditor snapshot` writes the
same objects to one YAML file (a `ClusterSnapshot` header, then a `List`), and `auditor scan FILE`
audits that file offline with the same findings. A snapshot never holds a Secret, nor a ConfigMap
other than `cilium-config`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from auditor import yamlio
from auditor.config import Settings
from auditor.inventory import SNAPSHOT_KIND, Inventory, build_inventory
from auditor.model.source import LoadError, SourceRef
from auditor.sources.kubeapi import ClusterRead, Reader, ReadOptions

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


def problem_notes(read: ClusterRead) -> list[str]:
    return [f"{p.what}: {p.message}" for p in read.absent]


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
        *problem_notes(read),
    ]
    return inv


def snapshot_documents(read: ClusterRead, now: datetime) -> list[dict[str, Any]]:
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
    return [header, {"apiVersion": "v1", "kind": "List", "items": [o for o in read.objects if allowed(o)]}]


def write_snapshot(read: ClusterRead, path: Path, now: datetime) -> None:
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(
            f"# Cluster snapshot written by placement-auditor; audit it with: auditor scan {path.name}\n"
        )
        yaml.dump_all(
            snapshot_documents(read, now), handle, Dumper=dumper, sort_keys=False, allow_unicode=True
        )
    tmp.replace(path)
