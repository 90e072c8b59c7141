"""The admission webhook end to end: AdmissionReview requests shaped as the API server sends them
(k8s.io/api admission/v1 `AdmissionRequest`, and the example request of the Kubernetes
documentation "Dynamic Admission Control": uid, kind, resource, subResource, requestKind,
name, namespace, operation, userInfo, object, oldObject, dryRun, options), over real HTTPS with
certificates made by `cryptography`, against the warm model of the seed scenario."""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import http.client
import json
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from admissionsupport import certificate, request
from dbsupport import Clock, engine_for

from auditor.admission import review as rv
from auditor.admission.check import Checker
from auditor.admission.record import AdmissionRecord
from auditor.admission.server import Certificates, Metrics, Recorder, Running, Webhook
from auditor.admission.warm import WarmModel
from auditor.rules.packs import load_packs
from auditor.settings.admission import MODE_LABEL, AdmissionSettings
from auditor.settings.config import Settings
from auditor.store.repository import Store

SEED = Path(__file__).resolve().parents[2] / "auditor" / "examples" / "seed-lab"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _namespace(mode: str | None) -> dict[str, Any]:
    labels = {"kubernetes.io/metadata.name": "ml-demo"}
    if mode:
        labels[MODE_LABEL] = mode
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml-demo", "labels": labels}}


def _model(*objects: dict[str, Any], mode: str | None = None, policies: bool = True) -> WarmModel:
    model = WarmModel("lab", monotonic=lambda: 0.0)
    base = _docs(SEED / "nodes.yaml") + (_docs(SEED / "policies.yaml") if policies else [])
    model.load([*base, _namespace(mode), *objects])
    return model


def _part(state: str, kind: str) -> dict[str, Any]:
    return next(d for d in _docs(SEED / state / "workload.yaml") if d["kind"] == kind)


class Sink:
    def __init__(self) -> None:
        self.records: list[AdmissionRecord] = []

    def record_admission(self, decision: AdmissionRecord) -> bool:
        self.records.append(decision)
        return True


PINNED = dt.datetime(2026, 12, 6, 9, 0, tzinfo=dt.UTC)


def webhook(model: WarmModel, settings: AdmissionSettings | None = None, sink: Any = None) -> Webhook:
    metrics = Metrics()
    return Webhook(
        model,
        Checker(Settings(), load_packs([]), model),
        settings or AdmissionSettings(),
        lambda: PINNED,
        cluster="lab",
        metrics=metrics,
        recorder=Recorder(sink, metrics),
    )


def answer(hook: Webhook, body: dict[str, Any]) -> dict[str, Any]:
    reply = hook.review(json.dumps(body).encode())
    assert reply.status == 200, reply.body
    data = json.loads(reply.body)
    assert data["apiVersion"] == "admission.k8s.io/v1" and data["kind"] == "AdmissionReview"
    return data["response"]


# -- the seed scenario -----------------------------------------------------------------------------


