"""A local HTTP server that speaks the Kubernetes list API the live audit uses, for the benchmark
and the cluster tests (tests/cluster/fakeapi.py re-exports it): paginated lists (`limit`,
`continue`, `resourceVersion`), 410 Gone for an expired continue token, 403 Status objects, 404 for
APIs not served (absent CRDs), and injectable faults (5xx, slow answers, connections cut mid-list).
The official client talks to it through a generated kubeconfig with a bearer token.

It also accepts server-side apply of custom resources it is told about (`apply_kinds`, e.g.
PolicyReports): `PATCH` with `Content-Type: application/apply-patch+yaml`, `fieldManager` required
(422 without it), 415 for another patch type, 404 when the CRD is not served, 403 for a forbidden
path, 400 when the body's apiVersion, kind, name or namespace disagree with the URL, 422 when the
object does not validate against the CRD's openAPIV3Schema (as kube-apiserver does), 409 when
another field manager owns the object and `force` is not set; 201 on create, 200 on update, with
uid, resourceVersion, generation and managedFields. Applied objects are served back by GET."""

from __future__ import annotations

import base64
import json
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from world.httpserve import handler_serving

TOKEN = "fake-api-token"

PLURALS = {
    ("v1", "Node"): ("/api/v1/nodes", False),
    ("v1", "Namespace"): ("/api/v1/namespaces", False),
    ("v1", "Pod"): ("/api/v1/pods", True),
    ("v1", "Service"): ("/api/v1/services", True),
    ("v1", "Secret"): ("/api/v1/secrets", True),
    ("v1", "ConfigMap"): ("/api/v1/configmaps", True),
    ("v1", "PersistentVolumeClaim"): ("/api/v1/persistentvolumeclaims", True),
    ("v1", "PersistentVolume"): ("/api/v1/persistentvolumes", False),
    ("storage.k8s.io/v1", "StorageClass"): ("/apis/storage.k8s.io/v1/storageclasses", False),
    ("apps/v1", "Deployment"): ("/apis/apps/v1/deployments", True),
    ("apps/v1", "StatefulSet"): ("/apis/apps/v1/statefulsets", True),
    ("apps/v1", "ReplicaSet"): ("/apis/apps/v1/replicasets", True),
    ("apps/v1", "DaemonSet"): ("/apis/apps/v1/daemonsets", True),
    ("batch/v1", "Job"): ("/apis/batch/v1/jobs", True),
    ("batch/v1", "CronJob"): ("/apis/batch/v1/cronjobs", True),
    ("networking.k8s.io/v1", "NetworkPolicy"): ("/apis/networking.k8s.io/v1/networkpolicies", True),
    ("cilium.io/v2", "CiliumNetworkPolicy"): ("/apis/cilium.io/v2/ciliumnetworkpolicies", True),
    ("cilium.io/v2", "CiliumClusterwideNetworkPolicy"): (
        "/apis/cilium.io/v2/ciliumclusterwidenetworkpolicies",
        False,
    ),
    ("kubeflow.org/v1", "PyTorchJob"): ("/apis/kubeflow.org/v1/pytorchjobs", True),
}
# APIs served even when empty (the built-in ones); CRD paths are served only when named in `crds`.
BUILTIN = {
    path
    for (api, _), (path, _) in PLURALS.items()
    if api.split("/")[0] in ("v1", "apps", "batch", "storage.k8s.io", "networking.k8s.io")
}


@dataclass
class Faults:
    fail: dict[str, int] = field(default_factory=dict)  # path → answer 500 this many times
    slow: dict[str, float] = field(default_factory=dict)  # path → sleep before answering
    slow_pages: dict[str, float] = field(default_factory=dict)  # path → sleep before each later page
    gone: dict[str, int] = field(default_factory=dict)  # path → expire this many continue tokens (410)
    cut: dict[str, int] = field(default_factory=dict)  # path → drop the connection this many times
    forbidden: set[str] = field(default_factory=set)  # paths answered 403
    throttle: dict[str, int] = field(default_factory=dict)  # path → answer 429 (Retry-After: 0)


