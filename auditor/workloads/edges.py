"""Who must reach whom: communication edges between workload roles (pure).

Training kinds have built-in edges (DESIGN.md "Training kinds and their edges"). Any workload
also gets an edge wherever a container's env, args or command names a Service's DNS name
(`svc`, `svc.ns`, `svc.ns.svc`, `svc.ns.svc.cluster.local`, optionally `:port`) → the roles that
Service selects, and wherever the annotation `placement-auditor.io/talks-to: "svc[:port],..."`
says so. An edge without a port (NCCL, Gloo, MPI data) is a data-plane edge: its connections land
on kernel-chosen ports of `port_range` (workloads/dataports.py says which range), unless the
manifest declares the port the peers use (a declared containerPort beats the range).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import field
from typing import Literal

from auditor.model.objects import Role, Service, Workload, WorkloadRef
from auditor.model.values import value
from auditor.workloads.adapters import KUBEFLOW_REPLICA_SPECS
from auditor.workloads.dataports import LINUX_EPHEMERAL, PortRange, data_port_range, ompi_range, range_text
from auditor.workloads.operators import job_count
from auditor.workloads.replicas import replica_holding

TALKS_TO = "placement-auditor.io/talks-to"


# Where an edge came from, for reports that show what was understood (docs/reports.md, `origin`).
EdgeOrigin = Literal[
    "operator-default",
    "named-port",
    "container-port",
    "spec-field",
    "pod-dns-name",
    "jobset-coordinator",
    "service-reference",
    "annotation",
]


@value(frozen=True)
class CommEdge:
    source: Role
    destination: Role
    port: int | None  # None: a data-plane edge on the ports of port_range
    protocol: str
    reason: str
    # For a data-plane edge: the destination's ports its connections can use (comm_edges fills it).
    port_range: PortRange | None = None
    # The one replica of `destination` the edge reaches (rank 0, a pod named by its DNS name),
    # where that matters: a role split by per-replica labels (workloads/replicas.py).
    to_replica: int | None = field(default=None, compare=False)
    origin: EdgeOrigin = field(kw_only=True)
    # The ClusterIP Service the traffic goes through (its routing may keep it in the zone,
    # placement/routing.py); None for a path to the pods themselves.
    via: Service | None = field(default=None, compare=False, hash=False, kw_only=True)

    @property
    def ports(self) -> PortRange:
        """The destination ports the edge's connections use: its port, or its data-plane range."""
        if self.port is not None:
            return self.port, self.port
        return self.port_range or LINUX_EPHEMERAL

    @property
    def ports_text(self) -> str:
        return range_text(self.ports)


def _role(w: Workload, *names: str) -> Role | None:
    wanted = {n.lower() for n in names}
    return next((r for r in w.roles if r.name.lower() in wanted), None)


def _named_port(role: Role, name: str, default: int) -> tuple[int, EdgeOrigin]:
    """The container port the operator names, else its default, and which of the two it is."""
    named = next((p.port for p in role.template.named_ports if p.name == name), None)
    return (default, "operator-default") if named is None else (named, "named-port")


def training_kind(ref: WorkloadRef) -> str | None:
    """The training kind whose built-in edges apply to a workload (its kind, or `Volcano Job`),
    None for a generic workload whose edges come only from Service references and annotations."""
    if ref.kind in KUBEFLOW_REPLICA_SPECS or ref.kind in _OPERATOR_KINDS:
        return ref.kind
    if ref.kind == "Job" and ref.api_version.startswith(VOLCANO_GROUP):
        return "Volcano Job"
    return None


_OPERATOR_KINDS = ("JobSet", "TrainJob", "RayCluster", "RayJob", "LeaderWorkerSet")
VOLCANO_GROUP = "batch.volcano.sh/"


def _named_edge(
    source: Role, destination: Role, port_name: str, default: int, reason: str, to_replica: int | None = None
) -> CommEdge:
    """A built-in edge on the destination's named container port, else the operator's default."""
    port, origin = _named_port(destination, port_name, default)
    return CommEdge(source, destination, port, "TCP", reason, to_replica=to_replica, origin=origin)