def test_before_workers_are_warned_in_warn_mode() -> None:
    hook = webhook(_model(_part("before", "Deployment"), _part("before", "Service"), mode="warn"))
    out = answer(hook, request(_part("before", "Job")))
    assert out["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    assert out["allowed"] is True
    warnings = out["warnings"]
    assert any("cross-zone-blocked ml-demo/trainer-workers" in w and "9999" in w for w in warnings), warnings
    for w in warnings:
        assert len(w) < 120 and w.isprintable(), w


def test_before_workers_are_denied_in_deny_mode_with_the_fix() -> None:
    hook = webhook(_model(_part("before", "Deployment"), _part("before", "Service"), mode="deny"))
    out = answer(hook, request(_part("before", "Job")))
    assert out["allowed"] is False
    status = out["status"]
    assert status["code"] == 403 and status["reason"] == "Forbidden"
    message = status["message"]
    assert "cross-zone-blocked (critical, always)" in message
    assert "zone-b-only" in message or "gpu-workers-stay-in-zone-a" in message
    assert "fix: pin-zone to zone-a" in message and "auditor fix" in message


def test_a_denial_spells_out_five_findings_and_counts_the_rest() -> None:
    """Many findings: the first five in full, the others counted per rule; the way out stays."""
    from auditor.admission.answer import DENIAL_DETAILED
    from auditor.admission.answer import answer as decide
    from auditor.admission.check import Verdict

    hook = webhook(_model(_part("before", "Deployment"), _part("before", "Service"), mode="deny"))
    review = rv.parse(json.dumps(request(_part("before", "Job"))).encode())
    verdict = hook.checker.check(review, PINNED.date())
    (finding,) = verdict.findings
    many = tuple(
        dataclasses.replace(finding, message=f"{finding.message} (#{i})") for i in range(DENIAL_DETAILED + 7)
    )
    out = decide(
        Verdict("workload", many, fixes=verdict.fixes), "deny", "label", "Job ml-demo/x", AdmissionSettings()
    )
    assert not out.allowed
    assert out.message.count("cross-zone-blocked (") == DENIAL_DETAILED
    assert "and 7 more (cross-zone-blocked ×7)" in out.message
    assert out.message.rstrip().endswith("=warn (or off)")
    assert len(out.warnings) == DENIAL_DETAILED + 7


def test_a_node_change_reaches_the_next_answer() -> None:
    """The parsed Nodes are kept while the cluster's objects stand: once every node is relabelled
    into one zone, the same apply can no longer split across zones (the seed's policies still
    deny the path by pod label: that finding stays)."""
    from auditor.sources.kubeapi import RESOURCES

    model = _model(_part("before", "Deployment"), _part("before", "Service"), mode="deny")
    hook = webhook(model)
    before = answer(hook, request(_part("before", "Job")))
    assert any("cross-zone-blocked" in w for w in before["warnings"])
    nodes = next(r for r in RESOURCES if r.kind == "Node")
    for item in _docs(SEED / "nodes.yaml")[0]["items"]:
        moved = copy.deepcopy(item)
        if "topology.kubernetes.io/zone" in moved["metadata"].get("labels", {}):
            moved["metadata"]["labels"]["topology.kubernetes.io/zone"] = "zone-a"
        model.upsert(nodes, moved)
    after = answer(hook, request(_part("before", "Job")))
    assert after["warnings"] and not any("cross-zone-blocked" in w for w in after["warnings"]), after


def test_the_coordinator_applied_after_the_workers_is_caught_too() -> None:
    """Order does not matter: the Deployment arriving second is named by the Job in force."""
    hook = webhook(_model(_part("before", "Job"), _part("before", "Service"), mode="deny"))
    out = answer(hook, request(_part("before", "Deployment")))
    assert out["allowed"] is False
    assert "cross-zone-blocked" in out["status"]["message"]


def test_after_state_is_allowed_without_warnings() -> None:
    hook = webhook(_model(_part("after", "Deployment"), _part("after", "Service"), mode="deny"))
    out = answer(hook, request(_part("after", "Job")))
    assert out == {"uid": out["uid"], "allowed": True}


def test_the_fixing_update_is_allowed_and_a_kept_finding_only_warns() -> None:
    before, after = _part("before", "Deployment"), _part("after", "Deployment")
    hook = webhook(_model(before, _part("before", "Service"), _part("before", "Job"), mode="deny"))
    fixed = answer(hook, request(after, "UPDATE", old=before))
    assert fixed == {"uid": fixed["uid"], "allowed": True}
    # An unrelated change to the broken coordinator keeps the finding: it warns, never denies.
    bumped = copy.deepcopy(before)
    bumped["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:1.37"
    kept = answer(hook, request(bumped, "UPDATE", old=before))
    assert kept["allowed"] is True
    assert any("(already before this change)" in w for w in kept["warnings"])


def _running(state: str) -> list[dict[str, Any]]:
    """The group of `state` running: its pods on the seed nodes (owner Job / ReplicaSet)."""
    deploy, job = _part(state, "Deployment"), _part(state, "Job")
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": "trainer-coordinator-6d8f",
            "namespace": "ml-demo",
            "labels": deploy["spec"]["template"]["metadata"]["labels"],
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": "trainer-coordinator",
                    "controller": True,
                    "uid": "d1",
                }
            ],
        },
        "spec": {
            "replicas": 1,
            "selector": deploy["spec"]["selector"],
            "template": deploy["spec"]["template"],
        },
    }
    pods = []
    coordinator_node = "lab-worker" if state == "after" else "lab-worker3"
    pods.append(
        _pod("trainer-coordinator-6d8f-x1", deploy, "ReplicaSet", rs["metadata"]["name"], coordinator_node)
    )
    for i in range(4):
        pods.append(
            _pod(
                f"trainer-workers-{i}",
                job,
                "Job",
                "trainer-workers",
                "lab-worker" if i % 2 else "lab-worker2",
            )
        )
    return [deploy, _part(state, "Service"), job, rs, *pods]


