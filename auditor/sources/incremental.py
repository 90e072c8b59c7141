"""Incremental audits: a re-scan of a tree audits again only the units its changes reach.

`TreeAuditor.scan` audits the files under some paths as `auditor scan` does (load_inventory +
scan), and keeps in the cache (auditor/cache.py: signed entries, atomic writes, bounded size) a
*snapshot* of what it saw: each file's stat and SHA-256 and its unit (auditor/sources/units.py),
each unit's loaded documents, what it reads and contributes to the whole tree, and its fragment of
the audit (auditor/audit/fragments.py). The snapshot is found again by the resolved paths
scanned, the auditor's code, the settings and the policy packs. The next scan:

1. stats every file: one whose size, times, inode and device are those recorded (and that was
   not modified within `RACY_NS` of the recording, as git does for its index) keeps its recorded
   digest; any other is read and hashed, and parsed if its digest changed. The tree is not even
   walked while the recorded walk holds (every directory's stat, or its entries, as recorded:
   TreeAuditor._quick), and the stats are compared in C where auditor/_faststat.c was built;
2. when no file changed, puts the report together from the fragments;
3. when only files of namespaces changed (not the cluster part: nodes, namespaces, cluster-wide
   policies, ...), audits the units that depend on those namespaces (units.dependencies) with the
   cluster part and what they read — their documents read back from the cache, changed files as
   parsed now — and joins their new fragments to the others';
4. otherwise (the cluster part changed, or the CNI or per-replica comparisons of the whole tree,
   a changed file has errors, an entry was evicted, ...) audits everything, documents of
   unchanged files read back from the cache.

Every path gives the report a cold scan (`--no-cache`) gives; tests/test_incremental.py checks it
after every kind of change. Trees with Kustomize directories or Helm charts are audited as before
(load_inventory; their renders are never cached), and so is an audit that cannot be cut into
fragments (a partial one: it is simply not recorded).
"""

from __future__ import annotations

import hashlib
import operator
import os
import pickle
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date
from functools import cached_property, partial
from itertools import chain, compress, groupby
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import NamedTuple, cast

from auditor import parallel, yamlio
from auditor.audit import scan as scanning
from auditor.audit.fragments import Fragment, Unattributable, Whole, assemble, kept_json, partition
from auditor.audit.scan import ScanResult
from auditor.cache import DocumentCache
from auditor.inventory import Inventory
from auditor.model.pickling import by_fields
from auditor.model.source import LoadError, NotAudited, SourceRef
from auditor.progress import Progress, silent
from auditor.reports import json_report
from auditor.resources import policies_dir
from auditor.rules.packs import PolicyPack
from auditor.settings.config import AuditSettings, Settings
from auditor.sources import units
from auditor.sources.manifests import load_inventory, renders
from auditor.sources.objects import NOWHERE, Elsewhere, build_inventory

try:
    from auditor._faststat import changes as _changes_in_c

    STATS_IN_C = True
except ImportError:  # built without a C compiler: os.stat does the same
    STATS_IN_C = False

SNAPSHOT_FORMAT = "8"
"""Bump when what a snapshot, a unit's documents or a fragment holds changes shape."""
READ_ONCE = "-"
"""UnitRecord.docs of a namespace unit whose documents one incremental audit needed (its own
file changed, or a unit it depends on did): they are recorded the second time they are needed.
Recording a unit's documents costs more than parsing them again once (pickling them was 14 ms
of a 0.37 s re-scan, parsing 13 ms; reading them back 5 ms), and most units changed once are
not changed again soon: a unit pays for its record only when it has shown it will be read."""
RACY_NS = 2_000_000_000
"""A file modified less than this before its stat was recorded is read again on the next scan:
a change within the file system's timestamp granularity would not show in its stat."""

Stat = tuple[int, int, int, int, int]  # size, mtime_ns, ctime_ns, inode, device
Loaded = tuple[list[yamlio.Document], list[LoadError]]


class FileRecord(NamedTuple):
    """One file as the snapshot saw it (a plain tuple: a snapshot holds one per file of a tree,
    and is read and written on every scan)."""

    display: str
    real: str
    stat: Stat
    digest: str  # SHA-256 of its bytes
    unit: str  # "?" until it is parsed
    documents: int  # how many documents it holds (Inventory.file_order lists those first)


@by_fields
@dataclass(frozen=True, slots=True)
class UnitRecord:
    # Cache key of its files' documents (display → (digest, documents, errors)); "" when never
    # needed, READ_ONCE when an incremental audit read them once and did not record them.
    docs: str
    fragment: str  # cache key of its Fragment
    reads: units.Reads
    facts: Elsewhere  # what it contributes to the inventories of the tree's other parts


Columns = tuple[str, str, tuple[int, ...], str, str, tuple[int, ...]]
"""A snapshot's file records by column: display names, real paths, digests and units, each
joined by NUL (which no path holds); the stats' five integers, one after the other; document
counts. Made and read back by C-level joins, splits and zips: 17,000 records pickled as tuples,
or rebuilt one by one in Python, took a tenth of a re-scan."""

