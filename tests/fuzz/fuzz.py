"""Fuzz the C extensions, built with AddressSanitizer and UndefinedBehaviorSanitizer (sanitized.py),
with atheris (Google's coverage-guided fuzzer for Python, libFuzzer inside).

    python tests/fuzz/fuzz.py yaml  --seconds 60      # auditor/_fastyaml.c against PyYAML's loader
    python tests/fuzz/fuzz.py stat  --seconds 60      # auditor/_faststat.c against os.stat
    python tests/fuzz/fuzz.py leaks                   # every seed through both, LeakSanitizer on
    python tests/fuzz/fuzz.py yaml --seconds 3600 --report docs/fuzzing-last-run.txt

`yaml`: each input, decoded as UTF-8 (invalid bytes replaced), is loaded by yamlio twice: through
the sanitized _fastyaml and through the full path (PyYAML composes the node tree and constructs the
data); the documents (data, every line number) and the errors must be equal, or the input is a
finding. Seeds: tests/fuzz/corpus (the YAML test suite), every YAML file of the repository and the
loader's edge cases; mutations from there (libFuzzer's, plus a dictionary of YAML tokens).

`stat`: each input picks paths (existing files and directories, missing ones, a symlink loop, NUL
bytes, very long names, values that are not strings), recorded stats (wrong lengths, negative and
64-bit-overflowing integers, non-tuples), a `trusted` time and the mode; the sanitized
_faststat.changes must give what the os.stat fallback (sources/incremental.stat_changes without C)
gives, or raise a clean TypeError / ValueError / OverflowError where the arguments are malformed.

A crash, a sanitizer report (which aborts), an uncaught exception or a mismatch exits non-zero with
the input saved as crash-<sha1> (libFuzzer's artifact) in the working directory. The process
re-executes itself with the sanitizer runtimes preloaded (LD_PRELOAD), as the interpreter itself is
not instrumented. `--report FILE` writes one line with the result (for docs/fuzzing.md).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import operator
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from itertools import compress
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import sanitized  # noqa: E402

YAML_TOKENS = [
    "- ",
    ": ",
    "? ",
    "---",
    "...",
    "&a ",
    "*a",
    "!!str ",
    "!!int ",
    "!!binary ",
    "!tag ",
    "<<: ",
    "{",
    "}",
    "[",
    "]",
    ",",
    "|",
    ">",
    "|-",
    ">+",
    "'",
    '"',
    "#",
    "%YAML 1.1",
    "%TAG ! tag:x,2000:",
    "\t",
    "\r\n",
    "\\x00",
    "\\u263A",
    "~",
    "null",
    "true",
    "0x1F",
    "0o17",
    ".inf",
    "-.nan",
    "2001-12-14t21:59:43.10-05:00",
    "\ufeff",
    "\x85",
    "\u2028",
]


def seeds() -> list[bytes]:
    roots = [
        HERE / "corpus",
        ROOT / "tests" / "data",
        ROOT / "auditor" / "examples",
        ROOT / "deploy",
        ROOT / "policies",
    ]
    out = []
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.suffix in (".yaml", ".yml", ".json") and path.is_file() and path.stat().st_size < 200_000:
                out.append(path.read_bytes())
    try:
        from test_yamlio_events import EDGE_CASES

        out.extend(t.encode("utf-8", "surrogatepass") for t in EDGE_CASES.values())
    except ImportError:
        pass
    return out


# --- the yaml target ------------------------------------------------------------------------


def yaml_target(fastyaml: Any) -> Any:
    from auditor import yamlio

    def comparable(result: Any) -> Any:
        docs, errors = result
        return [(d.source, locations(d.data)) for d in docs], [str(e) for e in errors]

    def locations(data: Any) -> Any:
        if isinstance(data, yamlio.YamlMap):
            return ("map", data.line, dict(data.key_lines), {k: locations(v) for k, v in data.items()})
        if isinstance(data, yamlio.YamlSeq):
            return ("seq", data.line, list(data.item_lines), [locations(v) for v in data])
        if isinstance(data, float) and math.isnan(data):
            return ("float", "nan")
        return (type(data).__name__, data)

    def full_only(*_: object) -> Any:
        raise yamlio._NeedsFullConstructor

    real_events = yamlio._from_events

    def one(data: bytes) -> None:
        text = data.decode("utf-8", "replace")
        yamlio._fastyaml, yamlio._from_events = fastyaml, real_events
        fast = comparable(yamlio.load_text(text, "f.yaml"))
        yamlio._fastyaml, yamlio._from_events = None, full_only
        try:
            full = comparable(yamlio.load_text(text, "f.yaml"))
        finally:
            yamlio._fastyaml, yamlio._from_events = fastyaml, real_events
        if fast != full:
            raise AssertionError(f"_fastyaml and the full loader differ on {text[:200]!r}:\n{fast}\n{full}")

    return one


# --- the stat target ------------------------------------------------------------------------


def reference_changes(paths: list[str], recorded: list[Any], trusted: int, directories: bool) -> Any:
    """sources/incremental.stat_changes's os.stat branch (kept identical; the test below checks)."""
    from auditor.sources import incremental

    getter, mtime = (
        (incremental._DIR_STAMP, incremental._DIR_MTIME)
        if directories
        else (incremental._FILE_STAT, incremental._FILE_MTIME)
    )
    try:
        now = list(map(getter, map(os.stat, paths)))
    except OSError:
        return None
    changed = set(compress(range(len(now)), map(operator.ne, now, recorded)))
    changed.update(compress(range(len(now)), map(trusted.__le__, map(mtime, now))))
    return {i: now[i] for i in sorted(changed)}


