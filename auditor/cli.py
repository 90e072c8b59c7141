"""The one entry point. Errors become exit codes here and nowhere else.

Exit codes: 0 success (explain: allowed); 1 findings at or above --fail-on (explain: denied);
2 usage or configuration error; 3 the audit itself failed or could not answer.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from datetime import date
from pathlib import Path

from auditor import TOOL_NAME, __version__, progress
from auditor.config import ConfigError, load_settings
from auditor.explain import ExplainError, explain, to_json, to_text
from auditor.reports import csv_report, json_report, junit, sarif, table
from auditor.resources import examples_dir
from auditor.rules.packs import load_packs
from auditor.scan import apply_baseline, scan
from auditor.sources.manifests import load_inventory

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_FAILED = 0, 1, 2, 3


def example_path(name: str) -> Path:
    base = examples_dir()
    path = (base / name).resolve()
    if not path.exists() or base.resolve() not in path.parents:
        available = sorted(p.name for p in base.iterdir() if p.is_dir())
        raise ConfigError(
            "--example", 0, name, f"no bundled example by that name (have: {', '.join(available)})"
        )
    return path


def _paths(args: argparse.Namespace) -> list[Path]:
    paths = [Path(p) for p in args.paths]
    if args.example:
        example = example_path(args.example.split("/")[0])
        if "/" in args.example:
            paths.append(example_path(args.example))
        paths.extend(p for p in sorted(example.glob("*.yaml")))
    if not paths:
        raise ConfigError("(arguments)", 0, "PATH", "give at least one manifest path or --example NAME")
    return paths


def cmd_explain(args: argparse.Namespace) -> int:
    settings = load_settings(Path(args.config) if args.config else None)
    inv = load_inventory(_paths(args), settings)
    errors = [e.to_json() for e in inv.errors]
    try:
        exp = explain(inv, args.from_, args.to, str(args.port), args.protocol, args.from_zone, args.to_zone)
    except ExplainError as exc:
        for e in inv.errors:
            print(f"warning: {e}", file=sys.stderr)
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.format == "json":
        print(json.dumps(to_json(exp, errors), indent=2))
    else:
        print(to_text(exp))
        for e in inv.errors:
            print(f"warning: {e}", file=sys.stderr)
    return EXIT_OK if exp.allowed else EXIT_FINDINGS


def _baseline_fingerprints(path: Path) -> set[str]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(str(path), 0, "--baseline", f"cannot read the baseline report: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("schema") != json_report.SCHEMA:
        raise ConfigError(str(path), 0, "--baseline", f"not a {json_report.SCHEMA} report")
    return {str(f.get("fingerprint")) for f in doc.get("findings", []) if isinstance(f, dict)}


def cmd_scan(args: argparse.Namespace) -> int:
    settings = load_settings(Path(args.config) if args.config else None)
    paths = _paths(args) + [Path(p) for p in args.nodes or []]
    bar = progress.for_stderr()
    try:
        pack = load_packs([Path(p) for p in args.policy or []])
        inv = load_inventory(paths, settings, progress=bar or progress.silent)
        result = scan(inv, pack, date.today(), bar or progress.silent)
    finally:
        if bar is not None:
            bar.close()
    if args.baseline:
        result = apply_baseline(result, _baseline_fingerprints(Path(args.baseline)))
    renderers = {
        "json": json_report.render,
        "sarif": sarif.render,
        "junit": junit.render,
        "csv": csv_report.render,
    }
    if args.format in renderers:
        text = renderers[args.format](result)
    else:
        out_tty = args.output is None and sys.stdout.isatty()
        text = table.render(result, colour=out_tty and "NO_COLOR" not in os.environ)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    if result.audited_objects == 0 and result.errors:
        return EXIT_FAILED
    return EXIT_FINDINGS if result.at_or_above(args.fail_on) else EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="auditor",
        description="Placement Auditor: where training pods can "
        "land, and which network-policy doors are closed.",
    )
    parser.add_argument("--version", action="version", version=f"{TOOL_NAME} {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("explain", help="answer one reachability question with the deciding policies")
    ex.add_argument("paths", nargs="*", metavar="PATH", help="manifest files or directories")
    ex.add_argument("--example", help="use a bundled example (e.g. seed-lab/before)")
    ex.add_argument(
        "--from",
        dest="from_",
        required=True,
        metavar="NS/NAME",
        help="source: NS/POD, NS/WORKLOAD or NS/WORKLOAD/ROLE",
    )
    ex.add_argument("--to", required=True, metavar="NS/NAME", help="destination, same forms")
    ex.add_argument("--port", required=True, help="destination port number or container port name")
    ex.add_argument("--protocol", default="TCP", help="TCP (default), UDP or SCTP")
    ex.add_argument(
        "--from-zone", help="zone the source lands in (default: its node's or only feasible zone)"
    )
    ex.add_argument("--to-zone", help="zone the destination lands in")
    ex.add_argument("--config", help="config file (YAML)")
    ex.add_argument("--format", choices=("text", "json"), default="text")
    ex.set_defaults(func=cmd_explain)
    sc = sub.add_parser(
        "scan", help="audit manifests: training groups blocked, slowed or billed across zones"
    )
    sc.add_argument("paths", nargs="*", metavar="PATH", help="manifest files or directories")
    sc.add_argument("--example", help="use a bundled example (e.g. seed-lab/before)")
    sc.add_argument("--nodes", action="append", metavar="FILE", help="`kubectl get nodes -o yaml` dumps")
    sc.add_argument("--config", help="config file (YAML)")
    sc.add_argument("--format", choices=("table", "json", "sarif", "junit", "csv"), default="table")
    sc.add_argument(
        "--policy",
        action="append",
        metavar="PACK",
        help="policy pack file or directory, applied after the default pack (repeatable)",
    )
    sc.add_argument(
        "--baseline", metavar="FILE", help="report only findings absent from this earlier JSON report"
    )
    sc.add_argument("--output", metavar="FILE", help="write the report here instead of stdout")
    sc.add_argument(
        "--fail-on",
        choices=("critical", "high", "medium", "low", "none"),
        default="high",
        help="exit 1 when a finding is at or above this severity (default high)",
    )
    sc.set_defaults(func=cmd_scan)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