def _pod(name: str, owner: dict[str, Any], kind: str, owner_name: str, node: str) -> dict[str, Any]:
    template = owner["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml-demo",
            "labels": template["metadata"]["labels"],
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1" if kind == "ReplicaSet" else "batch/v1",
                    "kind": kind,
                    "name": owner_name,
                    "controller": True,
                    "uid": "o",
                }
            ],
        },
        "spec": {**template["spec"], "nodeName": node},
        "status": {"phase": "Running"},
    }


def _nodes_by_zone() -> dict[str, str]:
    return {
        n["metadata"]["name"]: n["metadata"].get("labels", {}).get("topology.kubernetes.io/zone", "")
        for d in _docs(SEED / "nodes.yaml")
        for n in d.get("items", [d])
    }


def test_the_zone_policies_applied_under_a_running_split_group_are_denied_naming_it() -> None:
    zones = _nodes_by_zone()
    assert zones["lab-worker3"] != zones["lab-worker"], "the seed nodes changed: fix the pod placement"
    hook = webhook(_model(*_running("before"), mode="deny", policies=False))
    policy = next(d for d in _docs(SEED / "policies.yaml") if d["metadata"]["name"] == "zone-b-only")
    out = answer(hook, request(policy))
    assert out["allowed"] is False, out
    message = out["status"]["message"]
    assert "ml-demo/trainer-workers (running)" in message
    assert any("this policy would cut ml-demo/trainer-workers" in w for w in out.get("warnings", []))


def _swapped_boundary() -> dict[str, Any]:
    """A zone boundary with its zones swapped: zone-a pods may only be reached from zone-b."""
    return {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "metadata": {"name": "zone-a-ingress", "namespace": "ml-demo"},
        "spec": {
            "endpointSelector": {"matchLabels": {"zone": "zone-a"}},
            "ingress": [{"fromEndpoints": [{"matchLabels": {"zone": "zone-b"}}]}],
        },
    }


@pytest.mark.parametrize("mode", ["warn", "deny"])
def test_a_zone_blocking_policy_applied_while_the_after_group_runs_names_it(mode: str) -> None:
    hook = webhook(_model(*_running("after"), mode=mode, policies=False))
    out = answer(hook, request(_swapped_boundary()))
    assert out["allowed"] is (mode == "warn"), out
    text = " ".join(out.get("warnings", [])) + out.get("status", {}).get("message", "")
    assert "ml-demo/trainer-workers" in text and "traffic-blocked" in text


def test_deleting_the_policy_that_kept_the_path_open_is_caught() -> None:
    allow = {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "metadata": {"name": "zone-a-from-zone-a", "namespace": "ml-demo"},
        "spec": {
            "endpointSelector": {"matchLabels": {"zone": "zone-a"}},
            "ingress": [
                {"fromEndpoints": [{"matchLabels": {"zone": "zone-a"}}, {"matchLabels": {"zone": "zone-b"}}]}
            ],
        },
    }
    hook = webhook(_model(*_running("after"), allow, _swapped_boundary(), mode="deny", policies=False))
    out = answer(hook, request(None, "DELETE", old=allow))
    assert out["allowed"] is False, out
    assert "ml-demo/trainer-workers" in out["status"]["message"]


