"""components/admission (cert-manager) and components/admission-selfsigned on overlays/postgres,
rendered by the real `kubectl kustomize`: the ValidatingWebhookConfiguration asks for exactly the
kinds the webhook answers for (auditor/admission/warm.py), fails open and never intercepts the
system namespaces, its own namespace, namespaces turned off or a controller's children (the
matchConditions evaluated with a real CEL runtime); it reaches the webhook's Service, port and
path; the RBAC is the list and watch of what the informer reads and nothing else; the certificate
chain and CA injection hold together; and deploy/kind/admission-certs.sh makes a certificate the
server loads and a client that trusts the CA verifies for the Service's name."""

from __future__ import annotations

import re
import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest
from deploysupport import DEPLOY, DEPLOY_DOC, NAMESPACE, find, kubectl, one, render_variant
from test_deploy_kustomize import _assert_hardened
from test_deploy_rbac import ANY, Grant, grants_of
from test_deploy_schemas import validate_builtin

from auditor.admission.server import Certificates
from auditor.admission.warm import POLICY_KINDS, WORKLOAD_KINDS, resource_for
from auditor.rules.cel_rules import compile_expression
from auditor.settings.admission import MODE_LABEL
from auditor.settings.config import load_settings
from auditor.sources.kubeapi import RESOURCES

pytestmark = pytest.mark.skipif(kubectl() is None, reason="kubectl is installed by .ci/run")
NAME = "placement-auditor-admission"
ACCOUNT = (NAMESPACE, NAME)
CERT_SCRIPT = DEPLOY / "kind" / "admission-certs.sh"


@pytest.fixture(scope="module", params=["cert-manager", "selfsigned"])
def variant(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list]:
    component = "admission" if request.param == "cert-manager" else "admission-selfsigned"
    return request.param, render_variant(tmp_path_factory.mktemp(request.param), "postgres", [component])


