"""Helpers shared by tests: build inventories from text or objects, make endpoints, ask verdicts."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from auditor import yamlio
from auditor.audit.explain import endpoint_for
from auditor.inventory import Inventory
from auditor.model.source import SourceRef
from auditor.placement.coupling import PairContext, RolePlacement
from auditor.reachability.endpoints import PodEndpoint
from auditor.settings.config import NetworkConfig, Settings
from auditor.sources.objects import build_inventory

DATA = Path(__file__).parent / "data"
NETPOL = DATA / "netpol"


def documents_from_objects(
    objects: Iterable[Mapping[str, Any]], file: str = "<test>"
) -> list[yamlio.Document]:
    return [yamlio.Document(obj, SourceRef(file, 1, i)) for i, obj in enumerate(objects)]


def inventory(
    paths: Iterable[Path] = (),
    objects: Iterable[Mapping[str, Any]] = (),
    text: str = "",
    cni: str = "auto",
    settings: Settings | None = None,
) -> Inventory:
    docs, errors = yamlio.load_paths(list(paths)) if paths else ([], [])
    docs = [*docs, *documents_from_objects(objects)]
    if text:
        more, more_errors = yamlio.load_text(text, "<text>")
        docs += more
        errors += more_errors
    return build_inventory(docs, settings or Settings(network=NetworkConfig(cni=cni)), errors)


def node_yaml(name: str, zone: str, **labels: str) -> str:
    """One Node document (a `---` first) in `zone`, with its hostname and `labels`."""
    extra = "".join(f", {k}: '{v}'" for k, v in labels.items())
    return (
        f"---\napiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: "
        f"{{topology.kubernetes.io/zone: {zone}, kubernetes.io/hostname: {name}{extra}}}}}\n"
    )


def placed(
    text: str = "", paths: Iterable[Path] = (), settings: Settings | None = None
) -> tuple[dict[str, RolePlacement], PairContext, list[str]]:
    """Every role of the manifests placed as a scan places them (place_roles over all roles, with
    the inventory's claims and options), by `str(role)`; the pair context; the inventory's notes,
    its file notes' texts after them. The inventory must load without errors."""
    from auditor.inventory import role_claim_zones
    from auditor.placement.coupling import place_roles
    from auditor.rules.model import placement_options

    inv = inventory(paths=paths, text=text, settings=settings)
    assert not inv.errors, inv.errors
    roles = [r for w in inv.workloads for r in w.roles]
    options = placement_options(inv)
    out = place_roles(
        roles, inv.nodes, options.zone_key, {r: role_claim_zones(inv, r) for r in roles}, options
    )
    notes = [*inv.notes, *(n for _, n in inv.file_notes)]
    return {str(r): p for r, p in out.items()}, PairContext(inv.nodes, options), notes


def pod_endpoints(inv: Inventory) -> dict[str, PodEndpoint]:
    """Every role as `ns/name` (one-role workloads) or `ns/workload/role` → endpoint, zone unknown."""
    out: dict[str, PodEndpoint] = {}
    for w in inv.workloads:
        for role in w.roles:
            out[str(role)] = endpoint_for(inv, role, None)
    return out


def findings(text: str, cni: str = "auto", settings: Settings | None = None) -> list[tuple[str, str, str]]:
    """(rule, certainty, workload name) of a scan over manifests given as text."""
    from auditor.audit.scan import scan

    inv = inventory(text=text, cni=cni, settings=settings)
    assert not inv.errors, inv.errors
    return [(f.rule, f.certainty, f.workload.name) for f in scan(inv).findings]


def disk_now_ns(where: Path) -> int:
    """The file system's clock now, as an incremental scan reads it (the time stamp of a file
    written at `where`, a directory): not the process's clock, which faketime moves."""
    marker = where / ".disk-clock"
    marker.write_bytes(b"")
    return marker.stat().st_mtime_ns


def age_tree(root: Path, seconds_ago: int = 86_400) -> None:
    """Every directory and file under root (and root) modified `seconds_ago` by the file
    system's clock (symlinks themselves, not their targets)."""
    then = disk_now_ns(root.parent) - seconds_ago * 10**9
    for path in [root, *root.rglob("*")]:
        os.utime(path, ns=(then, then), follow_symlinks=False)