@dataclass
class ApplyKind:
    """A custom resource the server accepts by server-side apply: its kind, and the CRD's
    openAPIV3Schema (None: not validated)."""

    kind: str
    namespaced: bool
    schema: dict[str, Any] | None = None


class FakeCluster:
    def __init__(
        self,
        objects: list[dict[str, Any]],
        crds: set[str] | None = None,
        version: str = "v1.34.2",
        apply_kinds: dict[str, ApplyKind] | None = None,
    ) -> None:
        # collection path (/apis/group/version/plural) -> what may be applied there
        self.apply_kinds = dict(apply_kinds or {})
        self.applied: dict[str, dict[str, Any]] = {}  # object path -> stored object
        self.patches: list[tuple[str, str]] = []  # (path with query, content type)
        self.by_path: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self._serialized: dict[str, list[bytes]] = {}
        self.singles: dict[str, dict[str, Any]] = {}
        self.served = set(BUILTIN) | set(crds or ())
        self.version = version
        self.faults = Faults()
        self.requests: list[str] = []
        self.resource_version = 1000
        for obj in objects:
            path, _namespaced = PLURALS[(obj["apiVersion"], obj["kind"])]
            self.by_path[path].append(obj)
            if obj["kind"] == "ConfigMap":
                meta = obj["metadata"]
                self.singles[f"/api/v1/namespaces/{meta['namespace']}/configmaps/{meta['name']}"] = obj
            self.served.add(path)

    # -- the protocol -----------------------------------------------------------------------

    def answer(self, raw_path: str, headers: Any) -> tuple[int, dict[str, str], bytes]:
        parts = urlsplit(raw_path)
        path, query = parts.path, parse_qs(parts.query)
        self.requests.append(raw_path)
        if headers.get("Authorization") != f"Bearer {TOKEN}":
            return _status(401, "Unauthorized", "Unauthorized")
        if path in self.faults.slow:
            time.sleep(self.faults.slow[path])
        if path in self.faults.slow_pages and "continue" in query:
            time.sleep(self.faults.slow_pages[path])
        if self.faults.fail.get(path, 0) > 0:
            self.faults.fail[path] -= 1
            return _status(500, "InternalError", "etcdserver: request timed out")
        if self.faults.throttle.get(path, 0) > 0:
            self.faults.throttle[path] -= 1
            code, head, body = _status(429, "TooManyRequests", "too many requests")
            head["Retry-After"] = "0"
            return code, head, body
        if path == "/version":
            return (
                200,
                {"Content-Type": "application/json"},
                json.dumps({"gitVersion": self.version}).encode(),
            )
        if path in self.faults.forbidden:
            resource = path.rsplit("/", 1)[-1]
            return _status(
                403,
                "Forbidden",
                f'{resource} is forbidden: User "system:serviceaccount:audit:auditor" cannot list '
                f'resource "{resource}" at the cluster scope',
            )
        if path in self.singles:
            return 200, {"Content-Type": "application/json"}, json.dumps(self.singles[path]).encode()
        if path in self.applied:
            return 200, {"Content-Type": "application/json"}, json.dumps(self.applied[path]).encode()
        if path in self.apply_kinds and path in self.served:
            return self._applied_list(path, query)
        if path not in self.served:
            return _status(404, "NotFound", "the server could not find the requested resource")
        items = self.by_path.get(path, [])
        limit = int(query.get("limit", ["0"])[0] or 0) or len(items) or 1
        start = 0
        token = query.get("continue", [""])[0]
        if token:
            if self.faults.gone.get(path, 0) > 0:
                self.faults.gone[path] -= 1
                return _status(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list result.",
                )
            start = int(json.loads(base64.b64decode(token))["start"])
        page = items[start : start + limit]
        nxt = start + limit
        meta: dict[str, Any] = {"resourceVersion": str(self.resource_version)}
        if nxt < len(items):
            meta["continue"] = base64.b64encode(
                json.dumps({"start": nxt, "rv": self.resource_version}).encode()
            ).decode()
            meta["remainingItemCount"] = len(items) - nxt
        kind = next((k for (api, k), (p, _) in PLURALS.items() if p == path), "Unknown")
        cached = self._serialized.get(path)
        if cached is not None:
            head = json.dumps({"kind": f"{kind}List", "apiVersion": "v1", "metadata": meta})[:-1]
            data = head.encode() + b', "items": [' + b",".join(cached[start : start + limit]) + b"]}"
            return 200, {"Content-Type": "application/json"}, data
        body = {
            "kind": f"{kind}List",
            "apiVersion": "v1",
            "metadata": meta,
            "items": [_listed(o) for o in page],
        }
        return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()

    def apply(self, raw_path: str, headers: Any, body: bytes) -> tuple[int, dict[str, str], bytes]:
        """Server-side apply of one custom resource (see the module docstring)."""
        parts = urlsplit(raw_path)
        path, query = parts.path, parse_qs(parts.query)
        self.requests.append(f"PATCH {raw_path}")
        self.patches.append((raw_path, headers.get("Content-Type", "")))
        if headers.get("Authorization") != f"Bearer {TOKEN}":
            return _status(401, "Unauthorized", "Unauthorized")
        segments = path.strip("/").split("/")
        if len(segments) == 7 and segments[0] == "apis" and segments[3] == "namespaces":
            _, group, version, _, namespace, plural, name = segments
        elif len(segments) == 5 and segments[0] == "apis":
            _, group, version, plural, name = segments
            namespace = ""
        else:
            return _status(
                405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
            )
        collection = f"/apis/{group}/{version}/{plural}"
        if collection in self.faults.forbidden or path in self.faults.forbidden:
            return _status(
                403,
                "Forbidden",
                f'{plural}.{group} "{name}" is forbidden: User "system:serviceaccount:audit:auditor" '
                f'cannot patch resource "{plural}" in API group "{group}"'
                + (f' in the namespace "{namespace}"' if namespace else " at the cluster scope"),
            )
        spec = self.apply_kinds.get(collection)
        if spec is None or collection not in self.served:
            return _status(404, "NotFound", "the server could not find the requested resource")
        if spec.namespaced != bool(namespace):
            return _status(404, "NotFound", "the server could not find the requested resource")
        content_type = headers.get("Content-Type", "").split(";")[0].strip()
        if content_type != "application/apply-patch+yaml":
            return _status(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format: {content_type}",
            )
        manager = query.get("fieldManager", [""])[0]
        if not manager:
            return _status(
                422,
                "Invalid",
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                "is required for apply patch",
            )
        try:
            obj = yaml.safe_load(body)
        except yaml.YAMLError as exc:
            return _status(400, "BadRequest", f"error decoding YAML: {exc}")
        if not isinstance(obj, dict):
            return _status(400, "BadRequest", "the body is not an object")
        meta = obj.get("metadata") or {}
        if obj.get("apiVersion") != f"{group}/{version}" or obj.get("kind") != spec.kind:
            return _status(400, "BadRequest", f"the object is not a {spec.kind} of {group}/{version}")
        if meta.get("name") != name:
            return _status(400, "BadRequest", "the name of the object does not match the name on the URL")
        if namespace and meta.get("namespace", namespace) != namespace:
            return _status(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the request",
            )
        if spec.schema is not None:
            import jsonschema

            errors = sorted(
                jsonschema.Draft4Validator(spec.schema).iter_errors(obj), key=lambda e: list(e.absolute_path)
            )
            if errors:
                causes = "; ".join(f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:5])
                return _status(422, "Invalid", f'{spec.kind}.{group} "{name}" is invalid: {causes}')
        old = self.applied.get(path)
        force = query.get("force", ["false"])[0] == "true"
        if old is not None:
            owner = old["metadata"]["managedFields"][0]["manager"]
            if owner != manager and not force:
                return _status(
                    409,
                    "Conflict",
                    f'Apply failed with 1 conflict: conflict with "{owner}": .results',
                )
        self.resource_version += 1
        stored = json.loads(json.dumps(obj))
        stored_meta = stored.setdefault("metadata", {})
        if namespace:
            stored_meta["namespace"] = namespace
        stored_meta["uid"] = old["metadata"]["uid"] if old else f"uid-{self.resource_version}"
        stored_meta["resourceVersion"] = str(self.resource_version)
        stored_meta["generation"] = old["metadata"]["generation"] + 1 if old else 1
        stored_meta["managedFields"] = [
            {
                "manager": manager,
                "operation": "Apply",
                "apiVersion": f"{group}/{version}",
                "fieldsType": "FieldsV1",
            }
        ]
        self.applied[path] = stored
        return (
            (201 if old is None else 200),
            {"Content-Type": "application/json"},
            json.dumps(stored).encode(),
        )

    def _applied_list(
        self, collection: str, query: dict[str, list[str]]
    ) -> tuple[int, dict[str, str], bytes]:
        """A list of applied custom resources across namespaces, with an equality labelSelector."""
        if collection in self.faults.forbidden:
            return _status(403, "Forbidden", f"cannot list resource at the cluster scope: {collection}")
        _, group, version, plural = collection.strip("/").split("/")
        wanted = dict(
            term.split("=", 1) for term in query.get("labelSelector", [""])[0].split(",") if "=" in term
        )
        items = []
        for path, obj in sorted(self.applied.items()):
            segments = path.strip("/").split("/")
            if segments[1:3] != [group, version] or segments[-2] != plural:
                continue
            labels = obj["metadata"].get("labels") or {}
            if all(labels.get(k) == v for k, v in wanted.items()):
                items.append(obj)
        kind = self.apply_kinds[collection].kind
        body = {
            "apiVersion": f"{group}/{version}",
            "kind": f"{kind}List",
            "metadata": {"resourceVersion": str(self.resource_version)},
            "items": items,
        }
        return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()

    def delete(self, raw_path: str, headers: Any) -> tuple[int, dict[str, str], bytes]:
        path = urlsplit(raw_path).path
        self.requests.append(f"DELETE {raw_path}")
        if headers.get("Authorization") != f"Bearer {TOKEN}":
            return _status(401, "Unauthorized", "Unauthorized")
        if path not in self.applied:
            return _status(404, "NotFound", f"{path.rsplit('/', 1)[-1]} not found")
        del self.applied[path]
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
        return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()

    def preserialize(self) -> None:
        """Keep every object serialized, as kube-apiserver's watch cache does, so that answering a
        list costs what a real server's does (joining bytes), not a Python json.dumps per page."""
        self._serialized = {
            path: [json.dumps(_listed(o)).encode() for o in items] for path, items in self.by_path.items()
        }


