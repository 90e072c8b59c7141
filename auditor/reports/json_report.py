"""The JSON contract (schema placement-auditor/findings/v1, DESIGN.md)."""

from __future__ import annotations

import codecs
import json
import re
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from typing import Any

import orjson

from auditor import TOOL_NAME, __version__
from auditor.audit.scan import ScanResult
from auditor.model.findings import Finding, ObjectRef
from auditor.rules.groups import Group, GroupEdge, GroupEntry, GroupRole, listed_as

SCHEMA = "placement-auditor/findings/v1"


def to_document(result: ScanResult, groups: bool = True, findings: bool = True) -> dict[str, Any]:
    """The report as JSON values (`groups`: with its group listing, when the result has one;
    `findings`: with the findings' list)."""
    return {
        "schema": SCHEMA,
        "tool": {"name": TOOL_NAME, "version": __version__},
        "summary": result.summary(),
        **({"findings": [f.to_json() for f in result.findings]} if findings else {}),
        "errors": [e.to_json() for e in result.errors],
        "waived": [{"finding": w.finding.to_json(), "waiver": w.waiver.to_json()} for w in result.waived],
        "expired_waivers": [
            {"fingerprint": x.finding.fingerprint, "waiver": x.waiver.to_json()}
            for x in result.expired_waivers
        ],
        "notes": list(result.notes),
        "network": result.network,
        **({"groups": _groups(result)} if groups and result.groups is not None else {}),
    }


def _groups(result: ScanResult) -> list[dict[str, Any]]:
    assert result.groups is not None
    by_workload = Counter(f.workload.identity for f in result.findings)
    return [_group(g, by_workload[g.workload.identity]) for g in result.groups.groups]


def _group(g: Group, findings: int) -> dict[str, Any]:
    return {
        **_group_own(g.workload, g.recognised_as, g.roles, g.edges),
        "reached_from": [_workload(r) for r in g.reached_from],
        "findings": findings,
    }


def _group_own(
    workload: ObjectRef, recognised_as: str, roles: Sequence[GroupRole], edges: Sequence[GroupEdge]
) -> dict[str, Any]:
    """A group's members that come from its own workload's entry alone (the rest, who reaches it
    and how many findings it has, takes the whole audit)."""
    return {
        **workload.to_json(),
        "recognised_as": recognised_as,
        "roles": [
            {
                "name": r.name,
                "replicas": r.replicas,
                "feasible_zones": list(r.feasible_zones),
                "unschedulable": r.unschedulable,
            }
            for r in roles
        ],
        "edges": [_edge(e) for e in edges],
    }


# Where a group stands in the report: an item of the top-level "groups" list.
_ITEM = "\n    "
_MEMBER = "\n      "


def group_head(
    workload: ObjectRef, recognised_as: str, roles: Sequence[GroupRole], edges: Sequence[GroupEdge]
) -> str:
    """The report's text of a group from its opening brace through its "edges" member, indented
    for its place in the listing: what json.dumps(to_document(...), indent=2) writes there."""
    text = _plain(_group_own(workload, recognised_as, roles, edges))
    return "    " + text[:-2].replace("\n", _ITEM)  # without the closing "\n}"


def group_heads(entries: Iterable[GroupEntry]) -> list[str]:
    """`group_head` of the group each entry would be listed as, in their order (an incremental
    scan keeps them with the unit's fragment, and `summarise` puts them in Group.head)."""
    out: list[str] = []
    for e in entries:
        workload, recognised_as = listed_as(e)
        out.append(group_head(workload, recognised_as, e.roles, e.edges))
    return out


def _group_tail(g: Group, findings: int) -> str:
    """The rest of a group's text after its head."""
    reached = (
        _plain([_workload(r) for r in g.reached_from]).replace("\n", _MEMBER) if g.reached_from else "[]"
    )
    return f',{_MEMBER}"reached_from": {reached},{_MEMBER}"findings": {findings}{_ITEM}}}'


def _listing(result: ScanResult) -> list[str]:
    """The "groups" member's value as json.dumps(..., indent=2) writes it in the report, in
    pieces: each group's head (`Group.head` where a cache kept it) and the rest."""
    assert result.groups is not None
    by_workload = Counter(f.workload.identity for f in result.findings)
    return _list_pieces(
        (
            g.head or group_head(g.workload, g.recognised_as, g.roles, g.edges),
            _group_tail(g, by_workload[g.workload.identity]),
        )
        for g in result.groups.groups
    )