def test_a_policy_update_that_changes_only_metadata_decides_nothing() -> None:
    """Labels and annotations of a policy select nothing: such an UPDATE (a GitOps re-label) is
    allowed without an audit, while the same UPDATE that also swaps the zones is denied."""
    old = copy.deepcopy(_swapped_boundary())
    old["spec"]["endpointSelector"] = {"matchLabels": {"zone": "nowhere"}}
    hook = webhook(_model(*_running("after"), old, mode="deny", policies=False))
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"] = {"team": "platform"}
    relabelled["metadata"]["annotations"] = {"note": "re-applied"}
    assert answer(hook, request(relabelled, "UPDATE", old=old)) == {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "allowed": True,
    }
    out = answer(hook, request(_swapped_boundary(), "UPDATE", old=old))
    assert out["allowed"] is False and "ml-demo/trainer-workers" in out["status"]["message"]


def test_a_cilium_policy_changed_only_in_its_specs_list_is_checked() -> None:
    """`specs` (the multi-rule form) sits beside `spec`: a change there is a change."""
    benign = {"endpointSelector": {"matchLabels": {"zone": "nowhere"}}, "ingress": [{}]}
    old = {**_swapped_boundary(), "spec": None, "specs": [benign]}
    old.pop("spec")
    new = copy.deepcopy(old)
    new["specs"] = [_swapped_boundary()["spec"]]
    hook = webhook(_model(*_running("after"), old, mode="deny", policies=False))
    out = answer(hook, request(new, "UPDATE", old=old))
    assert out["allowed"] is False and "ml-demo/trainer-workers" in out["status"]["message"]


def test_the_state_in_force_is_audited_again_once_the_model_changes() -> None:
    """The findings of the state in force are reused only while the namespaces' versions stand:
    once the running group is gone from the model, the same policy cuts nothing."""
    running = _running("after")
    model = _model(*running, mode="deny", policies=False)
    hook = webhook(model)
    first = answer(hook, request(_swapped_boundary()))
    again = answer(hook, request(_swapped_boundary()))
    assert first == again and first["allowed"] is False
    from auditor.sources.kubeapi import RESOURCES

    for obj in running:
        resource = next(
            r for r in RESOURCES if r.kind == obj["kind"] and obj["apiVersion"].startswith(r.group)
        )
        model.delete(resource, obj)
    assert answer(hook, request(_swapped_boundary()))["allowed"] is True


def test_dry_run_is_answered_the_same_and_recorded_as_such() -> None:
    sink = Sink()
    hook = webhook(_model(_part("before", "Deployment"), _part("before", "Service"), mode="deny"), sink=sink)
    hook.recorder.start()
    out = answer(hook, request(_part("before", "Job"), dry_run=True))
    hook.recorder.flush()
    assert out["allowed"] is False
    (record,) = sink.records
    assert record.dry_run and record.outcome == "denied" and record.rules == ("cross-zone-blocked",)
    assert record.groups == ("ml-demo/trainer-workers",) and record.user == "alice@example.com"
    hook.recorder.stop()


def test_off_mode_and_subresources_are_ignored() -> None:
    off = webhook(_model(_part("before", "Deployment"), _part("before", "Service"), mode="off"))
    assert answer(off, request(_part("before", "Job"))) == {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "allowed": True,
    }
    deny = webhook(_model(_part("before", "Deployment"), _part("before", "Service"), mode="deny"))
    job = _part("before", "Job")
    assert answer(deny, request(job, "UPDATE", old=job, sub_resource="status"))["allowed"] is True