def stat_target(faststat: Any, playground: Path) -> Any:
    import atheris

    files = [playground / f"f{i}.yaml" for i in range(4)]
    for i, f in enumerate(files):
        f.write_text("x" * i)
    (playground / "d").mkdir(exist_ok=True)
    loop = playground / "loop"
    if not loop.is_symlink():
        loop.symlink_to(loop)
    choices = [
        *map(str, files),
        str(playground / "d"),
        str(playground),
        str(playground / "missing"),
        str(loop),
        "",
        "a\0b",
        "x" * 5000,
        str(playground / ("y" * 300)),
    ]
    stats = {str(p): p.stat() for p in [*files, playground / "d", playground]}

    def number(fdp: Any) -> int:
        kind = fdp.ConsumeIntInRange(0, 5)
        if kind == 0:
            return fdp.ConsumeIntInRange(-(2**63), 2**63 - 1)
        if kind == 1:
            return fdp.ConsumeIntInRange(0, 2**70) * (1 if fdp.ConsumeBool() else -1)
        return fdp.ConsumeIntInRange(0, 10**19)

    def one(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        directories = fdp.ConsumeBool()
        trusted = number(fdp)
        count = fdp.ConsumeIntInRange(0, 6)
        paths: list[Any] = []
        recorded: list[Any] = []
        malformed = False
        width = 4 if directories else 5
        for _ in range(count):
            pick = fdp.ConsumeIntInRange(0, len(choices))
            if pick == len(choices):
                paths.append(fdp.ConsumeIntInRange(0, 9))  # not a string
                malformed = True
            else:
                paths.append(choices[pick])
                malformed = malformed or "\0" in choices[pick]
            how = fdp.ConsumeIntInRange(0, 4)
            path = paths[-1]
            real = stats.get(path) if isinstance(path, str) else None
            if how == 0 and real is not None:  # the real stat: unchanged
                getter = (
                    (real.st_mtime_ns, real.st_ctime_ns, real.st_ino, real.st_dev)
                    if directories
                    else (real.st_size, real.st_mtime_ns, real.st_ctime_ns, real.st_ino, real.st_dev)
                )
                recorded.append(getter)
            elif how == 1:
                recorded.append(tuple(number(fdp) for _ in range(fdp.ConsumeIntInRange(0, 7))))
            elif how == 2:
                recorded.append(tuple(number(fdp) for _ in range(width)))
            elif how == 3:
                recorded.append([number(fdp)] * width)  # a list, not a tuple
            else:
                recorded.append(None)
        if fdp.ConsumeBool() and recorded:
            recorded.pop()  # fewer recorded stats than paths
        try:
            got: Any = faststat.changes(paths, recorded, trusted, directories)
        except (TypeError, ValueError, OverflowError) as exc:
            got = exc
        try:
            want: Any = reference_changes(paths, recorded, trusted, directories)
        except (TypeError, ValueError, OverflowError) as exc:
            want = exc
        if isinstance(got, Exception):
            # The C extension is stricter about malformed arguments: a clean exception is fine,
            # never a wrong answer.
            int64 = -(2**63) <= trusted < 2**63
            if not (
                malformed or not int64 or isinstance(want, Exception) or _shape_wrong(paths, recorded, width)
            ):
                raise AssertionError(f"_faststat raised {got!r} where os.stat answers {want!r}: {paths!r}")
            return
        if isinstance(want, Exception) or got != want:
            raise AssertionError(
                f"_faststat {got!r} but os.stat {want!r} for {paths!r} {recorded!r} {trusted}"
            )

    return one


def _shape_wrong(paths: list[Any], recorded: list[Any], width: int) -> bool:
    if len(recorded) != len(paths):
        return True
    for r in recorded:
        if not isinstance(r, tuple) or len(r) != width:
            return True
        if any(not -(2**63) <= v < 2**64 for v in r):
            return True
    return False


# --- driver -----------------------------------------------------------------------------------
#
# Two phases. gcc's sanitizer runtime provides the coverage callbacks libFuzzer needs, so under it
# atheris runs blind (no coverage kept, the corpus shrinks to one input). Hence:
#   guided:    atheris, coverage-guided (the Python loader instrumented; the C paths it drives
#              follow), over the package's own build: crashes and mismatches; its corpus kept;
#   sanitized: the ASan+UBSan build, replaying the seeds and the guided phase's corpus, then
#              mutating them (a seeded, repeatable mutator: byte flips, YAML tokens, splices, cuts):
#              every memory or undefined-behaviour error aborts with the sanitizer's report.


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("target", choices=("yaml", "stat", "leaks"))
    ap.add_argument("--seconds", type=int, default=60, help="fuzz about this long in all")
    ap.add_argument("--runs", type=int, default=0, help="inputs per phase instead of a time")
    ap.add_argument("--build", type=Path, default=ROOT / "build" / "sanitized")
    ap.add_argument(
        "--corpus", type=Path, help="keep the guided phase's corpus here (default: a temporary one)"
    )
    ap.add_argument("--report", type=Path, help="write one line with the result to this file")
    ap.add_argument("--seed", type=int, default=1, help="random seed (a run is repeatable)")
    ap.add_argument(
        "--phase", choices=("both", "guided", "sanitized"), default="both", help=argparse.SUPPRESS
    )
    args = ap.parse_args(argv)
    built = sanitized.build(args.build)
    if args.phase != "both":
        return _phase(args)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fuzz-corpus-") as tmp:
        corpus = args.corpus or Path(tmp)
        corpus.mkdir(parents=True, exist_ok=True)
        common = [
            __file__,
            args.target,
            "--build",
            str(args.build),
            "--corpus",
            str(corpus),
            "--seed",
            str(args.seed),
        ]
        limit = ["--runs", str(args.runs)] if args.runs else ["--seconds", str(max(1, args.seconds // 2))]
        codes = []
        if args.target == "leaks":
            codes.append(heap_growth())
        else:
            codes.append(_child([*common, *limit, "--phase", "guided"], dict(os.environ)))
        if not any(codes):
            env = sanitized.environment(leaks=args.target == "leaks")
            codes.append(_child([*common, *limit, "--phase", "sanitized"], env))
        code = next((c for c in codes if c), 0)
    if args.report:
        verdict = "no crash, no sanitizer report, no mismatch" if code == 0 else f"FAILED (exit {code})"
        args.report.write_text(
            f"{time.strftime('%Y-%m-%d', time.gmtime())} {args.target}: {verdict}; "
            f"{time.monotonic() - started:.0f} s, seed {args.seed}; {', '.join(sorted(built))} built with "
            f"{sanitized.compiler()} -fsanitize=address,undefined\n"
        )
    return code


def _child(argv: list[str], env: dict[str, str]) -> int:
    done = subprocess.run([sys.executable, *argv], env=env, check=False)
    return done.returncode if done.returncode >= 0 else 128 - done.returncode


def _phase(args: argparse.Namespace) -> int:
    if args.phase == "guided":
        import atheris

        with atheris.instrument_imports(include=["auditor.yamlio"]):
            from auditor import yamlio  # noqa: F401  (instrumented before anything imports it)
        from auditor import _faststat, _fastyaml

        modules: dict[str, Any] = {"_fastyaml": _fastyaml, "_faststat": _faststat}
    else:
        modules = sanitized.load(args.build)
    if args.target == "leaks":
        return leaks(modules)
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        if args.target == "yaml":
            target = yaml_target(modules["_fastyaml"])
            start = seeds()
        else:
            playground = Path(tmp) / "tree"
            playground.mkdir()
            target = stat_target(modules["_faststat"], playground)
            rng = random.Random(args.seed)
            start = [rng.randbytes(rng.randint(0, 200)) for _ in range(64)]
        if args.phase == "guided":
            return _guided(args, target, start, Path(tmp))
        return _sanitized(args, target, start)


def _guided(args: argparse.Namespace, target: Any, start: list[bytes], tmp: Path) -> int:
    import atheris

    for i, s in enumerate(start):
        (args.corpus / f"seed-{i}").write_bytes(s)
    dictionary = tmp / "yaml.dict"
    dictionary.write_text("".join(f'"{_escape(t)}"\n' for t in YAML_TOKENS))
    limit = [f"-runs={args.runs}"] if args.runs else [f"-max_total_time={args.seconds}"]
    extra = [f"-dict={dictionary}", "-max_len=65536"] if args.target == "yaml" else ["-max_len=512"]
    atheris.Setup(
        [
            sys.argv[0],
            *limit,
            f"-seed={args.seed}",
            "-timeout=10",
            "-rss_limit_mb=4096",
            *extra,
            str(args.corpus),
        ],
        target,
    )
    atheris.Fuzz()
    return 0


def _sanitized(args: argparse.Namespace, target: Any, start: list[bytes]) -> int:
    """The corpus and the seeds as they are, then mutated, through the sanitized build."""
    pool = [*start, *(p.read_bytes() for p in sorted(args.corpus.iterdir()) if p.is_file())]
    rng = random.Random(args.seed)
    deadline = time.monotonic() + args.seconds
    count = 0
    for data in pool:
        _run(target, data)
        count += 1
    mutated = 0
    while (mutated < args.runs) if args.runs else (time.monotonic() < deadline):
        _run(target, mutate(rng.choice(pool), rng, pool))
        mutated += 1
    print(f"sanitized: {count} corpus inputs and {mutated} mutations, no report")
    return 0


def _run(target: Any, data: bytes) -> None:
    try:
        target(data)
    except BaseException:
        name = Path(f"crash-{hashlib.sha1(data).hexdigest()}")
        name.write_bytes(data)
        print(f"input saved as {name}", file=sys.stderr)
        raise


def mutate(data: bytes, rng: random.Random, pool: list[bytes]) -> bytes:
    """One to four of: flip a byte, insert a YAML token or random bytes, delete or duplicate a
    range, splice another input in, cut the end."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        at = rng.randint(0, len(out))
        if op == 0 and out:
            out[min(at, len(out) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:
            out[at:at] = rng.choice(YAML_TOKENS).encode("utf-8", "surrogatepass")
        elif op == 2:
            out[at:at] = rng.randbytes(rng.randint(1, 8))
        elif op == 3 and out:
            end = min(len(out), at + rng.randint(1, 64))
            del out[at:end]
        elif op == 4 and out:
            end = min(len(out), at + rng.randint(1, 256))
            out[at:at] = out[at:end] * rng.randint(1, 8)
        elif op == 5:
            other = rng.choice(pool)
            a = rng.randint(0, len(other))
            out[at:at] = other[a : a + rng.randint(1, 512)]
        else:
            del out[at:]
    return bytes(out[:65536])


def _escape(token: str) -> str:
    return "".join(
        c if 32 <= ord(c) < 127 and c not in '"\\' else "".join(f"\\x{b:02x}" for b in c.encode())
        for c in token
    )


def heap_growth(rounds: int = 3, allowed: int = 200) -> int:
    """Python objects an extension leaks by reference count (LeakSanitizer cannot tell them from
    the interpreter's own): the interpreter's allocated blocks after the seeds went through the
    package's _fastyaml `rounds` more times, once warmed up, must not grow by more than `allowed`
    (a few caches settling); a leak of one object per document would be thousands."""
    import gc

    from auditor import _faststat, _fastyaml

    one = yaml_target(_fastyaml)
    data = seeds()
    with tempfile.TemporaryDirectory(prefix="fuzz-heap-") as tmp:
        paths = [str(Path(tmp) / "missing"), tmp, __file__]

        def once() -> None:
            for s in data:
                one(s)
            for _ in range(100):
                _faststat.changes(paths[1:], [(0, 0, 0, 0, 0)] * 2, 0, False)
                _faststat.changes(paths, [(0, 0, 0, 0, 0)] * 3, 0, False)

        once()
        once()
        gc.collect()
        before = sys.getallocatedblocks()
        for _ in range(rounds):
            once()
        gc.collect()
        grown = sys.getallocatedblocks() - before
    print(
        f"heap: {grown:+d} allocated blocks after {rounds} more rounds of {len(data)} documents (allowed {allowed})"
    )
    return 0 if grown <= allowed else 1


def leaks(modules: dict[str, Any]) -> int:
    """Every seed through the sanitized _fastyaml, three times, and _faststat over a tree; the
    process then exits and LeakSanitizer reports anything the extensions allocated and lost."""
    one = yaml_target(modules["_fastyaml"])
    count = 0
    for _ in range(3):
        for s in seeds():
            one(s)
            count += 1
    with tempfile.TemporaryDirectory(prefix="fuzz-leaks-") as tmp:
        paths = []
        for i in range(50):
            p = Path(tmp) / f"f{i}"
            p.write_text("x")
            paths.append(str(p))
        for _ in range(200):
            modules["_faststat"].changes(paths, [(0, 0, 0, 0, 0)] * len(paths), 0, False)
            modules["_faststat"].changes([tmp], [(0, 0, 0, 0)], 0, True)
            modules["_faststat"].changes([*paths, tmp + "/missing"], [(0, 0, 0, 0, 0)] * 51, 0, False)
    print(f"leaks: {count} documents and 600 stat batches through the sanitized builds")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