def _list_pieces(items: Iterable[Sequence[str]]) -> list[str]:
    """A top-level list member's value as json.dumps(..., indent=2) writes it, from each item's
    text (already indented for its place, in one or more pieces), never joined into one string."""
    pieces = ["[\n"]
    for item in items:
        pieces += item
        pieces.append(",\n")
    if len(pieces) == 1:
        return ["[]"]
    pieces[-1] = "\n  ]"  # no separator after the last item
    return pieces


def _by_source_zone(pairs: tuple[tuple[str, str], ...]) -> dict[str, list[str]]:
    """Zone pairs as source zone → destination zones: a third of the size of a list of pairs."""
    out: dict[str, list[str]] = {}
    for source, destination in pairs:
        out.setdefault(source, []).append(destination)
    return out


def _workload(ref: ObjectRef) -> dict[str, str]:
    return {"apiVersion": ref.api_version, "kind": ref.kind, "namespace": ref.namespace, "name": ref.name}


def _edge(e: GroupEdge) -> dict[str, Any]:
    other = e.destination_workload
    return {
        "from": {"role": e.source},
        "to": {
            "role": e.destination,
            "workload": None if other is None else _workload(other),
        },
        "port": e.port,
        "ports": e.ports,
        "protocol": e.protocol,
        "origin": e.origin,
        "reason": e.reason,
        "verdict": {
            "analysed": e.analysed,
            "allowed": _by_source_zone(e.allowed),
            "denied": _by_source_zone(e.denied),
            "split": e.split,
            "coupling": e.coupling,
        },
    }


def render(result: ScanResult) -> str:
    return "".join(render_pieces(result))


def render_pieces(result: ScanResult) -> list[str]:
    """The report's text in pieces, to be written one after the other (joined, they are
    `render`'s text): a large report is never copied whole. The findings' list and the group
    listing are put together from each finding's and group's text (an incremental scan's cache
    keeps most of them: ScanResult.finding_json, Group.head); the members around them are
    written as `dumps` writes them."""
    doc = to_document(result, groups=False, findings=False)
    # The members before the findings (schema, tool, summary), then those after them.
    head = {k: doc.pop(k) for k in ("schema", "tool", "summary")}
    # The waived findings' only floats are their estimates, checked here instead of in their JSON.
    plain = all(_plain_estimates(w.finding) for w in result.waived)
    rest = dumps(doc, checked=("waived",) if plain else ())
    pieces = [dumps(head)[:-2], ',\n  "findings": ', *_findings(result), ","]
    pieces.append(rest[1:-2])  # its members, without the braces
    if result.groups is not None:
        # The group listing is the document's last member.
        pieces += [',\n  "groups": ', *_listing(result)]
    pieces.append("\n}\n")
    return pieces


def _plain_estimates(f: Finding) -> bool:
    return all(e is None or plain_float(e) for e in (f.estimated_monthly_cost_usd, f.estimated_slowdown_pct))


def finding_text(f: Finding) -> str:
    """The report's text of a finding, indented for its place in the findings' list: what
    json.dumps(to_document(...), indent=2) writes there."""
    value = f.to_json()
    # Its only floats are its estimates: orjson writes plain ones as json does (`_plain`).
    text = _plain(value) if _plain_estimates(f) else json.dumps(value, indent=2)
    return "    " + text.replace("\n", _ITEM)


def _findings(result: ScanResult) -> list[str]:
    """The findings' list as json.dumps(..., indent=2) writes it in the report, in pieces."""
    known = result.finding_json

    def text(f: Finding) -> str:
        hit = known.get(id(f))
        return hit[1] if hit is not None and hit[0] is f else finding_text(f)

    return _list_pieces((text(f),) for f in result.findings)


def plain_float(value: float) -> bool:
    """A float orjson and json write alike: finite, and 0 or between 1e-4 and 1e16 in magnitude
    (json's repr switches to exponents outside that range, where orjson does not)."""
    return value == 0 or 1e-4 <= abs(value) < 1e16


