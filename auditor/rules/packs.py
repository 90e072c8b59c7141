"""Policy packs: which rules run, at what severity and where; custom CEL rules; waivers.

A pack is a YAML file of documents (``policies/default.yaml`` is the one that ships). Packs are read
in order — the default pack first, then the user's, each file's documents top to bottom — and
later settings override earlier ones. Every key is checked: an unknown key, a wrong type or a bad
CEL expression stops loading with a :class:`PackError` naming the file, the line and the key path.

PolicyPack document::

    apiVersion: placement-auditor.io/v1
    kind: PolicyPack
    metadata:
      name: team-ml                      # required; names the pack in reports
      description: ...                   # optional
    spec:
      rules:                             # settings for built-in or already defined custom rules
        cross-zone-traffic:
          enabled: true                  # default true
          severity: medium               # critical | high | medium | low; omitted: the rule's own
          scope:                         # omitted or empty: everywhere
            namespaces: [ml-*]           # fnmatch patterns on the object's namespace
            excludeNamespaces: [ml-sandbox]
            kinds: [PyTorchJob, MPIJob]  # object kinds, exact
            labels:                      # a label selector on the workload's metadata.labels
              matchLabels: {team: ml}
              matchExpressions: [{key: tier, operator: NotIn, values: [dev]}]
          options: {}                    # the rule's parameters; only the keys it declares
      customRules:
      - id: gpu-role-without-toleration  # lowercase letters, digits and '-', at most 63 characters
        title: GPU role cannot tolerate the GPU taint
        description: ...                 # optional, for people
        severity: high                   # required
        symptoms: [blocked]              # any of blocked, slowdown, cost
        certainty: always                # always (default) | likely | possible
        for: role                        # role (default): once per role; workload: once per workload
        condition: >-                    # CEL, must yield a bool; true reports a finding
          'nvidia.com/gpu' in role.resources && !role.tolerations.exists(t, t.key == 'nvidia.com/gpu')
        message: GPU role has no toleration for nvidia.com/gpu   # required
        messageExpression: "'role ' + role.name + ' ...'"         # optional CEL string; message on error
        options: {gpuResource: nvidia.com/gpu}                   # defaults, read as `params` in CEL
        scope: {...}                     # as above
        enabled: true

Merging. Built-in rules start enabled, at their own severity, everywhere. Each pack, in order, first
defines its custom rules (a later definition of the same id replaces the earlier one and its
overrides; a custom id may not be a built-in's), then applies its ``rules`` entries to rules known so
far: ``enabled``, ``severity`` and ``scope`` replace the earlier value (a scope as a whole), ``options``
keys replace earlier keys. A ``rules`` entry for an id not known at that point is an error. A rule
with no ``severity`` anywhere keeps its own (``cross-zone-traffic`` is high when its split is
``always`` and medium otherwise). A severity override rebuilds the finding; its fingerprint (rule,
target, workload identity, edge) does not change. Scope is matched against the finding's object; a
finding about a policy object (``ineffective-policy-selector``) has no workload labels, so only
selectors that hold on an empty label set let it through; cluster-scoped objects have the namespace
``""`` and are left out by any ``namespaces`` list.

Waivers hide findings for a reason until a date. Both kinds have a rule, a reason and an expiry; a
waiver applies through its ``expires`` day (``expires: 2026-03-31`` hides the finding on 31 March, UTC, and
no longer from 1 April). An expired waiver stops hiding: its finding is reported again and listed
with the waiver; a waiver that matched no finding is listed as unused. Waiver document (in any pack
file)::

    apiVersion: placement-auditor.io/v1
    kind: Waiver
    metadata: {name: train-split-accepted}     # required, unique over all packs
    spec:
      rule: cross-zone-traffic                  # required; a built-in or custom rule id
      fingerprint: 3f9c...                      # either: the finding's fingerprint (32 hex digits)
      workload: {kind: PyTorchJob, namespace: ml, name: train}   # or: every finding of the rule on it
                                                # (apiVersion optional; namespace "" for cluster-scoped)
      reason: capacity only in zone-b until the new GPU nodes arrive   # required
      expires: 2026-03-31                       # required, YYYY-MM-DD
      owner: ml-platform@example.com            # optional

Workload annotation waiver (on the workload object's own ``metadata.annotations``, not its pod
template)::

    placement-auditor.io/waive: "cross-zone-traffic, role-unschedulable"   # rule ids, comma-separated
    placement-auditor.io/waive-reason: "..."                                 # required
    placement-auditor.io/waive-expires: "2026-03-31"                         # required, YYYY-MM-DD
    placement-auditor.io/waive-owner: "..."                                  # optional

A malformed annotation waiver (no reason, no or a bad date, an unknown rule id) hides nothing and is
reported as an error entry; its valid rule ids still apply when reason and date are valid.

Custom rule conditions are CEL over the variables documented in :mod:`auditor.rules.cel_rules`.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from types import MappingProxyType
from typing import Any

from auditor import yamlio
from auditor.errors import ConfigError
from auditor.model.findings import SEVERITIES, Finding, ObjectRef
from auditor.model.labels import LabelSelector, SelectorError, parse_label_selector, type_name
from auditor.model.objects import Workload
from auditor.model.source import LoadError, SourceRef
from auditor.resources import policies_dir
from auditor.rules import RULES
from auditor.rules.cel_rules import (
    VARIABLES,
    WORKLOAD_VARIABLES,
    CelError,
    CelExpression,
    Returns,
    activations,
    compile_expression,
)
from auditor.rules.model import AuditModel

API_VERSION = "placement-auditor.io/v1"
PACK_KIND = "PolicyPack"
WAIVER_KIND = "Waiver"
DEFAULT_PACK = "default.yaml"

WAIVE_ANNOTATION = "placement-auditor.io/waive"
WAIVE_REASON_ANNOTATION = "placement-auditor.io/waive-reason"
WAIVE_EXPIRES_ANNOTATION = "placement-auditor.io/waive-expires"
WAIVE_OWNER_ANNOTATION = "placement-auditor.io/waive-owner"

SYMPTOMS = ("blocked", "slowdown", "cost")
CERTAINTIES = ("always", "likely", "possible")
TARGETS = ("role", "workload")

MAX_ERRORS_PER_RULE = 10
"""Runtime errors reported per custom rule and scan; the rest are counted in one more entry, so a
condition that fails on every workload of a large tree does not bury the report."""

_RULE_ID_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_FINGERPRINT_RE = re.compile(r"^[0-9a-f]{32}$")

_BUILTIN_META = {rule.META.id: rule.META for rule in RULES}


class PackError(ConfigError):
    """A policy pack that cannot be used: file, line (0 when unknown), key path and message. A
    ConfigError, so it ends the run as a configuration error (exit code 2)."""


# --------------------------------------------------------------------------------------------
# The merged pack


@dataclass(frozen=True, slots=True)
class Scope:
    """Where a rule reports. Empty fields do not restrict."""

    namespaces: tuple[str, ...] = ()
    exclude_namespaces: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    labels: LabelSelector | None = None

    def matches(self, namespace: str, kind: str, labels: Mapping[str, str]) -> bool:
        if self.namespaces and not any(fnmatch.fnmatchcase(namespace, p) for p in self.namespaces):
            return False
        if any(fnmatch.fnmatchcase(namespace, p) for p in self.exclude_namespaces):
            return False
        if self.kinds and kind not in self.kinds:
            return False
        return self.labels is None or self.labels.matches(labels)


EVERYWHERE = Scope()


@dataclass(frozen=True, slots=True)
class RuleSettings:
    """One rule's settings after every pack. ``severity`` None keeps the rule's own; ``source`` is
    where they were last changed (empty for built-in defaults)."""

    rule: str
    enabled: bool = True
    severity: str | None = None
    scope: Scope = EVERYWHERE
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    source: str = ""


@dataclass(frozen=True, slots=True)
class CustomRule:
    """A rule defined in a pack: a CEL condition over one role (or workload) and its placement."""

    id: str
    title: str
    severity: str
    symptoms: tuple[str, ...]
    certainty: str
    target: str  # role | workload
    message: str
    condition: CelExpression
    message_expression: CelExpression | None
    source: SourceRef  # where the rule's mapping starts
    key: str  # its key path, e.g. spec.customRules[2]
    condition_line: int
    message_expression_line: int = 0
    description: str = ""


@dataclass(frozen=True, slots=True)
class WorkloadMatch:
    kind: str
    namespace: str
    name: str
    api_version: str = ""  # "" matches every apiVersion

    def matches(self, ref: ObjectRef) -> bool:
        return (ref.kind, ref.namespace, ref.name) == (self.kind, self.namespace, self.name) and (
            not self.api_version or ref.api_version == self.api_version
        )


@dataclass(frozen=True, slots=True)
class Waiver:
    """Hides the findings of one rule, by fingerprint or on one workload, through ``expires``."""

    name: str
    rule: str
    reason: str
    expires: date
    owner: str
    origin: str  # document | annotation
    source: SourceRef
    fingerprint: str = ""
    workload: WorkloadMatch | None = None

    def active(self, today: date) -> bool:
        return today <= self.expires

    def matches(self, finding: Finding) -> bool:
        if finding.rule != self.rule:
            return False
        if self.fingerprint:
            return finding.fingerprint == self.fingerprint
        return self.workload is not None and self.workload.matches(finding.workload)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "rule": self.rule,
            "reason": self.reason,
            "expires": self.expires.isoformat(),
            "owner": self.owner,
            "origin": self.origin,
            "file": self.source.file,
            "line": self.source.line,
        }
        if self.fingerprint:
            out["fingerprint"] = self.fingerprint
        if self.workload is not None:
            w = self.workload
            out["workload"] = {"apiVersion": w.api_version, "kind": w.kind, "namespace": w.namespace}
            out["workload"]["name"] = w.name
        return out


@dataclass(frozen=True, slots=True)
class PolicyPack:
    """The packs merged: settings for every known rule, the custom rules, the waivers."""

    names: tuple[str, ...]
    files: tuple[str, ...]
    rules: Mapping[str, RuleSettings]
    custom_rules: tuple[CustomRule, ...] = ()
    waivers: tuple[Waiver, ...] = ()

    def settings(self, rule: str) -> RuleSettings:
        """A rule's settings; a rule no pack knows (a newer built-in) runs with its defaults."""
        return self.rules.get(rule) or RuleSettings(rule)

    def enabled(self, rule: str) -> bool:
        return self.settings(rule).enabled

    def rule_options(self) -> dict[str, dict[str, Any]]:
        """Options per built-in rule, in the shape ``run_rules(model, options)`` takes."""
        return {rid: dict(self.settings(rid).options) for rid in _BUILTIN_META}


