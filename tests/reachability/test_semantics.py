"""Semantics that must be right, one small scenario each (DESIGN.md "Reachability")."""

from __future__ import annotations

import dataclasses
import ipaddress

import pytest
from support import inventory

from auditor.audit.explain import endpoint_for, find_role
from auditor.inventory import Inventory, policy_engine
from auditor.reachability.endpoints import (
    EntityEndpoint,
    ExternalEndpoint,
    NamedPort,
    NodeEndpoint,
    parse_ip,
)
from auditor.reachability.policy import Direction
from auditor.settings.config import KubernetesSettings, NetworkConfig, Settings

PODS = """\
apiVersion: v1
kind: Namespace
metadata: {name: a, labels: {team: red}}
---
apiVersion: v1
kind: Namespace
metadata: {name: b, labels: {team: blue}}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: a, labels: {app: client}}
spec: {containers: [{name: c, image: x}]}
---
apiVersion: v1
kind: Pod
metadata: {name: server, namespace: a, labels: {app: server}}
spec: {containers: [{name: c, image: x, ports: [{containerPort: 8080, name: http}]}]}
---
apiVersion: v1
kind: Pod
metadata: {name: other, namespace: b, labels: {app: client}}
spec: {containers: [{name: c, image: x}]}
"""


def allowed(inv: Inventory, src: str, dst: str, port: int = 8080, proto: str = "TCP") -> bool:
    engine = policy_engine(inv)
    s = endpoint_for(inv, find_role(inv, src), None)
    d = endpoint_for(inv, find_role(inv, dst), None)
    return engine.flow(s, d).allows(proto, port)


def cnp(body: str, kind: str = "CiliumNetworkPolicy", ns: str = "a") -> str:
    meta = f"{{name: p, namespace: {ns}}}" if kind == "CiliumNetworkPolicy" else "{name: p}"
    return f"---\napiVersion: cilium.io/v2\nkind: {kind}\nmetadata: {meta}\nspec:\n{body}"


SERVER_FROM_CLIENTS = "  endpointSelector: {matchLabels: {app: server}}\n  ingress:\n  - fromEndpoints:\n    - matchLabels: {app: client}\n"


def test_cnp_endpoint_selectors_stay_in_the_policy_namespace() -> None:
    inv = inventory(text=PODS + cnp(SERVER_FROM_CLIENTS))
    assert allowed(inv, "a/client", "a/server")
    assert not allowed(inv, "b/other", "a/server")


def test_ccnp_endpoint_selectors_reach_every_namespace() -> None:
    inv = inventory(text=PODS + cnp(SERVER_FROM_CLIENTS, "CiliumClusterwideNetworkPolicy"))
    assert allowed(inv, "a/client", "a/server") and allowed(inv, "b/other", "a/server")


def test_cnp_namespace_label_selects_across_namespaces() -> None:
    body = (
        "  endpointSelector: {matchLabels: {app: server}}\n  ingress:\n  - fromEndpoints:\n"
        "    - matchLabels: {k8s:io.kubernetes.pod.namespace: b}\n"
    )
    inv = inventory(text=PODS + cnp(body))
    assert allowed(inv, "b/other", "a/server") and not allowed(inv, "a/client", "a/server")


def test_l4_only_rule_allows_every_peer_and_empty_rule_allows_none() -> None:
    l4 = "  endpointSelector: {matchLabels: {app: server}}\n  ingress:\n  - toPorts:\n    - ports: [{port: '8080', protocol: TCP}]\n"
    inv = inventory(text=PODS + cnp(l4))
    assert allowed(inv, "b/other", "a/server") and not allowed(inv, "b/other", "a/server", 9090)
    empty = "  endpointSelector: {matchLabels: {app: server}}\n  ingress:\n  - {}\n"
    inv = inventory(text=PODS + cnp(empty))
    assert not allowed(inv, "a/client", "a/server")


def test_deny_beats_allow_across_policy_kinds() -> None:
    knp = """---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-all, namespace: a}
spec:
  podSelector: {}
  ingress: [{}]
"""
    deny = "  endpointSelector: {matchLabels: {app: server}}\n  ingressDeny:\n  - fromEndpoints:\n    - matchLabels: {app: client}\n"
    inv = inventory(text=PODS + knp + cnp(deny))
    engine = policy_engine(inv)
    seg = engine.flow(
        endpoint_for(inv, find_role(inv, "a/client"), None),
        endpoint_for(inv, find_role(inv, "a/server"), None),
    ).ingress.at("TCP", 8080)
    assert not seg.allowed and seg.deciders[0].effect == "deny" and seg.deciders[0].rule == "ingressDeny[0]"


