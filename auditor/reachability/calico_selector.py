"""Calico selector expressions: parse them once, evaluate them against label maps.

Used for every projectcalico.org/v3 field that holds a selector: `selector`,
`namespaceSelector`, `serviceAccountSelector`, and a rule's `source`/`destination`
`selector`, `namespaceSelector` and `notSelector`.

The grammar follows Calico's reference tokenizer and parser (libcalico-go
`lib/selector/tokenizer` and `lib/selector/parser`)::

    selector   := <empty> | or_expr
    or_expr    := and_expr ('||' and_expr)*
    and_expr   := unary ('&&' unary)*                 # && binds tighter than ||
    unary      := '!'* primary                        # an even number of '!' cancels out
    primary    := '(' or_expr ')'
                | 'all()' | 'global()' | 'has(' key ')'
                | key '==' string | key '!=' string
                | key 'in' set | key 'not in' set
                | key 'contains' string | key 'starts with' string | key 'ends with' string
    set        := '{' [string (',' string)* [',']] '}'
    string     := '"' any-but-" '"' | "'" any-but-' "'"   # no escapes, as in Calico
    key        := [A-Za-z0-9_./-]+

Semantics when a label is absent (again as in Calico): `==`, `in`, `contains`,
`starts with`, `ends with` and `has()` are false; `!=` and `not in` are true.

`global()` is only meaningful in a `namespaceSelector`, where it selects non-namespaced
(global) resources; here it matches every label map and callers can find it with
`uses_global()` and reject or special-case it elsewhere.

Differences from Calico, all on the lenient side: newlines and carriage returns count as
whitespace (Calico only skips spaces and tabs), and operator words need a word boundary
after them. Hostile input is bounded: selectors over `MAX_SELECTOR_BYTES` bytes (UTF-8) or
with parentheses nested deeper than `MAX_NESTING_DEPTH` raise `CalicoSelectorError`; the
parser makes one left-to-right pass and recurses only on parentheses.

Positions in errors are 0-based character offsets into the selector text.
"""

from __future__ import annotations

import functools
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar

__all__ = [
    "ALL",
    "GLOBAL",
    "MAX_NESTING_DEPTH",
    "MAX_SELECTOR_BYTES",
    "AllNode",
    "AndNode",
    "CalicoSelectorError",
    "ContainsNode",
    "EndsWithNode",
    "EqualsNode",
    "GlobalNode",
    "HasNode",
    "InNode",
    "NotEqualsNode",
    "NotInNode",
    "NotNode",
    "OrNode",
    "Selector",
    "StartsWithNode",
    "parse_selector",
]

MAX_SELECTOR_BYTES = 16 * 1024
"""Longest selector (UTF-8 bytes) we agree to parse."""

MAX_NESTING_DEPTH = 64
"""Deepest parenthesis nesting we agree to parse."""


class CalicoSelectorError(ValueError):
    """A selector that Calico would not accept (or that is too big for us to try).

    `position` is the 0-based character offset of the problem; `reason` says what was
    expected there (and what was found).
    """

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"invalid Calico selector at position {position}: {reason}")
        self.position = position
        self.reason = reason

    def __reduce__(self) -> tuple[type[CalicoSelectorError], tuple[int, str]]:
        return (type(self), (self.position, self.reason))


# --------------------------------------------------------------------------------------------
# AST
# --------------------------------------------------------------------------------------------

# Binding strength used to print the fewest parentheses that keep the meaning.
_PREC_OR = 1
_PREC_AND = 2
_PREC_ATOM = 3


def _quote(value: str) -> str:
    """Quote a value the way Calico prints it: double quotes unless the value contains one."""
    quote = "'" if '"' in value else '"'
    return f"{quote}{value}{quote}"


