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
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from auditor import yamlio
from auditor.errors import ConfigError
from auditor.model.findings import FINDING_ORDER, SEVERITIES, Finding, ObjectRef
from auditor.model.labels import LabelSelector, SelectorError, parse_label_selector
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
from auditor.rules.model import AuditModel, workload_object
from auditor.settings.schema import Invalid, Where, json_schema, kind_of, non_empty, read, setting

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


def _selector(raw: Any) -> LabelSelector | None:
    if raw is None:
        return None
    try:
        return parse_label_selector(raw, "labels")
    except SelectorError as exc:
        sub = exc.field[len("labels") :].lstrip(".") if exc.field.startswith("labels") else ""
        raise Invalid(exc.message, sub) from None


_SELECTOR_JSON: dict[str, Any] = {
    "type": "object",
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["key", "operator"],
                "additionalProperties": False,
            },
        },
    },
    "additionalProperties": False,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ScopeDoc:
    """Where a rule reports; omitted or empty: everywhere."""

    namespaces: tuple[str, ...] = setting(
        (), doc="fnmatch patterns on the object's namespace; empty: every namespace.", item_check=non_empty
    )
    exclude_namespaces: tuple[str, ...] = setting(
        (), doc="fnmatch patterns of namespaces left out.", key="excludeNamespaces", item_check=non_empty
    )
    kinds: tuple[str, ...] = setting((), doc="Object kinds, exact; empty: every kind.", item_check=non_empty)
    labels: LabelSelector | None = setting(
        None,
        doc="A label selector on the workload's metadata.labels.",
        parse=_selector,
        json=_SELECTOR_JSON,
    )

    def matches(self, namespace: str, kind: str, labels: Mapping[str, str]) -> bool:
        if self.namespaces and not any(fnmatch.fnmatchcase(namespace, p) for p in self.namespaces):
            return False
        if any(fnmatch.fnmatchcase(namespace, p) for p in self.exclude_namespaces):
            return False
        if self.kinds and kind not in self.kinds:
            return False
        return self.labels is None or self.labels.matches(labels)


EVERYWHERE = ScopeDoc()


@dataclass(frozen=True, slots=True)
class RuleSettings:
    """One rule's settings after every pack. ``severity`` None keeps the rule's own; ``source`` is
    where they were last changed (empty for built-in defaults)."""

    rule: str
    enabled: bool = True
    severity: str | None = None
    scope: ScopeDoc = EVERYWHERE
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


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadDoc:
    """A workload by kind, namespace and name."""

    kind: str = setting(doc="Object kind.", check=non_empty)
    namespace: str = setting(doc='Namespace ("" for cluster-scoped objects).')
    name: str = setting(doc="Object name.", check=non_empty)
    api_version: str = setting("", doc="Optional; empty matches every apiVersion.", key="apiVersion")

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
    origin: str  # document | annotation | api (a suppression set through the service's API)
    source: SourceRef
    fingerprint: str = ""
    workload: WorkloadDoc | None = None

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