@pytest.fixture(scope="module")
def objs(variant: tuple[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return variant[1]


def _webhooks(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    config = one(objs, "ValidatingWebhookConfiguration", NAME)
    return {w["name"]: w for w in config["webhooks"]}


def _rules(webhook: dict[str, Any]) -> set[tuple[str, str, str]]:
    """(group, resource, operation) the webhook's rules send."""
    out = set()
    for rule in webhook["rules"]:
        assert "*" not in rule["resources"] and "*" not in rule["apiGroups"], rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert "/" not in resource, f"a subresource is sent: {resource}"
                out.update((group, resource, op) for op in rule["operations"])
    return out


def _plural(group: str, kind: str) -> str:
    resource = resource_for(group, kind)
    if resource is not None:
        return resource.plural
    return {"NetworkPolicy": "networkpolicies", "GlobalNetworkPolicy": "globalnetworkpolicies"}[kind]


# -- what the API server sends ------------------------------------------------------------------


def test_the_webhooks_send_exactly_the_kinds_the_webhook_answers_for(objs: list[dict[str, Any]]) -> None:
    hooks = _webhooks(objs)
    assert set(hooks) == {
        "workloads.admission.placement-auditor.io",
        "policies.admission.placement-auditor.io",
    }
    workloads = _rules(hooks["workloads.admission.placement-auditor.io"])
    assert workloads == {
        (group, _plural(group, kind), op) for group, kind in WORKLOAD_KINDS for op in ("CREATE", "UPDATE")
    }
    policies = _rules(hooks["policies.admission.placement-auditor.io"])
    assert policies == {
        (group, _plural(group, kind), op)
        for group, kind in POLICY_KINDS
        for op in ("CREATE", "UPDATE", "DELETE")
    }
    # Scopes as the resources are: a namespaced rule never names a cluster-scoped resource.
    for webhook in hooks.values():
        for rule in webhook["rules"]:
            for group in rule["apiGroups"]:
                for plural in rule["resources"]:
                    found = next((r for r in RESOURCES if (r.group, r.plural) == (group, plural)), None)
                    if found is not None:
                        assert rule["scope"] == ("Namespaced" if found.namespaced else "Cluster"), rule


def test_the_webhooks_fail_open_fast_and_change_nothing(objs: list[dict[str, Any]]) -> None:
    budget_ms = load_settings(
        str(DEPLOY / "kustomize" / "base" / "config" / "auditor.yaml")
    ).admission.budget_ms
    for webhook in _webhooks(objs).values():
        assert webhook["failurePolicy"] == "Ignore"
        assert webhook["sideEffects"] == "None"
        assert webhook["admissionReviewVersions"] == ["v1"]
        assert webhook["matchPolicy"] == "Equivalent"
        # Inside the API server's ceiling (30 s) and well above the answer budget, so a slow answer
        # is the webhook's own fail-open warning, not the API server's timeout.
        assert budget_ms / 1000 < webhook["timeoutSeconds"] <= 10


def _selects_namespace(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) == {"matchExpressions"}
    for expr in selector["matchExpressions"]:
        assert expr["operator"] == "NotIn"
        if labels.get(expr["key"]) in expr["values"]:
            return False
    return True


def test_system_namespaces_its_own_and_those_turned_off_are_never_sent(objs: list[dict[str, Any]]) -> None:
    def labels(name: str, mode: str | None = None) -> dict[str, str]:
        out = {"kubernetes.io/metadata.name": name}
        return out | ({MODE_LABEL: mode} if mode else {})

    for webhook in _webhooks(objs).values():
        selector = webhook["namespaceSelector"]
        assert not _selects_namespace(selector, labels("kube-system"))
        assert not _selects_namespace(selector, labels(NAMESPACE))
        assert not _selects_namespace(selector, labels("ml-demo", "off"))
        assert _selects_namespace(selector, labels("ml-demo", "deny"))
        assert _selects_namespace(selector, labels("ml-demo", "warn"))
        assert _selects_namespace(selector, labels("ml-demo"))


def _conditions(webhook: dict[str, Any]) -> list[Any]:
    return [
        (c["name"], compile_expression(c["expression"], ("object", "oldObject", "request")))
        for c in webhook.get("matchConditions", [])
    ]


def _sent(webhook: dict[str, Any], obj: dict[str, Any] | None, resource: tuple[str, str]) -> bool:
    """Whether every matchCondition holds, as the API server evaluates them (all must be true)."""
    group, plural = resource
    request = {
        "resource": {"group": group, "version": "v1", "resource": plural},
        "userInfo": {"username": "alice@example.com"},
        "operation": "CREATE",
    }
    activation = {"object": obj or {}, "oldObject": {}, "request": request}
    return all(program.evaluate(activation) is True for _, program in _conditions(webhook))


def test_match_conditions_skip_children_of_audited_workloads_and_leases(objs: list[dict[str, Any]]) -> None:
    hooks = _webhooks(objs)
    workloads = hooks["workloads.admission.placement-auditor.io"]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "w", "namespace": "ml-demo"}}
    assert _sent(workloads, job, ("batch", "jobs"))

    def owned(kind: str, controller: bool | None) -> dict[str, Any]:
        ref: dict[str, Any] = {"apiVersion": "x/v1", "kind": kind, "name": "o", "uid": "u"}
        if controller is not None:
            ref["controller"] = controller
        return {**job, "metadata": {**job["metadata"], "ownerReferences": [ref]}}

    audited = sorted({kind for _, kind in WORKLOAD_KINDS})
    listed = re.findall(r"'(\w+)'", workloads["matchConditions"][0]["expression"])
    assert sorted(set(listed)) == audited, "the owner kinds in matchConditions drifted from WORKLOAD_KINDS"
    for kind in audited:
        assert not _sent(workloads, owned(kind, True), ("batch", "jobs")), kind
        assert _sent(workloads, owned(kind, False), ("batch", "jobs")), kind
        assert _sent(workloads, owned(kind, None), ("batch", "jobs")), kind
    assert _sent(workloads, owned("SomeOperatorsTrainer", True), ("batch", "jobs"))
    # Leases (heartbeats, leader election: ours too) are never sent, even under a widened rule.
    for webhook in hooks.values():
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}}
        assert not _sent(webhook, lease, ("coordination.k8s.io", "leases"))
        policy = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "p"}}
        assert _sent(webhook, policy, ("networking.k8s.io", "networkpolicies"))


