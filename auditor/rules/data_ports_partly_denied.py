"""data-ports-partly-denied — policies deny some, not all, of the ports a data-plane edge (NCCL/Gloo
all-reduce, MPI's TCP transport) can use. Those transports listen on a port the kernel picks at
random from the ephemeral range (`network.ephemeral_ports`, Linux default 32768–60999, or the pod's
own `net.ipv4.ip_local_port_range` sysctl), a new one per connection. Connections that land on a
denied port fail or hang while the others succeed, so the job fails *intermittently*: it may start,
then stall at a random step or on a random restart. The finding names the denied ports and the
deciding policies. An edge is blocked (`traffic-blocked`, `cross-zone-blocked`) only when every
port of its range is denied; a port the manifest declares (a containerPort, `MASTER_PORT`, a plugin
`--port`) is the edge's port and is either allowed or blocked, never partly.

Fails: a PyTorchJob's workers all-reduce over NCCL and a cluster-wide policy denies TCP 9100
(node-exporter's port) between pods: 9100 is outside Linux's default range, but the nodes run with
`ephemeral_ports: 1024-65535`, so about 1 connection in 64,500 lands on it.
Passes: the nodes keep the default range 32768–60999 (9100 is not in it), or the pods narrow it
with the sysctl `net.ipv4.ip_local_port_range: "32768 60999"`, or the policy excludes the range.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from auditor.model.findings import EdgeRef, Finding
from auditor.reachability.ports import PortSet
from auditor.rules.base import RuleMeta
from auditor.rules.model import AuditModel, EdgeAnalysis, mentions, role_finding

META = RuleMeta(
    "data-ports-partly-denied",
    "Some ports of a data-plane range are denied: intermittent failures",
    "medium",
    ("intermittent",),
)


def certainty(analysis: EdgeAnalysis) -> str:
    partial, verdicts = analysis.partly_denied, analysis.verdicts
    if len(partial) == len(verdicts):
        return "always"
    cross = [v for v in verdicts if not v.same_zone]
    if (
        cross
        and all(not v.same_zone for v in partial)
        and len(partial) == len(cross)
        and analysis.placement.split in ("always", "likely")
    ):
        return analysis.placement.split
    return "possible"


RANK = {"always": 0, "likely": 1, "possible": 2}


def evaluate(model: AuditModel, options: Mapping[str, Any]) -> Iterator[Finding]:
    # One finding per workload: its ring edges share the cause (the same policies on the same range).
    by_workload: dict[object, list[EdgeAnalysis]] = {}
    for analysis in model.edges:
        if analysis.partly_denied:
            by_workload.setdefault(analysis.edge.source.workload, []).append(analysis)
    for analyses in by_workload.values():
        analyses.sort(key=lambda a: RANK[certainty(a)])  # stable: edges keep their sorted order
        top = analyses[0]
        edge = top.edge
        partial = [v for a in analyses for v in a.partly_denied]
        denied = PortSet()
        for v in partial:
            denied = denied | v.denied_ports
        ports = PortSet.of(edge.ports)
        share = len(denied & ports) / max(len(ports), 1)
        policies = mentions([d for v in partial for d in v.deciders])
        names = ", ".join(f"{p.kind} {p.namespace + '/' if p.namespace else ''}{p.name}" for p in policies)
        where = ", ".join(sorted({f"{v.source_zone}→{v.destination_zone}" for v in partial}))
        edges = ", ".join(f"{a.edge.source.name} → {a.edge.destination.name}" for a in analyses)
        message = (
            f"{edge.source} → {edge.destination} ({edge.reason}) connects on kernel-chosen ports "
            f"{edge.protocol}/{edge.ports_text}; ports {denied} of them are denied "
            f"(edges: {edges}; placements: {where}; deciding policies: {names or 'none'}). The "
            f"kernel picks a random port of the range for each connection, so the ~{share:.2%} of "
            "connections that land on a denied port fail or hang while the rest succeed: "
            "failures are intermittent, not a clean 'blocked'"
        )
        src = tuple(sorted({v.source_zone for v in top.partly_denied}))
        dst = tuple(sorted({v.destination_zone for v in top.partly_denied}))
        ref = EdgeRef(edge.source.name, src, edge.destination.name, dst, edge.port, edge.protocol)
        yield role_finding(META, edge.source, message, certainty(top), ref, policies)
