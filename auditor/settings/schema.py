"""One declarative settings schema: dataclass fields carry their documentation and constraints
(`setting(...)`), one generic reader validates YAML against them, and the same declarations give
the JSON Schemas published under docs/schemas/.

Dataclass field metadata was chosen over pydantic: the settings are frozen dataclasses the core
already uses everywhere, errors must name the file, *line* and key path (pydantic knows no YAML
lines), and the core must not import a validation library to read its own settings.

Types the reader understands: str, int, float (an int is accepted), bool (YAML true is never a
number), `X | None`, `tuple[X, ...]` (from a YAML list), nested dataclasses (from a mapping), and any
shape a field's `parse` hook reads. A dataclass may define `validated(self, raw, where, path, line)`
for checks across its fields (returning itself, or an adjusted copy, e.g. paths resolved).
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, Union, cast

from auditor import yamlio
from auditor.errors import ConfigError
from auditor.model.labels import type_name

T = TypeVar("T")
JSON = dict[str, Any]


class Invalid(ValueError):
    """Raised by `parse`/`check` hooks: what is wrong, and optionally the sub-key it is about."""

    def __init__(self, message: str, key: str = "", line: int = 0) -> None:
        super().__init__(message)
        self.message, self.key, self.line = message, key, line


@dataclass(frozen=True, slots=True)
class Where:
    """The file being read, and the directory relative paths in it are read from."""

    file: str
    base: Path
    kind: type[ConfigError] = ConfigError  # the error class this file's problems raise

    def error(self, path: str, line: int, message: str) -> ConfigError:
        return self.kind(self.file, line, path, message)


@dataclass(frozen=True, slots=True)
class Meta:
    doc: str
    unit: str = ""
    why: str = ""
    key: str = ""  # the YAML key when it is not the field name
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None
    pattern: str = ""  # a regular expression a string must match in full
    pattern_text: str = ""  # what the pattern means, for the error message
    check: Callable[[Any], str | None] | None = None
    item_check: Callable[[Any], str | None] | None = None  # each item of a list
    parse: Callable[[Any], Any] | None = None  # reads the raw YAML value (raises Invalid)
    json: JSON | None = None  # JSON Schema of what `parse` reads
    path: str = ""  # "resolve": a path relative to the config file
    secret: bool = False
    internal: bool = False  # not read from the file (e.g. where the settings came from)


def is_internal(f: dataclasses.Field[Any]) -> bool:
    info = f.metadata.get("schema")
    return bool(f.metadata.get("internal")) or (isinstance(info, Meta) and info.internal) or not f.init


def setting(
    default: Any = dataclasses.MISSING,
    *,
    doc: str,
    factory: Callable[[], Any] | None = None,
    **meta: Any,
) -> Any:
    """A dataclass field with its documentation and constraints (see Meta)."""
    info = Meta(doc=doc, **meta)
    shown = not info.secret
    if factory is not None:
        return field(default_factory=factory, repr=shown, metadata={"schema": info})
    return field(default=default, repr=shown, metadata={"schema": info})


def meta_of(f: dataclasses.Field[Any]) -> Meta:
    found = f.metadata.get("schema")
    if not isinstance(found, Meta):
        raise TypeError(f"{f.name}: declare settings fields with schema.setting()")
    return found


def _optional(tp: Any) -> Any | None:
    """X for `X | None`, else None."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0]
    return None


def _accepts(tp: Any, value: Any) -> bool:
    """isinstance, except that YAML's true/false is not a number (bool subclasses int in Python)."""
    if tp is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if tp is float:
        return isinstance(value, int | float)
    return isinstance(value, tp)


def non_empty(text: str) -> str | None:
    """A `check` for strings that must say something."""
    return None if text.strip() else "must not be empty"


def kind_of(value: object) -> str:
    """What a YAML value is, in words: "null", "a list", "a mapping", "a string"…"""
    return "null" if value is None else f"a {type_name(value)}"


_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}
_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _item_line(raw: Any, index: int, default: int) -> int:
    lines = getattr(raw, "item_lines", None)
    if lines and index < len(lines) and lines[index]:
        return int(lines[index])
    return yamlio.line_of(raw[index], default) if isinstance(raw, list) else default