# --------------------------------------------------------------------------------------------
# Reading documents


class _Doc:
    """Validation helpers for one document: every error names this file, a line and a key path."""

    def __init__(self, file: str, line: int) -> None:
        self.file, self.line = file, line

    def error(self, line: int, key: str, message: str) -> PackError:
        return PackError(self.file, line or self.line, key, message)

    def line_of(self, container: object, key: str) -> int:
        return yamlio.key_line(container, key, yamlio.line_of(container, self.line))

    def mapping(
        self,
        value: object,
        path: str,
        line: int,
        allowed: Sequence[str],
        required: Sequence[str] = (),
        unknown: str = "unknown key",
    ) -> Mapping[str, Any]:
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            raise self.error(line, path, f"must be a mapping, not {_type_name(value)}")
        for key in value:
            if key not in allowed:
                raise self.error(
                    self.line_of(value, str(key)),
                    _join(path, str(key)),
                    f"{unknown} (known: {', '.join(sorted(allowed)) or 'none'})",
                )
        for key in required:
            if value.get(key) is None:
                raise self.error(yamlio.line_of(value, line), _join(path, key), "is required")
        return value

    def string(self, container: Mapping[str, Any], key: str, path: str, default: str = "") -> str:
        value = container.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            # YAML 1.1 reads on/off/yes/no as booleans and bare digits as numbers.
            hint = " (quote it)" if isinstance(value, bool | int | float) else ""
            raise self.error(
                self.line_of(container, key),
                _join(path, key),
                f"must be a string, not {_type_name(value)}{hint}",
            )
        return value

    def required_string(self, container: Mapping[str, Any], key: str, path: str) -> str:
        value = self.string(container, key, path)
        if not value.strip():
            raise self.error(self.line_of(container, key), _join(path, key), "must not be empty")
        return value

    def choice(
        self, container: Mapping[str, Any], key: str, path: str, choices: Sequence[str], default: str | None
    ) -> str | None:
        value = self.string(container, key, path) if container.get(key) is not None else None
        if value is None:
            return default
        if value not in choices:
            raise self.error(
                self.line_of(container, key),
                _join(path, key),
                f"{value!r} is not one of {', '.join(choices)}",
            )
        return value

    def boolean(self, container: Mapping[str, Any], key: str, path: str, default: bool) -> bool:
        value = container.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(
                self.line_of(container, key), _join(path, key), f"must be true or false, not {value!r}"
            )
        return value

    def strings(self, container: Mapping[str, Any], key: str, path: str) -> tuple[str, ...]:
        value = container.get(key)
        if value is None:
            return ()
        line = self.line_of(container, key)
        if not isinstance(value, list):
            raise self.error(line, _join(path, key), f"must be a list of strings, not {_type_name(value)}")
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, str) or not item:
                item_line = _item_line(value, i, line)
                raise self.error(item_line, f"{_join(path, key)}[{i}]", "must be a non-empty string")
            out.append(item)
        return tuple(out)

    def expiry(self, value: object, line: int, path: str) -> date:
        if isinstance(value, date):  # should a loader ever resolve YAML timestamps
            return value
        text = value if isinstance(value, str) else ""
        if not _DATE_RE.match(text):
            raise self.error(line, path, f"must be a date as YYYY-MM-DD, not {value!r}")
        try:
            return date.fromisoformat(text)
        except ValueError:
            raise self.error(line, path, f"{text!r} is not a calendar date") from None