class Selector(ABC):
    """A parsed selector: any node. `str()` of it is the canonical form."""

    __slots__ = ()

    _precedence: ClassVar[int] = _PREC_ATOM

    @abstractmethod
    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether an object with these labels is selected."""

    @abstractmethod
    def keys(self) -> frozenset[str]:
        """The label keys this expression reads."""

    def uses_global(self) -> bool:
        """Whether `global()` appears anywhere in the expression."""
        return False

    def _wrapped(self, min_precedence: int) -> str:
        text = str(self)
        return f"({text})" if self._precedence < min_precedence else text


@dataclass(frozen=True, slots=True)
class AllNode(Selector):
    """`all()` (and the empty selector): matches everything."""

    def matches(self, labels: Mapping[str, str]) -> bool:
        return True

    def keys(self) -> frozenset[str]:
        return frozenset()

    def __str__(self) -> str:
        return "all()"


@dataclass(frozen=True, slots=True)
class GlobalNode(AllNode):
    """`global()`: non-namespaced resources in a namespaceSelector; here it matches everything."""

    def uses_global(self) -> bool:
        return True

    def __str__(self) -> str:
        return "global()"


@dataclass(frozen=True, slots=True)
class _LabelTest(Selector):
    """A test on one label: subclasses say how to compare a present value, and what an absent one gives."""

    key: str

    _when_absent: ClassVar[bool] = False

    @abstractmethod
    def _test(self, actual: str) -> bool:
        """Compare a present label value."""

    def matches(self, labels: Mapping[str, str]) -> bool:
        actual = labels.get(self.key)
        if actual is None:
            return self._when_absent
        return self._test(actual)

    def keys(self) -> frozenset[str]:
        return frozenset((self.key,))


@dataclass(frozen=True, slots=True)
class HasNode(_LabelTest):
    """`has(key)`: the label is present (with any value)."""

    def _test(self, actual: str) -> bool:
        return True

    def __str__(self) -> str:
        return f"has({self.key})"


@dataclass(frozen=True, slots=True)
class _ValueTest(_LabelTest):
    """`key <op> "value"`."""

    value: str

    _symbol: ClassVar[str] = ""

    def __str__(self) -> str:
        return f"{self.key} {self._symbol} {_quote(self.value)}"


@dataclass(frozen=True, slots=True)
class EqualsNode(_ValueTest):
    """`key == "value"`: false when the label is absent."""

    _symbol: ClassVar[str] = "=="

    def _test(self, actual: str) -> bool:
        return actual == self.value


@dataclass(frozen=True, slots=True)
class NotEqualsNode(_ValueTest):
    """`key != "value"`: true when the label is absent."""

    _symbol: ClassVar[str] = "!="
    _when_absent: ClassVar[bool] = True

    def _test(self, actual: str) -> bool:
        return actual != self.value


@dataclass(frozen=True, slots=True)
class ContainsNode(_ValueTest):
    """`key contains "s"`: false when the label is absent."""

    _symbol: ClassVar[str] = "contains"

    def _test(self, actual: str) -> bool:
        return self.value in actual


@dataclass(frozen=True, slots=True)
class StartsWithNode(_ValueTest):
    """`key starts with "s"`: false when the label is absent."""

    _symbol: ClassVar[str] = "starts with"

    def _test(self, actual: str) -> bool:
        return actual.startswith(self.value)


@dataclass(frozen=True, slots=True)
class EndsWithNode(_ValueTest):
    """`key ends with "s"`: false when the label is absent."""

    _symbol: ClassVar[str] = "ends with"

    def _test(self, actual: str) -> bool:
        return actual.endswith(self.value)


@dataclass(frozen=True, slots=True)
class _SetTest(_LabelTest):
    """`key <op> {"a", "b"}`; the set prints sorted so equal sets print equally."""

    values: frozenset[str]

    _symbol: ClassVar[str] = ""
    _when_member: ClassVar[bool] = True

    def _test(self, actual: str) -> bool:
        return (actual in self.values) == self._when_member

    def __str__(self) -> str:
        items = ", ".join(_quote(value) for value in sorted(self.values))
        return f"{self.key} {self._symbol} {{{items}}}"


@dataclass(frozen=True, slots=True)
class InNode(_SetTest):
    """`key in {"a", "b"}`: false when the label is absent."""

    _symbol: ClassVar[str] = "in"


@dataclass(frozen=True, slots=True)
class NotInNode(_SetTest):
    """`key not in {"a", "b"}`: true when the label is absent."""

    _symbol: ClassVar[str] = "not in"
    _when_absent: ClassVar[bool] = True
    _when_member: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class NotNode(Selector):
    """`!expr`."""

    operand: Selector

    def matches(self, labels: Mapping[str, str]) -> bool:
        return not self.operand.matches(labels)

    def keys(self) -> frozenset[str]:
        return self.operand.keys()

    def uses_global(self) -> bool:
        return self.operand.uses_global()

    def __str__(self) -> str:
        return "!" + self.operand._wrapped(_PREC_ATOM)


@dataclass(frozen=True, slots=True)
class _Junction(Selector):
    """`a && b && ...` or `a || b || ...` (two or more operands, none of the same kind once parsed)."""

    operands: tuple[Selector, ...]

    _symbol: ClassVar[str] = ""

    def __post_init__(self) -> None:
        if len(self.operands) < 2:
            raise ValueError(f"{type(self).__name__} needs at least two operands")

    def keys(self) -> frozenset[str]:
        return frozenset().union(*(operand.keys() for operand in self.operands))

    def uses_global(self) -> bool:
        return any(operand.uses_global() for operand in self.operands)

    def __str__(self) -> str:
        return f" {self._symbol} ".join(operand._wrapped(self._precedence + 1) for operand in self.operands)


@dataclass(frozen=True, slots=True)
class AndNode(_Junction):
    """`a && b && ...`."""

    _precedence: ClassVar[int] = _PREC_AND
    _symbol: ClassVar[str] = "&&"

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(operand.matches(labels) for operand in self.operands)


@dataclass(frozen=True, slots=True)
class OrNode(_Junction):
    """`a || b || ...`."""

    _precedence: ClassVar[int] = _PREC_OR
    _symbol: ClassVar[str] = "||"

    def matches(self, labels: Mapping[str, str]) -> bool:
        return any(operand.matches(labels) for operand in self.operands)


ALL: Selector = AllNode()
"""`all()`, also what the empty selector parses to."""

GLOBAL: Selector = GlobalNode()


def _flatten(kind: type[AndNode | OrNode], nodes: Iterable[Selector]) -> Selector:
    flat: list[Selector] = []
    for node in nodes:
        if isinstance(node, kind):
            flat.extend(node.operands)
        else:
            flat.append(node)
    return flat[0] if len(flat) == 1 else kind(tuple(flat))


# --------------------------------------------------------------------------------------------
# Parser
# --------------------------------------------------------------------------------------------

_WHITESPACE = frozenset(" \t\r\n")
_QUOTES = frozenset("\"'")
_KEY_RE = re.compile(r"[A-Za-z0-9_./-]+")
_OPERATOR_RE = re.compile(
    r"(contains|starts[ \t\r\n]*with|ends[ \t\r\n]*with|not[ \t\r\n]*in|in)(?![A-Za-z0-9_./-])"
)
_EXPECTED_OPERAND = "expected an expression (a label test, has(), all(), global(), '!' or '(')"
_EXPECTED_OPERATOR = "expected an operator (==, !=, in, not in, contains, starts with, ends with)"


class _Parser:
    """One left-to-right pass over the text; recursion only for parentheses (depth-capped)."""

    __slots__ = ("_depth", "_end", "_pos", "_text")

    def __init__(self, text: str) -> None:
        self._text = text
        self._end = len(text)
        self._pos = 0
        self._depth = 0

    # -- helpers -------------------------------------------------------------------------

    def _skip_ws(self) -> None:
        text, pos, end = self._text, self._pos, self._end
        while pos < end and text[pos] in _WHITESPACE:
            pos += 1
        self._pos = pos

    def _error(self, pos: int, expected: str) -> CalicoSelectorError:
        found = "end of selector" if pos >= self._end else repr(self._text[pos : pos + 12])
        return CalicoSelectorError(pos, f"{expected}, found {found}")

    def _accept(self, token: str) -> bool:
        self._skip_ws()
        if self._text.startswith(token, self._pos):
            self._pos += len(token)
            return True
        return False

    def _expect(self, token: str, expected: str) -> None:
        if not self._accept(token):
            raise self._error(self._pos, expected)

    # -- grammar -------------------------------------------------------------------------

    def parse(self) -> Selector:
        self._skip_ws()
        if self._pos == self._end:
            return ALL
        node = self._or_expr()
        self._skip_ws()
        if self._pos != self._end:
            raise self._error(self._pos, "expected '&&', '||' or end of selector")
        return node

    def _or_expr(self) -> Selector:
        nodes = [self._and_expr()]
        while self._accept("||"):
            nodes.append(self._and_expr())
        return _flatten(OrNode, nodes)

    def _and_expr(self) -> Selector:
        nodes = [self._unary()]
        while self._accept("&&"):
            nodes.append(self._unary())
        return _flatten(AndNode, nodes)

    def _unary(self) -> Selector:
        negated = False
        text = self._text
        while True:
            self._skip_ws()
            pos = self._pos
            if pos < self._end and text[pos] == "!" and not text.startswith("!=", pos):
                negated = not negated
                self._pos = pos + 1
            else:
                break
        node = self._primary()
        if not negated:
            return node
        return node.operand if isinstance(node, NotNode) else NotNode(node)

    def _primary(self) -> Selector:
        self._skip_ws()
        start = self._pos
        if start >= self._end:
            raise self._error(start, _EXPECTED_OPERAND)
        if self._text[start] == "(":
            return self._group(start)
        match = _KEY_RE.match(self._text, start)
        if match is None:
            raise self._error(start, _EXPECTED_OPERAND)
        word = match.group()
        self._pos = match.end()
        if self._pos < self._end and self._text[self._pos] == "(":
            return self._function(word, start)
        return self._label_test(word)

    def _group(self, start: int) -> Selector:
        if self._depth >= MAX_NESTING_DEPTH:
            raise CalicoSelectorError(start, f"parentheses nested deeper than {MAX_NESTING_DEPTH} levels")
        self._depth += 1
        self._pos = start + 1
        node = self._or_expr()
        self._expect(")", f"expected '&&', '||' or ')' closing the '(' at position {start}")
        self._depth -= 1
        return node

    def _function(self, name: str, start: int) -> Selector:
        self._pos += 1  # the "("
        if name in ("all", "global"):
            self._expect(")", f"expected ')' after '{name}('")
            return ALL if name == "all" else GLOBAL
        if name == "has":
            self._skip_ws()
            match = _KEY_RE.match(self._text, self._pos)
            if match is None:
                raise self._error(self._pos, "expected a label key inside has()")
            self._pos = match.end()
            self._expect(")", f"expected ')' after 'has({match.group()}'")
            return HasNode(match.group())
        raise CalicoSelectorError(start, f"unknown function {name!r}, expected has(key), all() or global()")

    def _label_test(self, key: str) -> Selector:
        if self._accept("=="):
            return EqualsNode(key, self._string("'=='"))
        if self._accept("!="):
            return NotEqualsNode(key, self._string("'!='"))
        self._skip_ws()
        match = _OPERATOR_RE.match(self._text, self._pos)
        if match is None:
            raise self._error(self._pos, f"{_EXPECTED_OPERATOR} after label key {key!r}")
        self._pos = match.end()
        word = match.group(1)
        if word == "in":
            return InNode(key, self._value_set("'in'"))
        if word.startswith("not"):
            return NotInNode(key, self._value_set("'not in'"))
        if word == "contains":
            return ContainsNode(key, self._string("'contains'"))
        if word.startswith("starts"):
            return StartsWithNode(key, self._string("'starts with'"))
        return EndsWithNode(key, self._string("'ends with'"))

    def _string(self, after: str) -> str:
        self._skip_ws()
        pos = self._pos
        if pos < self._end and self._text[pos] in _QUOTES:
            quote = self._text[pos]
            close = self._text.find(quote, pos + 1)
            if close < 0:
                raise CalicoSelectorError(
                    pos, f"unterminated string, expected a closing {quote} for the string opened here"
                )
            self._pos = close + 1
            return self._text[pos + 1 : close]
        raise self._error(pos, f"expected a quoted string after {after}")

    def _value_set(self, after: str) -> frozenset[str]:
        self._expect("{", f"expected '{{' opening the set of values after {after}")
        values: list[str] = []
        while True:
            self._skip_ws()
            pos = self._pos
            if pos < self._end and self._text[pos] in _QUOTES:
                values.append(self._string("'{'"))
                if self._accept(","):
                    continue
                self._expect("}", "expected ',' or '}' after a value in the set")
                break
            if self._accept("}"):
                break
            raise self._error(pos, "expected a quoted string or '}' in the set of values")
        return frozenset(values)


def _check_size(text: str) -> None:
    if len(text) > MAX_SELECTOR_BYTES:
        raise CalicoSelectorError(
            MAX_SELECTOR_BYTES,
            f"selector is {len(text)} characters long, expected at most {MAX_SELECTOR_BYTES} bytes",
        )
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > MAX_SELECTOR_BYTES:
        fits = text.encode("utf-8", errors="surrogatepass")[:MAX_SELECTOR_BYTES]
        position = len(fits.decode("utf-8", errors="ignore"))
        raise CalicoSelectorError(
            position, f"selector is {size} bytes long, expected at most {MAX_SELECTOR_BYTES} bytes"
        )


@functools.lru_cache(maxsize=4096)
def parse_selector(text: str) -> Selector:
    """Parse a Calico selector; the empty (or all-whitespace) selector is `ALL`.

    Results are cached by text (nodes are immutable, so sharing them is safe); errors are
    not cached. Raises `CalicoSelectorError` for anything Calico would reject, and for
    selectors over `MAX_SELECTOR_BYTES` or nested deeper than `MAX_NESTING_DEPTH`.
    """
    _check_size(text)
    return _Parser(text).parse()