def _kubeflow_edges(w: Workload) -> Iterator[CommEdge]:
    kind = w.ref.kind
    if kind == "PyTorchJob":
        master, worker = _role(w, "Master"), _role(w, "Worker")
        if master is not None and worker is not None:
            yield _named_edge(
                worker, master, "pytorchjob-port", 23456, "PyTorch rendezvous: workers → master (MASTER_ADDR)"
            )
        elif worker is not None and w.options.elastic:
            rdzv = w.options.rdzv_port
            reason = "elastic c10d rendezvous: workers → worker-0"
            origin: EdgeOrigin = "spec-field" if rdzv else "operator-default"
            yield CommEdge(worker, worker, rdzv or 29400, "TCP", reason, to_replica=0, origin=origin)
        group = [r for r in (master, worker) if r is not None]
        yield from _ring(group, "NCCL/Gloo all-reduce between ranks")
    elif kind == "TFJob":
        ps = _role(w, "PS")
        others = [r for r in w.roles if r.name.lower() in ("worker", "chief", "master", "evaluator")]
        for r in others:
            if ps is not None:
                yield _named_edge(r, ps, "tfjob-port", 2222, "TensorFlow: worker/chief ↔ parameter server")
                yield _named_edge(ps, r, "tfjob-port", 2222, "TensorFlow: parameter server ↔ worker/chief")
        trainers = [r for r in others if r.name.lower() != "evaluator"]
        for a in trainers:
            for b in trainers:
                if a.replicas > 1 or a is not b:
                    yield _named_edge(a, b, "tfjob-port", 2222, "TensorFlow collective: worker ↔ worker")
    elif kind == "XGBoostJob":
        master, worker = _role(w, "Master"), _role(w, "Worker")
        if master is not None and worker is not None:
            yield _named_edge(worker, master, "xgboostjob-port", 9999, "XGBoost tracker: workers → master")
    elif kind == "PaddleJob":
        worker = _role(w, "Worker")
        if worker is not None:
            yield _named_edge(worker, worker, "master", 36543, "Paddle: workers → worker-0", to_replica=0)
    elif kind == "JAXJob":
        worker = _role(w, "Worker")
        if worker is not None:
            yield _named_edge(
                worker, worker, "jaxjob-port", 6666, "JAX coordinator: workers → worker-0", to_replica=0
            )
    elif kind == "MPIJob":
        launcher, worker = _role(w, "Launcher"), _role(w, "Worker")
        if launcher is not None and worker is not None:
            yield CommEdge(
                launcher, worker, 22, "TCP", "MPI: launcher → workers (ssh)", origin="operator-default"
            )
        if worker is not None:
            yield from _ring([worker], "MPI data between workers", mpi=True, launcher=launcher)


def _env(role: Role, *names: str) -> str | None:
    return next((v for c in role.template.containers for n, v in c.env if n in names), None)


def _first_port(role: Role) -> int | None:
    return role.template.container_ports[0][1] if role.template.container_ports else None


