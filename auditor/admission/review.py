"""AdmissionReview `admission.k8s.io/v1`, as the API server sends it and wants it back (pure).

The request's shape follows the Kubernetes API types (k8s.io/api/admission/v1, `AdmissionRequest`
and `AdmissionResponse`) and the documentation "Dynamic Admission Control": `uid` is echoed in the
response, `object` is null on DELETE and `oldObject` is set on UPDATE and DELETE, `dryRun` says
the API server will not persist the object, `subResource` names a subresource (`status`, `scale`)
that this webhook does not check.

`parse` turns a body into a `Review` or raises `BadReview` with a message for a 400 answer;
`response` builds the answer. Warnings follow the API server's rules and the issue's: one line
each, no control characters, at most `WARNING_LIMIT` characters (the API server itself truncates
at 256 and kubectl prints each on its own line).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
WARNING_LIMIT = 119  # "under 120 characters"
MESSAGE_LIMIT = 2000  # a denial's status message: kubectl prints it whole; keep it readable

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200b-\u200f\u202a-\u202e\u2066-\u2069]+")


class BadReview(ValueError):
    """The body is not an AdmissionReview this webhook can answer (a 400 answer)."""


@dataclass(frozen=True, slots=True)
class GroupVersionKind:
    group: str
    version: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


@dataclass(frozen=True, slots=True)
class Review:
    uid: str
    kind: GroupVersionKind
    resource: str  # the plural, e.g. "pytorchjobs"
    sub_resource: str  # "" for the object itself
    operation: str
    namespace: str  # "" for a cluster-scoped object
    name: str  # may be "" on CREATE with generateName
    user: str
    groups: tuple[str, ...]
    dry_run: bool
    object: Mapping[str, Any] | None = field(default=None, repr=False)
    old_object: Mapping[str, Any] | None = field(default=None, repr=False)


def _str(value: Any, where: str, required: bool = False) -> str:
    if value is None:
        if required:
            raise BadReview(f"request.{where} is missing")
        return ""
    if not isinstance(value, str):
        raise BadReview(f"request.{where} must be a string, not {type(value).__name__}")
    return value


def _object(value: Any, where: str) -> Mapping[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise BadReview(f"request.{where} must be an object or null, not {type(value).__name__}")
    return value


def parse(body: bytes) -> Review:
    """The request of an AdmissionReview body; BadReview names what is wrong."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadReview(f"the body is not JSON: {exc}") from None
    if not isinstance(data, Mapping):
        raise BadReview(f"the body must be a JSON object (an AdmissionReview), not {type(data).__name__}")
    if data.get("kind") != KIND:
        raise BadReview(f"kind must be {KIND}, not {str(data.get('kind'))[:60]!r}")
    if data.get("apiVersion") != API_VERSION:
        raise BadReview(
            f"apiVersion {str(data.get('apiVersion'))[:60]!r} is not supported: this webhook speaks "
            f"{API_VERSION} (set admissionReviewVersions: [v1])"
        )
    request = data.get("request")
    if not isinstance(request, Mapping):
        raise BadReview("request is missing or not an object")
    uid = _str(request.get("uid"), "uid", required=True)
    if not uid:
        raise BadReview("request.uid is empty")
    kind = request.get("kind")
    if not isinstance(kind, Mapping):
        raise BadReview("request.kind is missing or not an object")
    gvk = GroupVersionKind(
        _str(kind.get("group"), "kind.group"),
        _str(kind.get("version"), "kind.version", required=True),
        _str(kind.get("kind"), "kind.kind", required=True),
    )
    resource = request.get("resource")
    plural = _str(resource.get("resource"), "resource.resource") if isinstance(resource, Mapping) else ""
    operation = _str(request.get("operation"), "operation", required=True)
    if operation not in OPERATIONS:
        raise BadReview(f"request.operation {operation[:30]!r} is not one of {', '.join(OPERATIONS)}")
    user_info = request.get("userInfo")
    user, groups = "", tuple[str, ...]()
    if isinstance(user_info, Mapping):
        user = _str(user_info.get("username"), "userInfo.username")
        raw_groups = user_info.get("groups")
        if isinstance(raw_groups, list):
            groups = tuple(g for g in raw_groups if isinstance(g, str))
    dry_run = request.get("dryRun")
    if dry_run is not None and not isinstance(dry_run, bool):
        raise BadReview("request.dryRun must be true, false or absent")
    obj = _object(request.get("object"), "object")
    old = _object(request.get("oldObject"), "oldObject")
    if operation in ("CREATE", "UPDATE") and obj is None:
        raise BadReview(f"request.object is null on {operation}")
    if operation == "UPDATE" and old is None:
        raise BadReview("request.oldObject is null on UPDATE")
    return Review(
        uid,
        gvk,
        plural,
        _str(request.get("subResource"), "subResource"),
        operation,
        _str(request.get("namespace"), "namespace"),
        _str(request.get("name"), "name"),
        user,
        groups,
        bool(dry_run),
        obj,
        old,
    )


def uid_of(body: bytes) -> str:
    """The request uid of a body `parse` refused, when one can be read (to answer it), else ""."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    request = data.get("request") if isinstance(data, Mapping) else None
    uid = request.get("uid") if isinstance(request, Mapping) else None
    return uid if isinstance(uid, str) else ""


def clean_line(text: str, limit: int = WARNING_LIMIT) -> str:
    """One line without control characters, cut to `limit` characters (with an ellipsis)."""
    line = " ".join(_CONTROL.sub(" ", text).split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def clean_message(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """A status message: lines kept (kubectl prints them), each cleaned, the whole cut to `limit`."""
    lines = [" ".join(_CONTROL.sub(" ", part).split()) for part in text.split("\n")]
    out = "\n".join(line for line in lines if line)
    return out if len(out) <= limit else out[: limit - 1].rstrip() + "…"


def response(
    uid: str,
    allowed: bool,
    *,
    warnings: Sequence[str] = (),
    message: str = "",
    code: int = 403,
    reason: str = "Forbidden",
) -> bytes:
    """The AdmissionReview answer; a denial carries a Status with `code`, `reason` and `message`."""
    answer: dict[str, Any] = {"uid": uid, "allowed": allowed}
    lines = []
    for w in warnings:
        line = clean_line(w)
        if line and line not in lines:
            lines.append(line)
    if lines:
        answer["warnings"] = lines
    if not allowed:
        answer["status"] = {
            "status": "Failure",
            "code": code,
            "reason": reason,
            "message": clean_message(message),
        }
    return orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": answer})
