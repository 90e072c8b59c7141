"""Calico selector parsing and evaluation (auditor.reachability.calico_selector)."""

from __future__ import annotations

import contextlib
import pickle
import time

import pytest

from auditor.reachability.calico_selector import (
    ALL,
    GLOBAL,
    MAX_NESTING_DEPTH,
    MAX_SELECTOR_BYTES,
    AndNode,
    CalicoSelectorError,
    ContainsNode,
    EndsWithNode,
    EqualsNode,
    HasNode,
    InNode,
    NotEqualsNode,
    NotInNode,
    NotNode,
    OrNode,
    StartsWithNode,
    parse_selector,
)

APP_WEB = {"app": "web", "tier": "frontend"}
NO_LABELS: dict[str, str] = {}


# --------------------------------------------------------------------------------------------
# Evaluation: (selector, labels, expected)
# --------------------------------------------------------------------------------------------

MATCH_CASES = [
    # all(), global(), empty
    pytest.param("all()", NO_LABELS, True, id="all-empty-labels"),
    pytest.param("all()", APP_WEB, True, id="all-some-labels"),
    pytest.param("", APP_WEB, True, id="empty-is-all"),
    pytest.param("   \t ", NO_LABELS, True, id="whitespace-is-all"),
    pytest.param("global()", NO_LABELS, True, id="global-matches-everything"),
    pytest.param("!all()", APP_WEB, False, id="not-all"),
    # has / !has
    pytest.param("has(app)", APP_WEB, True, id="has-present"),
    pytest.param("has(app)", {"app": ""}, True, id="has-present-empty-value"),
    pytest.param("has(role)", APP_WEB, False, id="has-absent"),
    pytest.param("!has(role)", APP_WEB, True, id="not-has-absent"),
    pytest.param("!has(app)", APP_WEB, False, id="not-has-present"),
    pytest.param("has( app )", APP_WEB, True, id="has-inner-spaces"),
    # ==
    pytest.param('app == "web"', APP_WEB, True, id="eq-true"),
    pytest.param('app == "db"', APP_WEB, False, id="eq-false"),
    pytest.param('role == "web"', APP_WEB, False, id="eq-absent"),
    pytest.param('app == ""', {"app": ""}, True, id="eq-empty-value"),
    pytest.param('app == "Web"', APP_WEB, False, id="eq-case-sensitive"),
    # !=
    pytest.param('app != "db"', APP_WEB, True, id="ne-true"),
    pytest.param('app != "web"', APP_WEB, False, id="ne-false"),
    pytest.param('role != "web"', APP_WEB, True, id="ne-absent-is-true"),
    # in / not in
    pytest.param('app in {"web", "api"}', APP_WEB, True, id="in-true"),
    pytest.param('app in {"db", "api"}', APP_WEB, False, id="in-false"),
    pytest.param('role in {"web"}', APP_WEB, False, id="in-absent"),
    pytest.param("app in {}", APP_WEB, False, id="in-empty-set"),
    pytest.param('app in {"web",}', APP_WEB, True, id="in-trailing-comma"),
    pytest.param('app not in {"db", "api"}', APP_WEB, True, id="not-in-true"),
    pytest.param('app not in {"web","api"}', APP_WEB, False, id="not-in-false"),
    pytest.param('role not in {"web"}', APP_WEB, True, id="not-in-absent-is-true"),
    pytest.param("app not in {}", APP_WEB, True, id="not-in-empty-set"),
    pytest.param('app in{"web"}', APP_WEB, True, id="in-no-space-before-brace"),
    pytest.param('app notin {"db"}', APP_WEB, True, id="notin-without-space"),
    # contains / starts with / ends with
    pytest.param('app contains "e"', APP_WEB, True, id="contains-true"),
    pytest.param('app contains "x"', APP_WEB, False, id="contains-false"),
    pytest.param('role contains ""', APP_WEB, False, id="contains-absent"),
    pytest.param('tier starts with "front"', APP_WEB, True, id="starts-with-true"),
    pytest.param('tier starts with "end"', APP_WEB, False, id="starts-with-false"),
    pytest.param('role starts with ""', APP_WEB, False, id="starts-with-absent"),
    pytest.param('tier ends with "end"', APP_WEB, True, id="ends-with-true"),
    pytest.param('tier ends with "front"', APP_WEB, False, id="ends-with-false"),
    pytest.param('role ends with ""', APP_WEB, False, id="ends-with-absent"),
    pytest.param('tier starts   with "front"', APP_WEB, True, id="starts-with-extra-spaces"),
    # && / || / precedence
    pytest.param('app == "web" && tier == "frontend"', APP_WEB, True, id="and-true"),
    pytest.param('app == "web" && tier == "backend"', APP_WEB, False, id="and-false"),
    pytest.param('app == "db" || tier == "frontend"', APP_WEB, True, id="or-true"),
    pytest.param('app == "db" || tier == "backend"', APP_WEB, False, id="or-false"),
    # a || (b && c): a alone suffices; under (a || b) && c it would not.
    pytest.param("a == 'x' || b == 'y' && c == 'z'", {"a": "x"}, True, id="precedence-and-binds-tighter"),
    pytest.param("(a == 'x' || b == 'y') && c == 'z'", {"a": "x"}, False, id="parens-override-precedence"),
    pytest.param("a == 'x' || b == 'y' && c == 'z'", {"b": "y"}, False, id="precedence-b-without-c"),
    pytest.param("a == 'x' || b == 'y' && c == 'z'", {"b": "y", "c": "z"}, True, id="precedence-b-and-c"),
    pytest.param("b == 'y' && c == 'z' || a == 'x'", {"a": "x"}, True, id="precedence-and-first"),
    # negation
    pytest.param('!app == "web"', APP_WEB, False, id="not-binds-to-operation"),
    pytest.param('!app == "db"', APP_WEB, True, id="not-eq-false-becomes-true"),
    pytest.param('!role == "x"', APP_WEB, True, id="not-eq-absent"),
    pytest.param('!(app == "web" && tier == "backend")', APP_WEB, True, id="not-group-and"),
    pytest.param('!(app == "web" || tier == "backend")', APP_WEB, False, id="not-group-or"),
    pytest.param("!!has(app)", APP_WEB, True, id="double-negation"),
    pytest.param("!!!has(app)", APP_WEB, False, id="triple-negation"),
    pytest.param("! has(app)", APP_WEB, False, id="space-after-bang"),
    pytest.param("!(!(has(app)))", APP_WEB, True, id="nested-negated-groups"),
    pytest.param("((has(app)))", APP_WEB, True, id="redundant-parens"),
    # whitespace variants and quotes
    pytest.param('app=="web"&&tier=="frontend"', APP_WEB, True, id="no-whitespace"),
    pytest.param('  app  ==  "web"  ', APP_WEB, True, id="extra-whitespace"),
    pytest.param('\tapp ==\t"web"', APP_WEB, True, id="tabs"),
    pytest.param('app == "web"\n&& has(tier)', APP_WEB, True, id="newline"),
    pytest.param("app == 'web'", APP_WEB, True, id="single-quotes"),
    pytest.param("app in {'web', \"api\"}", APP_WEB, True, id="mixed-quotes-in-set"),
    pytest.param("""msg == 'say "hi"'""", {"msg": 'say "hi"'}, True, id="double-quote-inside-single"),
    pytest.param('''msg == "it's"''', {"msg": "it's"}, True, id="single-quote-inside-double"),
    pytest.param('app == "a b && c"', {"app": "a b && c"}, True, id="operators-inside-string"),
    # keys with dots, slashes, dashes, underscores, digits
    pytest.param(
        "projectcalico.org/namespace == 'prod'",
        {"projectcalico.org/namespace": "prod"},
        True,
        id="key-with-dot-slash",
    ),
    pytest.param(
        "pcns.kubernetes.io/metadata.name in {'kube-system', 'default'}",
        {"pcns.kubernetes.io/metadata.name": "kube-system"},
        True,
        id="namespace-label-key",
    ),
    pytest.param(
        "app.kubernetes.io/part-of == 'x'", {"app.kubernetes.io/part-of": "y"}, False, id="key-dash"
    ),
    pytest.param("has(my_label-2)", {"my_label-2": "1"}, True, id="key-underscore-digit"),
    # labels named like keywords are plain keys
    pytest.param("has(has)", {"has": "1"}, True, id="key-named-has"),
    pytest.param("in == 'x'", {"in": "x"}, True, id="key-named-in"),
    pytest.param("all == 'x'", {"all": "x"}, True, id="key-named-all"),
]


