"""The one entry point. Errors become exit codes here and nowhere else (`main()`); the codes are
EXIT_CODES below (docs/cli.md). A partial audit exits 3, which wins over 1, so it never looks like a
result; an unexpected error (a bug) is 3 too, never 1, which means findings; 141, the reader of
stdout went away (`auditor scan … | head`), is quiet, as a program stopped by SIGPIPE is.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from auditor import TOOL_NAME, __version__, codecache, gcpause, native, progress
from auditor.audit.scan import ScanResult, apply_baseline, scan
from auditor.cache import DEFAULT_MAX_BYTES, DocumentCache, user_cache_dir
from auditor.clock import system_clock, utc_date
from auditor.errors import (
    EXIT_FAILED,
    EXIT_FINDINGS,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    AuditFailed,
    AuditorError,
    ConfigError,
    for_http_status,
)
from auditor.model.findings import Finding
from auditor.model.source import NotAudited
from auditor.reports import json_report, table
from auditor.resources import examples_dir
from auditor.rules.packs import load_packs
from auditor.settings.config import CONFIG_ENV, CONFIG_FILE_NAME, Settings, discover_config
from auditor.settings.config import load_settings as _load_settings
from auditor.sources import incremental
from auditor.sources.manifests import Tools, load_inventory, repository_root

if TYPE_CHECKING:  # the cluster reader (and msgspec) load only for the commands that read one
    from auditor.sources.kubeapi import ClusterRead

# 128 + SIGPIPE: what a shell reports for a producer whose reader closed the pipe (`yes | head`).
EXIT_BROKEN_PIPE = 141


def load_settings(path: Path | None) -> Settings:
    """The settings, with their warnings (a secret sent unencrypted) printed on stderr."""
    settings = _load_settings(path)
    for warning in settings.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return settings


def _scan_root(args: argparse.Namespace) -> Path:
    """The scanned repository's root: the git work tree of the first path (or --example), else
    the working directory (also for `-`, a stream)."""
    given = [Path(p) for p in getattr(args, "paths", []) if p != STDIN]
    if not given and getattr(args, "example", None):
        given = [example_path(args.example.split("/")[0])]
    return repository_root(given[0]) if given else Path.cwd()


def _settings(args: argparse.Namespace) -> Settings:
    """--config, else $AUDITOR_CONFIG, else .placement-auditor.yaml from the scanned repository's
    root upward, else the defaults."""
    if args.config:
        return load_settings(Path(args.config))
    found = discover_config(_scan_root(args), os.environ)
    return load_settings(found) if found is not None else Settings()


@contextlib.contextmanager
def _store_errors() -> Iterator[None]:
    """A database error as the CLI's failure (SQLAlchemy imported here: a scan never loads it)."""
    from sqlalchemy.exc import SQLAlchemyError

    from auditor.store.database import ENV_URL
    from auditor.store.url import DatabaseURLError

    try:
        yield
    except DatabaseURLError as exc:
        # A URL this product cannot use is a configuration error (exit 2), not a failed audit:
        # name where it came from. The message names the backend, never the URL (its password).
        where = ("(environment)", ENV_URL) if os.environ.get(ENV_URL) else ("(config)", "database.url")
        raise ConfigError(where[0], 0, where[1], str(exc)) from None
    except SQLAlchemyError as exc:
        raise AuditFailed(f"the findings store is not available: {type(exc).__name__}: {exc}") from exc


def example_path(name: str) -> Path:
    base = examples_dir()
    path = (base / name).resolve()
    if not path.exists() or base.resolve() not in path.parents:
        available = sorted(p.name for p in base.iterdir() if p.is_dir())
        raise ConfigError(
            "--example", 0, name, f"no bundled example by that name (have: {', '.join(available)})"
        )
    return path


STDIN = "-"


def _read_stdin() -> tuple[str, list[Any], list[Any]]:
    """`-`: a multi-document YAML stream on stdin (`helm template … | auditor scan -`), read with
    the limits of a file; its objects' sources are `<stdin>` and a line."""
    from auditor import yamlio
    from auditor.model.source import LoadError

    limits = yamlio.YamlLimits()
    raw = sys.stdin.buffer.read(limits.max_file_bytes + 1)
    docs, errors = yamlio.load_bytes(raw, "<stdin>", limits)
    if not docs and not errors:
        errors = [LoadError("<stdin>", 0, "no Kubernetes objects on stdin (an empty stream)")]
    return "<stdin>", docs, errors


def _paths(args: argparse.Namespace) -> list[Path]:
    if args.paths.count(STDIN) > 1:
        raise ConfigError("(arguments)", 0, "PATH", "'-' (stdin) may be given once")
    paths = [Path(p) for p in args.paths if p != STDIN]
    if args.example:
        example = example_path(args.example.split("/")[0])
        if "/" in args.example:
            paths.append(example_path(args.example))
        paths.extend(p for p in sorted(example.glob("*.yaml")))
    if not paths and STDIN not in args.paths:
        raise ConfigError(
            "(arguments)", 0, "PATH", "give at least one manifest path, '-' for stdin, or --example NAME"
        )
    return paths + [Path(p) for p in args.nodes or []]


def _jobs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number ≥ 0, got {text!r}")
    return value


def _explain_mode_error(args: argparse.Namespace) -> str:
    """Why the options ask neither or both of explain's questions ("" when they ask one)."""
    question = {"--from": args.from_, "--to": args.to, "--port": args.port}
    pinned = {"--from-zone": args.from_zone, "--to-zone": args.to_zone, "--protocol": args.protocol}
    if args.placement is not None:
        given = [k for k, v in {**question, **pinned}.items() if v is not None]
        if given:
            return f"--placement cannot be combined with {', '.join(given)}: ask one question at a time"
        return ""
    missing = [k for k, v in question.items() if v is None]
    if missing:
        return (
            f"explain needs --from, --to and --port (missing: {', '.join(missing)}), or --placement NS/NAME"
        )
    return ""


def cmd_explain(args: argparse.Namespace) -> int:
    """A reachability question (--from/--to/--port: 0 allowed, 1 denied), or a placement one
    (--placement NS/NAME: 0 when every replica of every role named can be placed, 1 when not)."""
    from auditor.audit import placement_explain
    from auditor.audit.explain import ExplainError, explain, to_json, to_text

    mode_error = _explain_mode_error(args)
    if mode_error:
        print(f"error: {mode_error}", file=sys.stderr)
        return EXIT_USAGE
    settings = _settings(args)
    paths = _paths(args)
    stream = _read_stdin() if STDIN in args.paths else None
    inv = load_inventory(paths, settings, stream=stream)
    errors = [e.to_json() for e in inv.errors]
    as_json = args.format == "json"
    try:
        if args.placement is not None:
            placed = placement_explain.explain_placement(inv, args.placement)
            ok = placed.placeable
            out = (
                json.dumps(placement_explain.to_json(placed, errors), indent=2)
                if as_json
                else placement_explain.to_text(placed)
            )
        else:
            exp = explain(
                inv, args.from_, args.to, str(args.port), args.protocol or "TCP", args.from_zone, args.to_zone
            )
            ok = exp.allowed
            out = json.dumps(to_json(exp, errors), indent=2) if as_json else to_text(exp)
    except ExplainError as exc:
        for e in inv.errors:
            print(f"warning: {e}", file=sys.stderr)
        message = placement_explain.clean(str(exc)) if args.placement is not None else str(exc)
        print(f"error: {message}", file=sys.stderr)
        return EXIT_USAGE
    print(out)
    if not as_json:
        for e in inv.errors:
            print(f"warning: {e}", file=sys.stderr)
    return EXIT_OK if ok else EXIT_FINDINGS