def test_a_workload_made_by_an_audited_owner_is_judged_through_it() -> None:
    """A JobSet's Job is not answered for alone (its owner's answer covered it); a Job some other
    controller made, or one whose owner reference is not the controller, still is."""
    hook = webhook(_model(_part("before", "Deployment"), _part("before", "Service"), mode="deny"))
    job = copy.deepcopy(_part("before", "Job"))
    owner = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "trainer", "uid": "u1"}
    job["metadata"]["ownerReferences"] = [{**owner, "controller": True}]
    assert answer(hook, request(job))["allowed"] is True
    job["metadata"]["ownerReferences"] = [{**owner, "controller": False}]
    assert answer(hook, request(job))["allowed"] is False
    other = {"apiVersion": "example.com/v1", "kind": "Trainer", "name": "t", "uid": "u2", "controller": True}
    job["metadata"]["ownerReferences"] = [other]
    assert answer(hook, request(job))["allowed"] is False


def test_parsed_parts_follow_the_object_the_model_holds() -> None:
    """The memo answers for the object the model holds now: a Node replaced by a watch event is
    parsed anew, and an object the model does not hold is never kept."""
    model = _model()
    name = _docs(SEED / "nodes.yaml")[0]["items"][1]["metadata"]["name"]
    held = model.get("", "", "Node", name)
    assert held is not None
    calls: list[str] = []

    def make(tag: str) -> Any:
        return lambda: calls.append(tag) or tag

    assert model.memo(held, "node", make("first")) == "first"
    assert model.memo(held, "node", make("second")) == "first"
    from auditor.sources.kubeapi import RESOURCES

    nodes = next(r for r in RESOURCES if r.kind == "Node")
    changed = copy.deepcopy(held)
    changed["metadata"]["labels"]["topology.kubernetes.io/zone"] = "zone-z"
    model.upsert(nodes, changed)
    now = model.get("", "", "Node", name)
    assert now is not None and now is not held
    assert model.memo(now, "node", make("third")) == "third"
    stranger = copy.deepcopy(now)
    assert model.memo(stranger, "node", make("fourth")) == "fourth"
    assert model.memo(stranger, "node", make("fifth")) == "fifth"
    assert calls == ["first", "third", "fourth", "fifth"]


# -- failing open -----------------------------------------------------------------------------------


def test_an_unsynced_model_fails_open_with_a_warning() -> None:
    model = WarmModel("lab", monotonic=lambda: 0.0)
    from auditor.sources.kubeapi import RESOURCES

    model.expect(RESOURCES)
    out = answer(webhook(model), request(_part("before", "Job")))
    assert out["allowed"] is True
    assert out["warnings"] == [
        "placement-auditor: not checked (the cluster model is not synced yet); allowed"
    ]


def test_a_watch_broken_too_long_fails_open() -> None:
    now = [0.0]
    model = WarmModel("lab", monotonic=lambda: now[0])
    model.load(
        [
            *_docs(SEED / "nodes.yaml"),
            *_docs(SEED / "policies.yaml"),
            _namespace("deny"),
            _part("before", "Deployment"),
            _part("before", "Service"),
        ]
    )
    from auditor.sources.kubeapi import RESOURCES

    class Broken:
        synced, healthy, problem, message = True, False, "failed", "watch: connection refused"

    model.state(RESOURCES[0], Broken())
    hook = webhook(model, AdmissionSettings(max_staleness_seconds=60))
    now[0] = 30.0
    assert answer(hook, request(_part("before", "Job")))["allowed"] is False  # still trusted
    now[0] = 61.0
    out = answer(hook, request(_part("before", "Job"), uid="u2"))
    assert out["allowed"] is True and "model stale" in out["warnings"][0]


def test_an_answer_over_budget_fails_open() -> None:
    model = _model(_part("before", "Deployment"), _part("before", "Service"), mode="deny")
    hook = webhook(model, AdmissionSettings(budget_ms=50))
    real = hook.checker.check

    def slow(review: rv.Review, today: dt.date) -> Any:
        time.sleep(0.5)
        return real(review, today)

    hook.checker.check = slow  # type: ignore[method-assign]
    out = answer(hook, request(_part("before", "Job")))
    assert out["allowed"] is True and "over the 50 ms budget" in out["warnings"][0]