def _listed(obj: dict[str, Any]) -> dict[str, Any]:
    """Items of a list response carry no apiVersion/kind (the API server omits them)."""
    return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}


def _status(code: int, reason: str, message: str) -> tuple[int, dict[str, str], bytes]:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return code, {"Content-Type": "application/json"}, json.dumps(body).encode()


class _Handler(BaseHTTPRequestHandler):
    cluster: FakeCluster
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        faults = self.cluster.faults
        if faults.cut.get(path, 0) > 0 and "continue=" in self.path:
            faults.cut[path] -= 1
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.write(b'{"kind": "PodList", "items": [{"metadata": ')
            self.wfile.flush()
            self.close_connection = True
            return
        code, headers, body = self.cluster.answer(self.path, self.headers)
        self._send(code, headers, body)

    def do_DELETE(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self._send(*self.cluster.delete(self.path, self.headers))

    def do_PATCH(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self._send(*self.cluster.apply(self.path, self.headers, body))

    def _send(self, code: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def serve(cluster: FakeCluster) -> Iterator[str]:
    with handler_serving(type("Handler", (_Handler,), {"cluster": cluster})) as base:
        yield base


def kubeconfig(path: Path, server: str, context: str = "lab") -> Path:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": context, "cluster": {"server": server}}],
                "users": [{"name": "auditor", "user": {"token": TOKEN}}],
                "contexts": [{"name": context, "context": {"cluster": context, "user": "auditor"}}],
                "current-context": context,
            }
        )
    )
    return path
