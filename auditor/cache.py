"""A content-addressed cache of loaded YAML files, and the signed store incremental scans keep
their snapshots in (auditor/sources/incremental.py: `get_value`/`put_value`).

The loader's entries hold its result for runs of files — their documents (the located mappings and
sequences of auditor.yamlio, with their lines and document indexes) and per-document errors — so
that what reads a tree through `load_inventory` parses again only what changed. Snapshots, a
unit's documents and a unit's fragment of an audit are entries of their own, under keys that name
the auditor's code, settings and packs; the entry rules below hold for all of them.

* Key: each file's key is the SHA-256 of its bytes together with everything else the result
  depends on (:data:`auditor.yamlio.LOADER_VERSION`, the auditor's version, PyYAML's and libyaml's
  versions, the Python version and the loader limits). An entry holds a *run* of consecutive files
  (cut where a file's key says so: see auditor.yamlio._load_cached) and is keyed by their keys, so
  a tree of 17,000 files is ~500 entries to read, and one changed file changes one. An entry of
  another version is never found, and one that says it is of another key is ignored. File names
  are not part of the key; they are put back when an entry is read.
* Location: the user cache directory for the CLI (``$XDG_CACHE_HOME`` or platformdirs'), the
  service's data directory for the service (beside its git checkouts).
* Concurrent writers: an entry is written to a temporary file in the same directory and renamed
  over its name (``os.replace``, atomic on POSIX), so a reader sees a whole entry or none; two
  writers of one key write the same bytes.
* Corrupt, torn, foreign or hostile entries: each entry carries an HMAC-SHA256 of its key and
  payload under a random secret kept in the cache directory (mode 0600, created once). An entry
  whose MAC does not verify is ignored (and removed) *before* anything is unpickled, and the
  unpickler accepts only the classes an entry of its kind may hold (the loader's: the two container
  classes of auditor.yamlio; snapshots: the record classes sources/incremental.py lists). Pickle is
  used because it rebuilds the located containers in C (a third of the time of re-parsing); the MAC
  is what makes it safe: only a process that can read the secret — the user themself — can write
  an entry that will be unpickled, and such a process could run code anyway.
* A directory another user owns, or that others may write to, is not used at all.
* Bounded size: after a scan that wrote entries, the oldest entries (by modification time, which
  a hit refreshes) are removed until the cache is under 90% of its cap.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import importlib
import io
import os
import pickle
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from auditor import __version__, yamlio

MAGIC = b"PAUDC1\n"
_MAC_BYTES = 32
DEFAULT_MAX_BYTES = 1 << 30
"""Default cap on the cache's size (1 GiB): the 20,000-object benchmark repository takes 170 MiB."""

ENV_DIR = "AUDITOR_CACHE_DIR"
"""Overrides the CLI's cache directory (as --cache-dir does)."""

Entry = tuple[str, list[tuple[Any, int, int]], list[tuple[int, str]]]
"""One file's loader result without its name: its key, documents as (data, line, index), errors as
(line, message). An entry on disk holds a *run* of them (see auditor.yamlio.load_files)."""


def _is_run(value: object) -> bool:
    """Whether a loader entry's value has the shape of a run of file entries."""
    return isinstance(value, list) and all(
        isinstance(entry, tuple)
        and len(entry) == 3
        and isinstance(entry[0], str)
        and isinstance(entry[1], list)
        and isinstance(entry[2], list)
        for entry in value
    )


def user_cache_dir(environ: dict[str, str] | None = None) -> Path:
    """The CLI's cache directory: $AUDITOR_CACHE_DIR, else $XDG_CACHE_HOME/placement-auditor/documents,
    else the platform's user cache directory (platformdirs: ~/.cache on Linux)."""
    env = os.environ if environ is None else environ
    if env.get(ENV_DIR):
        return Path(env[ENV_DIR])
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]) / "placement-auditor" / "documents"
    import platformdirs

    return Path(platformdirs.user_cache_dir("placement-auditor", appauthor=False)) / "documents"


LOADED: Mapping[str, frozenset[str]] = {"auditor.yamlio": frozenset({"YamlMap", "YamlSeq"})}
"""The classes a loaded file's entry may hold: the located containers."""