@pytest.mark.parametrize(("text", "labels", "expected"), MATCH_CASES)
def test_matches(text: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_selector(text).matches(labels) is expected


# --------------------------------------------------------------------------------------------
# AST shape
# --------------------------------------------------------------------------------------------

AST_CASES = [
    pytest.param("", ALL, id="empty"),
    pytest.param("all()", ALL, id="all"),
    pytest.param("global()", GLOBAL, id="global"),
    pytest.param("has(a)", HasNode("a"), id="has"),
    pytest.param("a == 'x'", EqualsNode("a", "x"), id="eq"),
    pytest.param("a != 'x'", NotEqualsNode("a", "x"), id="ne"),
    pytest.param("a in {'y', 'x', 'y'}", InNode("a", frozenset({"x", "y"})), id="in-dedup"),
    pytest.param("a not in {'x'}", NotInNode("a", frozenset({"x"})), id="not-in"),
    pytest.param("a contains 'x'", ContainsNode("a", "x"), id="contains"),
    pytest.param("a starts with 'x'", StartsWithNode("a", "x"), id="starts-with"),
    pytest.param("a ends with 'x'", EndsWithNode("a", "x"), id="ends-with"),
    pytest.param("!has(a)", NotNode(HasNode("a")), id="not"),
    pytest.param("!!has(a)", HasNode("a"), id="double-not-collapses"),
    pytest.param("!(!has(a))", HasNode("a"), id="double-not-through-parens"),
    pytest.param(
        "a == 'x' || b == 'y' && c == 'z'",
        OrNode((EqualsNode("a", "x"), AndNode((EqualsNode("b", "y"), EqualsNode("c", "z"))))),
        id="precedence",
    ),
    pytest.param(
        "(has(a) && has(b)) && has(c)",
        AndNode((HasNode("a"), HasNode("b"), HasNode("c"))),
        id="and-flattened",
    ),
    pytest.param(
        "has(a) || (has(b) || has(c))",
        OrNode((HasNode("a"), HasNode("b"), HasNode("c"))),
        id="or-flattened",
    ),
    pytest.param(
        "!(has(a) || has(b))",
        NotNode(OrNode((HasNode("a"), HasNode("b")))),
        id="not-group",
    ),
]


@pytest.mark.parametrize(("text", "expected"), AST_CASES)
def test_ast(text: str, expected: object) -> None:
    assert parse_selector(text) == expected


# --------------------------------------------------------------------------------------------
# Canonical string form
# --------------------------------------------------------------------------------------------

CANONICAL_CASES = [
    pytest.param("", "all()", id="empty"),
    pytest.param("  all( )  ", "all()", id="all-spaces"),
    pytest.param("global( )", "global()", id="global"),
    pytest.param("has(  a  )", "has(a)", id="has"),
    pytest.param("a=='x'", 'a == "x"', id="eq-single-to-double-quotes"),
    pytest.param("""a == 'say "hi"'""", """a == 'say "hi"'""", id="keeps-single-when-needed"),
    pytest.param("a!='x'", 'a != "x"', id="ne"),
    pytest.param("a in {'y','x'}", 'a in {"x", "y"}', id="in-sorted"),
    pytest.param("a notin{'x',}", 'a not in {"x"}', id="not-in"),
    pytest.param("a in {}", "a in {}", id="empty-set"),
    pytest.param("a contains'x'", 'a contains "x"', id="contains"),
    pytest.param("a startswith 'x'", 'a starts with "x"', id="starts-with"),
    pytest.param("a ends  with 'x'", 'a ends with "x"', id="ends-with"),
    pytest.param("!  has(a)", "!has(a)", id="not"),
    pytest.param("!a=='x'", '!a == "x"', id="not-eq"),
    pytest.param("((has(a)))", "has(a)", id="redundant-parens"),
    pytest.param(
        "a=='x'||b=='y'&&c=='z'", 'a == "x" || b == "y" && c == "z"', id="precedence-no-extra-parens"
    ),
    pytest.param(
        "(a=='x'||b=='y')&&c=='z'", '(a == "x" || b == "y") && c == "z"', id="parens-kept-when-needed"
    ),
    pytest.param("a=='x'||(b=='y'&&c=='z')", 'a == "x" || b == "y" && c == "z"', id="parens-dropped"),
    pytest.param("!(has(a)&&has(b))", "!(has(a) && has(b))", id="not-group"),
]


@pytest.mark.parametrize(("text", "canonical"), CANONICAL_CASES)
def test_canonical_string(text: str, canonical: str) -> None:
    selector = parse_selector(text)
    assert str(selector) == canonical
    # The canonical form parses back to the same tree.
    assert parse_selector(canonical) == selector


@pytest.mark.parametrize(
    ("left", "right"),
    [
        pytest.param('app == "web" && tier != "db"', "app=='web'&&tier!='db'", id="spacing-and-quotes"),
        pytest.param("a in {'x', 'y'}", 'a in {"y","x","x"}', id="set-order-and-duplicates"),
        pytest.param("(has(a) && has(b)) && has(c)", "has(a) && (has(b) && has(c))", id="associativity"),
        pytest.param("\n has(a)\t||\thas(b) ", "has(a)||has(b)", id="whitespace-kinds"),
        pytest.param("", "all()", id="empty-and-all"),
    ],
)
def test_equivalent_spellings_share_canonical_string(left: str, right: str) -> None:
    assert str(parse_selector(left)) == str(parse_selector(right))
    assert parse_selector(left) == parse_selector(right)


def test_different_selectors_have_different_canonical_strings() -> None:
    assert str(parse_selector("a == 'x'")) != str(parse_selector("a != 'x'"))
    assert str(parse_selector("a in {'x'}")) != str(parse_selector("a not in {'x'}"))
    assert str(parse_selector("(has(a) || has(b)) && has(c)")) != str(
        parse_selector("has(a) || has(b) && has(c)")
    )


# --------------------------------------------------------------------------------------------
# keys() and global()
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "keys"),
    [
        pytest.param("", frozenset(), id="empty"),
        pytest.param("global()", frozenset(), id="global"),
        pytest.param("has(a)", frozenset({"a"}), id="has"),
        pytest.param(
            "!(a == 'x' || b in {'y'}) && !has(c) && d contains 'z'",
            frozenset({"a", "b", "c", "d"}),
            id="compound",
        ),
        pytest.param(
            "projectcalico.org/namespace == 'x' && projectcalico.org/namespace != 'y'",
            frozenset({"projectcalico.org/namespace"}),
            id="repeated-key",
        ),
    ],
)
def test_keys(text: str, keys: frozenset[str]) -> None:
    assert parse_selector(text).keys() == keys