# -- the server behind it -----------------------------------------------------------------------


def test_the_webhooks_reach_the_webhook_pods_on_the_port_they_serve(objs: list[dict[str, Any]]) -> None:
    deploy = one(objs, "Deployment", NAME)
    pod = deploy["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    args = container["args"]
    assert args[0] == "admit" and "--in-cluster" in args
    assert int(args[args.index("--port") + 1]) == ports["https"]
    assert int(args[args.index("--metrics-port") + 1]) == ports["metrics"]
    service = one(objs, "Service", NAME)
    labels = pod["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    server_service = one(objs, "Service", "placement-auditor")
    assert not server_service["spec"]["selector"].items() <= labels.items(), "the server's Service selects us"
    by_port = {p["port"]: p for p in service["spec"]["ports"]}
    for webhook in _webhooks(objs).values():
        ref = webhook["clientConfig"]["service"]
        assert (ref["namespace"], ref["name"], ref["path"]) == (NAMESPACE, NAME, "/validate")
        assert by_port[ref["port"]]["targetPort"] == "https"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = container[probe]["httpGet"]
        assert get["scheme"] == "HTTPS" and get["port"] == "https"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_two_replicas_spread_hardened_with_a_disruption_budget(objs: list[dict[str, Any]]) -> None:
    deploy = one(objs, "Deployment", NAME)
    assert deploy["spec"]["replicas"] == 2
    assert deploy["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = deploy["spec"]["template"]["spec"]
    _assert_hardened(pod)
    assert {c["topologyKey"] for c in pod["topologySpreadConstraints"]} >= {"topology.kubernetes.io/zone"}
    pdb = one(objs, "PodDisruptionBudget", NAME)
    assert pdb["spec"]["minAvailable"] == 1
    assert (
        pdb["spec"]["selector"]["matchLabels"].items()
        <= deploy["spec"]["template"]["metadata"]["labels"].items()
    )
    assert pod["serviceAccountName"] == NAME
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container.get("env", [])}
    # The database, and nothing else secret: no API token, git or SMTP credentials.
    assert set(env) == {"AUDITOR_DATABASE_URL"}
    secrets = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert secrets == {"placement-auditor-admission-tls"}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    tls = next(v["name"] for v in pod["volumes"] if "secret" in v)
    assert "subPath" not in mounts[tls], "a subPath mount never sees a renewed certificate"
    where = mounts[tls]["mountPath"]
    args = container["args"]
    assert args[args.index("--tls-cert") + 1] == f"{where}/tls.crt"
    assert args[args.index("--tls-key") + 1] == f"{where}/tls.key"


def test_the_network_policy_admits_the_api_server_and_prometheus(objs: list[dict[str, Any]]) -> None:
    policy = one(objs, "NetworkPolicy", NAME)
    labels = one(objs, "Deployment", NAME)["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    open_ports = [r for r in policy["spec"]["ingress"] if "from" not in r]
    assert [p["port"] for r in open_ports for p in r["ports"]] == [8443]
    egress_ports = {p["port"] for r in policy["spec"]["egress"] for p in r.get("ports", [])}
    assert {53, 443, 5432} <= egress_ports


def test_rbac_is_the_informers_list_and_watch_and_nothing_else(objs: list[dict[str, Any]]) -> None:
    granted = grants_of(objs, ACCOUNT)
    wanted = {Grant(ANY, r.group, r.plural, verb, ANY) for r in RESOURCES for verb in ("list", "watch")}
    wanted |= {Grant("kube-system", "", "configmaps", verb, "cilium-config") for verb in ("list", "watch")}
    assert granted == wanted, {"missing": wanted - granted, "extra": granted - wanted}
    # The server's reader is untouched by the component.
    assert grants_of(objs, (NAMESPACE, "placement-auditor"))


def test_every_builtin_object_matches_its_schema(objs: list[dict[str, Any]]) -> None:
    for obj in objs:
        if obj["apiVersion"].startswith(("cert-manager.io/", "monitoring.coreos.com/")):
            continue  # CRDs: checked field by field below / in test_deploy_schemas
        validate_builtin(obj)


# -- certificates -------------------------------------------------------------------------------


def test_cert_manager_issues_and_injects_the_ca_the_api_server_trusts(
    variant: tuple[str, list[dict[str, Any]]],
) -> None:
    name, objs = variant
    config = one(objs, "ValidatingWebhookConfiguration", NAME)
    if name == "selfsigned":
        assert not find(objs, "Certificate") and not find(objs, "Issuer")
        assert "cert-manager.io/inject-ca-from" not in (config["metadata"].get("annotations") or {})
        for webhook in config["webhooks"]:
            assert "caBundle" not in webhook["clientConfig"], "the script sets caBundle; apply must not"
        return
    ns, cert_name = config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].split("/")
    serving = one(objs, "Certificate", cert_name)
    assert serving["metadata"]["namespace"] == ns == NAMESPACE
    assert serving["spec"]["secretName"] == "placement-auditor-admission-tls"
    assert f"{NAME}.{NAMESPACE}.svc" in serving["spec"]["dnsNames"]
    assert "server auth" in serving["spec"]["usages"]
    assert serving["spec"]["privateKey"]["rotationPolicy"] == "Always"
    hours = {k: int(serving["spec"][k].removesuffix("h")) for k in ("renewBefore", "duration")}
    assert 0 < hours["renewBefore"] < hours["duration"]
    # The chain: serving <- CA Issuer <- CA Certificate <- self-signed Issuer, all in our namespace.
    issuer = one(objs, "Issuer", serving["spec"]["issuerRef"]["name"])
    ca = one(objs, "Certificate", "placement-auditor-admission-ca")
    assert issuer["spec"]["ca"]["secretName"] == ca["spec"]["secretName"] and ca["spec"]["isCA"] is True
    root = one(objs, "Issuer", ca["spec"]["issuerRef"]["name"])
    assert root["spec"] == {"selfSigned": {}}


def _handshake(cert: Path, key: Path, ca: Path, hostname: str) -> None:
    """A TLS handshake in memory: the server with the certificate, a client trusting only `ca`."""
    server_ctx = Certificates(cert, key).context
    client_ctx = ssl.create_default_context(cafile=str(ca))
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname=hostname)
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(20):
        for side, obj in (("client", client), ("server", server)):
            if not done[side]:
                try:
                    obj.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            return
    raise AssertionError("the handshake did not finish")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is in the Debian base image")
def test_the_kind_script_makes_a_certificate_the_server_serves_and_clients_verify(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    run = subprocess.run(
        ["bash", str(CERT_SCRIPT), "--out", str(out)], capture_output=True, text=True, timeout=60, check=False
    )
    assert run.returncode == 0, run.stderr
    for host in (f"{NAME}.{NAMESPACE}.svc", f"{NAME}.{NAMESPACE}.svc.cluster.local"):
        _handshake(out / "tls.crt", out / "tls.key", out / "ca.crt", host)
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(out / "tls.crt", out / "tls.key", out / "ca.crt", "somewhere.else.svc")
    assert (out.stat().st_mode & 0o077) == 0 and ((out / "ca.key").stat().st_mode & 0o077) == 0
    # Again: the same CA (the caBundle in the cluster stays valid), a new key.
    ca, key = (out / "ca.crt").read_bytes(), (out / "tls.key").read_bytes()
    again = subprocess.run(
        ["bash", str(CERT_SCRIPT), "--out", str(out)], capture_output=True, text=True, timeout=60, check=False
    )
    assert again.returncode == 0, again.stderr
    assert (out / "ca.crt").read_bytes() == ca and (out / "tls.key").read_bytes() != key
    _handshake(out / "tls.crt", out / "tls.key", out / "ca.crt", f"{NAME}.{NAMESPACE}.svc")
    bad = subprocess.run(
        ["bash", str(CERT_SCRIPT), "--days", "soon"], capture_output=True, text=True, timeout=60, check=False
    )
    assert bad.returncode == 2 and "--days" in bad.stderr


def test_the_deploy_doc_describes_both_ways_to_install() -> None:
    text = DEPLOY_DOC.read_text()
    for needle in ("components/admission", "components/admission-selfsigned", "admission-certs.sh"):
        assert needle in text, needle