def _baseline_fingerprints(path: Path) -> set[str]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(str(path), 0, "--baseline", f"cannot read the baseline report: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("schema") != json_report.SCHEMA:
        raise ConfigError(str(path), 0, "--baseline", f"not a {json_report.SCHEMA} report")
    return {str(f.get("fingerprint")) for f in doc.get("findings", []) if isinstance(f, dict)}


def _document_cache(args: argparse.Namespace) -> DocumentCache | None:
    """The cache of loaded files for `scan`: none with --no-cache; capped at
    $AUDITOR_CACHE_MAX_MB mebibytes (default 1024)."""
    if args.no_cache:
        return None
    directory = Path(args.cache_dir) if args.cache_dir else user_cache_dir()
    cap = os.environ.get("AUDITOR_CACHE_MAX_MB", "")
    if cap and not (cap.isascii() and cap.isdigit()):
        raise ConfigError(
            "environment", 0, "AUDITOR_CACHE_MAX_MB", f"not a whole number of mebibytes: {cap!r}"
        )
    return DocumentCache(directory, int(cap) * 2**20 if cap else DEFAULT_MAX_BYTES)


def cmd_scan(args: argparse.Namespace) -> int:
    settings = _settings(args)
    paths = _paths(args)
    if args.diff_base:
        return _diff_scan(args, settings, paths)
    stream = _read_stdin() if STDIN in args.paths else None
    bar = progress.for_stderr()
    try:
        pack_files = [Path(p) for p in args.policy or []]
        pack = load_packs(pack_files)
        today = utc_date(system_clock)
        cache = _document_cache(args)
        with gcpause.paused(resume=not args.one_shot):
            # Through the snapshot of these paths: only what changed since is audited again.
            through = (
                incremental.scan_tree(
                    cache, settings, pack, pack_files, paths, today, args.jobs, bar or progress.silent
                )
                if cache is not None and stream is None
                else None
            )
            if through is not None:
                result = through[0]
                _keep(args, result)
            else:
                inv = load_inventory(
                    paths,
                    settings,
                    progress=bar or progress.silent,
                    jobs=args.jobs,
                    stream=stream,
                    cache=cache,
                )
                result = scan(inv, pack, today, bar or progress.silent)
                _keep(args, inv, result)
            if args.baseline:
                result = apply_baseline(result, _baseline_fingerprints(Path(args.baseline)))
            _emit(args, result)
    finally:
        if bar is not None:
            bar.close()
    return _scan_exit(result, args.fail_on)


def _scan_exit(result: ScanResult, fail_on: str) -> int:
    if not result.complete:
        for n in result.not_audited:
            print(f"error: not audited: {table.clean(str(n))}", file=sys.stderr)
        print(
            f"error: the audit is partial: {len(result.not_audited)} file(s) or director(ies) "
            "were not audited (see above); findings from the rest are reported",
            file=sys.stderr,
        )
        return EXIT_FAILED
    if result.audited_objects == 0 and result.errors:
        return EXIT_FAILED
    return EXIT_FINDINGS if result.at_or_above(fail_on) else EXIT_OK


def _diff_scan(args: argparse.Namespace, settings: Settings, paths: list[Path]) -> int:
    """--diff-base REF: what the working tree introduces and resolves against the merge base."""
    from auditor.audit import diffscan

    if STDIN in args.paths or args.example or args.baseline:
        raise ConfigError(
            "(arguments)", 0, "--diff-base", "audits git paths: not with '-', --example or --baseline"
        )
    pack = load_packs([Path(p) for p in args.policy or []])
    today = utc_date(system_clock)

    def audit(audited: Sequence[Path], root: Path) -> ScanResult:
        inv = load_inventory(audited, settings, jobs=args.jobs, root=root)
        return scan(inv, pack, today)

    with gcpause.paused(resume=not args.one_shot):
        diff = diffscan.diff_scan(paths, args.diff_base, audit)
    if args.format in {"json", "markdown"}:
        doc = _diff_document(diff)
        from auditor.reports import markdown

        text = json.dumps(doc, indent=2) + "\n" if args.format == "json" else markdown.render(doc)
        _write(args, text)
    else:
        _emit(args, diff.head, diff.where.repository)
        for f in diff.resolved:
            print(f"resolved: {_named(f)}", file=sys.stderr)
    return _scan_exit(diff.head, args.fail_on)


def _named(f: Finding) -> str:
    """A finding on one line for stderr: rule, workload, short fingerprint."""
    w = f.workload
    return table.clean(f"{f.rule} {w.kind} {w.namespace}/{w.name} ({f.fingerprint[:12]})")


def _diff_document(diff: Any) -> dict[str, Any]:
    doc = json_report.to_document(diff.head)
    introduced = [{**f, "change": "introduced", "side": "head"} for f in doc["findings"]]
    resolved = [{**f.to_json(), "change": "resolved", "side": "base"} for f in diff.resolved]
    doc["findings"] = [*introduced, *resolved]
    doc["diff"] = {
        "base_ref": diff.where.ref,
        "merge_base": diff.where.merge_base,
        "head": diff.where.head,
        "head_tree": "working tree",
        "introduced": len(introduced),
        "resolved": len(resolved),
        "unchanged": diff.unchanged,
    }
    doc["summary"]["resolved"] = len(resolved)
    doc["errors"] += [{**e.to_json(), "side": "base"} for e in diff.base.errors]
    return doc


OUTPUT_BUFFER = 2**20
"""Bytes --output writes at a time."""


def _write(args: argparse.Namespace, text: str | list[str]) -> None:
    """Write the output (text, or its pieces one after the other) to --output or stdout."""
    pieces = [text] if isinstance(text, str) else text
    if args.output:
        # A large buffer: a report of 15 MB in pieces went to the kernel 8 KiB at a time (twice
        # the time of writing it in 1 MiB blocks).
        with Path(args.output).open("w", encoding="utf-8", buffering=OUTPUT_BUFFER) as out:
            out.writelines(pieces)
    else:
        sys.stdout.writelines(pieces)


def _emit(args: argparse.Namespace, result: ScanResult, root: Path | None = None) -> None:
    text: str | list[str]
    # The other formats' renderers are imported when asked for (a scan's start-up is its cost).
    if args.format in ("sarif", "junit"):
        from auditor.reports import junit, sarif

        source = sarif.SourceRoot(root or _scan_root(args), Path.cwd())
        text = (sarif.render if args.format == "sarif" else junit.render)(result, source)
    elif args.format == "markdown":
        from auditor.reports import markdown

        text = markdown.render(json_report.to_document(result))
    elif args.format == "csv":
        from auditor.reports import csv_report

        text = csv_report.render(result)
    elif args.format == "json":
        text = json_report.render_pieces(result)
    else:
        out_tty = args.output is None and sys.stdout.isatty()
        text = table.render(result, colour=out_tty and "NO_COLOR" not in os.environ)
    _write(args, text)


def _port_range(text: str) -> tuple[int, int]:
    lo_text, _, hi_text = text.partition("-")
    try:
        lo, hi = int(lo_text), int(hi_text or lo_text)
    except ValueError:
        lo, hi = 0, -1
    if not 1 <= lo <= hi <= 65535:
        raise argparse.ArgumentTypeError(f"a port or range N-M within 1-65535, got {text!r}")
    return lo, hi


def cmd_connectivity(args: argparse.Namespace) -> int:
    from auditor.audit.connectivity import connectivity
    from auditor.reports import connectivity_report

    settings = _settings(args)
    paths = _paths(args)
    with gcpause.paused(resume=not args.one_shot):
        inv = load_inventory(paths, settings, jobs=args.jobs)
        cmap = connectivity(inv, args.protocol.upper(), args.port or settings.network.ephemeral_ports)
        _keep(args, inv, cmap)
    if args.format == "csv":
        text = connectivity_report.render_csv(cmap)
        for e in inv.errors:
            print(f"warning: {e}", file=sys.stderr)
    else:
        text = connectivity_report.render_json(cmap, inv.network.describe(), list(inv.errors))
    _write(args, text)
    return EXIT_FAILED if not inv.workloads and inv.errors else EXIT_OK


def _read_cluster(args: argparse.Namespace, settings: Settings) -> ClusterRead | None:
    from auditor.sources import cluster
    from auditor.sources.kubeapi import ReadOptions

    if args.in_cluster and args.context:
        raise ConfigError("(arguments)", 0, "--in-cluster", "give --context or --in-cluster, not both")
    try:
        read = cluster.read_cluster(
            args.context, args.kubeconfig, args.in_cluster, ReadOptions.from_settings(settings)
        )
    except Exception as exc:
        # A kubeconfig missing or broken, an unknown context, the kubernetes client's config errors.
        if not isinstance(exc, ValueError | OSError) and type(exc).__name__ != "ConfigException":
            raise
        raise ConfigError(args.kubeconfig or "kubeconfig", 0, "--context", str(exc)) from None
    for problem in read.incomplete:
        grant = f" — grant it with: {problem.rbac}" if problem.rbac else ""
        print(f"error: {problem.what}: {problem.problem}: {problem.message}{grant}", file=sys.stderr)
    if not read.objects:
        print(f"error: nothing could be read from cluster {read.context}", file=sys.stderr)
        return None
    return read


def cmd_cluster(args: argparse.Namespace) -> int:
    from auditor.sources import cluster, prometheus

    settings = _settings(args)
    pack = load_packs([Path(p) for p in args.policy or []])
    with gcpause.paused(resume=not args.one_shot):
        read = _read_cluster(args, settings)
        if read is None:
            return EXIT_FAILED
        inv = cluster.inventory_from_read(read, settings)
        result = scan(inv, pack, utc_date(system_clock))
        _keep(args, read, inv, result)
        result.findings = prometheus.enrich(result.findings, inv, settings, os.environ, result.observation)
        # What could not be read makes the report partial too (SARIF executionSuccessful, JSON complete).
        result.not_audited += [
            NotAudited(f"cluster:{read.context}/{p.what}", f"{p.problem}: {p.message}")
            for p in read.incomplete
        ]
        _emit(args, result)
    if args.publish_reports:
        _publish_reports(args, result, read.incomplete)
    if read.incomplete:
        print("error: the audit is partial: some objects could not be read (see above)", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_FINDINGS if result.at_or_above(args.fail_on) else EXIT_OK


def _publish_reports(args: argparse.Namespace, result: ScanResult, incomplete: Sequence[object]) -> None:
    """--publish-reports: the PolicyReports of this audit, written into the cluster by
    server-side apply. A partial read publishes nothing: its passes would be untrue."""
    from auditor.reports import policyreport
    from auditor.sources.kubeapi import connect

    if incomplete:
        print("error: PolicyReports not published: the cluster read was partial", file=sys.stderr)
        return
    flavour = policyreport.FLAVOURS[args.publish_reports]
    docs = policyreport.build(policyreport.entries_from_scan(result), flavour, system_clock())
    api_client, _ = connect(args.context, args.kubeconfig, args.in_cluster)
    try:
        published = policyreport.publish(api_client, docs, flavour)
    except policyreport.PublishError as exc:
        raise AuditFailed(f"publishing PolicyReports: {exc}") from None
    finally:
        api_client.close()
    for p in published:
        where = f"{p.namespace}/" if p.namespace else ""
        if p.results < 0:
            print(f"deleted the stale {p.kind} {where}{p.name}", file=sys.stderr)
        else:
            print(f"published {p.kind} {where}{p.name} ({p.results} results)", file=sys.stderr)


def cmd_snapshot(args: argparse.Namespace) -> int:
    from auditor.sources import cluster

    settings = _settings(args)
    read = _read_cluster(args, settings)
    if read is None:
        return EXIT_FAILED
    cluster.write_snapshot(read, Path(args.output), system_clock(), settings.cluster.snapshot_annotations)
    kept = sum(1 for o in read.objects if cluster.allowed(o))
    print(f"wrote {kept} objects of cluster {read.context} to {args.output}", file=sys.stderr)
    return EXIT_FAILED if read.incomplete else EXIT_OK


def _service_settings(
    args: argparse.Namespace, fallback: Literal["demo", "defaults", "none"] = "none"
) -> Settings:
    """The config for the service commands: --config, else $AUDITOR_CONFIG, else
    .placement-auditor.yaml from the working directory upward; else the `fallback`: "demo" the
    bundled seed-lab example (`auditor serve`, as README and service.md document), "defaults"
    (`auditor findings`: only the database is needed), "none" a usage error (a config is required)."""
    if args.config:
        return load_settings(Path(args.config))
    found = discover_config(Path.cwd(), os.environ)
    if found is not None:
        print(f"note: using the config {found}", file=sys.stderr)
        return load_settings(found)
    if fallback == "demo":
        bundled = examples_dir() / "service.yaml"
        print(
            f"note: no config found (--config, ${CONFIG_ENV} or {CONFIG_FILE_NAME}): serving the "
            f"bundled DEMO config {bundled} (target seed-lab)",
            file=sys.stderr,
        )
        return load_settings(bundled)
    if fallback == "defaults":
        return Settings()
    raise ConfigError(
        "(arguments)",
        0,
        "--config",
        f"`auditor {args.command}` needs a config: give --config FILE, set ${CONFIG_ENV}, or put "
        f"{CONFIG_FILE_NAME} in this directory or one above (the bundled demo: --config "
        f"{examples_dir() / 'service.yaml'})",
    )


def _build_store(settings: Settings) -> Any:
    from auditor import bootstrap

    with _store_errors():
        return bootstrap.build_store(settings)


def cmd_db(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import SQLAlchemyError  # here: a scan never loads SQLAlchemy

    from auditor.store import database

    settings = _service_settings(args, "defaults")
    url = database.resolve_url(settings.database.url)
    with _store_errors():
        engine = database.make_engine(url)
    try:
        database.upgrade(engine)
        print(f"database {database.redacted(url)} is at revision {database.current_revision(engine)}")
    except SQLAlchemyError as exc:
        raise AuditFailed(f"database {database.redacted(url)}: {type(exc).__name__}: {exc}") from exc
    finally:
        engine.dispose()
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from auditor import bootstrap

    settings = _service_settings(args)
    settings.target(args.target)
    store = _build_store(settings)
    runner = bootstrap.build_runner(settings, store)
    runner.recover()
    actor = cli_actor()
    try:
        run_id = runner.start(args.target, None, "cli")
    except Exception as exc:  # busy, or a store that fails: recorded when it can be, then raised
        with contextlib.suppress(Exception):
            store.append_audit(actor, "run.start", args.target, outcome="refused", detail=str(exc))
        raise
    store.append_audit(actor, "run.start", args.target, detail=f"run {run_id}")
    result = runner.execute(run_id, args.target)
    store.engine.dispose()
    if result.summary is None:
        print(f"run {result.run_id} of {args.target}: failed: {result.error}", file=sys.stderr)
        return EXIT_FAILED
    s = result.summary
    cost = f", estimated ${s.estimated_monthly_cost_usd:,.2f}/month" if s.estimated_monthly_cost_usd else ""
    print(
        f"run {s.run_id} of {args.target}: {s.status}: {s.findings} finding(s) "
        f"({s.new} new, {s.reopened} reopened, {s.resolved} resolved, {s.waived} waived){cost}"
    )
    if s.status != "succeeded":
        return EXIT_FAILED
    return EXIT_FINDINGS if _active_at_or_above(store, args.target, args.fail_on) else EXIT_OK


def cli_actor() -> str:
    """Who runs this command, for the audit log: `cli:user@host` (the uid when the user has no
    name, as in a container without a passwd entry)."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid()) if hasattr(os, "getuid") else "unknown"
    return f"cli:{user}@{socket.gethostname()}"


def cmd_audit_log(args: argparse.Namespace) -> int:
    settings = _service_settings(args, "defaults")
    since = _since(args.since)
    page = _read_page(
        lambda: _build_store(settings).audit_log(
            actor=args.actor, action=args.action, since=since, limit=args.limit, cursor=args.cursor
        )
    )

    def line(e: Any) -> str:
        where = f" from {e.address}" if e.address else ""
        detail = f": {e.detail}" if e.detail else ""
        return (
            f"{e.id:>7}  {e.at.isoformat(timespec='seconds')}  {e.outcome:<7} {e.action:<20} "
            f"{e.subject} by {e.actor}{where}{detail}"
        )

    return _print_page(page, args.format, line, "no audit log entries match")


def _read_page(read: Callable[[], Any]) -> Any:
    """A page from the store: its errors as the CLI's, a bad cursor as a usage error."""
    from auditor.store.repository import BadCursor

    try:
        with _store_errors():
            return read()
    except BadCursor as exc:
        raise ConfigError("(arguments)", 0, "--cursor", str(exc)) from None


def _print_page(page: Any, fmt: str, line: Callable[[Any], str], empty: str) -> int:
    """A page as the API's JSON, or one cleaned line per item and the cursor to the next page."""
    if fmt == "json":
        from auditor.service import wire

        print(json.dumps(wire.record_json(page), indent=2))
        return EXIT_OK
    if not page.items:
        print(empty)
    for item in page.items:
        print(table.clean(line(item)))
    if page.next_cursor:
        print(f"more: --cursor {page.next_cursor}")
    return EXIT_OK


def _active_at_or_above(store: Any, target: str, fail_on: str) -> bool:
    from auditor.model.findings import SEVERITY_RANK

    if fail_on == "none":
        return False
    active = store.active_by_severity(target)
    return any(n and SEVERITY_RANK.get(sev, 99) <= SEVERITY_RANK[fail_on] for sev, n in active.items())


def _since(text: str | None) -> datetime | None:
    """--since as an aware time (UTC when no offset is given), or a usage error."""
    if not text:
        return None
    try:
        since = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError("(arguments)", 0, "--since", f"not an ISO date or time: {text!r}") from None
    return since if since.tzinfo else since.replace(tzinfo=UTC)


def cmd_findings(args: argparse.Namespace) -> int:
    from auditor.store.repository import FindingFilter

    settings = _service_settings(args, "defaults")
    flt = FindingFilter(
        args.target, args.rule, args.severity, args.status, args.namespace, _since(args.since)
    )
    page = _read_page(lambda: _build_store(settings).findings(flt, args.limit, args.cursor))

    def line(f: Any) -> str:
        w = f.workload
        return (
            f"{f.id:>7}  {f.status:<9} {f.severity:<8} {f.rule:<28} "
            f"{f.target}: {w.kind} {w.namespace}/{w.name}"
        )

    return _print_page(page, args.format, line, "no findings match")


def cmd_serve(args: argparse.Namespace) -> int:
    from auditor import bootstrap

    settings = _service_settings(args, "demo")
    host = args.host or settings.service.host
    port = args.port if args.port is not None else settings.service.port
    # The app checks Host headers when it listens on loopback: it must know the real address.
    service = dataclasses.replace(settings.service, host=host, port=port)
    settings = dataclasses.replace(settings, service=service)
    with _store_errors():
        bootstrap.serve(settings, host, port)
    return EXIT_OK


def cmd_admit(args: argparse.Namespace) -> int:
    """The validating admission webhook (docs/admission.md), until SIGTERM or SIGINT."""
    import signal
    import threading

    from auditor import bootstrap
    from auditor.sources.kubeapi import connect

    if args.in_cluster and args.context:
        raise ConfigError("(arguments)", 0, "--in-cluster", "give --context or --in-cluster, not both")
    settings = _service_settings(args, "defaults")
    pack = load_packs([Path(p) for p in args.policy or []])
    for flag, path in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)):
        if not Path(path).is_file():
            raise ConfigError(path, 0, flag, "no such file (the serving certificate and its key, PEM)")
    listen = bootstrap.AdmissionListen(
        args.host,
        args.port,
        None if args.metrics_port == 0 else args.metrics_port,
        Path(args.tls_cert),
        Path(args.tls_key),
    )
    try:
        connection = connect(args.context, args.kubeconfig, args.in_cluster)
    except Exception as exc:
        if not isinstance(exc, ValueError | OSError) and type(exc).__name__ != "ConfigException":
            raise
        raise ConfigError(args.kubeconfig or "kubeconfig", 0, "--context", str(exc)) from None
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    with _store_errors():
        bootstrap.admit(settings, connection, pack, listen, not args.no_record, args.drain_seconds, stop)
    return EXIT_OK


def _listen_port(text: str) -> int:
    value = int(text) if text.isdigit() else -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port within 0-65535, got {text!r}")
    return value


def cmd_worker(args: argparse.Namespace) -> int:
    """A Celery worker executing audits, PR checks and digests (fleet mode: service.broker)."""
    from auditor import bootstrap

    settings = _service_settings(args)
    if settings.service.broker is None:
        raise ConfigError(
            settings.source, 0, "service.broker", "`auditor worker` needs service.broker (a broker URL)"
        )
    with _store_errors():
        bootstrap.work(settings, args.concurrency, args.pool, args.hostname)
    return EXIT_OK


def cmd_fix(args: argparse.Namespace) -> int:
    from auditor.remediation.fix import propose, unified_diff

    settings = _settings(args)
    paths = _paths(args)
    pack = load_packs([Path(p) for p in args.policy or []])
    wanted = set(args.finding) if args.finding else None
    result, proposals = propose(paths, settings, pack, utc_date(system_clock), wanted, Tools.detect())
    if wanted is not None:
        unknown = wanted - {f.fingerprint for f in result.findings}
        if unknown:
            raise ConfigError("(arguments)", 0, "--finding", f"no such finding: {', '.join(sorted(unknown))}")
    if not proposals:
        print("nothing to fix", file=sys.stderr)
        return EXIT_OK
    final: dict[str, tuple[str, str]] = {}
    for p in proposals:
        head = _named(p.finding)
        if p.plan is None:
            print(f"no fix: {head}: {p.reason}", file=sys.stderr)
            continue
        print(f"fix: {head}: {p.plan.describe()}; {p.reaudit}", file=sys.stderr)
        for file, (before, after) in p.files.items():
            final[file] = (final.get(file, (before, after))[0], after)
    for file, (before, after) in sorted(final.items()):
        if args.write:
            Path(file).write_text(after, encoding="utf-8", newline="")
            print(f"wrote {file}", file=sys.stderr)
        else:
            sys.stdout.write(unified_diff(file, before, after))
    return (
        EXIT_OK
        if all(p.plan is not None or p.reason.startswith("already fixed") for p in proposals)
        else EXIT_FINDINGS
    )


def cmd_pr(args: argparse.Namespace) -> int:
    from github import GithubException

    from auditor.gitops.pulls import sync_pull_requests

    settings = _service_settings(args)
    target = settings.target(args.target)
    if target.git is None or target.github is None:
        raise ConfigError(
            settings.source, 0, f"targets[{args.target}]", "needs a git repository and a github section"
        )
    store = _build_store(settings)
    try:
        outcomes = sync_pull_requests(target, settings, store, tools=Tools.detect())
    except GithubException as exc:
        raise for_http_status(f"GitHub: {exc}", exc.status) from exc
    for o in outcomes:
        number = f" #{o.number}" if o.number else ""
        print(f"{o.action}{number}: {o.workload} ({o.branch}){': ' + o.detail if o.detail else ''}")
    return EXIT_OK


def cmd_digest(args: argparse.Namespace) -> int:
    from auditor.service import digests

    settings = _service_settings(args)
    store = _build_store(settings)
    try:
        if args.dry_run:
            for d, _since, _ in digests.build_all(settings, store):
                print(f"To: {', '.join(d.team.to)}\nSubject: {d.subject}\n\n{d.text}")
            return EXIT_OK
        queued, sent, errors = digests.run(settings, store, os.environ)
    except digests.NoDigestConfig as exc:
        raise ConfigError(settings.source, 0, "digest", str(exc)) from None
    print(f"{queued} digest(s) queued, {sent} sent", file=sys.stderr)
    for e in errors:
        print(f"error: {e} (kept in the outbox; retried next time)", file=sys.stderr)
    return EXIT_FAILED if errors else EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from auditor.reports import compliance

    settings = _service_settings(args)
    since = _since(args.since)
    store = _build_store(settings)
    if args.target:
        settings.target(args.target)
    from auditor.service import wire

    export = wire.record_json(store.export(args.target, since))
    if args.format in ("sarif", "junit", "policyreport", "openreports"):
        export = _checkout_relative(export, settings)
    report = compliance.build(export, settings.reports, store.clock(), since)
    if args.output:
        manifest = compliance.write(report, args.format, Path(args.output))
        print(f"wrote {args.output} and its sha256 manifest {manifest}", file=sys.stderr)
    else:
        if args.format == "pdf":
            raise ConfigError("(arguments)", 0, "--output", "a PDF report needs --output FILE")
        sys.stdout.write(compliance.render(report, args.format).decode())
    return EXIT_OK


def _checkout_relative(export: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """Stored file names made relative to their target's checkout (the service's git cache, or
    the target's directory), as code scanning places them on the repository's files."""
    from auditor.gitops.git import cache_dir_for

    roots: dict[str, Path] = {}
    for t in settings.targets:
        if t.git is not None:
            roots[t.name] = cache_dir_for(Path(settings.service.git_cache_dir), t.git.url).resolve()
        elif t.directory:
            roots[t.name] = Path(t.directory).resolve()

    def relative(obj: dict[str, Any], root: Path | None) -> dict[str, Any]:
        """`obj` with its `file` relative to `root` when it lies there."""
        name = obj.get("file", "")
        if name and root is not None and Path(name).is_absolute() and Path(name).is_relative_to(root):
            name = Path(name).relative_to(root).as_posix()
        return {**obj, "file": name}

    findings = []
    for f in export["findings"]:
        root = roots.get(f["target"])
        f = {**f, "workload": relative(f["workload"], root)}
        detail = dict(f.get("detail") or {})
        if isinstance(detail.get("workload"), dict):
            detail["workload"] = relative(detail["workload"], root)
        if isinstance(detail.get("policies"), list):
            detail["policies"] = [relative(p, root) for p in detail["policies"] if isinstance(p, dict)]
        f["detail"] = detail
        findings.append(f)
    return {**export, "findings": findings}


def cmd_version(args: argparse.Namespace) -> int:
    import platform

    mode, why = native.mode()
    info = {
        "name": TOOL_NAME,
        "version": __version__,
        "python": platform.python_version(),
        # Whether the audit's hot modules run compiled (mypyc) or from source, and why.
        "build": {"mode": mode, "why": why},
        "schemas": {
            "findings": json_report.SCHEMA,
            "sarif": "2.1.0",
            "policyreport": ["wgpolicyk8s.io/v1alpha2", "openreports.io/v1alpha1"],
        },
    }
    if args.format == "json":
        print(json.dumps(info, indent=2))
    else:
        print(f"{TOOL_NAME} {__version__} (Python {info['python']}; {mode}: {why})")
    return EXIT_OK


def cmd_completion(args: argparse.Namespace) -> int:
    from argcomplete.shell_integration import shellcode

    sys.stdout.write(shellcode(["auditor"], shell=args.shell))
    return EXIT_OK


EXIT_CODES = """exit codes:
  0    no finding at or above --fail-on (explain: allowed)
  1    findings at or above --fail-on (explain: denied)
  2    usage or configuration error
  3    the audit failed or was partial (also an unexpected error)
  130  interrupted; 141 stdout closed early"""

CONFIG_HELP = (
    f"config file (YAML); default: ${CONFIG_ENV}, else {CONFIG_FILE_NAME} in the scanned "
    "repository's root or a directory above it"
)
SCAN_FORMATS = ("table", "json", "sarif", "junit", "csv", "markdown")
FAIL_ON = ("critical", "high", "medium", "low", "none")
SERVICE_CONFIG_HELP = f"config file (YAML); default: ${CONFIG_ENV}, else {CONFIG_FILE_NAME} here or above"

EPILOGS = {
    "auditor": """examples:
  auditor scan manifests/
  helm template my-chart | auditor scan - --nodes nodes.yaml
  auditor scan deploy/ --diff-base origin/main --format json
  auditor explain manifests/ --from ml/train/Worker --to ml/train/Master --port 23456
  auditor serve --config auditor.yaml

""",
    "scan": """examples:
  auditor scan manifests/ --nodes nodes.yaml
  auditor scan --example seed-lab/before --format json
  kustomize build overlays/prod | auditor scan - --nodes nodes.yaml
  auditor scan . --diff-base origin/main --fail-on high      # what this change introduces
  auditor scan . --format sarif --output auditor.sarif       # for GitHub code scanning

""",
    "explain": """examples:
  auditor explain --example seed-lab/before --from ml-demo/trainer-workers \\
      --to ml-demo/trainer-coordinator --port 9999
  auditor explain manifests/ --nodes nodes.yaml --from ml/job/Worker --to ml/job/Master --port 23456
  auditor explain manifests/ --nodes nodes.yaml --placement ml/job          # where each role can land
  auditor explain manifests/ --nodes nodes.yaml --placement ml/job/Worker --format json

""",
    "cluster": """examples:
  auditor cluster --context prod --format json
  auditor cluster --in-cluster --publish-reports openreports --fail-on none

""",
    "report": """examples:
  auditor report --config auditor.yaml --format html --output report.html
  auditor report --config auditor.yaml --format policyreport --since 2026-11-01

""",
    "run": "examples:\n  auditor run --config auditor.yaml --target infra\n\n",
    "serve": "examples:\n  auditor serve                      # the bundled demo\n"
    "  auditor serve --config auditor.yaml --port 8080\n\n",
    "admit": "examples:\n  auditor admit --in-cluster --tls-cert /tls/tls.crt --tls-key /tls/tls.key\n"
    "  auditor admit --context kind-lab --tls-cert tls.crt --tls-key tls.key --host 127.0.0.1\n\n",
    "completion": 'examples:\n  eval "$(auditor completion bash)"        # in ~/.bashrc\n'
    "  auditor completion fish > ~/.config/fish/completions/auditor.fish\n\n",
}


def build_parser() -> argparse.ArgumentParser:
    # argparse makes a formatter for every argument added (to check its help), and each asks the
    # terminal for its width: 120 ioctls and environment reads per start. Asked once here, as
    # argparse asks it (the columns less two).
    import shutil

    width = shutil.get_terminal_size().columns - 2

    class Formatter(argparse.RawDescriptionHelpFormatter):
        def __init__(self, prog: str) -> None:
            super().__init__(prog, width=width)

    parser = argparse.ArgumentParser(
        prog="auditor",
        description="Placement Auditor: where training pods can "
        "land, and which network-policy doors are closed.",
        epilog=EPILOGS["auditor"] + EXIT_CODES,
        formatter_class=Formatter,
    )
    parser.add_argument("--version", action="version", version=f"{TOOL_NAME} {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="on an error, print the traceback too (for a bug report)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    original_add = sub.add_parser

    def add_parser(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        kwargs.setdefault("epilog", EPILOGS.get(name, "") + EXIT_CODES)
        kwargs.setdefault("formatter_class", Formatter)
        if "help" in kwargs:
            kwargs.setdefault("description", kwargs["help"])
        return original_add(name, **kwargs)

    sub.add_parser = add_parser  # type: ignore[method-assign]

    def manifest_args(cmd: argparse.ArgumentParser, paths: str, config: str = "config file (YAML)") -> None:
        cmd.add_argument("paths", nargs="*", metavar="PATH", help=paths)
        cmd.add_argument("--example", help="use a bundled example (e.g. seed-lab/before)")
        cmd.add_argument("--nodes", action="append", metavar="FILE", help="`kubectl get nodes -o yaml` dumps")
        cmd.add_argument("--config", help=config)

    ex = sub.add_parser(
        "explain",
        help="answer one reachability question with the deciding policies, or where a workload can land",
    )
    ex.add_argument("paths", nargs="*", metavar="PATH", help="manifest files or directories; - for stdin")
    ex.add_argument("--nodes", action="append", metavar="FILE", help="`kubectl get nodes -o yaml` dumps")
    ex.add_argument("--example", help="use a bundled example (e.g. seed-lab/before)")
    ex.add_argument(
        "--from",
        dest="from_",
        required=False,
        metavar="NS/NAME",
        help="source: NS/POD, NS/WORKLOAD or NS/WORKLOAD/ROLE",
    )
    ex.add_argument("--to", required=False, metavar="NS/NAME", help="destination, same forms")
    ex.add_argument(
        "--port",
        required=False,
        help="destination port: a number, a container port name, a range LO-HI, or ephemeral "
        "(the data-plane range scan uses for this destination)",
    )
    ex.add_argument("--protocol", help="TCP (default), UDP or SCTP")
    ex.add_argument(
        "--from-zone", help="zone the source lands in (default: its node's or only feasible zone)"
    )
    ex.add_argument("--to-zone", help="zone the destination lands in")
    ex.add_argument(
        "--placement",
        metavar="NS/NAME",
        help="instead of --from/--to/--port: per role of the workload NS/NAME (or the one role "
        "NS/WORKLOAD/ROLE), the zones it can reach and every object that narrowed or widened them",
    )
    ex.add_argument("--config", help=CONFIG_HELP)
    ex.add_argument("--format", choices=("text", "json"), default="text")
    ex.set_defaults(func=cmd_explain)
    sc = sub.add_parser(
        "scan", help="audit manifests: training groups blocked, slowed or billed across zones"
    )
    manifest_args(
        sc, "manifest files or directories; - reads a multi-document YAML stream from stdin", CONFIG_HELP
    )
    sc.add_argument("--format", choices=SCAN_FORMATS, default="table")
    sc.add_argument(
        "--diff-base",
        metavar="REF",
        help="git: report only the findings the working tree introduces (and those it resolves) "
        "against the merge base of REF and HEAD; the exit code counts introduced findings only",
    )
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
        choices=FAIL_ON,
        default="high",
        help="exit 1 when a finding is at or above this severity (default high)",
    )
    sc.add_argument(
        "--jobs",
        type=_jobs,
        default=0,
        metavar="N",
        help="processes reading a large tree (default 0: one per available CPU; 1: no workers)",
    )
    sc.add_argument(
        "--no-cache",
        action="store_true",
        help="read every file afresh, neither using nor filling the cache of loaded files",
    )
    sc.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="the cache of loaded files (default $AUDITOR_CACHE_DIR, else the user cache directory)",
    )
    sc.set_defaults(func=cmd_scan)

    cn = sub.add_parser(
        "connectivity", help="export who can reach whom, per namespace × zone, for training traffic"
    )
    manifest_args(cn, "manifest files or directories")
    cn.add_argument(
        "--port",
        type=_port_range,
        default=None,
        metavar="N|N-M",
        help="the probe: a port or range (default: network.ephemeral_ports, where all-reduce connects)",
    )
    cn.add_argument("--protocol", default="TCP", choices=("TCP", "UDP", "SCTP"), type=str.upper)
    cn.add_argument("--format", choices=("json", "csv"), default="json")
    cn.add_argument("--output", metavar="FILE", help="write the map here instead of stdout")
    cn.add_argument("--jobs", type=_jobs, default=0, metavar="N", help="processes reading a large tree")
    cn.set_defaults(func=cmd_connectivity)

    def cluster_args(cmd: argparse.ArgumentParser) -> None:
        where = cmd.add_mutually_exclusive_group()
        where.add_argument("--context", help="kubeconfig context (default: the current one)")
        where.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
        cmd.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
        cmd.add_argument("--config", help="config file (YAML)")

    cl = sub.add_parser("cluster", help="audit a live cluster: where pods run now, and where they could land")
    cluster_args(cl)
    cl.add_argument("--policy", action="append", metavar="PACK", help="extra policy pack (repeatable)")
    cl.add_argument("--format", choices=SCAN_FORMATS, default="table")
    cl.add_argument("--output", metavar="FILE", help="write the report here instead of stdout")
    cl.add_argument("--fail-on", choices=FAIL_ON, default="high")
    cl.add_argument(
        "--publish-reports",
        nargs="?",
        const="wgpolicyk8s",
        choices=("wgpolicyk8s", "openreports"),
        metavar="API",
        help="write a PolicyReport per namespace into the cluster (server-side apply): "
        "wgpolicyk8s (wgpolicyk8s.io/v1alpha2, the default) or openreports (openreports.io/v1alpha1)",
    )
    cl.set_defaults(func=cmd_cluster)

    sn = sub.add_parser("snapshot", help="write what the cluster reader sees to one YAML file")
    cluster_args(sn)
    sn.add_argument("-o", "--output", required=True, metavar="FILE")
    sn.set_defaults(func=cmd_snapshot)

    fx = sub.add_parser("fix", help="propose verified placement fixes as a diff (or write them)")
    manifest_args(fx, "manifest files or directories")
    fx.add_argument("--policy", action="append", metavar="PACK", help="extra policy pack (repeatable)")
    which = fx.add_mutually_exclusive_group()
    which.add_argument(
        "--finding", action="append", metavar="FINGERPRINT", help="fix this finding (repeatable)"
    )
    which.add_argument("--all", action="store_true", help="every fixable finding (the default)")
    how = fx.add_mutually_exclusive_group()
    how.add_argument("--dry-run", action="store_true", help="print a unified diff (the default)")
    how.add_argument("--write", action="store_true", help="write the changed files")
    fx.set_defaults(func=cmd_fix)

    pr = sub.add_parser("pr", help="open or update the fix pull requests of a git target")
    pr.add_argument("--target", required=True, metavar="NAME")
    pr.add_argument("--config", help=SERVICE_CONFIG_HELP)
    pr.set_defaults(func=cmd_pr)

    dg = sub.add_parser("digest", help="build and send the daily digest e-mails (the outbox is retried)")
    dg.add_argument("--config", help=SERVICE_CONFIG_HELP)
    dg.add_argument("--dry-run", action="store_true", help="print the digests instead of sending them")
    dg.set_defaults(func=cmd_digest)

    rp = sub.add_parser("report", help="export a compliance report from the store")
    rp.add_argument("--config", help=SERVICE_CONFIG_HELP)
    rp.add_argument(
        "--format",
        choices=("csv", "json", "html", "pdf", "sarif", "junit", "policyreport", "openreports"),
        default="html",
    )
    rp.add_argument("--target", metavar="NAME")
    rp.add_argument("--since", metavar="DATE", help="include findings resolved and runs since then")
    rp.add_argument("--output", metavar="FILE", help="write here, with FILE.sha256 beside it")
    rp.set_defaults(func=cmd_report)

    rn = sub.add_parser("run", help="audit one configured target now and store the results")
    rn.add_argument("--target", required=True, metavar="NAME")
    rn.add_argument("--config", help=SERVICE_CONFIG_HELP)
    rn.add_argument(
        "--fail-on",
        choices=FAIL_ON,
        default="high",
        help="exit 1 when an active finding of the target is at or above this severity",
    )
    rn.set_defaults(func=cmd_run)

    fd = sub.add_parser("findings", help="list stored findings")
    fd.add_argument("--config", help=SERVICE_CONFIG_HELP + " (else the default database)")
    fd.add_argument("--target", metavar="NAME")
    fd.add_argument("--rule")
    fd.add_argument("--severity", choices=("critical", "high", "medium", "low"))
    fd.add_argument("--status", choices=("new", "open", "resolved", "reopened", "waived"))
    fd.add_argument("--namespace")
    fd.add_argument("--since", metavar="ISO-TIME", help="seen or resolved at or after this time")
    fd.add_argument("--limit", type=int, default=50, choices=range(1, 501), metavar="N (1-500)")
    fd.add_argument("--cursor", help="continue after a previous page")
    fd.add_argument("--format", choices=("table", "json"), default="table")
    fd.set_defaults(func=cmd_findings)

    al = sub.add_parser("audit-log", help="every write to the service: who, what, when, from where")
    al.add_argument("--config", help=SERVICE_CONFIG_HELP + " (else the default database)")
    al.add_argument("--actor", help="one actor (cli:user@host, token:<hash>, service, anonymous)")
    al.add_argument("--action", help="one action (run.start, pull-request.open, ...)")
    al.add_argument("--since", metavar="ISO-TIME", help="entries at or after this time")
    al.add_argument("--limit", type=int, default=50, choices=range(1, 501), metavar="N (1-500)")
    al.add_argument("--cursor", help="continue after a previous page")
    al.add_argument("--format", choices=("table", "json"), default="table")
    al.set_defaults(func=cmd_audit_log)

    sv = sub.add_parser("serve", help="the scheduler, the HTTP API and metrics")
    sv.add_argument("--config", help=SERVICE_CONFIG_HELP + " (else the bundled demo)")
    sv.add_argument("--host", help="listen address (default: service.host, 127.0.0.1)")
    sv.add_argument("--port", type=int, help="listen port (default: service.port, 8080)")
    sv.set_defaults(func=cmd_serve)

    ad = sub.add_parser(
        "admit", help="the admission webhook: warn or deny, at apply time, what would split a training group"
    )
    cluster_args(ad)
    ad.add_argument("--policy", action="append", metavar="PACK", help="extra policy pack (repeatable)")
    ad.add_argument(
        "--tls-cert", required=True, metavar="FILE", help="serving certificate (PEM; reloaded on change)"
    )
    ad.add_argument("--tls-key", required=True, metavar="FILE", help="its private key (PEM)")
    ad.add_argument(
        "--host", default="0.0.0.0", help="listen address (default 0.0.0.0: the API server calls in)"
    )
    ad.add_argument(
        "--port", type=_listen_port, default=8443, help="HTTPS port of POST /validate (default 8443)"
    )
    ad.add_argument(
        "--metrics-port",
        type=_listen_port,
        default=9102,
        help="plain-HTTP /metrics port (default 9102; 0: none)",
    )
    ad.add_argument(
        "--no-record", action="store_true", help="do not store the answers (metrics and logs only)"
    )
    ad.add_argument(
        "--drain-seconds",
        type=float,
        default=5.0,
        metavar="S",
        help="on SIGTERM, answer this long with /readyz failing before the port closes (default 5)",
    )
    ad.set_defaults(func=cmd_admit)

    wk = sub.add_parser("worker", help="a Celery worker for audits, PR checks and digests (fleet mode)")
    wk.add_argument("--config", help="config file with service.broker (default: the bundled example)")
    wk.add_argument("--concurrency", type=int, default=1, metavar="N", help="worker processes (default 1)")
    wk.add_argument("--pool", choices=("prefork", "solo", "threads"), default="prefork")
    wk.add_argument("--hostname", help="Celery node name (default: worker@HOST)")
    wk.set_defaults(func=cmd_worker)

    db = sub.add_parser("db", help="database maintenance")
    dbsub = db.add_subparsers(dest="db_command", required=True)
    up = dbsub.add_parser("upgrade", help="apply the schema migrations")
    up.add_argument("--config", help="config file (database.url); AUDITOR_DATABASE_URL wins")
    up.set_defaults(func=cmd_db)

    vr = sub.add_parser("version", help="print the version (and, as JSON, the schemas it writes)")
    vr.add_argument("--format", choices=("text", "json"), default="text")
    vr.set_defaults(func=cmd_version)

    co = sub.add_parser("completion", help="print the shell completion script")
    co.add_argument("shell", choices=("bash", "zsh", "fish", "tcsh", "powershell"))
    co.set_defaults(func=cmd_completion)
    _add_debug(parser)
    return parser


def _add_debug(parser: argparse.ArgumentParser) -> None:
    """--debug on the program and on every command (`auditor --debug scan …` or `auditor scan
    … --debug`); a command's default is SUPPRESS so it never resets the program's flag."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                child.add_argument(
                    "--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
                )
                _add_debug(child)


def _one_line(text: str) -> str:
    """A message on one line, its control characters escaped (it may quote a hostile file)."""
    return table.clean(" ".join(text.split())) or "(no message)"


def _stdout_gone() -> None:
    """The reader of stdout went away: point stdout at /dev/null so the interpreter's last flush
    cannot raise again (https://docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (a test's capture)
        pass


# What a one-shot audit built (millions of objects on a large repository or cluster), left for the
# process exit to drop: freeing them one by one costs a few per cent of the audit (entry()).
_KEPT: list[object] = []


def _keep(args: argparse.Namespace, *built: object) -> None:
    if args.one_shot:
        _KEPT.extend(built)


def main(argv: Sequence[str] | None = None, *, one_shot: bool = False) -> int:
    """Run one command; every exception becomes its exit code and one line on stderr, here.

    `one_shot`: the process ends when it returns (the `auditor` program, a benchmark child), so
    the garbage collector paused for an audit is not resumed (gcpause)."""
    parser = build_parser()
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (`auditor completion SHELL`)
        import argcomplete

        argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)
    args.one_shot = one_shot
    debug = bool(args.debug)
    try:
        code: int = args.func(args)
        sys.stdout.flush()  # inside the boundary: a closed pipe shows here, not at exit
        return code
    except BrokenPipeError:
        _stdout_gone()
        return EXIT_BROKEN_PIPE
    except (KeyboardInterrupt, Exception) as exc:
        if debug:
            traceback.print_exc()
        if isinstance(exc, KeyboardInterrupt):
            print("error: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        if isinstance(exc, AuditorError):
            print(f"error: {_one_line(str(exc))}", file=sys.stderr)
            return exc.exit_code
        hint = "" if debug else " (run with --debug for the traceback)"
        print(f"error: internal error: {type(exc).__name__}: {_one_line(str(exc))}{hint}", file=sys.stderr)
        return EXIT_FAILED


def entry() -> NoReturn:
    """The `auditor` program and `python -m auditor`.

    After a one-shot audit the process leaves without tearing down what it built (`_KEPT`):
    its output is flushed, the code cache saved (codecache.save: the one exit work of ours), and
    nothing else is pending (no threads or pools).
    """
    code = main(one_shot=True)
    if _KEPT:
        leave(code)
    sys.exit(code)


def leave(code: int) -> NoReturn:
    """End the process now, as `entry` does after a one-shot audit: output flushed, the code
    cache saved, the heap not freed one object at a time (benchmark children leave this way)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    codecache.save()
    os._exit(code)


if __name__ == "__main__":
    entry()