def _type_name(value: object) -> str:
    return "null" if value is None else f"a {type_name(value)}"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _item_line(seq: object, index: int, default: int) -> int:
    if isinstance(seq, yamlio.YamlSeq) and index < len(seq.item_lines):
        return seq.item_lines[index] or default
    return default


@dataclass
class _Draft:
    """Settings being merged for one rule."""

    enabled: bool
    severity: str | None
    scope: Scope
    options: dict[str, Any]
    declared: frozenset[str]  # the option keys the rule accepts
    source: str = ""


@dataclass
class _Merger:
    """Folds pack documents, in order, into one PolicyPack."""

    names: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    drafts: dict[str, _Draft] = field(default_factory=dict)
    custom: dict[str, CustomRule] = field(default_factory=dict)
    waivers: list[tuple[Waiver, _Doc, int]] = field(default_factory=list)
    waiver_names: dict[str, SourceRef] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for rid, meta in _BUILTIN_META.items():
            self.drafts[rid] = _Draft(True, None, EVERYWHERE, dict(meta.options), frozenset(meta.options))

    def add(self, document: yamlio.Document) -> None:
        data, source = document.data, document.source
        doc = _Doc(source.file, source.line)
        top = doc.mapping(
            data, "", source.line, ("apiVersion", "kind", "metadata", "spec"), ("apiVersion", "kind")
        )
        api = doc.string(top, "apiVersion", "")
        if api != API_VERSION:
            raise doc.error(
                doc.line_of(top, "apiVersion"), "apiVersion", f"must be {API_VERSION}, not {api!r}"
            )
        kind = doc.string(top, "kind", "")
        if kind == PACK_KIND:
            self._pack(top, doc)
        elif kind == WAIVER_KIND:
            self._waiver(top, doc)
        else:
            raise doc.error(
                doc.line_of(top, "kind"), "kind", f"must be {PACK_KIND} or {WAIVER_KIND}, not {kind!r}"
            )

    # PolicyPack ----------------------------------------------------------------------------

    def _pack(self, top: Mapping[str, Any], doc: _Doc) -> None:
        meta = doc.mapping(
            top.get("metadata"),
            "metadata",
            doc.line_of(top, "metadata"),
            ("name", "description", "labels", "annotations"),
            ("name",),
        )
        name = doc.required_string(meta, "name", "metadata")
        spec = doc.mapping(top.get("spec"), "spec", doc.line_of(top, "spec"), ("rules", "customRules"))
        self.names.append(name)
        if doc.file not in self.files:
            self.files.append(doc.file)
        defined_here: set[str] = set()
        custom = spec.get("customRules")
        if custom is not None:
            line = doc.line_of(spec, "customRules")
            if not isinstance(custom, list):
                raise doc.error(line, "spec.customRules", f"must be a list, not {_type_name(custom)}")
            for i, raw in enumerate(custom):
                path = f"spec.customRules[{i}]"
                rule, draft = self._custom_rule(raw, doc, path, _item_line(custom, i, line))
                if rule.id in defined_here:
                    raise doc.error(
                        rule.source.line, f"{path}.id", f"{rule.id!r} is defined twice in this pack"
                    )
                defined_here.add(rule.id)
                self.custom.pop(rule.id, None)  # a redefinition moves to the end, in load order
                self.custom[rule.id] = rule
                self.drafts[rule.id] = draft
        rules = doc.mapping(
            spec.get("rules"),
            "spec.rules",
            doc.line_of(spec, "rules"),
            tuple(self.drafts),
            unknown="unknown rule",
        )
        for rid, raw in rules.items():
            self._override(str(rid), raw, doc, f"spec.rules.{rid}", doc.line_of(rules, str(rid)))

    def _override(self, rid: str, raw: object, doc: _Doc, path: str, line: int) -> None:
        body = doc.mapping(raw, path, line, ("enabled", "severity", "scope", "options"))
        draft = self.drafts[rid]
        draft.enabled = doc.boolean(body, "enabled", path, draft.enabled)
        draft.severity = doc.choice(body, "severity", path, SEVERITIES, draft.severity)
        if "scope" in body:
            draft.scope = self._scope(
                body.get("scope"), doc, _join(path, "scope"), doc.line_of(body, "scope")
            )
        if "options" in body:
            options = doc.mapping(
                body.get("options"),
                _join(path, "options"),
                doc.line_of(body, "options"),
                tuple(draft.declared),
            )
            for key, value in options.items():
                self._check_option(
                    draft, str(key), value, doc, f"{path}.options.{key}", doc.line_of(options, str(key))
                )
                draft.options[str(key)] = value
        draft.source = f"{doc.file}:{line}"

    def _check_option(self, draft: _Draft, key: str, value: object, doc: _Doc, path: str, line: int) -> None:
        default = draft.options.get(key)
        if default is None or value is None:
            return
        # An option keeps the type of its default: a number stays a number, a list a list.
        same = isinstance(value, bool) == isinstance(default, bool) and (
            isinstance(value, type(default))
            or (isinstance(value, int | float) and isinstance(default, int | float))
        )
        if not same:
            raise doc.error(
                line, path, f"must be {_type_name(default)} like its default, not {_type_name(value)}"
            )

    def _scope(self, raw: object, doc: _Doc, path: str, line: int) -> Scope:
        if raw is None:
            return EVERYWHERE
        body = doc.mapping(raw, path, line, ("namespaces", "excludeNamespaces", "kinds", "labels"))
        labels: LabelSelector | None = None
        if body.get("labels") is not None:
            try:
                labels = parse_label_selector(body["labels"], _join(path, "labels"))
            except SelectorError as exc:
                raise doc.error(
                    doc.line_of(body, "labels"), exc.field or _join(path, "labels"), exc.message
                ) from None
        return Scope(
            doc.strings(body, "namespaces", path),
            doc.strings(body, "excludeNamespaces", path),
            doc.strings(body, "kinds", path),
            labels,
        )

    def _custom_rule(self, raw: object, doc: _Doc, path: str, line: int) -> tuple[CustomRule, _Draft]:
        body = doc.mapping(
            raw,
            path,
            line,
            (
                "id",
                "title",
                "description",
                "severity",
                "symptoms",
                "certainty",
                "for",
                "condition",
                "message",
                "messageExpression",
                "options",
                "scope",
                "enabled",
            ),
            ("id", "severity", "condition", "message"),
        )
        line = yamlio.line_of(body, line)
        rid = doc.required_string(body, "id", path)
        if not _RULE_ID_RE.match(rid):
            raise doc.error(
                doc.line_of(body, "id"),
                _join(path, "id"),
                f"{rid!r} is not a rule id (lowercase letters, digits and '-', at most 63 characters)",
            )
        if rid in _BUILTIN_META:
            raise doc.error(doc.line_of(body, "id"), _join(path, "id"), f"{rid!r} is a built-in rule")
        severity = doc.choice(body, "severity", path, SEVERITIES, None) or ""
        symptoms = doc.strings(body, "symptoms", path)
        for i, symptom in enumerate(symptoms):
            if symptom not in SYMPTOMS:
                raise doc.error(
                    _item_line(body.get("symptoms"), i, doc.line_of(body, "symptoms")),
                    f"{path}.symptoms[{i}]",
                    f"{symptom!r} is not one of {', '.join(SYMPTOMS)}",
                )
        target = doc.choice(body, "for", path, TARGETS, "role") or "role"
        names = VARIABLES if target == "role" else WORKLOAD_VARIABLES
        condition_line = doc.line_of(body, "condition")
        condition = self._cel(body, "condition", doc, path, rid, names, "bool")
        message_expression = (
            self._cel(body, "messageExpression", doc, path, rid, names, "string")
            if body.get("messageExpression") is not None
            else None
        )
        raw_options = body.get("options")
        options = doc.mapping(
            raw_options,
            _join(path, "options"),
            doc.line_of(body, "options"),
            tuple(map(str, raw_options)) if isinstance(raw_options, Mapping) else (),
        )
        rule = CustomRule(
            id=rid,
            title=doc.string(body, "title", path) or rid,
            severity=severity,
            symptoms=symptoms,
            certainty=doc.choice(body, "certainty", path, CERTAINTIES, "always") or "always",
            target=target,
            message=doc.required_string(body, "message", path),
            condition=condition,
            message_expression=message_expression,
            source=SourceRef(doc.file, line),
            key=path,
            condition_line=condition_line,
            message_expression_line=doc.line_of(body, "messageExpression"),
            description=doc.string(body, "description", path),
        )
        draft = _Draft(
            doc.boolean(body, "enabled", path, True),
            None,
            self._scope(body.get("scope"), doc, _join(path, "scope"), doc.line_of(body, "scope")),
            {str(k): v for k, v in options.items()},
            frozenset(str(k) for k in options),
            f"{doc.file}:{line}",
        )
        return rule, draft

    def _cel(
        self,
        body: Mapping[str, Any],
        key: str,
        doc: _Doc,
        path: str,
        rid: str,
        names: Sequence[str],
        returns: Returns,
    ) -> CelExpression:
        source = doc.required_string(body, key, path)
        try:
            return compile_expression(source, names, returns)
        except CelError as exc:
            raise doc.error(doc.line_of(body, key), _join(path, key), f"rule {rid!r}: CEL: {exc}") from None

    # Waiver --------------------------------------------------------------------------------

    def _waiver(self, top: Mapping[str, Any], doc: _Doc) -> None:
        meta = doc.mapping(
            top.get("metadata"),
            "metadata",
            doc.line_of(top, "metadata"),
            ("name", "labels", "annotations"),
            ("name",),
        )
        name = doc.required_string(meta, "name", "metadata")
        spec = doc.mapping(
            top.get("spec"),
            "spec",
            doc.line_of(top, "spec"),
            ("rule", "fingerprint", "workload", "reason", "expires", "owner"),
            ("rule", "reason", "expires"),
        )
        if name in self.waiver_names:
            raise doc.error(
                doc.line_of(meta, "name"),
                "metadata.name",
                f"waiver {name!r} is already defined at {self.waiver_names[name]}",
            )
        has_fp, has_workload = spec.get("fingerprint") is not None, spec.get("workload") is not None
        if has_fp == has_workload:
            raise doc.error(
                yamlio.line_of(spec, doc.line), "spec", "give exactly one of fingerprint and workload"
            )
        fingerprint = ""
        workload = None
        if has_fp:
            fingerprint = doc.string(spec, "fingerprint", "spec").lower()
            if not _FINGERPRINT_RE.match(fingerprint):
                raise doc.error(
                    doc.line_of(spec, "fingerprint"),
                    "spec.fingerprint",
                    "must be a finding fingerprint (32 hex digits)",
                )
        else:
            w = doc.mapping(
                spec.get("workload"),
                "spec.workload",
                doc.line_of(spec, "workload"),
                ("apiVersion", "kind", "namespace", "name"),
                ("kind", "namespace", "name"),
            )
            workload = WorkloadMatch(
                doc.required_string(w, "kind", "spec.workload"),
                doc.string(w, "namespace", "spec.workload"),
                doc.required_string(w, "name", "spec.workload"),
                doc.string(w, "apiVersion", "spec.workload"),
            )
        source = SourceRef(doc.file, doc.line)
        waiver = Waiver(
            name=name,
            rule=doc.required_string(spec, "rule", "spec"),
            reason=doc.required_string(spec, "reason", "spec"),
            expires=doc.expiry(spec.get("expires"), doc.line_of(spec, "expires"), "spec.expires"),
            owner=doc.string(spec, "owner", "spec"),
            origin="document",
            source=source,
            fingerprint=fingerprint,
            workload=workload,
        )
        self.waiver_names[name] = source
        self.waivers.append((waiver, doc, doc.line_of(spec, "rule")))

    def result(self) -> PolicyPack:
        for waiver, doc, line in self.waivers:
            if waiver.rule not in self.drafts:
                raise doc.error(
                    line,
                    "spec.rule",
                    f"unknown rule {waiver.rule!r} (known: {', '.join(sorted(self.drafts))})",
                )
        rules = {
            rid: RuleSettings(
                rid, d.enabled, d.severity, d.scope, MappingProxyType(dict(d.options)), d.source
            )
            for rid, d in self.drafts.items()
        }
        return PolicyPack(
            tuple(self.names),
            tuple(self.files),
            MappingProxyType(rules),
            tuple(self.custom.values()),
            tuple(w for w, _, _ in self.waivers),
        )