_FIELDS = [itemgetter(i) for i in range(6)]  # a FileRecord's fields by position
# A FileRecord from a row of its six fields: FileRecord._make without its Python-level call per
# row (the rows come from zips of the columns, six fields each).
_RECORD = partial(tuple.__new__, FileRecord)
_FILE_STAT = attrgetter("st_size", "st_mtime_ns", "st_ctime_ns", "st_ino", "st_dev")  # → Stat
_FILE_MTIME = itemgetter(1)  # of a Stat
_DIR_STAMP = attrgetter("st_mtime_ns", "st_ctime_ns", "st_ino", "st_dev")  # → a Listing's stamp
_DIR_MTIME = itemgetter(0)  # of a Listing's stamp


def stat_changes(
    paths: list[str], recorded: Sequence[tuple[int, ...]], trusted: int, directories: bool = False
) -> dict[int, tuple[int, ...]] | None:
    """{position: stat now} for each path whose stat is not its `recorded` one, or whose mtime is
    `trusted` or later (too recent to trust); None when one cannot be stat'ed. A file's stat is a
    Stat, a directory's (`directories`) a Listing's stamp: os.stat's values, symlinks followed.
    In C where auditor/_faststat.c was built (a stat_result per path, and comparing in Python,
    were a third of the time), else os.stat."""
    if STATS_IN_C:
        return _changes_in_c(paths, list(recorded), trusted, directories)
    getter, mtime = (_DIR_STAMP, _DIR_MTIME) if directories else (_FILE_STAT, _FILE_MTIME)
    try:
        now: list[tuple[int, ...]] = list(map(getter, map(os.stat, paths)))
    except OSError:
        return None
    changed = set(compress(range(len(now)), map(operator.ne, now, recorded)))
    changed.update(compress(range(len(now)), map(trusted.__le__, map(mtime, now))))
    return {i: now[i] for i in sorted(changed)}


def _columns(files: Sequence[FileRecord]) -> Columns:
    display, real, stat, digest, unit, documents = _FIELDS
    return (
        "\0".join(map(display, files)),
        "\0".join(map(real, files)),
        tuple(chain.from_iterable(map(stat, files))),
        "\0".join(map(digest, files)),
        "\0".join(map(unit, files)),
        tuple(map(documents, files)),
    )


@by_fields
@dataclass(frozen=True, slots=True)
class Files:
    """The bulk of a snapshot, kept in an entry of its own (addressed by its content) that
    snapshots share: the files' records and the directories' listings. A re-scan that changed a
    few files writes a new small Snapshot patching this one instead of 5 MB of records again."""

    columns: Columns  # the files' records, in the order read
    listings: Mapping[str, yamlio.Listing]  # the directories' listings (yamlio.Listings)


@by_fields
@dataclass(frozen=True, slots=True)
class Snapshot:
    files: str  # cache key of its Files
    patch: tuple[tuple[int, FileRecord], ...]  # records that replace those of Files, by position
    listings_patch: Mapping[str, yamlio.Listing]  # listings that replace those of Files
    units: Mapping[str, UnitRecord]
    whole: Whole
    recorded_ns: int  # the file system's time when the files were stat'ed
    # Every directory of the walk that found the files was recorded (yamlio.Listings.visited),
    # and the paths scanned were all directories: while their listings stay trusted, the files
    # are those recorded, in the order recorded (TreeAuditor._quick).
    walked: bool = False


PATCH_MAX = 512
"""The most records a snapshot patches: beyond, its Files entry is written anew."""


@dataclass
class Recorded:
    """A snapshot read back whole: its records and listings, and those of its Files entry.

    The records are kept by column (patched: `displays`, `reals`, `stats`, `documents`) and made
    into FileRecords only when a scan needs them (`files`): a re-scan that finds no file
    changed never does (17,000 records were a twentieth of it)."""

    snapshot: Snapshot
    base_columns: Columns
    listings: dict[str, yamlio.Listing]
    base_listings: Mapping[str, yamlio.Listing]
    displays: list[str]
    reals: list[str]
    stats: list[Stat]
    documents: list[int]

    @cached_property
    def files(self) -> list[FileRecord]:
        """The snapshot's records: its Files entry's, patched (from the columns already split)."""
        _, _, _, digests, units_of, _ = self.base_columns
        digest_of = digests.split("\0") if self.documents else []
        unit_of = units_of.split("\0") if self.documents else []
        for position, record in self.snapshot.patch:
            digest_of[position], unit_of[position] = record.digest, record.unit
        rows = zip(self.displays, self.reals, self.stats, digest_of, unit_of, self.documents, strict=True)
        return list(map(_RECORD, rows))