class _Unpickler(pickle.Unpickler):
    """Only the classes an entry of its kind may hold (`allowed`: module → class names): every
    other global is refused (defence in depth behind the MAC)."""

    def __init__(self, data: io.BytesIO, allowed: Mapping[str, frozenset[str]] = LOADED) -> None:
        super().__init__(data)
        self.allowed = allowed

    def find_class(self, module: str, name: str) -> Any:
        if name in self.allowed.get(module, ()):
            found = _CLASSES.get((module, name))
            if found is None:
                found = _CLASSES[module, name] = getattr(importlib.import_module(module), name)
            return found
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a cache entry")


_CLASSES: dict[tuple[str, str], Any] = {}
"""The allowed classes found so far (a re-scan reads a hundred entries naming the same ten)."""


def _temporary(directory: Path, prefix: str) -> tuple[int, str]:
    """A new file only this user may read, under a random name in `directory`, open for writing:
    what tempfile.mkstemp makes (os.urandom names, O_EXCL), without importing tempfile, shutil and
    random into every scan's start."""
    for _ in range(100):
        path = str(directory / f"{prefix}{os.urandom(8).hex()}")
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {directory}")


@dataclass
class CacheStats:
    hits: int = 0  # files taken from the cache
    misses: int = 0  # files parsed
    writes: int = 0  # entries written
    rejected: int = 0  # entries ignored: bad MAC, torn, other version, unreadable
    evicted: int = 0