def test_enable_default_deny_false_leaves_other_traffic_allowed() -> None:
    body = (
        "  endpointSelector: {matchLabels: {app: server}}\n  enableDefaultDeny: {ingress: false}\n"
        "  ingress:\n  - fromEndpoints:\n    - matchLabels: {app: nobody}\n"
    )
    inv = inventory(text=PODS + cnp(body))
    assert allowed(inv, "b/other", "a/server")
    strict = inventory(text=PODS + cnp(body.replace("false", "true")))
    assert not allowed(strict, "b/other", "a/server")


def test_cidr_rules_do_not_match_pods_unless_configured() -> None:
    pods = PODS.replace(
        "metadata: {name: client, namespace: a, labels: {app: client}}\nspec: {containers: [{name: c, image: x}]}",
        "metadata: {name: client, namespace: a, labels: {app: client}}\nspec: {containers: [{name: c, image: x}]}\n"
        "status: {podIP: 10.0.0.5}",
    )
    body = "  endpointSelector: {matchLabels: {app: server}}\n  ingress:\n  - fromCIDR: [10.0.0.0/8]\n"
    inv = inventory(text=pods + cnp(body))
    assert not allowed(inv, "a/client", "a/server")
    server = endpoint_for(inv, find_role(inv, "a/server"), None)
    assert (
        policy_engine(inv)
        .directional(server, Direction.INGRESS, ExternalEndpoint(parse_ip("10.1.2.3")))
        .at("TCP", 1)
        .allowed
    )
    cfg = NetworkConfig(cni="cilium")
    cfg = NetworkConfig(cni="cilium", cilium=type(cfg.cilium)(policy_cidr_match_mode="pods"))
    assert allowed(inventory(text=pods + cnp(body), settings=Settings(network=cfg)), "a/client", "a/server")


def test_from_nodes_selects_node_identities_not_pods() -> None:
    body = "  endpointSelector: {matchLabels: {app: server}}\n  ingress:\n  - fromNodes:\n    - {}\n"
    inv = inventory(text=PODS + cnp(body))
    assert not allowed(inv, "a/client", "a/server")
    server = endpoint_for(inv, find_role(inv, "a/server"), None)
    assert (
        policy_engine(inv).directional(server, Direction.INGRESS, NodeEndpoint("n1")).at("TCP", 8080).allowed
    )


def test_entities_cluster_and_world() -> None:
    body = "  endpointSelector: {matchLabels: {app: server}}\n  ingress:\n  - fromEntities: [cluster]\n"
    inv = inventory(text=PODS + cnp(body))
    server = endpoint_for(inv, find_role(inv, "a/server"), None)
    engine = policy_engine(inv)
    assert allowed(inv, "b/other", "a/server")
    assert (
        engine.directional(server, Direction.INGRESS, EntityEndpoint("kube-apiserver")).at("TCP", 1).allowed
    )
    assert (
        not engine.directional(server, Direction.INGRESS, ExternalEndpoint(parse_ip("8.8.8.8")))
        .at("TCP", 1)
        .allowed
    )


ZONE_PODS = """\
apiVersion: v1
kind: Node
metadata: {name: n-a, labels: {topology.kubernetes.io/zone: zone-a}}
---
apiVersion: v1
kind: Node
metadata: {name: n-b, labels: {topology.kubernetes.io/zone: zone-b}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: server, namespace: a}
spec:
  replicas: 2
  selector: {matchLabels: {app: server}}
  template:
    metadata: {labels: {app: server}}
    spec: {containers: [{name: c, image: x}]}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: a, labels: {app: client}}
spec: {containers: [{name: c, image: x}]}
"""
ZONE_NP = """---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: zone-a-clients, namespace: a}
spec:
  podSelector: {matchLabels: {app: server}}
  ingress:
  - from:
    - podSelector: {matchLabels: {topology.kubernetes.io/zone: zone-a}}
"""


@pytest.mark.parametrize(
    ("version", "cni", "zone_a_allowed"),
    [
        ("1.35", "generic", True),  # PodTopologyLabels copies the zone: the selector matches in zone-a
        ("1.34", "generic", False),  # before 1.35 nothing copies the label: it matches no pod
        ("1.35", "cilium", False),  # Cilium's identity filter drops topology.kubernetes.io/*
    ],
)
def test_verdict_depends_on_the_zone_a_pod_lands_in(version: str, cni: str, zone_a_allowed: bool) -> None:
    settings = Settings(kubernetes=KubernetesSettings(version=version), network=NetworkConfig(cni=cni))
    inv = inventory(text=ZONE_PODS + ZONE_NP, settings=settings)
    engine = policy_engine(inv)
    server = endpoint_for(inv, find_role(inv, "a/server"), "zone-a")
    for zone, expect in (("zone-a", zone_a_allowed), ("zone-b", False)):
        client = endpoint_for(inv, find_role(inv, "a/client"), zone)
        assert engine.flow(client, server).allows("TCP", 80) is expect, zone