_ALLOWED: Mapping[str, frozenset[str]] = {
    "auditor.yamlio": frozenset({"YamlMap", "YamlSeq"}),
    "auditor.model.source": frozenset({"SourceRef", "LoadError"}),
    "auditor.model.findings": frozenset({"Finding", "ObjectRef", "EdgeRef", "PolicyMention"}),
    "auditor.model.objects": frozenset({"WorkloadRef", "ReplicaTest"}),
    "auditor.rules.groups": frozenset({"GroupEntry", "GroupRole", "GroupEdge"}),
    "auditor.rules.packs": frozenset({"Waiver", "WorkloadDoc"}),
    "auditor.audit.fragments": frozenset({"Fragment", "Whole"}),
    "auditor.sources.units": frozenset({"Reads"}),
    "auditor.sources.objects": frozenset({"Elsewhere"}),
    "auditor.sources.incremental": frozenset({"UnitRecord", "Snapshot", "Files", "FileRecord"}),
    "datetime": frozenset({"date"}),
}
"""The classes a snapshot, a unit's documents or a fragment may hold (the cache's unpickler
refuses any other)."""


@dataclass
class ScanStats:
    """What a scan through the snapshot did."""

    mode: str = ""  # "unchanged", "incremental" or "full"
    why_full: str = ""
    files_read: int = 0  # read and hashed (the others kept their recorded digest)
    files_parsed: int = 0
    units: int = 0
    units_audited: int = 0  # whose fragment was made anew
    records_patched: int = -1  # file records the new snapshot patches (-1: its Files entry is new)
    walked: bool = True  # the tree was walked (False: the recorded walk still held, TreeAuditor._quick)


_CODE: dict[str, str] = {}


def code_digest() -> str:
    """Digest of the auditor's code and shipped policy packs (once per process): a snapshot
    another version made is never found."""
    if not _CODE:
        _CODE["digest"] = tree_stamp((Path(__file__).resolve().parents[1], policies_dir()))
    return _CODE["digest"]


def tree_stamp(roots: Iterable[Path]) -> str:
    """Digest of the source and data files under `roots` by path and stat (size, mtime, ctime,
    inode), as Python judges bytecode current by its source's mtime and size — ctime and inode
    change with any write, rename or copy, so this is the stricter test — instead of reading and
    hashing 2 MB of source on every start."""
    digest = hashlib.sha256()
    for root in roots:
        for where, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(names):
                if name.endswith((".py", ".yaml", ".yml", ".json")):
                    path = Path(where, name)
                    st = path.stat()
                    stamp = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
                    digest.update(f"{path.relative_to(root)}\0{stamp}\0".encode())
    return digest.hexdigest()


def eligible(files: Sequence[tuple[str, str]]) -> bool:
    """Whether a tree of these files can be audited through a snapshot: no Kustomize directory
    and no Helm chart (their renders are not cached)."""
    return not renders(files)


def scan_tree(
    cache: DocumentCache,
    settings: Settings,
    pack: PolicyPack,
    pack_files: Sequence[Path],
    paths: Sequence[Path],
    today: date | None,
    jobs: int | None = None,
    progress: Progress = silent,
) -> tuple[ScanResult, ScanStats] | None:
    """The scan of `paths` through their snapshot, and what it did; None for a tree that is not
    audited this way (a path that cannot be listed, a Kustomize directory or Helm chart): the
    caller scans it through load_inventory."""
    tree = TreeAuditor(cache, settings, pack, pack_files, jobs, progress)
    result = tree.scan(paths, today)
    return None if result is None else (result, tree.stats)