@pytest.mark.parametrize(
    ("text", "uses_global"),
    [
        pytest.param("global()", True, id="global"),
        pytest.param("global() || has(a)", True, id="global-in-or"),
        pytest.param("!global()", True, id="negated-global"),
        pytest.param("all()", False, id="all"),
        pytest.param("has(global)", False, id="key-named-global"),
    ],
)
def test_uses_global(text: str, uses_global: bool) -> None:
    assert parse_selector(text).uses_global() is uses_global


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------

DEEP_OK = "(" * MAX_NESTING_DEPTH + "has(a)" + ")" * MAX_NESTING_DEPTH
TOO_DEEP = "(" * (MAX_NESTING_DEPTH + 1) + "has(a)" + ")" * (MAX_NESTING_DEPTH + 1)

ERROR_CASES = [
    pytest.param('a == "x', 5, "unterminated string", id="unterminated-double"),
    pytest.param("a == 'x", 5, "unterminated string", id="unterminated-single"),
    pytest.param("a in {'x', 'y}", 11, "unterminated string", id="unterminated-in-set"),
    pytest.param("a == 'x\"", 5, "unterminated string", id="mismatched-quotes"),
    pytest.param("a ==", 4, "expected a quoted string after '=='", id="missing-value"),
    pytest.param("a == b", 5, "expected a quoted string after '=='", id="unquoted-value"),
    pytest.param("a == 'x' &&", 11, "expected an expression", id="missing-right-operand-and"),
    pytest.param("a == 'x' || ", 12, "expected an expression", id="missing-right-operand-or"),
    pytest.param("&& a == 'x'", 0, "expected an expression", id="missing-left-operand"),
    pytest.param("!", 1, "expected an expression", id="bang-alone"),
    pytest.param("()", 1, "expected an expression", id="empty-parens"),
    pytest.param("!= 'x'", 0, "expected an expression", id="ne-without-key"),
    pytest.param("a", 1, "expected an operator", id="bare-key"),
    pytest.param("a = 'x'", 2, "expected an operator", id="single-equals"),
    pytest.param("a === 'x'", 4, "expected a quoted string after '=='", id="triple-equals"),
    pytest.param("a is 'x'", 2, "expected an operator", id="unknown-operator"),
    pytest.param("a starts 'x'", 2, "expected an operator", id="starts-without-with"),
    pytest.param("foo(x)", 0, "unknown function 'foo'", id="unknown-function"),
    pytest.param("has(a) && bar()", 10, "unknown function 'bar'", id="unknown-function-later"),
    pytest.param("has()", 4, "expected a label key inside has()", id="has-without-key"),
    pytest.param("has(a", 5, "expected ')' after 'has(a'", id="has-unclosed"),
    pytest.param("has(a b)", 6, "expected ')' after 'has(a'", id="has-two-words"),
    pytest.param("all(x)", 4, "expected ')' after 'all('", id="all-with-argument"),
    pytest.param("has(a) has(b)", 7, "expected '&&', '||' or end of selector", id="trailing-expression"),
    pytest.param("a == 'x' )", 9, "expected '&&', '||' or end of selector", id="trailing-paren"),
    pytest.param("a == 'x' & b == 'y'", 9, "expected '&&', '||' or end of selector", id="single-ampersand"),
    pytest.param("a == 'x' | b == 'y'", 9, "expected '&&', '||' or end of selector", id="single-pipe"),
    pytest.param("(has(a)", 7, "closing the '(' at position 0", id="unclosed-paren"),
    pytest.param("a in 'x'", 5, "expected '{'", id="in-without-braces"),
    pytest.param("a not in ('x')", 9, "expected '{'", id="not-in-with-parens"),
    pytest.param("a in {'x' 'y'}", 10, "expected ',' or '}'", id="set-missing-comma"),
    pytest.param("a in {'x',", 10, "expected a quoted string or '}'", id="set-unclosed"),
    pytest.param("a in {x}", 6, "expected a quoted string or '}'", id="set-unquoted-value"),
    pytest.param("a in {,}", 6, "expected a quoted string or '}'", id="set-leading-comma"),
    pytest.param("a == 'x' @", 9, "expected '&&', '||' or end of selector", id="garbage-char"),
    pytest.param("@", 0, "expected an expression", id="garbage-only"),
    pytest.param(TOO_DEEP, MAX_NESTING_DEPTH, "nested deeper than 64", id="too-deep"),
    pytest.param(
        "has(a) && " + TOO_DEEP, 10 + MAX_NESTING_DEPTH, "nested deeper than 64", id="too-deep-later"
    ),
    pytest.param("x" * (MAX_SELECTOR_BYTES + 1), MAX_SELECTOR_BYTES, "at most 16384 bytes", id="too-long"),
    pytest.param(
        "a == '" + "é" * 9000 + "'",
        6 + (MAX_SELECTOR_BYTES - 6) // 2,
        "at most 16384 bytes",
        id="too-long-in-utf8-bytes",
    ),
]


