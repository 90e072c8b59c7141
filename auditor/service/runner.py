"""One stored audit of one target: claim the slot, fetch, scan, store (the `run` use case).

Used by `auditor run`, by the scheduler and by the API's trigger. A run that cannot fetch or
scan ends `failed` with the reason; one that could not see everything ends `partial` (it
records what it saw and resolves nothing): a file that could not be read, a Kustomize directory
or Helm chart skipped (renderer missing), refused (remote or outside the target) or failing to
build; a process killed mid-run leaves a `running` row
that `recover` marks `interrupted` on the next start.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from auditor import gcpause
from auditor.audit.scan import ScanResult, scan
from auditor.cache import DocumentCache
from auditor.gitops import git
from auditor.inventory import Inventory
from auditor.rules.packs import PolicyPack, load_packs, with_api_waivers
from auditor.settings.config import Settings
from auditor.settings.service import TargetSettings
from auditor.sources import incremental
from auditor.sources.kubeapi import ReadOptions
from auditor.sources.manifests import Tools, load_inventory
from auditor.store import database
from auditor.store.repository import RunOutcome, RunSummary, SlotTaken, Store, WaiverSeen

log = logging.getLogger("auditor.runner")


def process_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_is_dead(owner: str) -> bool:
    """True when `owner` (host:pid) is a process on this host that no longer exists."""
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        pass
    return False


@dataclass(frozen=True, slots=True)
class RunResult:
    run_id: int
    status: str
    summary: RunSummary | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Analysis:
    """A target's inventory and a scan of it, not recorded as a run (see AuditRunner.analyse)."""

    inventory: Inventory
    result: ScanResult
    revision: str | None
    paths: list[Path]
    pack: PolicyPack
    today: date


@dataclass(frozen=True, slots=True)
class FixPreview:
    revision: str | None
    diffs: list[tuple[str, str]]  # (file relative to the target, unified diff)
    notes: list[str]  # why there is no fix, what the re-audit said


class TargetBusy(RuntimeError):
    """This process is already auditing that target."""