def default_pack_path() -> Path:
    return policies_dir() / DEFAULT_PACK


def load_packs(paths: Sequence[Path], include_default: bool = True) -> PolicyPack:
    """Read the default pack (unless told not to) and then ``paths`` (files, or directories walked
    for .yaml/.yml/.json), merged in that order. Raises PackError on the first problem."""
    merger = _Merger()
    given = ([default_pack_path()] if include_default else []) + list(paths)
    for path in given:
        documents, errors = yamlio.load_paths([path])
        if errors:
            first = errors[0]
            raise PackError(first.file, first.line, "(file)", first.message)
        if not documents:
            raise PackError(str(path), 0, "(file)", "holds no PolicyPack or Waiver document")
        for document in documents:
            merger.add(document)
    return merger.result()


# --------------------------------------------------------------------------------------------
# Custom rules


def _object(workload: Workload) -> ObjectRef:
    ref = workload.ref
    return ObjectRef(ref.api_version, ref.kind, ref.namespace, ref.name, ref.source.file, ref.source.line)


def evaluate_custom_rules(pack: PolicyPack, model: AuditModel) -> tuple[list[Finding], list[LoadError]]:
    """Findings of the pack's enabled custom rules, and one error entry per failed evaluation
    (at most MAX_ERRORS_PER_RULE per rule, then a count). Scope is applied before evaluating."""
    rules = [r for r in pack.custom_rules if pack.enabled(r.id)]
    findings: list[Finding] = []
    failures: dict[str, list[LoadError]] = {r.id: [] for r in rules}
    if not rules:
        return findings, []
    for activation in activations(model):
        ref = activation.workload.ref
        labels = dict(activation.workload.labels)
        for rule in rules:
            settings = pack.settings(rule.id)
            if not settings.scope.matches(ref.namespace, ref.kind, labels):
                continue
            base = {**activation.base, "params": dict(settings.options)}
            targets: Iterable[tuple[str, str, Mapping[str, Any]]] = (
                [(r.name, r.label, {**base, "role": m}) for r, m in activation.roles]
                if rule.target == "role"
                else [("", "", base)]
            )
            for target, role_label, variables in targets:
                what = f"{ref.kind} {ref.namespace}/{ref.name}" + (f" role {target}" if target else "")
                try:
                    hit = rule.condition.evaluate(variables)
                except CelError as exc:
                    failures[rule.id].append(
                        _runtime_error(rule, "condition", rule.condition_line, what, exc)
                    )
                    continue
                if not hit:
                    continue
                message = rule.message
                if rule.message_expression is not None:
                    try:
                        message = str(rule.message_expression.evaluate(variables))
                    except CelError as exc:
                        failures[rule.id].append(
                            _runtime_error(rule, "messageExpression", rule.message_expression_line, what, exc)
                        )
                findings.append(
                    Finding(
                        rule=rule.id,
                        severity=settings.severity or rule.severity,
                        certainty=rule.certainty,
                        symptoms=rule.symptoms,
                        workload=_object(activation.workload),
                        message=message,
                        target=target,
                        role=role_label,
                    )
                )
    errors: list[LoadError] = []
    for rule in rules:
        entries = failures[rule.id]
        errors.extend(entries[:MAX_ERRORS_PER_RULE])
        if len(entries) > MAX_ERRORS_PER_RULE:
            errors.append(
                LoadError(
                    rule.source.file,
                    rule.condition_line,
                    f"custom rule {rule.id!r}: {len(entries) - MAX_ERRORS_PER_RULE} more evaluation "
                    "error(s) not listed",
                    field=f"{rule.key}.condition",
                )
            )
    return sorted(findings), errors


