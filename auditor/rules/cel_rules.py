"""CEL for custom rules: a sandboxed, bounded evaluator and the variables a condition sees.

The runtime is `cel-expr-python`, the Python binding of Google's C++ CEL implementation (cel-cpp,
the conformance-tested runtime behind the CEL spec; Kubernetes uses its Go twin). Expressions are
parsed *and type-checked* when a pack is loaded, so a syntax error, an undeclared variable or
function, or a condition that cannot be a bool is reported with the rule and the position before
any scan runs.

Safety. CEL has no loops, no recursion, no I/O and no access to the host; this module registers no
custom functions, only the standard library and the `strings` extension (`lowerAscii`, `split`,
`join`, ...; the same one Kubernetes enables). `cel.bind` is not loaded, so no sub-result can be
reused to grow a value exponentially. Cost is bounded three ways:

* an expression is at most ``MAX_EXPRESSION_CHARS`` characters (checked before parsing);
* the parser refuses nesting past its recursion limit;
* every evaluation has the runtime's comprehension budget (``ITERATION_BUDGET`` iterations of
  `all`/`exists`/`exists_one`/`map`/`filter`, nested ones multiplied); past it the evaluation stops
  with an error instead of running on.

A failed evaluation (a missing map key, a type mismatch, the budget) raises :class:`CelError`;
callers turn it into an error entry, never a crash.

Variables. ``workload``, ``group``, ``cluster`` and ``params`` are always declared; ``role`` only for
rules evaluated per role (``for: role``, the default). All are maps; absent optional data is an empty
string, list or map, never a missing key, so conditions need no ``has()`` for the fields below.

``workload`` — the object the role belongs to:
  ``apiVersion``, ``kind``, ``namespace``, ``name`` (string); ``labels``, ``annotations``
  (map string→string, the object's own ``metadata``); ``file`` (string), ``line`` (int) where it
  was read.

``role`` — one pod template × replica count (PyTorchJob ``Worker`` ×8, a Deployment's pods):
  ``name`` (string; the workload name for one-role kinds); ``replicas`` (int);
  ``labels`` (pod labels, operator labels included), ``annotations`` (pod template),
  ``nodeSelector`` (map string→string); ``tolerations`` (list of maps with ``key``, ``operator``,
  ``value``, ``effect``); ``requests`` (list, one map per container: resource→quantity as written,
  limits filling absent requests); ``resources`` (sorted list of every resource name requested, e.g.
  ``"nvidia.com/gpu"``); ``hostNetwork`` (bool); ``serviceAccount`` (string);
  ``zones`` (sorted list of the zones it can land in, scheduler filters applied); ``nodes`` (int,
  the number of nodes it can land on); ``unschedulable`` (bool: no such node);
  ``split`` (string: the most certain zone split of any path from or to this role — ``"always"``,
  ``"likely"``, ``"possible"`` — or ``""`` when no allowed placement splits one).

``group`` — the workload's roles together:
  ``roles`` (list of maps: ``name``, ``replicas``, ``zones``, ``nodes``, ``unschedulable``);
  ``zones`` (union of the roles' feasible zones); ``commonZones`` (zones every schedulable role can
  land in); ``split`` (most certain split over the workload's paths, ``""`` if none);
  ``canSplit`` (bool: ``split != ""``); ``edges`` (list of maps, one per communication path:
  ``from``, ``to`` (role names), ``fromWorkload``, ``toWorkload`` (``namespace/name``: a path
  may lead to another workload's pods), ``port`` (int, or null for the ephemeral range), ``protocol``,
  ``reason``, ``split``, ``coupling`` (the constraint that decided, in words), ``denied`` (bool: a
  policy denies it in some allowed placement), ``crossZone`` (bool: some allowed placement puts the
  two ends in different zones)). Paths with an unschedulable end are not analysed and not listed.

``cluster`` — ``zones`` (sorted zones of all nodes), ``nodes`` (int), ``zoneKey`` (string).

``params`` — the rule's ``options`` after every pack's overrides (map).

Example: ``'nvidia.com/gpu' in role.resources &&
!role.tolerations.exists(t, t.key == 'nvidia.com/gpu' || (t.key == '' && t.operator == 'Exists'))``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

from auditor.model.objects import Role, Workload
from auditor.placement.coupling import RolePlacement
from auditor.rules.model import AuditModel, EdgeAnalysis

MAX_EXPRESSION_CHARS = 4096
"""Characters per expression. A condition is a line or a paragraph, not a program; the cap keeps
parse and check time trivially small whatever a pack contains."""

ITERATION_BUDGET = 10_000
"""Comprehension iterations per evaluation: cel-cpp's built-in budget (not configurable through the
Python binding). Nested comprehensions multiply: two levels over 100-element lists reach it."""

VARIABLES = ("workload", "role", "group", "cluster", "params")
WORKLOAD_VARIABLES = ("workload", "group", "cluster", "params")

SPLIT_RANK = {"always": 0, "likely": 1, "possible": 2}

Returns = Literal["bool", "string"]

# "ERROR: <input>:LINE:COLUMN: message" — one per problem, each followed by a source excerpt.
_COMPILE_ERROR_RE = re.compile(r"ERROR: <input>:(\d+):(\d+): ([^\n]*)")
_STATUS_PREFIX_RE = re.compile(r"^[A-Z_]+: ")
_STATUS_SUFFIX_RE = re.compile(r" \[[A-Z_]+\]$")


class CelError(ValueError):
    """A CEL expression that failed to compile or evaluate. ``line`` and ``column`` are 1-based
    positions inside the expression text (0 when the runtime gives none)."""

    def __init__(self, message: str, line: int = 0, column: int = 0) -> None:
        where = f" (expression line {line}, column {column})" if line else ""
        super().__init__(f"{message}{where}")
        self.message, self.line, self.column = message, line, column


def _clean(text: str) -> str:
    """A runtime status message without its status-code decoration."""
    text = _STATUS_SUFFIX_RE.sub("", text.strip())
    return _STATUS_PREFIX_RE.sub("", text)


def plain(value: Any) -> Any:
    """Builtin containers and scalars only: the binding converts exact dict, list and str types,
    not the located YamlMap/YamlSeq subclasses that pack options arrive as."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value