# Characters json.dumps escapes by default (ensure_ascii) that orjson writes as they are: DEL and
# everything past ASCII (orjson already escapes the control characters, quotes and backslashes
# the same way).
_NOT_ASCII = re.compile("[^\x00-\x7e]")
# Floats orjson writes differently from float.__repr__: below 1e-4 Python switches to exponent
# form (`1e-05`; orjson `0.00001`), and pads exponents to two digits (`1e-07`; orjson `1e-7`).
# Searched by their literal part (a regex starting with a character class scans 15 MB for a
# quarter of a second), then judged by the byte before; a false positive (a string that happens
# to hold `1e-5`) only costs the standard encoder.
_SHORT_EXPONENT = re.compile(rb"e-[0-9](?![0-9])")
_ZEROS = re.compile(rb"0\.0000")


def _small_float(raw: bytes) -> bool:
    for match in _SHORT_EXPONENT.finditer(raw):
        if raw[match.start() - 1 : match.start()].isdigit():
            return True
    return any(raw[m.start() - 1 : m.start()] in (b" ", b"-") for m in _ZEROS.finditer(raw))


def _escape_code(code: int) -> str:
    if code > 0xFFFF:
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def _escape(match: re.Match[str]) -> str:
    return _escape_code(ord(match.group()))


_ASCII_ESCAPES = "placement-auditor-json-ascii"


_ESCAPED: dict[bytes, str] = {}


def _escape_utf8(error: UnicodeError) -> tuple[str, int]:
    """Decoding error handler: the UTF-8 character at the error, as json's `\\uXXXX` escape(s)."""
    assert isinstance(error, UnicodeDecodeError)
    data, start = error.object, error.start
    size = 2 if data[start] < 0xE0 else 3 if data[start] < 0xF0 else 4
    char = data[start : start + size]
    escaped = _ESCAPED.get(char)
    if escaped is None:
        escaped = _escape_code(ord(char.decode("utf-8")))
        if len(_ESCAPED) < 4096:
            _ESCAPED[char] = escaped
    return escaped, start + size


def _ascii_text(raw: bytes) -> str:
    """orjson's UTF-8 output with everything past ASCII escaped as json's ensure_ascii does:
    decoded as ASCII, each character beyond handed to an error handler (several times faster
    than searching the decoded text for them)."""
    try:
        codecs.lookup_error(_ASCII_ESCAPES)
    except LookupError:
        codecs.register_error(_ASCII_ESCAPES, _escape_utf8)
    return raw.decode("ascii", _ASCII_ESCAPES)


def dumps(doc: Any, *, checked: Collection[str] = ()) -> str:
    """Exactly `json.dumps(doc, indent=2)`, about ten times faster.

    The standard library indents with its pure-Python encoder (a 15 MB report took a second);
    orjson writes the same layout in C. Where the two could differ, the result is checked and
    the standard encoder used instead: orjson refuses integers past 64 bits, non-string keys and
    lone surrogates (an exception); writes NaN and infinities as null (json's C encoder, compact
    and with allow_nan=False, finds them four times faster than reading orjson's text back);
    writes small floats in another form (found in the text); and leaves non-ASCII as UTF-8
    (escaped here as json's ensure_ascii does). `checked`: top-level members the caller built
    without floats, or whose floats it found plain (`plain_float`): not searched.
    """
    try:
        raw = orjson.dumps(doc, option=orjson.OPT_INDENT_2)
        searched = {k: v for k, v in doc.items() if k not in checked} if checked else doc
        json.dumps(searched, allow_nan=False)
    except (orjson.JSONEncodeError, TypeError, ValueError, OverflowError):
        return json.dumps(doc, indent=2)
    if _small_float(orjson.dumps(searched, option=orjson.OPT_INDENT_2) if checked else raw):
        return json.dumps(doc, indent=2)
    return _text(raw)


def _plain(value: Any) -> str:
    """Exactly `json.dumps(value, indent=2)` for a value without floats (nothing to check but
    what orjson refuses)."""
    try:
        raw = orjson.dumps(value, option=orjson.OPT_INDENT_2)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, indent=2)
    return _text(raw)


def _text(raw: bytes) -> str:
    """orjson's output as json.dumps writes it: everything past ASCII, and DEL, escaped."""
    if b"\x7f" in raw:
        return _NOT_ASCII.sub(_escape, raw.decode("utf-8"))
    return raw.decode("ascii") if raw.isascii() else _ascii_text(raw)