def test_an_error_in_the_check_fails_open_and_is_logged_without_the_body(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = _model(_part("before", "Deployment"), _part("before", "Service"), mode="deny")
    hook = webhook(model)

    def broken(review: rv.Review, today: dt.date) -> Any:
        raise RuntimeError("boom")

    hook.checker.check = broken  # type: ignore[method-assign]
    job = _part("before", "Job")
    job["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": "TOKEN", "value": "s3cr3t-value"})
    out = answer(hook, request(job))
    assert out["allowed"] is True and "internal error RuntimeError" in out["warnings"][0]
    assert "s3cr3t-value" not in caplog.text


# -- bad input ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"", "not JSON"),
        (b"{", "not JSON"),
        (b"[]", "JSON object"),
        (
            json.dumps(
                {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}
            ).encode(),
            "v1beta1",
        ),
        (
            json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "Pod"}).encode(),
            "kind must be AdmissionReview",
        ),
        (
            json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
            "request is missing",
        ),
        (
            json.dumps(
                {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 5}}
            ).encode(),
            "uid must be a string",
        ),
        (
            json.dumps(
                {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "request": {"uid": "x", "kind": {"version": "v1", "kind": "Job"}, "operation": "PATCH"},
                }
            ).encode(),
            "operation",
        ),
        (
            json.dumps(
                {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "request": {
                        "uid": "x",
                        "kind": {"version": "v1", "kind": "Job"},
                        "operation": "CREATE",
                        "object": None,
                    },
                }
            ).encode(),
            "object is null",
        ),
    ],
)
def test_malformed_reviews_are_a_400_that_says_why(body: bytes, needle: str) -> None:
    hook = webhook(_model())
    reply = hook.review(body)
    assert reply.status == 400
    data = json.loads(reply.body)
    assert data["kind"] == "Status" and needle in data["message"], data


def test_fuzzed_reviews_never_raise() -> None:
    import random

    rng = random.Random(34)
    hook = webhook(_model(_part("before", "Deployment"), _part("before", "Service"), mode="deny"))
    seed = json.dumps(request(_part("before", "Job"))).encode()
    values: list[Any] = [None, 0, -1, 1e308, "", "x" * 300, [], {}, True, "\x00\u202e", {"a": [{}]}]
    for i in range(300):
        data = json.loads(seed)
        # mutate: replace a random node of the request with a random value
        node: Any = data["request"]
        path = []
        while isinstance(node, dict) and node and rng.random() < 0.7:
            key = rng.choice(sorted(node))
            path.append(key)
            parent, node = node, node[key]
        if path:
            parent[path[-1]] = rng.choice(values)
        body = json.dumps(data).encode()
        if i % 7 == 0:
            body = body[: rng.randrange(len(body))]
        reply = hook.review(body)
        assert reply.status in (200, 400), reply
        json.loads(reply.body)


# -- HTTPS ------------------------------------------------------------------------------------------


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Running, Path, Sink]]:
    crt, key = certificate(tmp_path, "first.example")
    sink = Sink()
    hook = webhook(
        _model(_part("before", "Deployment"), _part("before", "Service"), mode="deny"),
        AdmissionSettings(max_body_bytes=200_000),
        sink,
    )
    running = Running(hook, Certificates(crt, key), "127.0.0.1", 0, 0, reload_seconds=3600).start()
    try:
        yield running, tmp_path, sink
    finally:
        running.stop()


def _client(port: int) -> http.client.HTTPSConnection:
    context = ssl._create_unverified_context()  # the test pins nothing: it reads the peer cert
    return http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)


def _post(
    conn: http.client.HTTPSConnection, body: bytes, ctype: str = "application/json"
) -> tuple[int, dict[str, Any]]:
    conn.request("POST", "/validate", body=body, headers={"Content-Type": ctype})
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read() or b"{}")


def _peer_name(port: int) -> str:
    from cryptography import x509

    der = ssl.get_server_certificate(("127.0.0.1", port))
    cert = x509.load_pem_x509_certificate(der.encode())
    return cert.subject.rfc4514_string()