class TreeAuditor:
    """Audits trees of manifest files through snapshots in `cache` (see the module docstring)."""

    def __init__(
        self,
        cache: DocumentCache,
        settings: Settings,
        pack: PolicyPack,
        pack_files: Sequence[Path] = (),
        jobs: int | None = None,
        progress: Progress = silent,
    ) -> None:
        self.cache = cache
        self.settings = settings
        self.pack = pack
        self.jobs = jobs
        self.progress = progress
        self.limits = yamlio.YamlLimits()
        audit_settings = AuditSettings.of(settings)
        self.default_namespace = audit_settings.kubernetes.default_namespace
        self.stats = ScanStats()
        identity = hashlib.sha256()
        for part in (
            SNAPSHOT_FORMAT,
            code_digest(),
            yamlio.versions(),
            repr(audit_settings),
            repr(self.limits),
            _packs_digest(pack_files),
        ):
            identity.update(part.encode("utf-8", "surrogateescape") + b"\0")
        self._identity = identity.hexdigest()
        self._listings = yamlio.Listings({}, 0)  # the directory listings of the scan under way
        self._recorded: Recorded | None = None  # the snapshot of the scan under way, as read
        self._walked = False  # see Snapshot.walked, for the scan under way

    def _key(self, kind: str, *parts: str) -> str:
        digest = hashlib.sha256(f"{kind}\0{self._identity}".encode())
        for part in parts:
            digest.update(b"\0" + part.encode("utf-8", "surrogateescape"))
        return digest.hexdigest()

    def _get(self, key: str) -> object | None:
        return self.cache.get_value(key, _ALLOWED)

    # --- the scan ----------------------------------------------------------------------------

    def scan(self, paths: Sequence[Path], today: date | None) -> ScanResult | None:
        """The scan of the files under `paths` through the snapshot of those paths; None when
        they are not audited this way (a path that cannot be listed, a Kustomize directory or
        Helm chart): the caller scans them through load_inventory."""
        self.stats = ScanStats()
        # The paths as given (they make the file names reports show) and where they lead.
        key = self._key("snapshot", *(f"{p}\0{p.resolve()}" for p in paths))
        ready = self.cache.ready()
        now = self._disk_time() if ready else 0
        self._recorded = self._read_snapshot(key) if ready else None
        snapshot = self._recorded.snapshot if self._recorded is not None else None
        trusted = snapshot.recorded_ns - RACY_NS if snapshot is not None and snapshot.recorded_ns else 0
        self._listings = yamlio.Listings(
            self._recorded.listings if self._recorded is not None else {}, trusted
        )
        quick = self._quick(self._recorded, trusted) if self._recorded is not None else None
        removed: list[FileRecord] = []
        if quick is not None and snapshot is not None and self._recorded is not None:
            # The files recorded, none added or removed (see _quick).
            self._walked, self.stats.walked = True, False
            changed, contents = quick
            if not changed:
                return self._unchanged(key, snapshot, self._recorded, None, today, now)
            records = list(self._recorded.files)
            old = {records[i].display: records[i] for i in changed}
            for position, record in changed.items():
                records[position] = record
            at = sorted(i for i, r in changed.items() if r.display in contents)
        else:
            files, problems = yamlio.discover(paths, listings=self._listings)
            if problems or not eligible(files):
                return None
            self._walked = self._listings.visited == len(self._listings.found) and all(
                p.is_dir() for p in paths
            )
            recorded = self._recorded.files if self._recorded is not None else []
            old = dict(zip(map(_FIELDS[0], recorded), recorded, strict=True))
            current = self._current(files, old, snapshot.recorded_ns if snapshot is not None else 0)
            if current is None or not ready:
                self.stats.mode, self.stats.why_full = "full", "a file could not be read, or no cache"
                return self._cold(paths, today)
            records, contents = current
            if snapshot is None or self._recorded is None:
                return self._full(key, records, contents, None, today, now, "no snapshot of these paths")
            present = {r.display for r in records}
            removed = [r for d, r in old.items() if d not in present]
            at = [i for i, r in enumerate(records) if r.display in contents]
        if not contents and not removed:
            return self._unchanged(key, snapshot, self._recorded, records, today, now)
        # `at`: the positions of the changed files (those in `contents`), in order.
        parsed = self._load([records[i] for i in at], contents)
        if any(errors for _, errors in parsed.values()):
            return self._full(
                key, records, contents, snapshot, today, now, "a changed file has errors", parsed
            )
        unit_of = units.file_units(
            [d for docs, _ in parsed.values() for d in docs], list(parsed), self.default_namespace
        )
        touched = {unit_of[d] for d in parsed} | {old[d].unit for d in parsed if d in old}
        touched |= {r.unit for r in removed}
        if units.CLUSTER in touched:
            return self._full(
                key, records, contents, snapshot, today, now, "the cluster part changed", parsed
            )
        for i in at:
            r = records[i]
            records[i] = r._replace(unit=unit_of[r.display], documents=len(parsed[r.display][0]))
        return self._incremental(key, snapshot, records, contents, parsed, touched, today, now)

    def _read_snapshot(self, key: str) -> Recorded | None:
        """The snapshot recorded under `key` with its Files entry patched; None when either is
        absent (evicted: the snapshot is then as good as none)."""
        snapshot = self._get(key)
        if not isinstance(snapshot, Snapshot):
            return None
        base = self._get(snapshot.files)
        if not isinstance(base, Files):
            return None
        displays, reals, stats, digests, units_of, documents = base.columns
        count = len(documents)
        if len(stats) != 5 * count or any(c.count("\0") != count - 1 for c in (digests, units_of) if count):
            return None  # damaged
        columns = (
            displays.split("\0") if count else [],
            reals.split("\0") if count else [],
            list(zip(*[iter(stats)] * 5, strict=True)),
            list(documents),
        )
        if any(len(column) != count for column in columns):
            return None  # damaged
        display_of, real_of, stat_of, documents_of = columns
        for position, record in snapshot.patch:
            if not 0 <= position < count or display_of[position] != record.display:
                return None  # not a patch of these records
            real_of[position], stat_of[position] = record.real, record.stat
            documents_of[position] = record.documents
        listings = {**base.listings, **snapshot.listings_patch}
        return Recorded(snapshot, base.columns, listings, base.listings, *columns)

    def _disk_time(self) -> int:
        """The file system's clock now: the time stamp of a file written in the cache directory
        (0 when it cannot be written: then no recorded stat is trusted)."""
        marker = self.cache.directory / ".clock"
        try:
            marker.write_bytes(b"")
            return marker.stat().st_mtime_ns
        except OSError:
            return 0

    def _current(
        self, files: Sequence[tuple[str, str]], known: Mapping[str, FileRecord], recorded_ns: int
    ) -> tuple[list[FileRecord], dict[str, bytes]] | None:
        """Each file's record now (unit "?" for a changed one), and the bytes of the changed ones;
        None when a file cannot be read. `known`: the records of the snapshot, made at
        `recorded_ns` (0: none)."""
        trusted = recorded_ns - RACY_NS if recorded_ns else 0
        # Each file's record when it is the same file (same display name and real path), whose
        # stat `stat_changes` compares with the one now; () for a file new here: never equal.
        olds = [
            old if (old := known.get(display)) is not None and old.real == where else None
            for where, display in files
        ]
        changed = stat_changes(
            [where for where, _ in files], [() if old is None else old.stat for old in olds], trusted
        )
        if changed is None:
            return None
        records = cast(list[FileRecord], olds)  # the unchanged ones' (not None: their stats matched)
        contents: dict[str, bytes] = {}
        for i in sorted(changed):
            where, display = files[i]
            checked = self._check(display, where, cast(Stat, changed[i]), olds[i], contents)
            if checked is None:
                return None
            records[i] = checked
        return records, contents

    def _check(
        self, display: str, where: str, stat: Stat, old: FileRecord | None, contents: dict[str, bytes]
    ) -> FileRecord | None:
        """The record of a file whose stat is not the recorded one (or too recent to trust): read
        and hashed; its bytes put in `contents` when they are not those recorded in `old` (None:
        a file new at this path). None when it cannot be read."""
        try:
            raw = yamlio.read_capped(where, self.limits.max_file_bytes, stat[0])
        except OSError:
            return None
        self.stats.files_read += 1
        digest = hashlib.sha256(raw).hexdigest()
        if old is not None and old.digest == digest:
            return old._replace(stat=stat)
        contents[display] = raw
        return FileRecord(display, where, stat, digest, "?", 0)

    def _quick(
        self, recorded: Recorded, trusted: int
    ) -> tuple[dict[int, FileRecord], dict[str, bytes]] | None:
        """What _current finds, without walking the tree: the records that changed (by position)
        and the bytes of the changed files. The walk that found the recorded files went through
        recorded directories only (Snapshot.walked); when each of them still has its recorded
        stat, older than `trusted`, or is listed again (yamlio.relist: its stat changed when a
        file in it was replaced) with the same entries, a walk now would yield exactly the files
        recorded, in their order (yamlio.Listings). Every directory's and file's stat is compared
        with the recorded one by `stat_changes` (in C where it was built); only those that differ,
        or are too recent to trust, are looked at one by one. None when this cannot tell (a
        directory's entries changed, something cannot be stat'ed): the caller walks the tree."""
        if not recorded.snapshot.walked or trusted <= 0 or not recorded.listings:
            return None
        listings = recorded.listings
        directories = list(listings)
        moved = stat_changes(directories, [listing[0] for listing in listings.values()], trusted, True)
        if moved is None:
            return None
        relisted: dict[str, yamlio.Listing] = {}
        for i in moved:
            fresh = yamlio.relist(directories[i])
            if fresh is None or fresh[1] != listings[directories[i]][1]:
                return None  # its entries changed: the walk would find other files
            relisted[directories[i]] = fresh
        changed = stat_changes(recorded.reals, recorded.stats, trusted)
        if changed is None:
            return None
        out: dict[int, FileRecord] = {}
        contents: dict[str, bytes] = {}
        if changed:
            files = recorded.files
            read = self.stats.files_read
            for position in sorted(changed):
                old = files[position]
                checked = self._check(old.display, old.real, cast(Stat, changed[position]), old, contents)
                if checked is None:
                    self.stats.files_read = read  # the walk reads them again
                    return None
                out[position] = checked
        self._listings.found = {**listings, **relisted}
        return out, contents

    def _load(self, records: Sequence[FileRecord], contents: Mapping[str, bytes] = {}) -> dict[str, Loaded]:
        """The files loaded: from the bytes in `contents` when they are there (read to hash them),
        else from disk (unchanged files whose documents were not recorded; one that cannot be
        read now is an error entry, as in any scan); in worker processes when there is much to
        parse and CPUs to spare (yamlio.load_files decides)."""
        self.stats.files_parsed += len(records)
        size = sum(r.stat[0] for r in records)
        if len(records) > 1 and size >= yamlio.PARALLEL_MIN_BYTES and parallel.workers_for(self.jobs) > 1:
            loaded = yamlio.load_files([(Path(r.real), r.display) for r in records], self.limits, self.jobs)
            return {r.display: result for r, result in zip(records, loaded, strict=True)}
        # A file over the size limit is loaded as load_file loads it (its error names its size).
        limit = self.limits.max_file_bytes
        out: dict[str, Loaded] = {}
        for r in records:
            raw = contents.get(r.display)
            if raw is not None and len(raw) <= limit:
                out[r.display] = yamlio.load_bytes(raw, r.display, self.limits)
            else:
                out[r.display] = yamlio.load_file(Path(r.real), r.display, self.limits)
        return out

    def _read_back(self, record: UnitRecord) -> dict[str, tuple[str, Loaded]]:
        """A unit's recorded documents: display → (digest, loaded); empty when not recorded (the
        cluster part's are, by a full audit; a namespace's the second time incremental audits
        need them: READ_ONCE) or evicted."""
        if record.docs in ("", READ_ONCE):
            return {}
        found = self._get(record.docs)
        if not isinstance(found, dict):
            return {}
        out: dict[str, tuple[str, Loaded]] = {}
        for display, (digest, docs, errors) in found.items():
            out[display] = (
                digest,
                (
                    [yamlio.Document(data, SourceRef(display, line, index)) for data, line, index in docs],
                    [LoadError(display, line, message) for line, message in errors],
                ),
            )
        return out

    def _record_docs(self, unit: str, files: Iterable[tuple[FileRecord, Loaded]]) -> str:
        value = {
            r.display: (
                r.digest,
                [(d.data, d.source.line, d.source.document) for d in docs],
                [(e.line, e.message) for e in errors],
            )
            for r, (docs, errors) in files
        }
        key = self._key("docs", unit, *(f"{d}\0{v[0]}" for d, v in value.items()))
        if not self.cache.has(key):
            self.cache.put_value(key, value)
        return key

    def _record_fragment(self, unit: str, fragment: Fragment) -> str:
        """Record a unit's fragment, with the JSON report's text of its groups and findings (written
        once here: most of the report, kept for the scans that reuse the fragment)."""
        fragment.group_heads = json_report.group_heads(fragment.group_entries)
        fragment.finding_json = [json_report.finding_text(f) for f in fragment.candidates]
        payload = pickle.dumps(fragment, protocol=pickle.HIGHEST_PROTOCOL)
        key = self._key("fragment", unit, hashlib.sha256(payload).hexdigest())
        if not self.cache.has(key):
            self.cache.put_value(key, fragment)
        return key

    def _fragment(self, record: UnitRecord) -> Fragment | None:
        found = self._get(record.fragment)
        return found if isinstance(found, Fragment) else None

    def _save(
        self, key: str, files: Sequence[FileRecord], units: Mapping[str, UnitRecord], whole: Whole, now: int
    ) -> None:
        """Record the snapshot: as a patch of the Files entry the last one used when the same files
        in the same order were listed, with at most PATCH_MAX records changed; else with a new
        Files entry."""
        listings = self._listings.found
        patched = self._patch(files, listings)
        if patched is None:
            value = Files(_columns(files), listings)
            files_key = self._key("files", hashlib.sha256(pickle.dumps(value, protocol=5)).hexdigest())
            if not self.cache.has(files_key):
                self.cache.put_value(files_key, value)
            patched = files_key, (), {}
        else:
            self.stats.records_patched = len(patched[1])
        self.cache.put_value(key, Snapshot(*patched, units, whole, now, self._walked))
        self.cache.finish()

    def _patch(
        self, files: Sequence[FileRecord], listings: Mapping[str, yamlio.Listing]
    ) -> tuple[str, tuple[tuple[int, FileRecord], ...], dict[str, yamlio.Listing]] | None:
        """The last snapshot's Files entry, with the records and listings that now replace its
        own; None when it does not list the same files and directories, or too much changed."""
        last = self._recorded
        if (
            last is None
            or len(last.displays) != len(files)
            or listings.keys() != last.base_listings.keys()
            or not self.cache.has(last.snapshot.files)
        ):
            return None
        # Where they differ from the last snapshot's records, and where those differ from its
        # Files entry's (its patch; compared with the snapshot's own records, which are made
        # anyway, instead of making the Files entry's too).
        changed = set(compress(range(len(files)), map(operator.ne, files, last.files)))
        changed.update(i for i, _ in last.snapshot.patch)
        if len(changed) > PATCH_MAX or any(files[i].display != last.displays[i] for i in changed):
            return None
        patch = tuple((i, files[i]) for i in sorted(changed))
        return last.snapshot.files, patch, {d: v for d, v in listings.items() if last.base_listings[d] != v}

    # --- whole audits ------------------------------------------------------------------------

    def _cold(self, paths: Sequence[Path], today: date | None) -> ScanResult:
        """What `auditor scan --no-cache` does, nothing recorded (a file vanished, no usable cache)."""
        inv = load_inventory(paths, self.settings, jobs=self.jobs)
        return scanning.finish(scanning.audit(inv, self.pack, self.progress), self.pack, today)

    def _inventory(
        self,
        names: Sequence[str],
        loaded: Sequence[Loaded],
        elsewhere: Elsewhere = NOWHERE,
    ) -> Inventory:
        """build_inventory of loaded files, with what collect() adds: files with errors are not
        audited (the audit is partial)."""
        documents = [d for docs, _ in loaded for d in docs]
        errors = [e for _, errs in loaded for e in errs]
        inv = build_inventory(documents, self.settings, errors, elsewhere)
        inv.not_audited = sorted(
            {NotAudited(name, errs[0].message) for name, (_, errs) in zip(names, loaded, strict=True) if errs}
        )
        return inv

    def _full(
        self,
        key: str,
        records: list[FileRecord],
        contents: Mapping[str, bytes],
        snapshot: Snapshot | None,
        today: date | None,
        now: int,
        why: str,
        parsed: dict[str, Loaded] | None = None,
    ) -> ScanResult:
        """Every unit audited (documents of unchanged files read back from the snapshot), and a
        new snapshot recorded when the audit can be cut into fragments."""
        self.stats.mode, self.stats.why_full = "full", why
        loaded = dict(parsed or {})
        digests = {r.display: r.digest for r in records}
        for record in snapshot.units.values() if snapshot is not None else ():
            for display, (digest, found) in self._read_back(record).items():
                if display not in loaded and digests.get(display) == digest:
                    loaded[display] = found
        # The rest: changed files from the bytes in hand; unchanged ones whose documents were not
        # recorded, or were evicted, from disk.
        loaded.update(self._load([r for r in records if r.display not in loaded], contents))
        ordered = [loaded[r.display] for r in records]
        inv = self._inventory([r.display for r in records], ordered)
        audited = scanning.audit(inv, self.pack, self.progress)
        documents = [d for docs, _ in ordered for d in docs]
        unit_of = units.file_units(documents, [r.display for r in records], self.default_namespace)
        try:
            parts, whole = partition(audited, unit_of)
        except Unattributable:
            # Nothing recorded: the next scan is a full one too.
            return scanning.finish(audited, self.pack, today)
        facts = units.unit_facts(documents, inv, unit_of)
        reads = units.unit_reads(inv, unit_of)
        recorded: list[FileRecord] = []
        members: dict[str, list[tuple[FileRecord, Loaded]]] = {}
        for r, result_of in zip(records, ordered, strict=True):
            rec = r._replace(unit=unit_of[r.display], documents=len(result_of[0]))
            recorded.append(rec)
            members.setdefault(rec.unit, []).append((rec, result_of))
        # Every incremental audit reads the cluster part's documents: recorded now. A namespace's
        # are recorded when incremental audits have needed them twice (READ_ONCE: most are never
        # read again, and pickling every document was a tenth of this audit).
        unit_records = {
            unit: UnitRecord(
                self._record_docs(unit, files) if unit == units.CLUSTER else "",
                self._record_fragment(unit, parts.get(unit, Fragment())),
                reads.get(unit, units.Reads()),
                facts.get(unit, NOWHERE),
            )
            for unit, files in members.items()
        }
        self.stats.units = self.stats.units_audited = len(unit_records)
        self._save(key, recorded, unit_records, whole, now)
        # The report's texts just written for the fragments, for this report too.
        heads = {
            id(e): h for f in parts.values() for e, h in zip(f.group_entries, f.group_heads, strict=True)
        }
        audited.group_heads = [heads.get(id(e), "") for e in audited.group_entries]
        audited.finding_json = kept_json(parts.values())[1]
        return scanning.finish(audited, self.pack, today)

    def _unchanged(
        self,
        key: str,
        snapshot: Snapshot,
        recorded: Recorded,
        records: list[FileRecord] | None,
        today: date | None,
        now: int,
    ) -> ScanResult:
        """No file changed: the report from the recorded fragments. `records`: the files' records
        now (None: those recorded, stats and all)."""
        fragments = [self._fragment(r) for r in snapshot.units.values()]
        if any(f is None for f in fragments):
            why = "a recorded fragment was evicted"
            return self._full(
                key, recorded.files if records is None else records, {}, snapshot, today, now, why
            )
        self.stats.mode, self.stats.units = "unchanged", len(fragments)
        order = _file_order(recorded.displays, recorded.documents)
        result = scanning.finish(
            assemble([f for f in fragments if f is not None], snapshot.whole, order), self.pack, today
        )
        # Stats changed, files read again, directories listed again, or the walk now recorded.
        if (
            self.stats.files_read
            or (records is not None and records != recorded.files)
            or self._listings.found != recorded.listings
            or self._walked != snapshot.walked
        ):
            self._save(
                key, recorded.files if records is None else records, snapshot.units, snapshot.whole, now
            )
        return result

    # --- the incremental audit -----------------------------------------------------------------

    def _incremental(
        self,
        key: str,
        snapshot: Snapshot,
        records: list[FileRecord],
        contents: Mapping[str, bytes],
        parsed: dict[str, Loaded],
        touched: set[str],
        today: date | None,
        now: int,
    ) -> ScanResult:
        """Audit the units that depend on the `touched` ones, with the cluster part and what they
        read; keep the other units' fragments."""
        self.stats.mode = "incremental"
        everything = set(map(_FIELDS[4], records)) | set(snapshot.units)
        reads = {u: rec.reads for u, rec in snapshot.units.items()}
        by_unit: dict[str, list[FileRecord]] = {}
        # By runs of one unit (a namespace's files are mostly listed together): a step per run,
        # not per file.
        for unit, run in groupby(records, key=_FIELDS[4]):
            by_unit.setdefault(unit, []).extend(run)
        loaded: dict[str, Loaded] = dict(parsed)
        reread: set[str] = set()
        included: set[str] = set()
        while True:
            readers = units.readers_of(reads) if self.pack.custom_rules else None
            deps = {u: units.dependencies(u, reads, everything, readers) for u in everything}
            dirty = {u for u, found in deps.items() if found & touched}
            wanted = {units.CLUSTER, *touched}.union(*(deps[u] for u in dirty))
            if wanted <= included:
                break
            for unit in wanted - included:
                if unit in snapshot.units:
                    for display, (_, found) in self._read_back(snapshot.units[unit]).items():
                        loaded.setdefault(display, found)
            included = wanted
            # Their records in the tree's order (picked in C: a pass, no index of every file).
            members = list(compress(records, map(included.__contains__, map(_FIELDS[4], records))))
            missing = [r for r in members if r.display not in loaded]
            if missing:  # documents not recorded yet, or evicted: read again (and recorded below)
                loaded.update(self._load(missing))
                reread.update(r.unit for r in missing)
            others = Elsewhere.joined(rec.facts for u, rec in snapshot.units.items() if u not in included)
            inv = self._inventory([r.display for r in members], [loaded[r.display] for r in members], others)
            unit_of = {r.display: r.unit for r in members}
            found_reads = units.unit_reads(inv, unit_of)
            reads.update({u: found_reads.get(u, units.Reads()) for u in included})
        # The other units were audited with the per-replica keys and comparisons of the whole tree
        # then: they must be the same now (the CNI the policy kinds imply is compared below, with
        # what else concerns the whole tree).
        documents = [d for r in members for d in loaded[r.display][0]]
        keys = frozenset().union(*(rec.facts.replica_keys for rec in snapshot.units.values()))
        facts = units.unit_facts(documents, inv, unit_of, keys)
        recorded_facts = {u: rec.facts for u, rec in snapshot.units.items()}
        now_facts = {**{u: f for u, f in recorded_facts.items() if u not in included}, **facts}
        before, after = Elsewhere.joined(recorded_facts.values()), Elsewhere.joined(now_facts.values())
        if (before.replica_keys, before.replica_tests) != (after.replica_keys, after.replica_tests):
            why = "the per-replica comparisons changed"
            return self._full(key, records, contents, snapshot, today, now, why, parsed)
        audited = scanning.audit(inv, self.pack, self.progress)
        try:
            parts, whole = partition(audited, unit_of)
        except Unattributable as exc:
            return self._full(key, records, contents, snapshot, today, now, str(exc), parsed)
        if whole != snapshot.whole:
            return self._full(
                key, records, contents, snapshot, today, now, "what concerns the whole tree changed", parsed
            )
        unit_records: dict[str, UnitRecord] = {}
        fragments: list[Fragment] = []
        for unit in sorted(by_unit):
            known = snapshot.units[unit].docs if unit in snapshot.units else ""
            if unit not in touched and unit not in reread:
                docs = known  # as recorded: none of its files changed
            elif known == "" and unit != units.CLUSTER:
                docs = READ_ONCE  # needed once: parsed, not recorded (see READ_ONCE)
            else:  # needed again, changed since recorded, or evicted: recorded as they are now
                docs = self._record_docs(unit, [(r, loaded[r.display]) for r in by_unit[unit]])
            if unit in dirty or unit not in snapshot.units:
                fragment = parts.get(unit, Fragment())
                unit_records[unit] = UnitRecord(
                    docs,
                    self._record_fragment(unit, fragment),
                    reads.get(unit, units.Reads()),
                    facts.get(unit, NOWHERE),
                )
                self.stats.units_audited += 1
            else:
                stored = self._fragment(snapshot.units[unit])
                if stored is None:
                    return self._full(
                        key,
                        records,
                        contents,
                        snapshot,
                        today,
                        now,
                        "a recorded fragment was evicted",
                        parsed,
                    )
                fragment = stored
                unit_records[unit] = replace(snapshot.units[unit], docs=docs)
            fragments.append(fragment)
        self.stats.units = len(unit_records)
        order = _file_order(list(map(_FIELDS[0], records)), list(map(_FIELDS[5], records)))
        result = scanning.finish(assemble(fragments, whole, order), self.pack, today)
        self._save(key, records, unit_records, whole, now)
        return result


def _packs_digest(paths: Sequence[Path]) -> str:
    """Digest of every file the policy packs at `paths` are read from (a directory: each file
    load_packs reads in it), with its path."""
    digest = hashlib.sha256()
    files, problems = yamlio.discover(list(paths))
    for real, display in files:
        digest.update(f"{display}\0{real}\0".encode("utf-8", "surrogateescape"))
        try:
            digest.update(Path(real).read_bytes())
        except OSError as exc:
            digest.update(f"unreadable: {exc}".encode())
    for problem in problems:
        digest.update(str(problem).encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def _file_order(displays: Sequence[str], documents: Sequence[int]) -> dict[str, int]:
    """Inventory.file_order of a whole tree, from its records' display names and document counts:
    files with documents in the order read, then the others."""
    listed = [*compress(displays, documents), *compress(displays, map(operator.not_, documents))]
    return dict(zip(listed, range(len(listed)), strict=True))