@dataclass
class DocumentCache:
    """Loaded files by content, in `directory` (created on first use, mode 0700)."""

    directory: Path
    max_bytes: int = DEFAULT_MAX_BYTES
    stats: CacheStats = field(default_factory=CacheStats)
    _secret: bytes | None = field(default=None, repr=False)
    _usable: bool = True

    def _key_prefix(self, context: str) -> bytes:
        return ("\0".join((__version__, yamlio.versions(), context)) + "\0").encode()

    def key(self, raw: bytes, context: str) -> str:
        """The entry name for a file's bytes loaded under `context` (loader version and limits)."""
        digest = hashlib.sha256(self._key_prefix(context))
        digest.update(raw)
        return digest.hexdigest()

    def _where(self, key: str) -> str:
        """Where the entry for `key` lives, as a plain string (an incremental re-scan reads a
        hundred entries: three Path objects each were 2 % of it)."""
        return os.path.join(self.directory, key[:2], key[2:])  # noqa: PTH118

    def _path(self, key: str) -> Path:
        return Path(self._where(key))

    def ready(self) -> bool:
        """Whether the cache can be used (its directory and secret exist or were made); loads the
        secret, so processes forked afterwards share it."""
        return self._load_secret() is not None

    def _load_secret(self) -> bytes | None:
        if self._secret is not None or not self._usable:
            return self._secret
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            st = self.directory.stat()
            if st.st_uid != os.getuid() or st.st_mode & 0o022:
                # Another user could have planted the secret and entries: use no cache at all.
                raise OSError(f"{self.directory} is not this user's own private directory")
            path = self.directory / "secret"
            if not path.exists():
                # Written whole under a temporary name, then linked into place: os.link fails if
                # another process got there first, so every process ends up reading one secret.
                fd, tmp = _temporary(self.directory, ".secret-")
                try:
                    with os.fdopen(fd, "wb") as handle:
                        handle.write(os.urandom(32))
                    os.link(tmp, path)
                except FileExistsError:
                    pass
                finally:
                    Path(tmp).unlink()
            secret = path.read_bytes()
            if len(secret) != 32:  # damaged: a new one (the entries it signed are then ignored)
                fd, tmp = _temporary(self.directory, ".secret-")
                with os.fdopen(fd, "wb") as handle:
                    handle.write(os.urandom(32))
                Path(tmp).replace(path)
                secret = path.read_bytes()
            self._secret = secret
        except OSError:
            self._usable = False  # a read-only or missing home: scan without a cache
        return self._secret

    def _mac(self, secret: bytes, key: str, payload: bytes | memoryview) -> bytes:
        mac = hmac.new(secret, key.encode() + b"\0", hashlib.sha256)
        mac.update(payload)  # a view of an entry's bytes: never copied
        return mac.digest()

    def has(self, key: str) -> bool:
        """Whether an entry for `key` exists (it may still fail verification when read)."""
        return os.path.isfile(self._where(key))  # noqa: PTH113

    def get(self, key: str) -> list[Entry] | None:
        """The run of file entries stored under `key`, or None (absent, or ignored: torn, corrupt,
        signed by another secret, of another shape)."""
        found = self._read(key, LOADED, _is_run)
        return found if isinstance(found, list) else None

    def get_value(self, key: str, allowed: Mapping[str, frozenset[str]]) -> object | None:
        """A value `put_value` stored under `key`, or None (absent, or ignored as `get` ignores an
        entry); its pickle may name only the `allowed` classes (module → names)."""
        return self._read(key, allowed, lambda _: True)

    def put_value(self, key: str, value: object) -> bool:
        """Store `value` under `key` (written whole or not at all); False when it was not."""
        return self._write(key, value)

    def _read(
        self, key: str, allowed: Mapping[str, frozenset[str]], valid: Callable[[object], bool]
    ) -> object | None:
        """The value stored under `key`: None when absent; an entry whose MAC does not verify,
        that names another key, or whose value is not `valid` is counted, removed and None."""
        secret = self._load_secret()
        if secret is None:
            return None
        path = self._where(key)
        try:
            with open(path, "rb") as handle:  # noqa: PTH123
                blob = handle.read()
        except OSError:
            return None
        value = self._verified(secret, key, blob, allowed)
        if not (isinstance(value, tuple) and len(value) == 2 and value[0] == key and valid(value[1])):
            self.stats.rejected += 1
            with contextlib.suppress(OSError):
                os.unlink(path)  # noqa: PTH108
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # recently used: evicted last
        found: object = value[1]
        return found

    def _verified(
        self, secret: bytes, key: str, blob: bytes, allowed: Mapping[str, frozenset[str]] = LOADED
    ) -> object | None:
        """The unpickled payload of an entry whose MAC verifies, else None."""
        head = len(MAGIC) + _MAC_BYTES
        if len(blob) < head or not blob.startswith(MAGIC):
            return None
        with memoryview(blob) as view:
            if not hmac.compare_digest(view[len(MAGIC) : head], self._mac(secret, key, view[head:])):
                return None
        data = io.BytesIO(blob)  # shares the entry's bytes (a slice would copy megabytes)
        data.seek(head)
        try:
            value: object = _Unpickler(data, allowed).load()
        except Exception:
            return None
        return value

    def put(self, key: str, entries: list[Entry]) -> None:
        self._write(key, entries)

    def _write(self, key: str, value: object) -> bool:
        secret = self._load_secret()
        if secret is None:
            return False
        path = self._path(key)
        try:
            payload = pickle.dumps((key, value), protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, ValueError, RecursionError):
            return False  # an unusual value: simply not cached
        blob = MAGIC + self._mac(secret, key, payload) + payload
        try:
            path.parent.mkdir(exist_ok=True, mode=0o700)
            fd, tmp = _temporary(path.parent, ".tmp-")
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(blob)
                Path(tmp).replace(path)
            except BaseException:
                Path(tmp).unlink()
                raise
        except OSError:
            return False
        self.stats.writes += 1
        return True

    def _entries(self) -> Iterator[tuple[float, int, str]]:
        try:
            shards = list(os.scandir(self.directory))
        except OSError:
            return
        for shard in shards:
            if not shard.is_dir(follow_symlinks=False) or len(shard.name) != 2:
                continue
            try:
                with os.scandir(shard.path) as listing:
                    for entry in listing:
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        yield st.st_mtime, st.st_size, entry.path
            except OSError:
                continue

    def size(self) -> int:
        return sum(size for _, size, _ in self._entries())

    def evict(self) -> None:
        """Remove the least recently used entries until the cache is under 90% of its cap."""
        entries = list(self._entries())
        total = sum(size for _, size, _ in entries)
        if total <= self.max_bytes:
            return  # (the common case: nothing sorted)
        entries.sort(key=lambda e: e[0])
        goal = self.max_bytes * 9 // 10
        for _, size, path in entries:
            if total <= goal:
                break
            try:
                os.unlink(path)  # noqa: PTH108
            except OSError:
                continue
            total -= size
            self.stats.evicted += 1

    def finish(self) -> None:
        """After a scan: keep the cache under its cap (only a scan that wrote can have grown it)."""
        if self.stats.writes:
            self.evict()