def _declared(cls: type) -> Iterator[tuple[str, dataclasses.Field[Any], Meta, Any]]:
    """(YAML key, field, its Meta, its type) of each setting of `cls` read from the file."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cast(Any, cls)):
        if not is_internal(f):
            yield meta_of(f).key or f.name, f, meta_of(f), hints[f.name]


def read(cls: type[T], raw: Any, path: str, where: Where, line: int = 0) -> T:
    """An instance of the settings dataclass `cls` from the YAML mapping `raw` (None: defaults)."""
    line = yamlio.line_of(raw, line)
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise where.error(path or "(top)", line or 1, f"must be a mapping, not {kind_of(raw)}")
    fields = {key: (f, meta, tp) for key, f, meta, tp in _declared(cls)}
    values: dict[str, Any] = {}
    prefix = f"{path}." if path else ""
    for key, value in raw.items():
        key_line = yamlio.key_line(raw, str(key), line)
        if str(key) not in fields:
            raise where.error(f"{prefix}{key}", key_line, f"unknown key (known: {', '.join(sorted(fields))})")
        f, meta, tp = fields[str(key)]
        values[f.name] = _value(tp, meta, value, f"{prefix}{key}", where, key_line)
    for key, (f, _, _) in fields.items():
        if f.name not in values and _required(f):
            raise where.error(f"{prefix}{key}", line, "is required")
    obj = cls(**values)
    validated = getattr(obj, "validated", None)
    if validated is not None:
        obj = validated(raw, where, path, line)
    return obj


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _value(tp: Any, meta: Meta, value: Any, path: str, where: Where, line: int) -> Any:
    if meta.parse is not None:
        try:
            return meta.parse(value)
        except Invalid as exc:
            at = f"{path}.{exc.key}" if exc.key else path
            raise where.error(at, exc.line or line, exc.message) from None
    inner = _optional(tp)
    if inner is not None:
        return None if value is None else _value(inner, meta, value, path, where, line)
    if dataclasses.is_dataclass(tp):
        return read(cast(type, tp), value, path, where, line)
    if typing.get_origin(tp) is tuple:
        (item_tp, *_rest) = typing.get_args(tp)
        if not isinstance(value, list):
            raise where.error(path, line, f"must be a list, not {kind_of(value)}")
        out = tuple(
            _value(item_tp, _item_meta(meta), item, f"{path}[{i}]", where, _item_line(value, i, line))
            for i, item in enumerate(value)
        )
        return _checked(meta, out, path, where, line)
    if tp in _TYPE_NAMES:
        if not _accepts(tp, value):
            # YAML 1.1 reads on/off/yes/no as booleans and bare digits as numbers.
            hint = " (quote it)" if tp is str and isinstance(value, bool | int | float) else ""
            raise where.error(path, line, f"must be {_TYPE_NAMES[tp]}, not {kind_of(value)}{hint}")
        return _checked(meta, float(value) if tp is float else value, path, where, line)
    raise TypeError(f"{path}: no reader for {tp!r}; give the field a parse hook")


def _item_meta(meta: Meta) -> Meta:
    """The constraints a list's items inherit (string shape, paths), not its own."""
    return Meta(
        doc="",
        pattern=meta.pattern,
        pattern_text=meta.pattern_text,
        choices=meta.choices,
        path=meta.path,
        check=meta.item_check,
    )


def _checked(meta: Meta, value: Any, path: str, where: Where, line: int) -> Any:
    if isinstance(value, str):
        if meta.choices and value not in meta.choices:
            raise where.error(path, line, f"{value!r} is not one of {', '.join(meta.choices)}")
        if meta.pattern and not re.fullmatch(meta.pattern, value):
            raise where.error(
                path, line, f"{meta.pattern_text or 'does not match ' + meta.pattern}: {value!r}"
            )
        if meta.path == "resolve" and value and not Path(value).is_absolute():
            value = str(where.base / value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        if meta.minimum is not None and value < meta.minimum:
            raise where.error(path, line, f"must be at least {_num(meta.minimum)}{_unit(meta)}")
        if meta.maximum is not None and value > meta.maximum:
            raise where.error(path, line, f"must be at most {_num(meta.maximum)}{_unit(meta)}")
        if meta.exclusive_minimum is not None and value <= meta.exclusive_minimum:
            raise where.error(path, line, f"must be greater than {_num(meta.exclusive_minimum)}{_unit(meta)}")
    if meta.check is not None and (problem := meta.check(value)):
        raise where.error(path, line, problem)
    return value


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _unit(meta: Meta) -> str:
    return f" {meta.unit}" if meta.unit else ""


# --- JSON Schema -------------------------------------------------------------------------------


def json_schema(cls: type, title: str, schema_id: str) -> JSON:
    """The JSON Schema (draft 2020-12) of a settings dataclass, from the same declarations."""
    defs: dict[str, JSON] = {}
    root = _object_schema(cls, defs)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": schema_id,
        "title": title,
        **root,
        **({"$defs": dict(sorted(defs.items()))} if defs else {}),
    }