def _runtime_error(rule: CustomRule, key: str, line: int, what: str, exc: CelError) -> LoadError:
    return LoadError(
        rule.source.file,
        line,
        f"custom rule {rule.id!r}: {key} failed on {what}: {exc.message}",
        object=what,
        field=f"{rule.key}.{key}",
    )


# --------------------------------------------------------------------------------------------
# Applying a pack to findings


@dataclass(frozen=True, slots=True)
class WaivedFinding:
    finding: Finding
    waiver: Waiver


@dataclass(frozen=True, slots=True)
class ExpiredWaiver:
    """A finding reported again because the waiver that hid it expired."""

    finding: Finding
    waiver: Waiver


@dataclass(frozen=True, slots=True)
class PackResult:
    findings: tuple[Finding, ...]  # to report: in scope, enabled, severity applied, not waived
    waived: tuple[WaivedFinding, ...]
    expired: tuple[ExpiredWaiver, ...]
    unused_waivers: tuple[Waiver, ...]  # matched no finding (active or expired)
    errors: tuple[LoadError, ...]  # malformed annotation waivers
    filtered: int = 0  # findings of disabled rules or outside a rule's scope
    notes: tuple[str, ...] = ()


def annotation_waivers(
    workload: Workload, known_rules: Iterable[str]
) -> tuple[list[Waiver], list[LoadError]]:
    """The waivers a workload's own annotations declare, and error entries for malformed ones."""
    annotations = workload.annotations
    ref = workload.ref
    what = f"{ref.kind} {ref.namespace}/{ref.name}"
    keys = (WAIVE_ANNOTATION, WAIVE_REASON_ANNOTATION, WAIVE_EXPIRES_ANNOTATION, WAIVE_OWNER_ANNOTATION)
    if not any(k in annotations for k in keys):
        return [], []

    def line(key: str) -> int:
        return annotations.line_of(key, ref.source.line)

    def error(key: str, message: str) -> LoadError:
        return LoadError(
            ref.source.file, line(key), message, object=what, field=f"metadata.annotations[{key}]"
        )

    errors: list[LoadError] = []
    text = annotations.get(WAIVE_ANNOTATION)
    if text is None:
        stray = next(k for k in keys if k in annotations)
        return [], [error(stray, f"set without {WAIVE_ANNOTATION}: nothing is waived")]
    rules = [r.strip() for r in str(text).split(",") if r.strip()]
    reason = str(annotations.get(WAIVE_REASON_ANNOTATION) or "").strip()
    expires_text = str(annotations.get(WAIVE_EXPIRES_ANNOTATION) or "").strip()
    expires: date | None = None
    if not rules:
        errors.append(error(WAIVE_ANNOTATION, "names no rule: nothing is waived"))
    if not reason:
        errors.append(error(WAIVE_ANNOTATION, f"has no {WAIVE_REASON_ANNOTATION}: nothing is waived"))
    if not expires_text:
        errors.append(error(WAIVE_ANNOTATION, f"has no {WAIVE_EXPIRES_ANNOTATION}: nothing is waived"))
    elif not _DATE_RE.match(expires_text):
        errors.append(
            error(
                WAIVE_EXPIRES_ANNOTATION,
                f"must be a date as YYYY-MM-DD, not {expires_text!r}: nothing is waived",
            )
        )
    else:
        try:
            expires = date.fromisoformat(expires_text)
        except ValueError:
            errors.append(
                error(WAIVE_EXPIRES_ANNOTATION, f"{expires_text!r} is not a calendar date: nothing is waived")
            )
    known = set(known_rules)
    waivers: list[Waiver] = []
    for rule in rules:
        if rule not in known:
            errors.append(
                error(WAIVE_ANNOTATION, f"unknown rule {rule!r} (known: {', '.join(sorted(known))})")
            )
        elif reason and expires is not None:
            waivers.append(
                Waiver(
                    name=f"{what} annotation",
                    rule=rule,
                    reason=reason,
                    expires=expires,
                    owner=str(annotations.get(WAIVE_OWNER_ANNOTATION) or ""),
                    origin="annotation",
                    source=SourceRef(ref.source.file, line(WAIVE_ANNOTATION)),
                    workload=WorkloadMatch(ref.kind, ref.namespace, ref.name, ref.api_version),
                )
            )
    return waivers, errors


