"""What a kustomization refers to, and whether it may be built: the check made before
`kubectl kustomize` runs (what is refused: docs/config.md, "Sources").

`kubectl kustomize` with the root-only load restrictor already refuses *files* outside a
kustomization's own directory, but not other directories (bases, components), symlinks that lead
out, or remote URLs, which it fetches; and it tries a name that is neither a file nor a directory
as a remote one. So every path a kustomization (or one it includes) names must resolve inside the
root, and a remote reference is refused unless `sources.kustomize_remote` allows it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from auditor import yamlio

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
# Fields whose entries may be a directory (another kustomization) or a remote URL.
INCLUDING = ("resources", "bases", "components")
# Fields whose string entries are file paths, or plugin configs that may also be URLs; an entry
# holding a newline is an inline document, not a path.
PLUGINS = ("generators", "transformers", "validators")
FILES = ("crds", "configurations", "patchesStrategicMerge")
# Lists of mappings with a `path`.
PATHED = ("patches", "patchesJson6902", "replacements")
GENERATORS = ("configMapGenerator", "secretGenerator")
_REMOTE = re.compile(r"^([a-z][a-z0-9+.-]*://|[a-z][a-z0-9+.-]*::|git@|ssh:|gh:)|\?ref=|\?version=|//", re.I)
_HOST = re.compile(r"^[a-z0-9-]+(\.[a-z0-9-]+)+(:[0-9]+)?/", re.I)


@dataclass(frozen=True, slots=True)
class Refusal:
    file: Path  # the kustomization file naming the reference
    line: int  # of the field holding it
    message: str


def kustomization_file(directory: Path) -> Path | None:
    return next((directory / n for n in KUSTOMIZATION_FILES if (directory / n).is_file()), None)


def looks_remote(entry: str) -> bool:
    return bool(_REMOTE.search(entry) or _HOST.match(entry))


def _load(file: Path) -> dict[str, object]:
    docs, _ = yamlio.load_file(file, str(file))
    data = docs[0].data if docs else None
    return data if isinstance(data, dict) else {}


def references(data: dict[str, object]) -> Iterator[tuple[str, str, bool]]:
    """(field, path or URL, may be remote or a directory) for every reference in a kustomization."""
    for key in (*INCLUDING, *PLUGINS, *FILES):
        for entry in _strings(data.get(key)):
            yield key, entry, key in INCLUDING or key in PLUGINS
    for key in PATHED:
        for item in _list(data.get(key)):
            if isinstance(item, dict) and isinstance(item.get("path"), str):
                yield f"{key}.path", item["path"], False
    for key in GENERATORS:
        for item in _list(data.get(key)):
            if not isinstance(item, dict):
                continue
            for entry in _strings(item.get("files")):
                yield f"{key}.files", entry.partition("=")[2] or entry, False
            for entry in _strings(item.get("envs")):
                yield f"{key}.envs", entry, False
            if isinstance(item.get("env"), str):
                yield f"{key}.env", str(item["env"]), False
    for key, field in (("openapi", "path"), ("helmGlobals", "chartHome")):
        value = data.get(key)
        if isinstance(value, dict) and isinstance(value.get(field), str):
            yield f"{key}.{field}", value[field], False


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _strings(value: object) -> Iterator[str]:
    for entry in _list(value):
        if isinstance(entry, str) and "\n" not in entry and entry.strip():
            yield entry.strip()


def included(directory: Path) -> set[Path]:
    """Local directories a kustomization pulls in (resources, bases, components)."""
    file = kustomization_file(directory)
    out: set[Path] = set()
    if file is None:
        return out
    for key, entry, _ in references(_load(file)):
        if key in INCLUDING:
            target = (directory / entry).resolve()
            if target.is_dir():
                out.add(target)
    return out


def check(directory: Path, root: Path, allow_remote: bool) -> list[Refusal]:
    """Why the kustomization in `directory` may not be built inside `root` (empty: it may)."""
    root = root.resolve()
    refusals: list[Refusal] = []
    pending, seen = [directory], set()
    while pending:
        current = pending.pop()
        real = current.resolve()
        if real in seen:
            continue
        seen.add(real)
        file = kustomization_file(current)
        if file is None:
            continue
        data = _load(file)
        for key, entry, remote_capable in references(data):
            refusal = _check_entry(current, root, key, entry, remote_capable, allow_remote)
            if refusal:
                line = yamlio.key_line(data, key.partition(".")[0], 1)
                refusals.append(Refusal(file, line, refusal))
                continue
            target = current / entry
            if (key in INCLUDING or key in PLUGINS) and target.is_dir():
                pending.append(target)  # another kustomization: its references count too
    return refusals


def _check_entry(
    directory: Path, root: Path, key: str, entry: str, remote_capable: bool, allow_remote: bool
) -> str | None:
    try:
        target = (directory / entry).resolve(strict=True)
    except (OSError, RuntimeError):
        target = None
    if target is not None:
        if target != root and not target.is_relative_to(root):
            return f"{key} entry {entry!r} leads outside the repository root {root} (-> {target})"
        return None
    if not remote_capable or allow_remote:
        return None  # a missing file: kubectl reports it, reading nothing
    if looks_remote(entry):
        return (
            f"{key} entry {entry!r} is a remote reference; it is not fetched "
            "(set sources.kustomize_remote: true to allow remote resources)"
        )
    # kustomize tries a name that is no local path as a remote one.
    return f"{key} entry {entry!r} is not a file or directory in the repository"