def test_https_answers_keep_alive_and_record(served: tuple[Running, Path, Sink]) -> None:
    running, _, sink = served
    conn = _client(running.port)
    status, data = _post(conn, json.dumps(request(_part("before", "Job"))).encode())
    assert status == 200 and data["response"]["allowed"] is False
    # The same Job again (the coordinator in force is still the broken one): denied again.
    status, data = _post(conn, json.dumps(request(_part("after", "Job"), uid="second")).encode())
    assert status == 200 and data["response"]["uid"] == "second" and data["response"]["allowed"] is False
    conn.request("GET", "/readyz")
    assert conn.getresponse().read() == b"ready\n"
    running.webhook.recorder.flush()
    assert [r.uid for r in sink.records] == ["705ab4f5-6393-11e8-b7cc-42010a800002", "second"]
    metrics = http.client.HTTPConnection("127.0.0.1", running.metrics_port or 0, timeout=10)
    metrics.request("GET", "/metrics")
    text = metrics.getresponse().read().decode()
    lines = text.splitlines()
    assert any(
        line.startswith("placement_auditor_admission_requests_total{")
        and 'kind="Job"' in line
        and 'outcome="denied"' in line
        and line.endswith(" 2.0")
        for line in lines
    ), text
    assert any(
        line.startswith("placement_auditor_admission_findings_total{")
        and 'rule="cross-zone-blocked"' in line
        and line.endswith(" 2.0")
        for line in lines
    ), text
    assert "placement_auditor_admission_latency_seconds_bucket" in text
    assert "placement_auditor_admission_model_staleness_seconds 0.0" in text


def test_bad_requests_are_4xx_and_the_server_keeps_serving(served: tuple[Running, Path, Sink]) -> None:
    running, _, _ = served
    conn = _client(running.port)
    assert _post(conn, b"{}", "text/plain")[0] == 415
    conn = _client(running.port)
    status, data = _post(conn, b"x" * 200_001)
    assert status == 413 and "admission.max_body_bytes" in data["message"]
    conn = _client(running.port)
    assert _post(conn, b"not json")[0] == 400
    conn = _client(running.port)
    conn.request("GET", "/nowhere")
    assert conn.getresponse().status == 404
    # Plain HTTP on the TLS port: a plain 400 that says so.
    with socket.create_connection(("127.0.0.1", running.port), timeout=10) as sock:
        sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        reply = sock.recv(4096)
    assert reply.startswith(b"HTTP/1.1 400") and b"plain HTTP request sent to the HTTPS port" in reply
    # Garbage that is neither: the connection is closed, the server lives on.
    with socket.create_connection(("127.0.0.1", running.port), timeout=10) as sock:
        sock.sendall(b"\x16\x03\x01\x00\x05hello")
        sock.shutdown(socket.SHUT_WR)
        sock.recv(100)
    status, data = _post(_client(running.port), json.dumps(request(_part("after", "Deployment"))).encode())
    assert status == 200 and data["response"]["allowed"] is True


def test_a_rotated_certificate_is_served_without_a_restart(served: tuple[Running, Path, Sink]) -> None:
    running, tmp, _ = served
    assert "first.example" in _peer_name(running.port)
    conn = _client(running.port)  # a connection open across the rotation keeps working
    assert _post(conn, json.dumps(request(_part("after", "Job"))).encode())[0] == 200
    new = tmp / "new"
    new.mkdir()
    crt, key = certificate(new, "second.example")
    (tmp / "tls.key").write_bytes(key.read_bytes())
    (tmp / "tls.crt").write_bytes(crt.read_bytes())
    assert running.certificates.reload() is True
    assert "second.example" in _peer_name(running.port)
    assert _post(conn, json.dumps(request(_part("after", "Job"), uid="again")).encode())[0] == 200
    # A half-written pair is refused and the certificate in use stays.
    (tmp / "tls.crt").write_text("-----BEGIN CERTIFICATE-----\ntruncated")
    assert running.certificates.reload() is False
    assert "second.example" in _peer_name(running.port)