def apply_pack(findings: Sequence[Finding], model: AuditModel, pack: PolicyPack, today: date) -> PackResult:
    """Filter, re-rate and waive findings (built-in and custom) as the pack says.

    ``today`` decides which waivers are in force (pass it in: the rules core reads no clock).
    A finding matched by several waivers is waived by the first active one (documents in load
    order, then annotations); every waiver it matched counts as used.
    """
    workloads = {_object(w).identity: w for w in model.workloads()}
    waivers: list[Waiver] = list(pack.waivers)
    errors: list[LoadError] = []
    for workload in model.workloads():
        found, problems = annotation_waivers(workload, pack.rules)
        waivers.extend(found)
        errors.extend(problems)
    kept: list[Finding] = []
    waived: list[WaivedFinding] = []
    expired: list[ExpiredWaiver] = []
    used: set[int] = set()
    filtered = 0
    for finding in findings:
        settings = pack.settings(finding.rule)
        subject = workloads.get(finding.workload.identity)
        labels = dict(subject.labels) if subject is not None else {}
        if not settings.enabled or not settings.scope.matches(
            finding.workload.namespace, finding.workload.kind, labels
        ):
            filtered += 1
            continue
        if settings.severity is not None and settings.severity != finding.severity:
            # Severity is not a fingerprint input, so history and baselines still recognise it.
            finding = replace(finding, severity=settings.severity)
        matching = [(i, w) for i, w in enumerate(waivers) if w.matches(finding)]
        used.update(i for i, _ in matching)
        active = next((w for _, w in matching if w.active(today)), None)
        if active is not None:
            waived.append(WaivedFinding(finding, active))
            continue
        kept.append(finding)
        expired.extend(ExpiredWaiver(finding, w) for _, w in matching)
    unused = tuple(w for i, w in enumerate(waivers) if i not in used)
    notes = []
    if waived or expired or unused:
        notes.append(
            f"policy packs {', '.join(pack.names) or '(none)'}: {len(waived)} finding(s) waived, "
            f"{len(expired)} waiver(s) expired, {len(unused)} waiver(s) unused"
        )
    return PackResult(
        tuple(sorted(kept)),
        tuple(waived),
        tuple(expired),
        unused,
        tuple(errors),
        filtered,
        tuple(notes),
    )
