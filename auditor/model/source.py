"""Where an object came from, and the error entries that replace objects we could not read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from auditor.model.pickling import by_fields
from auditor.model.values import value


@by_fields
@value(frozen=True, order=True)
class SourceRef:
    """A location in a scanned file (1-based line, 0-based document index) or a cluster object.

    `file` is the path as the user gave it (relative to the scan root when one is known),
    or `cluster:<context>` for objects read from a live cluster.
    """

    file: str
    line: int = 0
    document: int = 0
    # The kustomization.yaml whose build produced the object (its base document is `file`).
    via: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file


@by_fields
@value(frozen=True, order=True)
class LoadError:
    """One thing we could not read or understand. The rest of the scan goes on without it.

    `object` names the Kubernetes object (`Kind ns/name`) when known; `field` is a dotted path
    inside it (`spec.ingress[0].from`).
    """

    file: str
    line: int
    message: str
    object: str = ""
    field: str = ""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        what = f" {self.object}" if self.object else ""
        fld = f" field {self.field}:" if self.field else ""
        return f"{where}:{what}{fld} {self.message}".replace(": :", ":")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"file": self.file, "line": self.line, "message": self.message}
        if self.object:
            out["object"] = self.object
        if self.field:
            out["field"] = self.field
        return out


@dataclass(frozen=True, slots=True, order=True)
class NotAudited:
    """A file or directory whose content the audit did not see (a skipped or failed Kustomize
    build or Helm chart, an unreadable file): the audit is *partial*, and nothing it did not see
    may count as fixed. `path` is the file as the user gave it (a kustomization, a Chart.yaml)."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}