class Suppressed(Protocol):
    """A finding suppressed through the service's API (the store's SuppressionRecord)."""

    @property
    def fingerprint(self) -> str: ...
    @property
    def rule(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def expires(self) -> date: ...
    @property
    def created_by(self) -> str: ...


def with_api_waivers(pack: PolicyPack, suppressed: Iterable[Suppressed]) -> PolicyPack:
    """`pack` with one waiver of origin `api` per suppression, after the packs' own waivers: the
    same step hides, expires and reports them."""
    extra = tuple(
        Waiver(
            name=f"api-{s.fingerprint[:16]}",
            rule=s.rule,
            reason=s.reason,
            expires=s.expires,
            owner=s.created_by,
            origin="api",
            source=SourceRef("api", 0),
            fingerprint=s.fingerprint,
        )
        for s in suppressed
    )
    return replace(pack, waivers=(*pack.waivers, *extra)) if extra else pack


# --------------------------------------------------------------------------------------------
# Reading documents: declared with the one settings schema (auditor/settings/schema.py), so every error
# names this file, a line and a key path, and docs/schemas/policy-pack.schema.json comes from it.


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


def _mapping(raw: Any) -> Mapping[str, Any]:
    """A mapping kept as loaded (its keys' lines are read when they are checked)."""
    if raw is None:
        return MappingProxyType({})
    if not isinstance(raw, Mapping):
        raise Invalid(f"must be a mapping, not {kind_of(raw)}")
    return raw


def _expiry(value: Any) -> date:
    if isinstance(value, date):  # should a loader ever resolve YAML timestamps
        return value
    text = value if isinstance(value, str) else ""
    if not _DATE_RE.match(text):
        raise Invalid(f"must be a date as YYYY-MM-DD, not {value!r}")
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise Invalid(f"{text!r} is not a calendar date") from None


def _fingerprint(value: Any) -> str:
    if not isinstance(value, str) or not _FINGERPRINT_RE.match(value.lower()):
        raise Invalid("must be a finding fingerprint (32 hex digits)")
    return value.lower()


_ANY_MAPPING: dict[str, Any] = {"type": "object"}


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleEntryDoc:
    """Settings for a built-in or already defined custom rule."""

    enabled: bool | None = setting(None, doc="Whether the rule runs (default true).")
    severity: str | None = setting(
        None, doc="Severity override; omitted: the rule's own.", choices=SEVERITIES
    )
    scope: ScopeDoc | None = setting(None, doc="Where the rule reports (replaces an earlier scope).")
    options: Mapping[str, Any] = setting(
        factory=_empty,
        doc="The rule's parameters; only the keys it declares, each of its default's type.",
        parse=_mapping,
        json=_ANY_MAPPING,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class CustomRuleDoc:
    """A rule defined in a pack: a CEL condition over one role (or workload) and its placement."""

    id: str = setting(
        doc="Rule id: lowercase letters, digits and '-', at most 63 characters.",
        pattern=_RULE_ID_RE.pattern.strip("^$"),
        pattern_text="not a rule id (lowercase letters, digits and '-', at most 63 characters)",
    )
    title: str = setting("", doc="One line for people; default: the id.")
    description: str = setting("", doc="For people.")
    severity: str = setting(doc="critical, high, medium or low.", choices=SEVERITIES)
    symptoms: tuple[str, ...] = setting((), doc="Any of blocked, slowdown, cost.", choices=SYMPTOMS)
    certainty: str = setting("always", doc="The certainty its findings carry.", choices=CERTAINTIES)
    target: str = setting(
        "role", doc="role: evaluated once per role; workload: once per workload.", key="for", choices=TARGETS
    )
    condition: str = setting(doc="CEL that yields a bool; true reports a finding.", check=non_empty)
    message: str = setting(doc="The finding's message.", check=non_empty)
    message_expression: str | None = setting(
        None,
        doc="CEL that yields the message (string); on an evaluation error `message` is used.",
        key="messageExpression",
        check=non_empty,
    )
    options: Mapping[str, Any] = setting(
        factory=_empty,
        doc="Defaults of the rule's parameters, read as `params` in CEL.",
        parse=_mapping,
        json=_ANY_MAPPING,
    )
    scope: ScopeDoc | None = setting(None, doc="Where the rule reports.")
    enabled: bool = setting(True, doc="Whether the rule runs.")

    def validated(self, raw: Any, where: Where, path: str, line: int) -> CustomRuleDoc:
        if self.id in _BUILTIN_META:
            raise where.error(
                f"{path}.id", yamlio.key_line(raw, "id", line), f"{self.id!r} is a built-in rule"
            )
        return self


@dataclass(frozen=True, slots=True, kw_only=True)
class PackMetaDoc:
    """The pack's metadata."""

    name: str = setting(doc="Names the pack in reports.", check=non_empty)
    description: str = setting("", doc="For people.")
    labels: Mapping[str, Any] = setting(factory=_empty, doc="Free-form.", parse=_mapping, json=_ANY_MAPPING)
    annotations: Mapping[str, Any] = setting(
        factory=_empty, doc="Free-form.", parse=_mapping, json=_ANY_MAPPING
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class PackSpecDoc:
    """Rule settings and custom rules."""

    rules: Mapping[str, Any] = setting(
        factory=_empty,
        doc="Rule id → settings (RuleEntry), for built-in rules and custom rules defined so far.",
        parse=_mapping,
        json={"type": "object", "additionalProperties": {"$ref": "#/$defs/RuleEntryDoc"}},
    )
    custom_rules: tuple[CustomRuleDoc, ...] = setting((), doc="Custom CEL rules.", key="customRules")


@dataclass(frozen=True, slots=True, kw_only=True)
class WaiverMetaDoc:
    """The waiver's metadata."""

    name: str = setting(doc="Unique over all packs.", check=non_empty)
    labels: Mapping[str, Any] = setting(factory=_empty, doc="Free-form.", parse=_mapping, json=_ANY_MAPPING)
    annotations: Mapping[str, Any] = setting(
        factory=_empty, doc="Free-form.", parse=_mapping, json=_ANY_MAPPING
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class WaiverSpecDoc:
    """Which findings the waiver hides, why and until when."""

    rule: str = setting(doc="A built-in or custom rule id.", check=non_empty)
    fingerprint: str | None = setting(
        None,
        doc="The finding's fingerprint (32 hex digits); or give workload.",
        parse=_fingerprint,
        json={"type": "string", "pattern": "^[0-9a-fA-F]{32}$"},
    )
    workload: WorkloadDoc | None = setting(None, doc="Every finding of the rule on this workload.")
    reason: str = setting(doc="Why the findings are accepted.", check=non_empty)
    expires: date = setting(
        doc="YYYY-MM-DD; the waiver applies through that day (UTC).",
        parse=_expiry,
        json={"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
    )
    owner: str = setting("", doc="Who accepted it.")

    def validated(self, raw: Any, where: Where, path: str, line: int) -> WaiverSpecDoc:
        if (raw.get("fingerprint") is not None) == (raw.get("workload") is not None):
            raise where.error(path, line, "give exactly one of fingerprint and workload")
        return self


def _api_version(value: str) -> str | None:
    return None if value == API_VERSION else f"must be {API_VERSION}, not {value!r}"


def _kind(value: str) -> str | None:
    return (
        None if value in (PACK_KIND, WAIVER_KIND) else f"must be {PACK_KIND} or {WAIVER_KIND}, not {value!r}"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class HeaderDoc:
    """A pack file's document: a PolicyPack or a Waiver."""

    api_version: str = setting(doc=f"Always {API_VERSION}.", key="apiVersion", check=_api_version)
    kind: str = setting(doc=f"{PACK_KIND} or {WAIVER_KIND}.", check=_kind)
    metadata: Any = setting(
        None, doc="PackMetaDoc or WaiverMetaDoc.", parse=lambda raw: raw, json=_ANY_MAPPING
    )
    spec: Any = setting(None, doc="PackSpecDoc or WaiverSpecDoc.", parse=lambda raw: raw, json=_ANY_MAPPING)


def _item_line(seq: object, index: int, default: int) -> int:
    if isinstance(seq, yamlio.YamlSeq) and index < len(seq.item_lines):
        return seq.item_lines[index] or default
    return default


@dataclass
class _Draft:
    """Settings being merged for one rule."""

    enabled: bool
    severity: str | None
    scope: ScopeDoc
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
    waivers: list[tuple[Waiver, Where, int]] = field(default_factory=list)
    waiver_names: dict[str, SourceRef] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for rid, meta in _BUILTIN_META.items():
            self.drafts[rid] = _Draft(True, None, EVERYWHERE, dict(meta.options), frozenset(meta.options))

    def add(self, document: yamlio.Document) -> None:
        data, source = document.data, document.source
        where = Where(source.file, Path(source.file).parent, PackError)
        header = read(HeaderDoc, data, "", where, source.line)
        top_line = yamlio.line_of(data, source.line)
        if header.kind == PACK_KIND:
            self._pack(data, where, top_line)
        else:
            self._waiver(data, where, top_line)

    # PolicyPack ----------------------------------------------------------------------------

    def _pack(self, top: Mapping[str, Any], where: Where, line: int) -> None:
        meta = read(
            PackMetaDoc, top.get("metadata"), "metadata", where, yamlio.key_line(top, "metadata", line)
        )
        raw_spec = top.get("spec")
        spec = read(PackSpecDoc, raw_spec, "spec", where, yamlio.key_line(top, "spec", line))
        self.names.append(meta.name)
        if where.file not in self.files:
            self.files.append(where.file)
        defined_here: set[str] = set()
        raw_rules = raw_spec.get("customRules") if isinstance(raw_spec, Mapping) else None
        spec_line = yamlio.line_of(raw_spec, line)
        for i, doc in enumerate(spec.custom_rules):
            path = f"spec.customRules[{i}]"
            raw = raw_rules[i] if isinstance(raw_rules, list) else {}
            item_line = yamlio.line_of(raw, _item_line(raw_rules, i, spec_line))
            rule, draft = self._custom_rule(doc, raw, where, path, item_line)
            if rule.id in defined_here:
                raise where.error(
                    f"{path}.id", rule.source.line, f"{rule.id!r} is defined twice in this pack"
                )
            defined_here.add(rule.id)
            self.custom.pop(rule.id, None)  # a redefinition moves to the end, in load order
            self.custom[rule.id] = rule
            self.drafts[rule.id] = draft
        rules = spec.rules
        for rid, raw in rules.items():
            at = yamlio.key_line(rules, str(rid), spec_line)
            if rid not in self.drafts:
                raise where.error(
                    f"spec.rules.{rid}", at, f"unknown rule (known: {', '.join(sorted(self.drafts))})"
                )
            self._override(str(rid), raw, where, f"spec.rules.{rid}", at)

    def _override(self, rid: str, raw: Any, where: Where, path: str, line: int) -> None:
        entry = read(RuleEntryDoc, raw, path, where, line)
        draft = self.drafts[rid]
        if entry.enabled is not None:
            draft.enabled = entry.enabled
        if entry.severity is not None:
            draft.severity = entry.severity
        if isinstance(raw, Mapping) and "scope" in raw:
            draft.scope = entry.scope if entry.scope is not None else EVERYWHERE
        options = entry.options
        for key, value in options.items():
            at = yamlio.key_line(options, str(key), line)
            if key not in draft.declared:
                known = ", ".join(sorted(draft.declared)) or "none"
                raise where.error(f"{path}.options.{key}", at, f"unknown key (known: {known})")
            self._check_option(draft, str(key), value, where, f"{path}.options.{key}", at)
            draft.options[str(key)] = value
        draft.source = f"{where.file}:{line}"

    def _check_option(
        self, draft: _Draft, key: str, value: object, where: Where, path: str, line: int
    ) -> None:
        default = draft.options.get(key)
        if default is None or value is None:
            return
        # An option keeps the type of its default: a number stays a number, a list a list.
        same = isinstance(value, bool) == isinstance(default, bool) and (
            isinstance(value, type(default))
            or (isinstance(value, int | float) and isinstance(default, int | float))
        )
        if not same:
            raise where.error(
                path, line, f"must be {kind_of(default)} like its default, not {kind_of(value)}"
            )

    def _custom_rule(
        self, doc: CustomRuleDoc, raw: Any, where: Where, path: str, line: int
    ) -> tuple[CustomRule, _Draft]:
        names = VARIABLES if doc.target == "role" else WORKLOAD_VARIABLES

        def cel(key: str, source: str, returns: Returns) -> CelExpression:
            try:
                return compile_expression(source, names, returns)
            except CelError as exc:
                raise where.error(
                    f"{path}.{key}", yamlio.key_line(raw, key, line), f"rule {doc.id!r}: CEL: {exc}"
                ) from None

        condition = cel("condition", doc.condition, "bool")
        message_expression = (
            cel("messageExpression", doc.message_expression, "string")
            if doc.message_expression is not None
            else None
        )
        rule = CustomRule(
            id=doc.id,
            title=doc.title or doc.id,
            severity=doc.severity,
            symptoms=doc.symptoms,
            certainty=doc.certainty,
            target=doc.target,
            message=doc.message,
            condition=condition,
            message_expression=message_expression,
            source=SourceRef(where.file, line),
            key=path,
            condition_line=yamlio.key_line(raw, "condition", line),
            message_expression_line=yamlio.key_line(raw, "messageExpression", line),
            description=doc.description,
        )
        options = {str(k): v for k, v in doc.options.items()}
        scope = doc.scope if doc.scope is not None else EVERYWHERE
        return rule, _Draft(doc.enabled, None, scope, options, frozenset(options), f"{where.file}:{line}")

    # Waiver --------------------------------------------------------------------------------

    def _waiver(self, top: Mapping[str, Any], where: Where, line: int) -> None:
        meta_line = yamlio.key_line(top, "metadata", line)
        meta = read(WaiverMetaDoc, top.get("metadata"), "metadata", where, meta_line)
        raw_spec = top.get("spec")
        spec = read(WaiverSpecDoc, raw_spec, "spec", where, yamlio.key_line(top, "spec", line))
        if meta.name in self.waiver_names:
            raise where.error(
                "metadata.name",
                yamlio.key_line(top.get("metadata"), "name", meta_line),
                f"waiver {meta.name!r} is already defined at {self.waiver_names[meta.name]}",
            )
        source = SourceRef(where.file, line)
        waiver = Waiver(
            name=meta.name,
            rule=spec.rule,
            reason=spec.reason,
            expires=spec.expires,
            owner=spec.owner,
            origin="document",
            source=source,
            fingerprint=spec.fingerprint or "",
            workload=spec.workload,
        )
        self.waiver_names[meta.name] = source
        self.waivers.append((waiver, where, yamlio.key_line(raw_spec, "rule", line)))

    def result(self) -> PolicyPack:
        for waiver, where, line in self.waivers:
            if waiver.rule not in self.drafts:
                known = ", ".join(sorted(self.drafts))
                raise where.error("spec.rule", line, f"unknown rule {waiver.rule!r} (known: {known})")
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


def pack_json_schema() -> str:
    """docs/schemas/policy-pack.schema.json: one PolicyPack or Waiver document (a test keeps it current)."""
    pack = json_schema(PackSpecDoc, "spec", "")
    waiver = json_schema(WaiverSpecDoc, "spec", "")
    meta = json_schema(PackMetaDoc, "metadata", "")
    wmeta = json_schema(WaiverMetaDoc, "metadata", "")
    defs = {**pack.pop("$defs", {}), **waiver.pop("$defs", {})}
    defs["RuleEntryDoc"] = json_schema(RuleEntryDoc, "rule", "")
    defs.update(defs["RuleEntryDoc"].pop("$defs", {}))
    for d in (pack, waiver, meta, wmeta, defs["RuleEntryDoc"]):
        for k in ("$schema", "$id", "title"):
            d.pop(k, None)

    def document(
        kind: str, metadata: dict[str, Any], spec: dict[str, Any], required: list[str]
    ) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "apiVersion": {"const": API_VERSION},
                "kind": {"const": kind},
                "metadata": metadata,
                "spec": spec,
            },
            "required": required,
            "additionalProperties": False,
        }

    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://placement-auditor.dev/schemas/policy-pack.schema.json",
        "title": "placement-auditor policy pack document (PolicyPack or Waiver)",
        "oneOf": [
            document(PACK_KIND, meta, pack, ["apiVersion", "kind", "metadata"]),
            document(WAIVER_KIND, wmeta, waiver, ["apiVersion", "kind", "metadata", "spec"]),
        ],
        "$defs": dict(sorted(defs.items())),
    }
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


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
                        workload=workload_object(activation.workload.ref),
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
            more = f"{len(entries) - MAX_ERRORS_PER_RULE} more evaluation error(s) not listed"
            message = f"custom rule {rule.id!r}: {more}"
            errors.append(
                LoadError(rule.source.file, rule.condition_line, message, field=f"{rule.key}.condition")
            )
    return sorted(findings, key=FINDING_ORDER), errors


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
    """A finding and the waiver that hides it (as an ExpiredWaiver: that hid it, and expired)."""

    finding: Finding
    waiver: Waiver


ExpiredWaiver = WaivedFinding


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
    else:
        try:
            expires = _expiry(expires_text)
        except Invalid as exc:
            errors.append(error(WAIVE_EXPIRES_ANNOTATION, f"{exc.message}: nothing is waived"))
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
                    workload=WorkloadDoc(
                        kind=ref.kind, namespace=ref.namespace, name=ref.name, api_version=ref.api_version
                    ),
                )
            )
    return waivers, errors


@dataclass(frozen=True, slots=True)
class PackSubjects:
    """What applying a pack reads of the audited workloads: the labels of each (by identity, for
    rule scopes) and the waivers their annotations declare (in workload order), with the error
    entries of malformed ones."""

    labels: Mapping[str, Mapping[str, str]]
    waivers: tuple[Waiver, ...] = ()
    errors: tuple[LoadError, ...] = ()
    # The files each workload identity is declared in (more than one: declared twice).
    files: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @staticmethod
    def of(workloads: Iterable[Workload], pack: PolicyPack) -> PackSubjects:
        labels: dict[str, Mapping[str, str]] = {}
        files: dict[str, tuple[str, ...]] = {}
        waivers: list[Waiver] = []
        errors: list[LoadError] = []
        for workload in workloads:
            identity = workload_object(workload.ref).identity
            labels[identity] = dict(workload.labels)
            files[identity] = (*files.get(identity, ()), workload.ref.source.file)
            found, problems = annotation_waivers(workload, pack.rules)
            waivers.extend(found)
            errors.extend(problems)
        return PackSubjects(labels, tuple(waivers), tuple(errors), files)


def apply_pack(findings: Sequence[Finding], model: AuditModel, pack: PolicyPack, today: date) -> PackResult:
    """:func:`apply_pack_to` the workloads of `model`."""
    return apply_pack_to(findings, PackSubjects.of(model.workloads(), pack), pack, today)


def apply_pack_to(
    findings: Sequence[Finding], subjects: PackSubjects, pack: PolicyPack, today: date
) -> PackResult:
    """Filter, re-rate and waive findings (built-in and custom) as the pack says.

    ``today`` decides which waivers are in force (pass it in: the rules core reads no clock).
    A finding matched by several waivers is waived by the first active one (documents in load
    order, then annotations); every waiver it matched counts as used. Findings are taken in
    their sorted order, whatever order they come in, so waived and expired lists are too.
    """
    waivers: list[Waiver] = [*pack.waivers, *subjects.waivers]
    errors: list[LoadError] = list(subjects.errors)
    kept: list[Finding] = []
    waived: list[WaivedFinding] = []
    expired: list[ExpiredWaiver] = []
    used: set[int] = set()
    filtered = 0
    rerated = False  # a severity changed: `kept` is no longer in order
    for finding in sorted(findings, key=FINDING_ORDER):
        settings = pack.settings(finding.rule)
        labels = subjects.labels.get(finding.workload.identity, {})
        if not settings.enabled or not settings.scope.matches(
            finding.workload.namespace, finding.workload.kind, labels
        ):
            filtered += 1
            continue
        if settings.severity is not None and settings.severity != finding.severity:
            # Severity is not a fingerprint input, so history and baselines still recognise it.
            finding = replace(finding, severity=settings.severity)
            rerated = True
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
        tuple(sorted(kept, key=FINDING_ORDER)) if rerated else tuple(kept),
        tuple(waived),
        tuple(expired),
        unused,
        tuple(errors),
        filtered,
        tuple(notes),
    )
