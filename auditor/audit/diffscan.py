"""The impact of a change: `auditor scan PATH… --diff-base REF`.

Which training groups does this pull request break? The scan runs twice — on the merge base of
REF and HEAD, and on the working tree — and reports only what differs: findings the change
*introduces* (in the working tree, not at the merge base) and those it *resolves* (the other way
round). A finding is the same on both sides when its fingerprint is (rule, target, workload
identity and edge: no file name or line in it), so moving a manifest is not a change.

The user's repository is only read: the merge-base tree comes out of `git archive` into a
temporary directory (no worktree, no checkout, no index or ref touched), which is removed after.
`git archive` leaves out submodules and paths marked `export-ignore`.
"""

from __future__ import annotations

import dataclasses
import io
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from auditor.audit.scan import ScanResult
from auditor.errors import AuditFailed, ConfigError
from auditor.model.findings import Finding, ObjectRef
from auditor.model.source import NotAudited

GIT_TIMEOUT_SECONDS = 120.0
# An archive bigger than this is refused (a repository of manifests is far smaller).
MAX_ARCHIVE_BYTES = 2 * 1024 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class DiffBase:
    ref: str  # as the user gave it
    merge_base: str  # commit id
    head: str  # commit id of HEAD (the working tree is audited, changes included)
    repository: Path


@dataclass
class DiffResult:
    """`head` is the working tree's scan with only the introduced findings; `resolved` are the
    merge base's findings the change removes; `base` is the merge base's scan (errors, notes)."""

    head: ScanResult
    base: ScanResult
    resolved: list[Finding]
    where: DiffBase
    unchanged: int

    @property
    def complete(self) -> bool:
        return self.head.complete and self.base.complete


def _git(repo: Path, *args: str) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise ConfigError("--diff-base", 0, "--diff-base", "git is not installed") from None
    except subprocess.TimeoutExpired:
        raise AuditFailed(f"git {' '.join(args)} took over {GIT_TIMEOUT_SECONDS:.0f}s") from None
    if done.returncode != 0:
        detail = " ".join(done.stderr.split())[:400] or f"exit status {done.returncode}"
        raise ConfigError("--diff-base", 0, "--diff-base", f"git {args[0]}: {detail}")
    return done.stdout


def repository_of(paths: Sequence[Path]) -> Path:
    """The git work tree holding every path (they must share one)."""
    first = paths[0].resolve()
    start = first if first.is_dir() else first.parent
    top = Path(_git(start, "rev-parse", "--show-toplevel").strip()).resolve()
    for p in paths:
        if not p.resolve().is_relative_to(top):
            raise ConfigError(str(p), 0, "--diff-base", f"not inside the git repository {top}")
    return top


def resolve_base(repo: Path, ref: str) -> DiffBase:
    if ref.startswith("-"):
        raise ConfigError("--diff-base", 0, "--diff-base", f"not a git revision: {ref!r}")
    try:
        base = _git(repo, "merge-base", "--end-of-options", ref, "HEAD").strip()
    except ConfigError as exc:
        raise ConfigError(
            "--diff-base", 0, "--diff-base", f"no merge base of {ref!r} and HEAD ({exc.message})"
        ) from None
    head = _git(repo, "rev-parse", "--verify", "HEAD^{commit}").strip()
    return DiffBase(ref, base, head, repo)


@contextmanager
def base_tree(where: DiffBase) -> Iterator[Path]:
    """The merge-base tree in a temporary directory (`git archive`, extracted with the tarfile
    `data` filter: no absolute paths, links out of the tree, devices or set-uid bits)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(where.repository), "archive", "--format=tar", where.merge_base],
            capture_output=True,
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise AuditFailed(f"git archive {where.merge_base} took over {GIT_TIMEOUT_SECONDS:.0f}s") from None
    if done.returncode != 0:
        detail = " ".join(done.stderr.decode(errors="replace").split())[:400]
        raise AuditFailed(f"git archive {where.merge_base}: {detail}")
    if len(done.stdout) > MAX_ARCHIVE_BYTES:
        raise AuditFailed(f"the tree of {where.merge_base} is over {MAX_ARCHIVE_BYTES} bytes")
    with tempfile.TemporaryDirectory(prefix="auditor-diff-base-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(done.stdout), mode="r:") as archive:
            archive.extractall(tmp, filter="data")
        yield Path(tmp)


def _mapper(pairs: Sequence[tuple[str, str]]) -> Callable[[str], str]:
    """Rename files of the base tree (a temporary directory) to the names the user gave."""
    ordered = sorted(pairs, key=lambda p: -len(p[0]))

    def rename(name: str) -> str:
        for temp, given in ordered:
            if name == temp or name.startswith(temp + "/"):
                return given + name[len(temp) :]
        return name

    return rename


def _renamed(result: ScanResult, rename: Callable[[str], str]) -> ScanResult:
    def ref(r: ObjectRef) -> ObjectRef:
        return dataclasses.replace(r, file=rename(r.file))

    def finding(f: Finding) -> Finding:
        policies = tuple(dataclasses.replace(p, file=rename(p.file)) for p in f.policies)
        return dataclasses.replace(f, workload=ref(f.workload), policies=policies)

    return dataclasses.replace(
        result,
        findings=[finding(f) for f in result.findings],
        errors=[dataclasses.replace(e, file=rename(e.file)) for e in result.errors],
        not_audited=[dataclasses.replace(n, path=rename(n.path)) for n in result.not_audited],
    )


def diff_scan(
    paths: Sequence[Path],
    ref: str,
    audit: Callable[[Sequence[Path], Path], ScanResult],
) -> DiffResult:
    """Audit the merge base of `ref` and HEAD and the working tree with `audit(paths, root)`;
    return what the change introduces and resolves."""
    repo = repository_of(paths)
    where = resolve_base(repo, ref)
    head = audit(paths, repo)
    with base_tree(where) as tmp:
        base_paths: list[Path] = []
        pairs: list[tuple[str, str]] = []
        for p in paths:
            inside = tmp / p.resolve().relative_to(repo)
            if inside.exists():  # a path the change adds has nothing at the base
                base_paths.append(inside)
                pairs.append((str(inside), str(p)))
        base = _renamed(audit(base_paths, tmp), _mapper(pairs)) if base_paths else ScanResult([], [])
    return compare(head, base, where)


def compare(head: ScanResult, base: ScanResult, where: DiffBase) -> DiffResult:
    before = {f.fingerprint for f in base.findings}
    after = {f.fingerprint for f in head.findings}
    introduced = [f for f in head.findings if f.fingerprint not in before]
    resolved = [f for f in base.findings if f.fingerprint not in after]
    notes = [
        f"diff-base: {len(introduced)} finding(s) introduced and {len(resolved)} resolved "
        f"against {where.ref} (merge base {where.merge_base[:12]}); "
        f"{len(after & before)} unchanged finding(s) not reported",
        *head.notes,
    ]
    not_audited = [*head.not_audited, *(_at_base(n) for n in base.not_audited)]
    return DiffResult(
        dataclasses.replace(head, findings=introduced, notes=notes, not_audited=not_audited),
        base,
        resolved,
        where,
        len(after & before),
    )


def _at_base(n: NotAudited) -> NotAudited:
    return dataclasses.replace(n, reason=f"at the merge base: {n.reason}")


__all__ = ("DiffBase", "DiffResult", "compare", "diff_scan")