def test_cilium_config_map_sets_enforcement_and_labels() -> None:
    cm = """---
apiVersion: v1
kind: ConfigMap
metadata: {name: cilium-config, namespace: kube-system}
data:
  enable-policy: always
  labels: "k8s:app k8s:topology.kubernetes.io/zone"
"""
    inv = inventory(text=PODS + cm, cni="auto")
    assert inv.network.cni == "cilium" and "cilium-config" in inv.network.source
    assert not allowed(inv, "a/client", "a/server")  # no policy, but enforcement "always"
    inv2 = inventory(text=ZONE_PODS + ZONE_NP + cm.replace("always", "default"), cni="auto")
    server = endpoint_for(inv2, find_role(inv2, "a/server"), "zone-a")
    client = endpoint_for(inv2, find_role(inv2, "a/client"), "zone-a")
    assert (
        policy_engine(inv2).flow(client, server).allows("TCP", 80)
    )  # the labels setting keeps the zone label


def test_bad_cilium_config_value_is_an_error_entry() -> None:
    cm = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cilium-config, namespace: kube-system}\ndata:\n  enable-policy: sometimes\n"
    inv = inventory(text=PODS + cm, cni="auto")
    assert [e.field for e in inv.errors] == ["data.enable-policy"]
    assert inv.errors[0].line == (PODS + cm).splitlines().index("  enable-policy: sometimes") + 1


CALICO = """---
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: pass-clients, namespace: a}
spec:
  order: 10
  selector: app == 'server'
  ingress:
  - action: Pass
    source: {selector: app == 'client'}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: deny-rest}
spec:
  order: 20
  selector: app == 'server'
  types: [Ingress]
  ingress:
  - action: Deny
    protocol: TCP
    destination: {ports: [8080]}
"""


def test_calico_order_and_pass_to_the_profile() -> None:
    inv = inventory(text=PODS + CALICO, cni="calico")
    assert allowed(inv, "a/client", "a/server")  # Pass at order 10 skips the default tier → profile allows
    assert not allowed(
        inv, "b/other", "a/server"
    )  # same labels, other namespace: the source selector is namespaced
    other_port = inventory(text=PODS + CALICO, cni="calico")
    assert not allowed(
        other_port, "b/other", "a/server", 9090
    )  # end of tier: selected, nothing matched → deny


ANP_FAIL_CLOSED = """---
apiVersion: policy.networking.k8s.io/v1alpha1
kind: AdminNetworkPolicy
metadata: {name: fail-closed}
spec:
  priority: 5
  subject: {namespaces: {matchLabels: {team: red}}}
  ingress:
  - {name: future-peer, action: Deny, from: [{someFuturePeer: {}}]}
"""


def test_anp_unknown_peer_fails_closed() -> None:
    inv = inventory(text=PODS + ANP_FAIL_CLOSED)
    assert not allowed(inv, "b/other", "a/server")
    accept = inventory(text=PODS + ANP_FAIL_CLOSED.replace("Deny", "Allow"))
    assert allowed(accept, "b/other", "a/server")  # matches nothing; default allow


def test_cilium_policies_are_not_enforced_under_another_cni() -> None:
    inv = inventory(text=PODS + cnp(SERVER_FROM_CLIENTS), cni="calico")
    assert inv.policies == [] and any("not enforced" in n for _, n in inv.file_notes)
    assert allowed(inv, "b/other", "a/server")


def test_label_filter_follows_cilium_longest_match() -> None:
    """An include must match a longer prefix than the ignore it overrides (pkg/labelsfilter)."""
    from auditor.reachability.cni import LabelFilter

    default = LabelFilter.cilium_default()
    assert not default.keeps("topology.kubernetes.io/zone") and not default.keeps("pod-template-hash")
    assert default.keeps("app") and default.keeps("app.kubernetes.io/name") and default.keeps("job-name")
    assert not default.keeps("statefulset.kubernetes.io/pod-name")
    assert not LabelFilter.from_setting("k8s:topology.kubernetes.io").keeps("topology.kubernetes.io/zone")
    keep_zone = LabelFilter.from_setting("k8s:topology.kubernetes.io/zone")
    assert keep_zone.keeps("topology.kubernetes.io/zone") and not keep_zone.keeps("team")
    assert keep_zone.keeps("io.kubernetes.pod.namespace")
    assert not LabelFilter.from_setting("k8s:!team").keeps("team")


