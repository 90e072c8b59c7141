"""The policies both synthetic worlds put into their training namespaces: a NetworkPolicy of pod
selector, policy types and rules; a namespace peer; DNS egress; and "peers only" — the pods a
selector picks talk to each other and nothing else (one training job's pods on every port, or the
pods labelled with one zone), as a NetworkPolicy or a CiliumNetworkPolicy.

gen_repo.py writes them into each namespace's directory, world.cluster serves them stored (uid,
resourceVersion, generation)."""

from __future__ import annotations

from typing import Any

from world.objects import DNS_EGRESS, cilium_policy, network_policy

Obj = dict[str, Any]


def pod_policy(
    name: str,
    namespace: str,
    selector: Obj,
    types: list[str],
    ingress: list[Obj] | None = None,
    egress: list[Obj] | None = None,
) -> Obj:
    """A NetworkPolicy of `selector`'s pods: its ingress and egress rules (None: no such key),
    then its policy types."""
    spec: Obj = {"podSelector": selector}
    if ingress is not None:
        spec["ingress"] = ingress
    if egress is not None:
        spec["egress"] = egress
    spec["policyTypes"] = types
    return network_policy(name, namespace, spec)


def namespace_peer(name: str) -> Obj:
    """A policy peer: every pod of the namespace `name`."""
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}


def allow_dns(namespace: str) -> Obj:
    """Egress from every pod of the namespace to kube-dns."""
    return pod_policy("allow-dns", namespace, {}, ["Egress"], None, [DNS_EGRESS])


def peers_only(
    name: str,
    namespace: str,
    selector: Obj,
    *,
    egress: bool = True,
    cilium: bool = False,
    labels: dict[str, str] | None = None,
) -> Obj:
    """The selected pods accept traffic only from each other and, with `egress`, send only to
    each other (a CiliumNetworkPolicy always isolates both directions)."""
    if cilium:
        spec = {
            "endpointSelector": selector,
            "ingress": [{"fromEndpoints": [selector]}],
            "egress": [{"toEndpoints": [selector]}],
        }
        return cilium_policy(name, namespace, spec, labels=labels)
    types = ["Ingress", "Egress"] if egress else ["Ingress"]
    to = [{"to": [{"podSelector": selector}]}] if egress else None
    return pod_policy(name, namespace, selector, types, [{"from": [{"podSelector": selector}]}], to)
