"""Kubernetes label selectors (matchLabels / matchExpressions) as immutable values.

A selector is a conjunction of requirements. `In`/`NotIn`/`Exists`/`DoesNotExist` follow
apimachinery: `NotIn` and `DoesNotExist` are true when the key is absent. The empty selector
matches everything; `LabelSelector.nothing()` stands for a selector that can match nothing (an
invalid or explicitly empty peer).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from auditor.model.values import value

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


class SelectorError(ValueError):
    """A selector that is not valid; `field` is the dotted path of the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message


@value(frozen=True, order=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        return value is None

    def __str__(self) -> str:
        if self.operator == "In":
            return (
                f"{self.key}={self.values[0]}"
                if len(self.values) == 1
                else (f"{self.key} in ({','.join(self.values)})")
            )
        if self.operator == "NotIn":
            return f"{self.key} notin ({','.join(self.values)})"
        if self.operator == "Exists":
            return self.key
        return f"!{self.key}"


@value(frozen=True)
class LabelSelector:
    """A conjunction of requirements; `impossible` marks a selector that matches nothing."""

    requirements: tuple[Requirement, ...] = ()
    impossible: bool = False

    @staticmethod
    def everything() -> LabelSelector:
        return _EVERYTHING

    @staticmethod
    def nothing() -> LabelSelector:
        return _NOTHING

    def is_everything(self) -> bool:
        return not self.requirements and not self.impossible

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.impossible:
            return False
        # A loop, not all(...) over a generator: 0.18 against 0.32 µs a call, ~96k calls a scan.
        for r in self.requirements:  # noqa: SIM110
            if not r.matches(labels):
                return False
        return True

    def keys(self) -> frozenset[str]:
        return frozenset(r.key for r in self.requirements)

    def and_(self, other: LabelSelector) -> LabelSelector:
        return LabelSelector(
            tuple(sorted(set(self.requirements) | set(other.requirements))),
            self.impossible or other.impossible,
        )

    def __str__(self) -> str:
        if self.impossible:
            return "<nothing>"
        if not self.requirements:
            return "<all>"
        return ",".join(str(r) for r in self.requirements)


_EVERYTHING = LabelSelector()
_NOTHING = LabelSelector((), True)


def parse_label_selector(obj: Any, field: str) -> LabelSelector:
    """Parse a metav1.LabelSelector. None or {} is the empty selector (matches everything)."""
    if obj is None:
        return _EVERYTHING
    if not isinstance(obj, Mapping):
        raise SelectorError(
            field, f"must be a mapping with matchLabels/matchExpressions, got {type_name(obj)}"
        )
    unknown = set(obj) - {"matchLabels", "matchExpressions"}
    if unknown:
        raise SelectorError(field, f"unknown field(s) {', '.join(sorted(map(str, unknown)))}")
    reqs: set[Requirement] = set()
    match_labels = obj.get("matchLabels")
    if match_labels is not None:
        if not isinstance(match_labels, Mapping):
            raise SelectorError(f"{field}.matchLabels", f"must be a mapping, got {type_name(match_labels)}")
        for key, value in match_labels.items():
            label = _label_key(key, f"{field}.matchLabels")
            reqs.add(Requirement(label, "In", (_label_value(value, f"{field}.matchLabels.{key}"),)))
    exprs = obj.get("matchExpressions")
    if exprs is not None:
        if not isinstance(exprs, list):
            raise SelectorError(f"{field}.matchExpressions", f"must be a list, got {type_name(exprs)}")
        for i, expr in enumerate(exprs):
            reqs.add(parse_requirement(expr, f"{field}.matchExpressions[{i}]"))
    return LabelSelector(tuple(sorted(reqs)))


def parse_requirement(expr: Any, field: str, operators: tuple[str, ...] = OPERATORS) -> Requirement:
    if not isinstance(expr, Mapping):
        raise SelectorError(field, f"must be a mapping with key/operator/values, got {type_name(expr)}")
    unknown = set(expr) - {"key", "operator", "values"}
    if unknown:
        raise SelectorError(field, f"unknown field(s) {', '.join(sorted(map(str, unknown)))}")
    key = _label_key(expr.get("key"), f"{field}.key")
    op = expr.get("operator")
    if op not in operators:
        raise SelectorError(f"{field}.operator", f"must be one of {', '.join(operators)}, got {op!r}")
    raw_values = expr.get("values")
    if raw_values is None:
        raw_values = []
    if not isinstance(raw_values, list):
        raise SelectorError(f"{field}.values", f"must be a list of strings, got {type_name(raw_values)}")
    values = tuple(sorted({_label_value(v, f"{field}.values") for v in raw_values}))
    if op in ("In", "NotIn") and not values:
        raise SelectorError(f"{field}.values", f"must be non-empty for operator {op}")
    if op in ("Exists", "DoesNotExist") and values:
        raise SelectorError(f"{field}.values", f"must be empty for operator {op}")
    return Requirement(key, str(op), values)


def _label_key(key: Any, field: str) -> str:
    if not isinstance(key, str) or not key:
        raise SelectorError(field, f"label key must be a non-empty string, got {key!r}")
    return key


def _label_value(value: Any, field: str) -> str:
    # YAML turns `true`, `1.0` or `null` into non-strings; the API server would reject them.
    if isinstance(value, bool) or value is None or isinstance(value, (list, dict)):
        raise SelectorError(field, f"label value must be a string, got {type_name(value)} {value!r}")
    return str(value)


def type_name(obj: object) -> str:
    """What a YAML value is, in words, for error messages."""
    if obj is None:
        return "null"
    if isinstance(obj, bool):
        return "boolean"
    if isinstance(obj, Mapping):
        return "mapping"
    if isinstance(obj, list):
        return "list"
    if isinstance(obj, str):
        return "string"
    if isinstance(obj, (int, float)):
        return "number"
    return type(obj).__name__
