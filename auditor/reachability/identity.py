"""Endpoint identities: what the policies in play can tell about a pod, and nothing else.

Two pods that every selector, named port and CIDR in play sees alike get the same verdicts, so
verdicts are computed once per identity. An identity keeps the pod's namespace (and namespace
labels), service account, and only the labels some selector reads, the named ports some rule
names, and its IPs only when a CIDR rule can match pod IPs. The pod name never matters. This is
what makes the cost grow with the number of distinct identities, not with pods².
"""

from __future__ import annotations

import bisect
import ipaddress
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from auditor.model.labels import LabelSelector
from auditor.reachability import cni
from auditor.reachability.endpoints import Endpoint, IPAddress, PodEndpoint
from auditor.reachability.policy import (
    CalicoPeer,
    CIDRPeer,
    CiliumEndpointPeer,
    CiliumEntityPeer,
    CompiledPolicy,
    K8sPodPeer,
    K8sSubject,
    Peer,
)

if TYPE_CHECKING:
    from auditor.reachability.calico_selector import Selector as CalicoSelector

# Keys Cilium and Calico derive from the namespace, service account or cluster, not pod labels.
_PSEUDO_PREFIXES = (
    cni.CILIUM_NS_LABEL,
    cni.CILIUM_NS_META,
    cni.CILIUM_SA_LABEL,
    cni.CILIUM_CLUSTER_LABEL,
    "reserved:",
    "pcns.",
    "pcsa.",
    "projectcalico.org/",
)


def _label_key(key: str) -> str | None:
    for source in ("k8s:", "any:"):
        key = key.removeprefix(source)
    return None if key.startswith(_PSEUDO_PREFIXES) else key


def _selector_keys(selector: LabelSelector | CalicoSelector | None) -> set[str]:
    return {k for k in map(_label_key, selector.keys()) if k} if selector is not None else set()


def _peers(policy: CompiledPolicy) -> Iterator[Peer]:
    for direction in (policy.ingress, policy.egress):
        for rule in direction.rules:
            yield from rule.peers
            if rule.local is not None:
                yield rule.local


def label_keys_of(policy: CompiledPolicy) -> set[str]:
    """Pod label keys the policy's selectors read (subject and peers), namespace pseudo-labels aside."""
    subject = policy.subject
    keys = (
        set(subject.pod_selector.keys())
        if isinstance(subject, K8sSubject)
        else _selector_keys(subject.selector)
    )
    for peer in _peers(policy):
        if isinstance(peer, K8sPodPeer):
            keys |= peer.pod_selector.keys()
        elif isinstance(peer, CiliumEndpointPeer):
            keys |= _selector_keys(peer.selector)
        elif isinstance(peer, CalicoPeer):
            keys |= _selector_keys(peer.selector) | _selector_keys(peer.not_selector)
    return keys


class IdentityProjection:
    """Built once per policy set; `project` maps an endpoint to its identity."""

    def __init__(self, policies: Iterable[CompiledPolicy], settings: cni.NetworkSettings) -> None:
        self.settings = settings
        keys: set[str] = set()
        names: set[str] = set()
        self.reads_ips = False
        self.reads_node = False
        # Where CIDRs start and end, per IP version: addresses between two boundaries match the
        # same CIDR rules, so an identity keeps the region's first address, not the pod's IP.
        self._boundaries: dict[int, set[int]] = {4: set(), 6: set()}
        for policy in policies:
            keys |= label_keys_of(policy)
            for direction in (policy.ingress, policy.egress):
                for rule in direction.rules:
                    names |= rule.ports.names()
            for peer in _peers(policy):
                if isinstance(peer, CalicoPeer):
                    for net in (*peer.nets, *peer.not_nets):
                        self._add_cidr(net)
                elif isinstance(peer, CIDRPeer):
                    for net in (peer.cidr, *peer.excepts):
                        self._add_cidr(net)
                elif isinstance(peer, CiliumEntityPeer) and peer.entities & {"host", "remote-node"}:
                    self.reads_node = True
        self.label_keys = frozenset(keys)
        self.port_names = frozenset(names)
        self._sorted = {v: sorted(b) for v, b in self._boundaries.items()}
        self._projected: dict[int, tuple[PodEndpoint, PodEndpoint]] = {}

    def _add_cidr(self, net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> None:
        self.reads_ips = True
        self._boundaries[net.version] |= {int(net.network_address), int(net.broadcast_address) + 1}

    def _region(self, ip: IPAddress) -> IPAddress:
        bounds = self._sorted[ip.version]
        i = bisect.bisect_right(bounds, int(ip))
        start = bounds[i - 1] if i else 0
        return ipaddress.IPv4Address(start) if ip.version == 4 else ipaddress.IPv6Address(start)

    def project(self, ep: Endpoint) -> Endpoint:
        if not isinstance(ep, PodEndpoint):
            return ep
        # The same endpoint objects come back for every edge and zone placement: project once.
        # Keyed by identity, holding the endpoint so its id cannot be reused while cached.
        found = self._projected.get(id(ep))
        if found is not None and found[0] is ep:
            return found[1]
        projected = self._project(ep)
        self._projected[id(ep)] = (ep, projected)
        return projected

    def _project(self, ep: PodEndpoint) -> PodEndpoint:
        host = ep.host_network and not self.settings.host_network_pods_are_pods()
        keys, names = self.label_keys, self.port_names
        return PodEndpoint(
            namespace=ep.namespace,
            name="",
            labels=tuple(kv for kv in ep.labels if kv[0] in keys),
            namespace_labels=ep.namespace_labels,
            service_account=ep.service_account,
            named_ports=tuple(p for p in ep.named_ports if p.name in names),
            ips=tuple(dict.fromkeys(map(self._region, ep.ips))) if self.reads_ips else (),
            # Where a pod runs matters for a host-network pod (it speaks as its node) and for
            # Cilium's host/remote-node entities.
            node=ep.node if (host or self.reads_node) else None,
            zone=None,
            host_network=host,
            node_labels=ep.node_labels if host else (),
        )