class AuditRunner:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        tools: Tools | None = None,
        owner: str | None = None,
        environ: dict[str, str] | None = None,
        cache: DocumentCache | None = None,
    ) -> None:
        self.settings = settings
        # Loaded files by content: a daily re-audit of an unchanged repository parses nothing.
        self.cache = cache
        self.store = store
        self.tools = tools or Tools.detect()
        self.owner = owner or process_owner()
        self.environ = environ if environ is not None else dict(os.environ)
        self.read_options: ReadOptions | None = None  # cluster reads; None = the defaults
        self.last_scan: incremental.ScanStats | None = None  # what the last scan through the cache did
        self._busy: set[str] = set()
        self._lock = threading.Lock()
        # Failures that could not be written (the database was away), written by `recover`.
        self._unrecorded: dict[int, tuple[str, str | None]] = {}
        # PR steps a rate limit deferred (target → when to try again), retried by `recover`.
        self.deferred_pull_requests: dict[str, datetime] = {}
        # Workers: a database that is away (database.is_transient) is raised, not recorded as a
        # failed run, so the task waits and takes the run over again (tasks.patiently).
        self.raise_transient = False

    # -- entry points -------------------------------------------------------------------------

    def start(self, target: str, slot: str | None, trigger: str) -> int:
        """Claim a run (raises SlotTaken, TargetBusy, UnknownTarget); `execute` does the work."""
        self.settings.target(target)  # a configured target
        with self._lock:
            if target in self._busy:
                raise TargetBusy(target)
            self._busy.add(target)
        try:
            return self.store.claim_run(target, slot, trigger, self.owner)
        except BaseException:
            with self._lock:
                self._busy.discard(target)
            raise

    def run(self, target: str, slot: str | None = None, trigger: str = "cli") -> RunResult | None:
        """Claim and execute; None when another process has this slot."""
        try:
            run_id = self.start(target, slot, trigger)
        except SlotTaken:
            log.info("target %s slot %s: already claimed by another process", target, slot)
            return None
        return self.execute(run_id, target)

    def execute(self, run_id: int, target_name: str) -> RunResult:
        target = self.settings.target(target_name)
        stop = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(run_id, stop), daemon=True)
        beat.start()
        revision: str | None = None
        try:
            try:
                if target.cluster is not None:
                    with gcpause.paused():
                        result, revision = self._audit_cluster(target)
                else:
                    with self._holding(target):
                        root, revision = self._materialise(target)
                        with gcpause.paused():
                            result = self._audit_files(target, root)
            except git.GitError as exc:
                return self._fail(run_id, f"fetching {target.location}: {exc}", revision)
            except Exception as exc:
                if self.raise_transient and database.is_transient(exc):
                    raise
                log.error(
                    "run %s of %s failed: %s: %s",
                    run_id,
                    target_name,
                    type(exc).__name__,
                    exc,
                    exc_info=not isinstance(exc, OSError),  # a traceback only for the unexpected
                )
                return self._fail(run_id, f"{type(exc).__name__}: {exc}", revision)
            outcome = self._outcome(result, revision)
            if outcome is None:
                first = result.errors[0] if result.errors else None
                return self._fail(
                    run_id, f"nothing could be audited: {first}" if first else "nothing to audit", revision
                )
            try:
                summary = self.store.complete_run(run_id, outcome)
            except Exception as exc:  # SQLAlchemy's errors, and the driver's from the bulk writes
                if self.raise_transient and database.is_transient(exc):
                    raise
                return self._fail(
                    run_id, f"storing the results failed: {type(exc).__name__}: {exc}", revision
                )
            if summary.status == "succeeded" and target.github is not None and target.github.after_run:
                self._pull_requests(target)
            return RunResult(run_id, summary.status, summary)
        finally:
            stop.set()
            beat.join(timeout=5)
            with self._lock:
                self._busy.discard(target_name)

    def _pull_requests(self, target: TargetSettings) -> None:
        """Open or update fix PRs after a successful run; a failure here never fails the run."""
        from auditor.gitops.pulls import PullRequestsDeferred, sync_pull_requests

        try:
            for o in sync_pull_requests(target, self.settings, self.store, self.environ, tools=self.tools):
                log.info("target %s: pull request %s %s %s", target.name, o.action, o.branch, o.detail)
            with self._lock:
                self.deferred_pull_requests.pop(target.name, None)
        except PullRequestsDeferred as exc:
            log.warning("target %s: pull requests %s", target.name, exc)
            with self._lock:
                self.deferred_pull_requests[target.name] = exc.until
        except Exception as exc:
            log.error("target %s: pull requests failed: %s: %s", target.name, type(exc).__name__, exc)

    def recover(self, now: datetime | None = None) -> list[int]:
        """Write the failures that could not be written (over `interrupted`: this process knows
        better), retry deferred PR steps that are due, then mark the runs of dead processes (and
        stale ones) `interrupted`."""
        with self._lock:
            pending = dict(self._unrecorded)
        for run_id, (error, revision) in pending.items():
            # Still unwritable: raise, and mark nothing interrupted until it is written.
            self.store.fail_run(run_id, error, revision=revision, over_interrupted=True)
            with self._lock:
                self._unrecorded.pop(run_id, None)
        now = now or self.store.clock()
        with self._lock:
            due = [t for t, until in self.deferred_pull_requests.items() if until <= now]
        for name in due:
            self._pull_requests(self.settings.target(name))
        stale = now - timedelta(seconds=self.settings.service.stale_after_seconds)
        return self.store.recover_interrupted(owner_is_dead, stale)

    # -- steps --------------------------------------------------------------------------------

    def _heartbeat(self, run_id: int, stop: threading.Event) -> None:
        while not stop.wait(self.settings.service.heartbeat_seconds):
            try:
                self.store.heartbeat(run_id)
            except SQLAlchemyError as exc:
                log.warning("heartbeat of run %s failed: %s", run_id, exc)

    def _fail(self, run_id: int, error: str, revision: str | None) -> RunResult:
        log.error("run %s failed: %s", run_id, error)
        try:
            self.store.fail_run(run_id, error, revision=revision, over_interrupted=True)
        except SQLAlchemyError as exc:
            # The database is away too: written by the next `recover` once it is back (or, if
            # this process dies first, the row is marked interrupted).
            log.error("could not record the failure of run %s: %s", run_id, exc)
            with self._lock:
                self._unrecorded[run_id] = (error, revision)
        return RunResult(run_id, "failed", error=error)

    def _holding(self, target: TargetSettings) -> AbstractContextManager[None]:
        if target.git is None:
            return nullcontext()
        return git.checkout_lock(Path(self.settings.service.git_cache_dir), target.git.url)

    def _materialise(self, target: TargetSettings) -> tuple[Path, str | None]:
        if target.git is None:
            root = Path(target.directory)
            if not root.is_dir():
                raise FileNotFoundError(f"directory {target.directory} does not exist")
            return root, None
        credentials = git.credentials(target.git, self.environ)
        checkout = git.fetch(
            target.git.url,
            target.git.branch,
            Path(self.settings.service.git_cache_dir),
            credentials,
            self.settings.service.git_timeout_seconds,
            self.environ,
        )
        return checkout.path, checkout.commit

    def _inside(self, root: Path, relative: str, what: str) -> Path:
        path = (root / relative).resolve()
        if not path.is_relative_to(root.resolve()):
            raise ValueError(f"{what} {relative!r} leads outside the target")
        return path

    def _inputs(self, target: TargetSettings, root: Path) -> tuple[list[Path], PolicyPack]:
        """The target's manifest paths and node files, and its policy pack, inside `root`."""
        paths = [self._inside(root, p, "path") for p in target.paths] or [root]
        nodes = [self._inside(root, n, "node file") for n in target.nodes]
        pack = load_packs([self._inside(root, p, "policy pack") for p in target.policies])
        return [*paths, *nodes], self._with_suppressions(target.name, pack)

    def _with_suppressions(self, target: str, pack: PolicyPack) -> PolicyPack:
        """`pack` with the target's suppressions (set through the API) as waivers."""
        return with_api_waivers(pack, self.store.suppressions(target))

    def _audit_files(self, target: TargetSettings, root: Path) -> ScanResult:
        """A stored run's scan of a Git or directory target: through the snapshot of its paths in
        the cache (only what changed since the last run is audited again) when the tree has no
        Kustomize directory or Helm chart and every path could be listed; else as `analyse`."""
        if self.cache is not None:
            paths, pack = self._inputs(target, root)
            pack_files = [self._inside(root, p, "policy pack") for p in target.policies]
            through = incremental.scan_tree(
                self.cache, self.settings, pack, pack_files, paths, self.store.clock().date()
            )
            if through is not None:
                result, self.last_scan = through
                return result
        return self._analyse(target, root).result

    def _analyse(self, target: TargetSettings, root: Path) -> Analysis:
        paths, pack = self._inputs(target, root)
        inv = load_inventory(paths, self.settings, self.tools, root=root, cache=self.cache)
        today = self.store.clock().date()
        return Analysis(inv, scan(inv, pack, today), None, paths, pack, today)

    def analyse(self, target_name: str) -> Analysis:
        """A fresh scan of a Git or directory target with its inventory, recording nothing: what
        the web pages' group and cluster maps and fix previews draw (FileNotFoundError, GitError,
        ValueError for a cluster target)."""
        target = self.settings.target(target_name)
        if target.cluster is not None:
            raise ValueError(f"target {target_name} is a cluster: its map comes from `auditor cluster`")
        with self._holding(target):
            root, revision = self._materialise(target)
            analysis = self._analyse(target, root)
        return dataclasses.replace(analysis, revision=revision)

    def preview_fix(self, target_name: str, fingerprint: str) -> FixPreview:
        """The fix `auditor fix` would propose for one finding of a Git or directory target, as
        unified diffs against the target's files (recording and committing nothing)."""
        from auditor.remediation.fix import propose, unified_diff

        target = self.settings.target(target_name)
        if target.cluster is not None:
            raise ValueError(f"target {target_name} is a cluster: fixes apply to manifests in Git")
        with self._holding(target):
            root, revision = self._materialise(target)
            paths, pack = self._inputs(target, root)
            today = self.store.clock().date()
            _, proposals = propose(paths, self.settings, pack, today, {fingerprint}, self.tools)
            diffs: list[tuple[str, str]] = []
            reasons: list[str] = []
            for proposal in proposals:
                if not proposal.fixed:
                    reasons.append(proposal.reason)
                for file, (before, after) in sorted(proposal.files.items()):
                    shown = git.relative_to(file, root)
                    diffs.append((shown, unified_diff(shown, before, after)))
                if proposal.reaudit:
                    reasons.append(proposal.reaudit)
        return FixPreview(revision, diffs, reasons)

    def fix_pull_request(self, target_name: str, fingerprint: str) -> list[Any]:
        """Open (or bring up to date) the fix pull request of the workload of one finding, as
        `auditor pr` does for all of them: the store's fix id keeps it one PR however often it is
        asked. Raises ValueError when the target has no git repository with a github section."""
        from auditor.gitops.pulls import sync_pull_requests

        target = self.settings.target(target_name)
        if target.git is None or target.github is None:
            raise ValueError(f"target {target_name} has no git repository with a github section")
        return sync_pull_requests(
            target, self.settings, self.store, self.environ, tools=self.tools, only={fingerprint}
        )

    def _audit_cluster(self, target: TargetSettings) -> tuple[ScanResult, str | None]:
        from auditor.sources import cluster, prometheus

        assert target.cluster is not None
        source = target.cluster
        read = cluster.read_cluster(
            source.context or None,
            source.kubeconfig or None,
            source.in_cluster,
            self.read_options or ReadOptions.from_settings(self.settings),
        )
        pack = self._with_suppressions(target.name, load_packs([]))
        inv = cluster.inventory_from_read(read, self.settings)
        result = scan(inv, pack, self.store.clock().date())
        result.findings = prometheus.enrich(
            result.findings, inv, self.settings, self.environ, result.observation
        )
        return result, read.server_version or None

    @staticmethod
    def _outcome(result: ScanResult, revision: str | None) -> RunOutcome | None:
        if result.audited_objects == 0 and result.errors:
            return None

        def seen(w: Any, expired: bool) -> WaiverSeen:
            waiver = w.waiver
            # A suppression set through the API names who set it; a pack's, its file and name.
            origin = (
                f"api:{waiver.owner}" if waiver.origin == "api" else f"{waiver.origin}:{waiver.source.file}"
            )
            where = f"{origin}:{waiver.name}"[:255] if waiver.origin != "api" else origin[:255]
            return WaiverSeen(w.finding.fingerprint, where, waiver.reason, waiver.expires, expired)

        return RunOutcome(
            "partial" if result.errors or result.not_audited else "succeeded",
            revision,
            result.findings,
            [(w.finding, seen(w, False)) for w in result.waived],
            [seen(e, True) for e in result.expired_waivers],
            [e.to_json() for e in result.errors],
            result.audited_objects,
            result.workload_labels,
        )
