"""The things traffic flows between: pods, nodes, external addresses and reserved identities."""

from __future__ import annotations

import ipaddress

# The C module `socket` wraps: its inet_pton, without the wrapper's import (its enums, selectors
# and select: 3 ms of every start, for one function).
from _socket import AF_INET, inet_pton
from dataclasses import dataclass, field

from auditor.model.objects import NamedPort
from auditor.model.values import value

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@value(frozen=True)
class PodEndpoint:
    """A pod (or one replica of a workload role) with the labels policies can see.

    `labels` are the pod's labels after placement-derived labels were applied (the zone a pod
    lands in can change them). `node`/`zone` say where it runs, when known.
    """

    namespace: str
    name: str
    labels: tuple[tuple[str, str], ...] = ()
    namespace_labels: tuple[tuple[str, str], ...] = ()
    service_account: str = "default"
    named_ports: tuple[NamedPort, ...] = ()
    ips: tuple[IPAddress, ...] = ()
    node: str | None = None
    zone: str | None = None
    host_network: bool = False
    node_labels: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    # Endpoints key every verdict cache: hash the fields once, not on every look-up.
    _hash: int = field(default=0, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "_hash",
            hash(
                (
                    self.namespace,
                    self.name,
                    self.labels,
                    self.namespace_labels,
                    self.service_account,
                    self.named_ports,
                    self.ips,
                    self.node,
                    self.zone,
                    self.host_network,
                )
            ),
        )

    def __hash__(self) -> int:
        return self._hash

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)

    @property
    def namespace_label_map(self) -> dict[str, str]:
        return dict(self.namespace_labels)

    def named_port(self, name: str, protocol: str | None) -> list[NamedPort]:
        return [
            p for p in self.named_ports if p.name == name and (protocol is None or p.protocol == protocol)
        ]

    def __str__(self) -> str:
        # Role endpoints are already named ns/workload[/role].
        return self.name if "/" in self.name else f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    """A node's host identity (host-network pods and the kubelet speak as the node)."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()
    ips: tuple[IPAddress, ...] = ()

    def __str__(self) -> str:
        return f"node/{self.name}"


@dataclass(frozen=True, slots=True)
class ExternalEndpoint:
    """An address outside the cluster (Cilium's `world`)."""

    ip: IPAddress

    def __str__(self) -> str:
        return str(self.ip)


@dataclass(frozen=True, slots=True)
class EntityEndpoint:
    """A reserved identity such as `kube-apiserver` or `host` (Cilium entities)."""

    entity: str

    def __str__(self) -> str:
        return f"reserved:{self.entity}"


Endpoint = PodEndpoint | NodeEndpoint | ExternalEndpoint | EntityEndpoint


def parse_ip(text: str) -> IPAddress:
    """`ipaddress.ip_address` of the stripped text. Dotted quads (every pod IP of a large IPv4
    cluster) go through inet_pton, which accepts exactly ipaddress's strict form (four decimal
    octets up to 255, no leading zeros) about four times faster; anything else, and every error,
    is ipaddress's own."""
    text = text.strip()
    try:
        return ipaddress.IPv4Address(inet_pton(AF_INET, text))
    except (OSError, ValueError):
        return ipaddress.ip_address(text)