def test_shared_verdicts_still_see_the_subjects_node_and_named_ports() -> None:
    """Subjects selected by the same policies share verdicts per peer, except where the verdict reads
    the subject itself: its node (Cilium host vs remote-node) and its own named ports (ingress)."""
    body = (
        "  endpointSelector: {matchLabels: {app: server}}\n  ingress:\n  - fromEntities: [host]\n"
        "  - fromEndpoints: [{matchLabels: {app: client}}]\n    toPorts: [{ports: [{port: http}]}]\n"
    )
    inv = inventory(text=PODS + cnp(body))
    engine = policy_engine(inv)
    server = endpoint_for(inv, find_role(inv, "a/server"), None)
    client = endpoint_for(inv, find_role(inv, "a/client"), None)
    on_n1 = dataclasses.replace(server, node="n1")
    on_n2 = dataclasses.replace(server, node="n2")
    host_pod_n1 = dataclasses.replace(client, host_network=True, node="n1")
    # The same host-network peer is the local host for one replica and a remote node for the other.
    assert engine.directional(on_n1, Direction.INGRESS, host_pod_n1).at("TCP", 1).allowed
    assert not engine.directional(on_n2, Direction.INGRESS, host_pod_n1).at("TCP", 1).allowed
    assert engine.directional(on_n1, Direction.INGRESS, NodeEndpoint("n1")).at("TCP", 1).allowed
    assert not engine.directional(on_n2, Direction.INGRESS, NodeEndpoint("n1")).at("TCP", 1).allowed
    # A peer on the pod network is itself wherever it runs: the client is allowed on port http, from
    # any node, and the host rule never covers it.
    for node in ("n1", "n2"):
        client_on = dataclasses.replace(client, node=node)
        assert engine.directional(on_n1, Direction.INGRESS, client_on).at("TCP", 8080).allowed
        assert not engine.directional(on_n1, Direction.INGRESS, client_on).at("TCP", 1).allowed
    # Named port `http` resolves on each subject: 8080 on one, 9090 on the other.
    other_port = dataclasses.replace(server, named_ports=(NamedPort("http", "TCP", 9090),))
    assert engine.directional(server, Direction.INGRESS, client).at("TCP", 8080).allowed
    assert not engine.directional(server, Direction.INGRESS, client).at("TCP", 9090).allowed
    assert engine.directional(other_port, Direction.INGRESS, client).at("TCP", 9090).allowed
    assert not engine.directional(other_port, Direction.INGRESS, client).at("TCP", 8080).allowed


@pytest.mark.parametrize(
    "text",
    [
        "10.1.2.3",
        " 10.1.2.3\n",
        "0.0.0.0",
        "255.255.255.255",
        "01.2.3.4",
        "1.2.3.04",
        "000.1.2.3",
        "256.1.1.1",
        "1.2.3",
        "1.2.3.4.5",
        "1..2.3",
        "0x1.2.3.4",
        "+1.2.3.4",
        "1.2.3.4/32",
        "١.2.3.4",
        "1.2.3.4\x00",
        "",
        "::1",
        "::ffff:1.2.3.4",
        "fe80::1%eth0",
        "2001:db8::1",
    ],
)
def test_parse_ip_is_ipaddress_on_the_stripped_text(text: str) -> None:
    """The inet_pton fast path for dotted quads changes no answer and no error message."""
    try:
        want: object = ipaddress.ip_address(text.strip())
    except ValueError as exc:
        with pytest.raises(ValueError) as got:
            parse_ip(text)
        assert str(got.value) == str(exc)
        return
    ip = parse_ip(text)
    assert (ip, type(ip)) == (want, type(want))


def test_a_node_less_pod_is_the_pod_with_only_its_node_dropped() -> None:
    """PolicyEngine._nodeless_pod builds the copy field by field (dataclasses.replace is 3x
    slower there): every other field must carry over, whatever fields PodEndpoint grows."""
    from auditor.reachability.endpoints import PodEndpoint

    pod = PodEndpoint(
        namespace="ml",
        name="ml/job/Worker",
        labels=(("app", "w"),),
        namespace_labels=(("team", "a"),),
        service_account="trainer",
        named_ports=(NamedPort("nccl", "TCP", 23456),),
        ips=(ipaddress.ip_address("10.1.2.3"),),
        node="gpu-1",
        zone="za",
        host_network=False,
        node_labels=(("topology.kubernetes.io/zone", "za"),),
    )
    nodeless = policy_engine(inventory(text=""))._nodeless_pod(pod)
    expected = dataclasses.replace(pod, node=None, node_labels=())
    assert [getattr(nodeless, f.name) for f in dataclasses.fields(PodEndpoint)] == [
        getattr(expected, f.name) for f in dataclasses.fields(PodEndpoint)
    ]