def test_answers_reach_the_store(tmp_path: Path) -> None:
    with engine_for("sqlite", tmp_path) as engine:
        store = Store(engine, Clock())
        hook = webhook(
            _model(_part("before", "Deployment"), _part("before", "Service"), mode="deny"), sink=store
        )
        hook.recorder.start()
        answer(hook, request(_part("before", "Job")))
        answer(hook, request(_part("before", "Job")))  # the API server retried: stored once
        hook.recorder.stop()
        page = store.admission_decisions(cluster="lab", outcome="denied", since=None)
        assert [d.uid for d in page.items] == ["705ab4f5-6393-11e8-b7cc-42010a800002"]


def test_cilium_config_listed_per_namespace_keeps_the_other_namespaces_copy() -> None:
    from auditor.sources.kubeapi import CILIUM_CONFIG

    model = WarmModel("lab", monotonic=lambda: 0.0)
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cilium-config", "namespace": "kube-system"},
        "data": {"enable-policy": "default"},
    }
    model.replace(CILIUM_CONFIG, [config], "1", namespace="kube-system")
    model.replace(CILIUM_CONFIG, [], "1", namespace="cilium")  # Cilium does not run there
    kept = [d.data for d in model.documents([], None) if d.data.get("kind") == "ConfigMap"]
    assert kept == [config]
    model.replace(CILIUM_CONFIG, [], "2", namespace="kube-system")
    assert not [d for d in model.documents([], None) if d.data.get("kind") == "ConfigMap"]


def test_the_after_state_built_from_the_before_one_answers_as_a_full_rebuild() -> None:
    """A policy answer builds the inventory after the change from the one before (only the
    policy set differs); on a generated cluster (the benchmark's world: 500 pods, 100 policies,
    a tenth Cilium, running split jobs, zone-fenced namespaces) every policy review gets the
    same findings, groups and running marks as with the inventory rebuilt from every object."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import bench_admission as bench

    args = bench.argparse.Namespace(nodes=None, jobs=None, policies=100, cilium_share=0.1, seed=3)
    world = bench.build_world(args, 500)
    model, _ = bench.timed_load(world)
    reviews = [
        rv.parse(r.body(f"u{i}"))
        for i, r in enumerate(bench.make_requests(world, 400, 11))
        if "Policy" in r.label
    ]
    fast = Checker(Settings(), load_packs([]), model, before_cache=0)
    full = Checker(Settings(), load_packs([]), model, before_cache=0)
    full._changed = lambda *args, **kwargs: None  # type: ignore[method-assign]
    taken = 0
    shortcut = fast._changed

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal taken
        found = shortcut(*args, **kwargs)
        taken += found is not None
        return found

    fast._changed = counted  # type: ignore[method-assign]
    assert len(reviews) > 50
    with_findings = 0
    for review in reviews:
        a, b = fast.check(review, PINNED.date()), full.check(review, PINNED.date())
        assert sorted((f.fingerprint, f.message) for f in a.findings) == sorted(
            (f.fingerprint, f.message) for f in b.findings
        ), review.name
        assert (a.groups, a.running) == (b.groups, b.running), review.name
        with_findings += bool(a.findings)
    assert taken > len(reviews) // 2 and with_findings > 0, (taken, with_findings)


def test_the_objects_that_decide_zones_reach_the_answers_inventory() -> None:
    # Issue 35: a NodePool, Kueue's cluster objects and a HyperNode are cluster-scoped (read with
    # the cluster bucket); a LocalQueue is read with its namespace's context.
    objects = [
        {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"}, "spec": {}},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {},
        },
        {
            "apiVersion": "topology.volcano.sh/v1alpha1",
            "kind": "HyperNode",
            "metadata": {"name": "s0"},
            "spec": {"tier": 1},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": {"name": "q", "namespace": "ml-demo"},
            "spec": {"clusterQueue": "cq"},
        },
    ]
    model = _model(*objects)
    kinds = {d.data["kind"] for d in model.documents({"ml-demo"}, [], nodes=False)}
    assert {"NodePool", "ClusterQueue", "HyperNode", "LocalQueue"} <= kinds