def _pod_dns_edges(w: Workload) -> Iterator[CommEdge]:
    """JobSet pods are reachable as <jobset>-<replicatedJob>-<job>-<pod>.<subdomain>."""
    by_name = {r.name: r for r in w.roles}
    prefix = f"{w.ref.name}-"
    texts = {role: [t for t in _texts(role) if prefix in t] for role in w.roles}
    if not any(texts.values()):
        return  # no pod name in any command, argument or env value: nothing to compile
    pattern = re.compile(rf"(?<![\w-]){re.escape(w.ref.name)}-([a-z0-9-]+?)-(\d+)-(\d+)(?![\w-])")
    for role in w.roles:
        for text in texts[role]:
            for m in pattern.finditer(text):
                target = by_name.get(m.group(1))
                if target is None:
                    continue
                port_text = _env(role, "MASTER_PORT", "PET_MASTER_PORT")
                port = int(port_text) if port_text and port_text.isdigit() else _first_port(target)
                if target is not role or role.replicas > 1:
                    jobs = max(job_count(target), 1)
                    index = int(m.group(2)) * max(target.replicas // jobs, 1) + int(m.group(3))
                    reason = f"names pod {m.group(0)}"
                    yield CommEdge(role, target, port, "TCP", reason, to_replica=index, origin="pod-dns-name")


def _operator_edges(w: Workload) -> Iterator[CommEdge]:
    kind = w.ref.kind
    if kind in ("JobSet", "TrainJob"):
        yield from _pod_dns_edges(w)
        coordinator = w.options.coordinator if kind == "JobSet" else None
        if coordinator is not None:
            target = _role(w, coordinator)
            if target is not None:
                port = _first_port(target)
                for r in w.roles:
                    if r is not target:
                        yield CommEdge(
                            r, target, port, "TCP", "JobSet coordinator endpoint", origin="jobset-coordinator"
                        )
        if kind == "TrainJob":
            node, launcher = _role(w, "node"), _role(w, "launcher")
            if launcher is not None and node is not None:
                reason = "MPI runtime: launcher → nodes (ssh)"
                yield CommEdge(launcher, node, 22, "TCP", reason, origin="operator-default")
            elif node is not None and node.replicas > 1:
                reason = "torchrun rendezvous: nodes → node-0-0 (PET_MASTER_PORT)"
                yield CommEdge(node, node, 29500, "TCP", reason, to_replica=0, origin="operator-default")
            if node is not None:
                reason = "all-reduce between training nodes"
                yield from _ring([node], reason, mpi=launcher is not None, launcher=launcher)
    elif kind in ("RayCluster", "RayJob"):
        head = _role(w, "head")
        port = 6379 if w.options.ray_port is None else w.options.ray_port
        port_origin: EdgeOrigin = "operator-default" if w.options.ray_port is None else "spec-field"
        for r in w.roles:
            if head is not None and r is not head:
                yield CommEdge(r, head, port, "TCP", "Ray: worker → head GCS", origin=port_origin)
    elif kind == "LeaderWorkerSet":
        leader, worker = _role(w, "leader"), _role(w, "worker")
        if leader is not None and worker is not None:
            leader_port = _first_port(leader)
            origin: EdgeOrigin = "operator-default" if leader_port is None else "container-port"
            yield CommEdge(
                worker, leader, leader_port, "TCP", "LeaderWorkerSet: worker → leader", origin=origin
            )
    elif kind == "Job" and w.ref.api_version.startswith(VOLCANO_GROUP):
        yield from _volcano_edges(w)


def _port_arg(args: Mapping[str, str], default: int) -> int:
    text = args.get("port", "")
    return int(text) if text.isdigit() and 1 <= int(text) <= 65535 else default


def _volcano_edges(w: Workload) -> Iterator[CommEdge]:
    rings: list[CommEdge] = []  # the data plane of the frameworks the plugins name
    args = w.options.plugin("mpi")
    if args is not None:
        master = _role(w, args.get("master", ""), "master", "mpimaster")
        worker = _role(w, args.get("worker", ""), "worker", "mpiworker")
        if master is not None and worker is not None:
            ssh = _port_arg(args, 22)
            origin: EdgeOrigin = "spec-field" if "port" in args else "operator-default"
            yield CommEdge(
                master, worker, ssh, "TCP", "Volcano mpi plugin: master → workers (ssh)", origin=origin
            )
        if worker is not None:
            rings += _ring([worker], "MPI data between workers", mpi=True, launcher=master)
    args = w.options.plugin("pytorch")
    if args is not None:
        master, worker = _role(w, args.get("master", "master")), _role(w, args.get("worker", "worker"))
        if master is not None and worker is not None:
            port = _port_arg(args, 23456)
            origin = "spec-field" if "port" in args else "operator-default"
            yield CommEdge(
                worker, master, port, "TCP", "Volcano pytorch plugin: workers → master", origin=origin
            )
        group = [r for r in (master, worker) if r is not None]
        rings += _ring(group, "NCCL/Gloo all-reduce between ranks")
    yield from rings
    if w.options.plugin("svc") is not None and sum(r.replicas for r in w.roles) >= 2:
        # The svc plugin makes every task reachable by name; a task's declared containerPorts are
        # the ports its peers use (they beat the ephemeral range), else the data-plane range.
        covered = {(e.source, e.destination) for e in rings}
        reason = "Volcano svc plugin: tasks reach each other"
        declared = f"{reason} (declared containerPort)"
        for a in w.roles:
            for b in w.roles:
                if a is b and a.replicas < 2:
                    continue
                if b.template.container_ports:
                    for protocol, port in sorted(set(b.template.container_ports)):
                        yield CommEdge(a, b, port, protocol, declared, origin="container-port")
                elif (a, b) not in covered:
                    yield CommEdge(a, b, None, "TCP", reason, origin="operator-default")


def _ring(
    roles: Sequence[Role], reason: str, mpi: bool = False, launcher: Role | None = None
) -> Iterator[CommEdge]:
    """Data-plane edges between every pair of ranks (`mpi`: Open MPI's TCP BTL port settings of
    the destination, else of its `launcher`, apply)."""
    if sum(r.replicas for r in roles) < 2:
        return
    for a in roles:
        for b in roles:
            if a is not b or a.replicas > 1:
                ports = ompi_range(b, launcher) if mpi else None
                yield CommEdge(a, b, None, "TCP", reason, ports, origin="operator-default")


def _dns_names(svc: Service) -> list[str]:
    n, ns = svc.name, svc.namespace
    return [f"{n}.{ns}.svc.cluster.local", f"{n}.{ns}.svc", f"{n}.{ns}", n]


def _texts(role: Role) -> Iterator[str]:
    for c in (*role.template.containers, *role.template.init_containers):
        yield from (value for _, value in c.env)
        yield from c.command
        yield from c.args


def _selected(svc: Service, roles: Iterable[Role]) -> list[Role]:
    """Roles the Service's selector selects (none for a Service without a selector)."""
    return [
        r
        for r in roles
        if r.workload.namespace == svc.namespace
        and svc.selector
        and all(r.template.label_map.get(k) == v for k, v in svc.selector)
    ]


class _RolesByLabel:
    """The roles carrying each (namespace, label, value), in the order given: a Service's
    selector is tried only on the roles its first label selects (thousands of Services and roles,
    most of a namespace's roles unselected by each)."""

    def __init__(self, roles: Iterable[Role]) -> None:
        self.index: dict[tuple[str, str, str], list[Role]] = {}
        for r in roles:
            ns = r.workload.namespace
            for k, v in r.template.labels:
                self.index.setdefault((ns, k, v), []).append(r)

    def selected(self, svc: Service) -> list[Role]:
        if not svc.selector:
            return []
        k, v = svc.selector[0]
        return _selected(svc, self.index.get((svc.namespace, k, v), ()))


def _service_targets(
    svc: Service, port: int | None, selected: Sequence[Role]
) -> Iterator[tuple[Role, int, bool]]:
    """The selected roles with the container port each reference reaches: the port written after
    the name (a Service port, mapped to its targetPort) or every Service port; and whether the
    traffic goes through the Service's ClusterIP (False: a port it does not list, reached on the
    pod itself through headless DNS)."""
    ports = [p for p in svc.ports if port is None or p.port == port]
    for r in selected:
        if port is not None and not ports:
            yield r, port, False  # a port the Service does not list: headless DNS reaches the pod directly
            continue
        for p in ports:
            if p.target_port.isdigit():
                yield r, int(p.target_port), True
            else:
                named = next((np.port for np in r.template.named_ports if np.name == p.target_port), None)
                if named is not None:
                    yield r, named, True


def _reference(name: str, ns: str, services: Sequence[Service]) -> Service | None:
    svc_ns, _, svc_name = name.rpartition("/")
    return next((s for s in services if s.name == svc_name and s.namespace == (svc_ns or ns)), None)


# A DNS name (dot-separated labels) with an optional :port, not inside a longer word.
_HOST = re.compile(
    r"(?<![\w.-])([a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*)(?::(\d+))?(?![\w-])",
    re.IGNORECASE,
)


def named_namespaces(role: Role) -> set[str]:
    """Every namespace whose Services a role's env, command, args or `talks-to` annotation could
    name (what service_edges may resolve there), besides its own: the second label of each
    dotted host name, the namespace of each `ns/name` item. An over-approximation: a host that
    names no Service still counts."""
    found: set[str] = set()
    for text in _texts(role):
        for m in _HOST.finditer(text):
            labels = m.group(1).lower().split(".")
            if len(labels) > 1:
                found.add(labels[1])
    talks = dict(role.template.annotations).get(TALKS_TO, "")
    for item in talks.split(","):
        namespace = item.strip().partition(":")[0].rpartition("/")[0]
        if namespace:
            found.add(namespace)
    return found


def service_edges(roles: Sequence[Role], services: Sequence[Service]) -> Iterator[CommEdge]:
    # Index every name a Service answers to, so each text is tokenised once instead of being
    # matched against every Service (a repository has thousands of both).
    by_name: dict[str, list[Service]] = {}
    for svc in services:
        for name in _dns_names(svc):
            by_name.setdefault(name, []).append(svc)
    by_label = _RolesByLabel(roles)
    selected: dict[int, list[Role]] = {}  # by id(Service): many roles name the same Service

    def selected_by(svc: Service) -> list[Role]:
        found = selected.get(id(svc))
        if found is None:
            found = selected[id(svc)] = by_label.selected(svc)
        return found

    for role in roles:
        ns = role.workload.namespace
        seen: set[tuple[Role, int]] = set()
        references: list[tuple[Service, int | None, str, EdgeOrigin]] = []
        for text in _texts(role):
            for m in _HOST.finditer(text):
                host = m.group(1).lower()
                for svc in by_name.get(host, ()):
                    # A bare `svc` resolves only inside the pod's own namespace.
                    if svc.namespace == ns or "." in host:
                        port = int(m.group(2)) if m.group(2) else None
                        reason = f"names Service {svc.namespace}/{svc.name}"
                        references.append((svc, port, reason, "service-reference"))
        talks = dict(role.template.annotations).get(TALKS_TO, "")
        for item in filter(None, (t.strip() for t in talks.split(","))):
            name, _, port_text = item.partition(":")
            referenced = _reference(name, ns, services)
            if referenced is not None:
                port = int(port_text) if port_text.isdigit() else None
                references.append((referenced, port, f"annotation {TALKS_TO}: {item}", "annotation"))
        for svc, port, reason, origin in references:
            for target, tport, routed in _service_targets(svc, port, selected_by(svc)):
                if (target is not role or role.replicas > 1) and (target, tport) not in seen:
                    seen.add((target, tport))
                    via = svc if routed and not svc.headless else None
                    yield CommEdge(role, target, tport, "TCP", reason, origin=origin, via=via)


def _whole(w: Workload) -> tuple[Workload, dict[Role, list[Role]]]:
    """A workload whose roles were split by per-replica labels, with each role whole again (what
    the built-in edges of its kind are written for), and the parts of each such role."""
    if all(r.replica_class is None for r in w.roles):
        return w, {}
    by_name: dict[str, list[Role]] = {}
    for r in w.roles:
        by_name.setdefault(r.name, []).append(r)
    roles: list[Role] = []
    parts_of: dict[Role, list[Role]] = {}
    for parts in by_name.values():
        if len(parts) == 1:
            roles.append(parts[0])
            continue
        role = dataclasses.replace(parts[0], replicas=sum(p.replicas for p in parts), replica_class=None)
        roles.append(role)
        parts_of[role] = parts
    return dataclasses.replace(w, roles=tuple(roles)), parts_of


def _onto_parts(edges: Iterable[CommEdge], parts_of: Mapping[Role, list[Role]]) -> Iterator[CommEdge]:
    """Edges between whole roles as edges between their parts: every part, or the one holding
    the replica the edge reaches; a single pod does not talk to itself."""
    for e in edges:
        sources = parts_of.get(e.source, [e.source])
        destinations = parts_of.get(e.destination, [e.destination])
        if e.to_replica is not None and e.destination in parts_of:
            holder = replica_holding(destinations, e.to_replica)
            destinations = [holder] if holder is not None else []
        for s in sources:
            for d in destinations:
                if s is not d or s.replicas > 1:
                    yield dataclasses.replace(e, source=s, destination=d)


def comm_edges(
    workloads: Sequence[Workload], services: Sequence[Service], ephemeral: PortRange = LINUX_EPHEMERAL
) -> list[CommEdge]:
    """Every edge; a data-plane edge gets the range its destination's connections use
    (`ephemeral`: the cluster's range, `network.ephemeral_ports`)."""
    edges: list[CommEdge] = []
    for w in workloads:
        whole, parts_of = _whole(w)
        builtin = [*_kubeflow_edges(whole), *_operator_edges(whole)]
        edges.extend(_onto_parts(builtin, parts_of) if parts_of else builtin)
    roles = [r for w in workloads for r in w.roles]
    edges.extend(service_edges(roles, services))
    edges = [
        dataclasses.replace(e, port_range=data_port_range(e.destination, ephemeral))
        if e.port is None and e.port_range is None
        else e
        for e in edges
    ]
    # Roles of workloads declared twice (one name in two files) print alike: their sources
    # break the tie, and duplicates go in the order found, never in a hash order.
    return sorted(
        dict.fromkeys(edges),
        key=lambda e: (
            str(e.source),
            str(e.destination),
            e.port or 0,
            e.ports,
            e.source.source,
            e.destination.source,
        ),
    )