def _object_schema(cls: type, defs: dict[str, JSON]) -> JSON:
    props: dict[str, JSON] = {}
    required: list[str] = []
    for key, f, meta, tp in _declared(cls):
        props[key] = _field_schema(tp, meta, f, defs)
        if _required(f):
            required.append(key)
    out: JSON = {"type": "object", "properties": props, "additionalProperties": False}
    doc = (cls.__doc__ or "").strip().split("\n\n")[0]
    if doc and not doc.startswith(cls.__name__ + "("):
        out = {"description": " ".join(doc.split()), **out}
    if required:
        out["required"] = required
    return out


def _describe(meta: Meta) -> str:
    parts = [meta.doc]
    if meta.unit:
        parts.append(f"Unit: {meta.unit}.")
    if meta.why:
        parts.append(f"Why: {meta.why}")
    return " ".join(p for p in parts if p)


def _field_schema(tp: Any, meta: Meta, f: dataclasses.Field[Any], defs: dict[str, JSON]) -> JSON:
    out = dict(meta.json) if meta.json is not None else _type_schema(tp, meta, defs)
    out["description"] = _describe(meta)
    if (
        f.default is not dataclasses.MISSING
        and not meta.secret
        and (plain := _plain(f.default)) is not _NOT_JSON
    ):
        out["default"] = plain
    return out


_NOT_JSON = object()


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, tuple) and all(isinstance(v, str | int | float) for v in value):
        return list(value)
    return _NOT_JSON


def _type_schema(tp: Any, meta: Meta, defs: dict[str, JSON]) -> JSON:
    inner = _optional(tp)
    if inner is not None:
        return {"anyOf": [_type_schema(inner, meta, defs), {"type": "null"}]}
    if dataclasses.is_dataclass(tp):
        name = cast(type, tp).__name__
        if name not in defs:
            defs[name] = {}  # a placeholder breaks recursion
            defs[name] = _object_schema(cast(type, tp), defs)
        return {"$ref": f"#/$defs/{name}"}
    if typing.get_origin(tp) is tuple:
        (item_tp, *_rest) = typing.get_args(tp)
        return {"type": "array", "items": _type_schema(item_tp, _item_meta(meta), defs)}
    out: JSON = {"type": _JSON_TYPES[tp]} if tp in _JSON_TYPES else {}
    if meta.choices:
        out["enum"] = list(meta.choices)
    if meta.pattern:
        out["pattern"] = f"^(?:{meta.pattern})$"
    if meta.minimum is not None:
        out["minimum"] = meta.minimum
    if meta.maximum is not None:
        out["maximum"] = meta.maximum
    if meta.exclusive_minimum is not None:
        out["exclusiveMinimum"] = meta.exclusive_minimum
    return out


def field_docs(cls: type, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key path, default as YAML/JSON, description) of every setting, nested sections flattened."""
    rows: list[tuple[str, str, str]] = []
    for name, f, meta, hint in _declared(cls):
        key = f"{prefix}{name}"
        tp = _optional(hint) or hint
        if typing.get_origin(tp) is tuple and dataclasses.is_dataclass(typing.get_args(tp)[0]):
            rows.append((f"{key}[]", "", _describe(meta)))
            rows.extend(field_docs(cast(type, typing.get_args(tp)[0]), f"{key}[]."))
            continue
        if dataclasses.is_dataclass(tp) and meta.parse is None:
            rows.append((key, "", _describe(meta)))
            rows.extend(field_docs(cast(type, tp), key + "."))
            continue
        if f.default is dataclasses.MISSING:
            default = "(required)" if f.default_factory is dataclasses.MISSING else ""
        elif meta.secret:
            default = ""
        else:
            plain = (meta.json or {}).get("default", _plain(f.default))
            default = "" if plain is _NOT_JSON else json.dumps(plain, ensure_ascii=False)
        rows.append((key, default, _describe(meta)))
    return rows