@cache
def _cel() -> Any:
    """The CEL binding, imported when a pack first has an expression (not at every start).
    cel-expr-python ships a .pyi but no py.typed marker; its untyped surface stays in here."""
    from cel_expr_python import cel  # type: ignore[import-untyped]

    return cel


Library = Literal["rules", "devices"]
"""The functions an expression may call beyond CEL's standard ones and `strings`: ``devices`` adds
the part of Kubernetes' quantity library DRA device selectors use (placement/dra.py)."""


def _milli(text: str) -> int:
    from auditor.placement.resources import milli_value, parse_quantity

    try:
        return milli_value(parse_quantity(text))
    except ValueError as exc:
        raise ValueError(f"quantity({text!r}): {exc}") from None


def _quantity_functions(cel: Any) -> list[Any]:
    """`quantity(s)` and its comparisons, as Kubernetes' CEL quantity library defines them. A
    quantity is its value in thousandths (an int), so a capacity compares exactly with a literal
    whatever the suffixes; `asInteger` and `asApproximateFloat` give the value in whole units."""
    i, b, s, d = cel.Type.INT, cel.Type.BOOL, cel.Type.STRING, cel.Type.DOUBLE

    def member(name: str, result: Any, impl: Any) -> Any:
        return cel.FunctionDecl(
            name, [cel.Overload(f"quantity_{name}", result, [i, i], is_member=True, impl=impl)]
        )

    def unary(name: str, result: Any, impl: Any) -> Any:
        return cel.FunctionDecl(
            name, [cel.Overload(f"quantity_{name}", result, [i], is_member=True, impl=impl)]
        )

    return [
        cel.FunctionDecl("quantity", [cel.Overload("quantity_string", i, [s], impl=_milli)]),
        cel.FunctionDecl("isQuantity", [cel.Overload("is_quantity_string", b, [s], impl=_is_quantity)]),
        member("compareTo", i, lambda x, y: (x > y) - (x < y)),
        member("isGreaterThan", b, lambda x, y: x > y),
        member("isLessThan", b, lambda x, y: x < y),
        member("add", i, lambda x, y: x + y),
        member("sub", i, lambda x, y: x - y),
        unary("asInteger", i, lambda x: x // 1000),
        unary("asApproximateFloat", d, lambda x: x / 1000),
        unary("isInteger", b, lambda x: x % 1000 == 0),
        unary("sign", i, lambda x: (x > 0) - (x < 0)),
    ]


def _is_quantity(text: str) -> bool:
    try:
        _milli(text)
    except ValueError:
        return False
    return True


@cache
def _environment(variables: tuple[str, ...], library: Library = "rules") -> Any:
    """One CEL environment per variable set and library; built on first use, never at import."""
    from cel_expr_python.ext.ext_strings import ExtStrings  # type: ignore[import-untyped]

    cel = _cel()
    any_map = cel.Type.Map(cel.Type.STRING, cel.Type.DYN)
    functions = _quantity_functions(cel) if library == "devices" else []
    return cel.NewEnv(
        variables=dict.fromkeys(variables, any_map), extensions=[ExtStrings()], functions=functions
    )


@dataclass(frozen=True, slots=True)
class CelExpression:
    """A parsed and type-checked expression, ready to evaluate many times."""

    source: str
    returns: Returns
    variables: tuple[str, ...]
    program: Any = field(repr=False, compare=False)

    def evaluate(self, activation: Mapping[str, Any]) -> bool | str:
        """The expression's value for these variables; raises CelError on any failure."""
        try:
            value = self.program.eval(data={name: plain(v) for name, v in activation.items()})
        except MemoryError:
            raise
        except Exception as exc:
            # The iteration budget and internal failures raise RuntimeError; a value the binding
            # cannot convert may raise anything. Either costs this evaluation, not the scan.
            raise CelError(_clean(str(exc))) from None
        kind = value.type()
        cel = _cel()
        if kind == cel.Type.ERROR:
            raise CelError(_clean(str(value.value())))
        if self.returns == "bool" and kind == cel.Type.BOOL:
            return bool(value.value())
        if self.returns == "string" and kind == cel.Type.STRING:
            return str(value.value())
        raise CelError(f"returned {kind.name().lower()}, not {self.returns}")


def compile_expression(
    source: str, variables: Collection[str] = VARIABLES, returns: Returns = "bool", library: Library = "rules"
) -> CelExpression:
    """Parse and type-check ``source`` over the given (map-typed) variables.

    Raises CelError with the first problem's position; the message says how many more there were.
    """
    if len(source) > MAX_EXPRESSION_CHARS:
        raise CelError(
            f"the expression is {len(source)} characters, over the limit of {MAX_EXPRESSION_CHARS}"
        )
    if not source.strip():
        raise CelError("the expression is empty")
    names = tuple(sorted(variables))
    try:
        program = _environment(names, library).compile(source)
    except MemoryError:
        raise
    except Exception as exc:  # RuntimeError for CEL problems; odd input must still be a CelError
        text = str(exc)
        problems = _COMPILE_ERROR_RE.findall(text)
        if not problems:
            raise CelError(_clean(text)) from None
        line, column, message = problems[0]
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise CelError(_clean(message) + more, int(line), int(column)) from None
    result = program.return_type()
    cel = _cel()
    wanted = cel.Type.BOOL if returns == "bool" else cel.Type.STRING
    if result not in (wanted, cel.Type.DYN):
        raise CelError(f"the expression yields {result.name().lower()}, but a {returns} is needed", 1, 1)
    return CelExpression(source, returns, names, program)


# --------------------------------------------------------------------------------------------
# Variables


@dataclass(frozen=True, slots=True)
class WorkloadActivation:
    """The variables for one workload: ``base`` (workload, group, cluster) and one ``role`` map per
    role, in the workload's role order."""

    workload: Workload
    base: Mapping[str, Any]
    roles: tuple[tuple[Role, Mapping[str, Any]], ...]


def _most_certain(splits: Iterator[str | None]) -> str:
    ranked = [s for s in splits if s]
    return min(ranked, key=lambda s: SPLIT_RANK.get(s, 9)) if ranked else ""


def _role_map(role: Role, placement: RolePlacement | None, split: str) -> dict[str, Any]:
    t = role.template
    requests = [dict(container) for container in t.requests]
    return {
        "name": role.name,
        "replicas": role.replicas,
        "labels": dict(t.labels),
        "annotations": dict(t.annotations),
        "nodeSelector": dict(t.node_selector),
        "tolerations": [dataclasses.asdict(x) for x in t.tolerations],  # key, operator, value, effect
        "requests": requests,
        "resources": sorted({name for container in requests for name in container}),
        "hostNetwork": t.host_network,
        "serviceAccount": t.service_account,
        "zones": list(placement.zones) if placement else [],
        "nodes": len(placement.nodes) if placement else 0,
        "unschedulable": placement.unschedulable if placement else True,
        "split": split,
    }


def _edge_map(analysis: EdgeAnalysis) -> dict[str, Any]:
    edge = analysis.edge
    return {
        "from": edge.source.name,
        "to": edge.destination.name,
        "fromWorkload": f"{edge.source.workload.namespace}/{edge.source.workload.name}",
        "toWorkload": f"{edge.destination.workload.namespace}/{edge.destination.workload.name}",
        "port": edge.port,
        "protocol": edge.protocol,
        "reason": edge.reason,
        "split": analysis.placement.split or "",
        "coupling": analysis.placement.coupling,
        "denied": any(not v.allowed for v in analysis.verdicts),
        "crossZone": any(not v.same_zone for v in analysis.verdicts),
    }


def cluster_variables(model: AuditModel) -> dict[str, Any]:
    zone_key = model.inventory.settings.topology.zone_key
    zones = sorted({z for n in model.inventory.nodes if (z := n.label_map.get(zone_key))})
    return {"zones": zones, "nodes": len(model.inventory.nodes), "zoneKey": zone_key}


def activations(model: AuditModel) -> Iterator[WorkloadActivation]:
    """The CEL variables (except ``params``) for every workload of the model, in inventory order."""
    cluster = cluster_variables(model)
    by_workload: dict[object, list[EdgeAnalysis]] = {}
    for analysis in model.edges:
        by_workload.setdefault(analysis.edge.source.workload, []).append(analysis)
        if analysis.edge.destination.workload != analysis.edge.source.workload:
            by_workload.setdefault(analysis.edge.destination.workload, []).append(analysis)
    for workload in model.workloads():
        analyses = by_workload.get(workload.ref, [])
        placements = {r: model.placements.get(r) for r in workload.roles}
        roles: list[tuple[Role, Mapping[str, Any]]] = []
        for role in workload.roles:
            split = _most_certain(
                a.placement.split for a in analyses if role in (a.edge.source, a.edge.destination)
            )
            roles.append((role, _role_map(role, placements[role], split)))
        schedulable = [p for p in placements.values() if p is not None and not p.unschedulable]
        common = set.intersection(*(set(p.zones) for p in schedulable)) if schedulable else set()
        group_split = _most_certain(a.placement.split for a in analyses)
        group = {
            "roles": [
                {k: m[k] for k in ("name", "replicas", "zones", "nodes", "unschedulable")} for _, m in roles
            ],
            "zones": sorted({z for p in schedulable for z in p.zones}),
            "commonZones": sorted(common),
            "split": group_split,
            "canSplit": bool(group_split),
            "edges": [_edge_map(a) for a in analyses],
        }
        ref = workload.ref
        workload_map = {
            "apiVersion": ref.api_version,
            "kind": ref.kind,
            "namespace": ref.namespace,
            "name": ref.name,
            "labels": dict(workload.labels),
            "annotations": workload.annotations.text(),
            "file": ref.source.file,
            "line": ref.source.line,
        }
        yield WorkloadActivation(
            workload, {"workload": workload_map, "group": group, "cluster": cluster}, tuple(roles)
        )
