"""Small strict readers for policy specs: every error names the field path it is about."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from auditor.model.labels import SelectorError, type_name
from auditor.reachability.policy import IPNetwork
from auditor.reachability.ports import normalise_protocol


class PolicyError(SelectorError):
    """A policy we cannot evaluate as written; `field` is the dotted path inside the object."""


def mapping(
    obj: Any, field: str, allowed: Iterable[str] | None = None, *, optional: bool = True
) -> Mapping[str, Any]:
    if obj is None:
        if optional:
            return {}
        raise PolicyError(field, "is required")
    # dict first: what every loader gives, checked without the Mapping ABC's slower test.
    if not isinstance(obj, (dict, Mapping)):
        raise PolicyError(field, f"must be a mapping, got {type_name(obj)}")
    if allowed is not None:
        known = allowed if isinstance(allowed, (set, frozenset)) else set(allowed)
        unknown = sorted(str(k) for k in obj if k not in known)
        if unknown:
            raise PolicyError(
                f"{field}.{unknown[0]}" if field else unknown[0],
                f"unknown field {unknown[0]!r} (known: {', '.join(sorted(allowed))})",
            )
    return obj


def seq(obj: Any, field: str) -> list[Any]:
    if obj is None:
        return []
    if not isinstance(obj, list):
        raise PolicyError(field, f"must be a list, got {type_name(obj)}")
    return obj


def string(obj: Any, field: str, *, optional: bool = False) -> str:
    if obj is None and optional:
        return ""
    if not isinstance(obj, str):
        raise PolicyError(field, f"must be a string, got {type_name(obj)}")
    return obj


def integer(obj: Any, field: str, lo: int, hi: int) -> int:
    if isinstance(obj, bool) or not isinstance(obj, int):
        if isinstance(obj, str) and obj.strip().isdigit():
            obj = int(obj.strip())
        else:
            raise PolicyError(field, f"must be an integer, got {type_name(obj)} {obj!r}")
    if not lo <= obj <= hi:
        raise PolicyError(field, f"must be between {lo} and {hi}, got {obj}")
    return int(obj)


def protocol(obj: Any, field: str) -> str:
    proto = normalise_protocol(obj)
    if proto is None:
        raise PolicyError(field, f"must be TCP, UDP or SCTP, got {obj!r}")
    return proto


def cidr(obj: Any, field: str) -> IPNetwork:
    text = string(obj, field)
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError as exc:
        raise PolicyError(field, f"is not a valid CIDR: {exc}") from exc


def cidrs(obj: Any, field: str) -> tuple[IPNetwork, ...]:
    return tuple(cidr(c, f"{field}[{i}]") for i, c in enumerate(seq(obj, field)))


def policy_types(obj: Any, field: str, default: set[str]) -> set[str]:
    """NetworkPolicy `policyTypes`, Calico `types`: Ingress and/or Egress."""
    if obj is None:
        return default
    types = set()
    for i, t in enumerate(seq(obj, field)):
        if t not in ("Ingress", "Egress"):
            raise PolicyError(f"{field}[{i}]", f"must be Ingress or Egress, got {t!r}")
        types.add(str(t))
    return types


def item_line(container: Any, index: int, default: int) -> int:
    lines = getattr(container, "item_lines", None)
    if lines is not None and index < len(lines):
        return int(lines[index])
    return int(getattr(container[index], "line", default)) if index < len(container) else default