@pytest.mark.parametrize(("text", "position", "reason"), ERROR_CASES)
def test_errors(text: str, position: int, reason: str) -> None:
    with pytest.raises(CalicoSelectorError) as caught:
        parse_selector(text)
    error = caught.value
    assert error.position == position
    assert reason in error.reason
    assert f"position {position}" in str(error)
    assert isinstance(error, ValueError)


def test_error_says_what_was_found() -> None:
    with pytest.raises(CalicoSelectorError) as caught:
        parse_selector("a == 'x' )")
    assert str(caught.value) == (
        "invalid Calico selector at position 9: expected '&&', '||' or end of selector, found ')'"
    )


def test_error_pickles() -> None:
    with pytest.raises(CalicoSelectorError) as caught:
        parse_selector("foo()")
    clone = pickle.loads(pickle.dumps(caught.value))
    assert (clone.position, clone.reason, str(clone)) == (
        caught.value.position,
        caught.value.reason,
        str(caught.value),
    )


# --------------------------------------------------------------------------------------------
# Limits, hostile input, caching
# --------------------------------------------------------------------------------------------


def test_nesting_at_the_limit_is_accepted() -> None:
    assert parse_selector(DEEP_OK) == HasNode("a")


def test_longest_allowed_selector_is_accepted() -> None:
    text = "a == '" + "x" * (MAX_SELECTOR_BYTES - 7) + "'"
    assert len(text) == MAX_SELECTOR_BYTES
    assert parse_selector(text) == EqualsNode("a", "x" * (MAX_SELECTOR_BYTES - 7))


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("!" * (MAX_SELECTOR_BYTES - 10) + "has(a)", id="many-bangs"),
        pytest.param("(" * (MAX_SELECTOR_BYTES - 1) + "x", id="many-open-parens"),
        pytest.param(" || ".join(["has(a)"] * 1600), id="long-or-chain"),
        pytest.param("a in {" + ",".join(["'v'"] * 4000) + "}", id="big-set"),
        pytest.param("a starts" + " " * (MAX_SELECTOR_BYTES - 20) + "x", id="spaces-after-starts"),
        pytest.param("'" * MAX_SELECTOR_BYTES, id="many-quotes"),
    ],
)
def test_hostile_inputs_finish_quickly(text: str) -> None:
    started = time.perf_counter()
    with contextlib.suppress(CalicoSelectorError):
        parse_selector(text)
    assert time.perf_counter() - started < 1.0


def test_long_or_chain_is_flat() -> None:
    selector = parse_selector(" || ".join(f"has(k{i})" for i in range(1000)))
    assert isinstance(selector, OrNode)
    assert len(selector.operands) == 1000
    assert selector.matches({"k999": ""}) is True
    assert selector.matches({"k1000": ""}) is False


def test_many_bangs_collapse() -> None:
    assert parse_selector("!" * 1001 + "has(a)") == NotNode(HasNode("a"))
    assert parse_selector("!" * 1000 + "has(a)") == HasNode("a")


def test_parse_is_cached() -> None:
    text = "cache-probe == 'unique-value-for-this-test'"
    first = parse_selector(text)
    hits_before = parse_selector.cache_info().hits
    second = parse_selector(text)
    assert second is first
    assert parse_selector.cache_info().hits == hits_before + 1


def test_nodes_are_immutable_and_hashable() -> None:
    selector = parse_selector("a in {'x'} && !has(b)")
    with pytest.raises(AttributeError):
        selector.operands = ()  # type: ignore[misc, union-attr]
    assert hash(selector) == hash(parse_selector("a in {'x'}&&!has(b)"))
    assert {selector, parse_selector("a in {'x'}&&!has(b)")} == {selector}


def test_and_or_require_two_operands() -> None:
    with pytest.raises(ValueError, match="at least two operands"):
        AndNode((HasNode("a"),))
    with pytest.raises(ValueError, match="at least two operands"):
        OrNode(())
