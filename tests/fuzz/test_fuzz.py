"""The fuzzing set-up (issue 36), checked on every push: the sanitizers really catch a heap
overflow, signed overflow and a leak (a deliberately broken extension, selfcheck.c); the
comparison really fails on a wrong answer; and a short pass of each fuzzer over the sanitized
_fastyaml and _faststat finds nothing (the hour-long run is `tests/fuzz/fuzz.py --seconds 3600`,
its last result in docs/fuzzing.md)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import sanitized  # noqa: E402


def _ready() -> str | None:
    if not any(shutil.which(c) for c in ("gcc", "clang", "cc")):
        return "no C compiler"
    if importlib.util.find_spec("atheris") is None:
        return "atheris is not installed (pip install -e '.[dev]')"
    if not Path("/usr/include/yaml.h").exists():
        return "libyaml's headers are not installed (Debian: libyaml-dev)"
    try:
        sanitized.runtime_libraries()
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        return str(exc)
    return None


REASON = _ready()
needs = pytest.mark.skipif(REASON is not None, reason=REASON or "")


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sanitized")
    sanitized.build(out)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    include = sysconfig.get_paths()["include"]
    subprocess.run(
        [
            sanitized.compiler(),
            *sanitized.FLAGS,
            f"-I{include}",
            str(HERE / "selfcheck.c"),
            "-o",
            str(out / f"selfcheck{suffix}"),
        ],
        check=True,
    )
    return out


def _run(code: str, build: Path, leaks: bool = False) -> subprocess.CompletedProcess[str]:
    env = sanitized.environment(leaks=leaks)
    env["PYTHONPATH"] = str(build)
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False
    )


@needs
def test_the_sanitizers_catch_what_the_fuzzers_rely_on(build: Path) -> None:
    done = _run("import selfcheck; selfcheck.heap_overflow()", build)
    assert done.returncode != 0 and "AddressSanitizer: heap-buffer-overflow" in done.stderr
    done = _run("import selfcheck; selfcheck.signed_overflow(5)", build)
    assert done.returncode != 0 and "signed integer overflow" in done.stderr
    done = _run("import selfcheck; selfcheck.leak()", build, leaks=True)
    assert done.returncode != 0 and "LeakSanitizer: detected memory leaks" in done.stderr
    assert "selfcheck" in done.stderr  # the leak's stack, through the extension: never suppressed
    # And the real builds load and work under the same runtime.
    done = _run("import _fastyaml, _faststat; print(_fastyaml.libyaml_version())", build, leaks=True)
    assert done.returncode == 0, done.stderr


@needs
def test_a_wrong_answer_of_the_c_loader_is_a_finding() -> None:
    import fuzz

    from auditor import yamlio

    real = yamlio._fastyaml
    assert real is not None

    class Lying:
        @staticmethod
        def build(*args: object) -> object:
            out = real.build(*args)
            if isinstance(out, tuple) and isinstance(out[0], dict) and "a" in out[0]:
                out[0]["a"] = "changed"
            return out

        libyaml_version = staticmethod(real.libyaml_version)

    with pytest.raises(AssertionError, match="differ"):
        fuzz.yaml_target(Lying)(b"a: 1\n")
    fuzz.yaml_target(real)(b"a: 1\n")  # the true one passes


@needs
@pytest.mark.parametrize("target", ["yaml", "stat"])
def test_a_short_fuzz_pass_finds_nothing(target: str, build: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(HERE / "fuzz.py"), target, "--runs", "1500", "--build", str(build)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "sanitized: " in done.stdout and "no report" in done.stdout
    assert not list(tmp_path.glob("crash-*"))


@needs
def test_no_leak_through_the_extensions(build: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(HERE / "fuzz.py"), "leaks", "--build", str(build)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "leaks: " in done.stdout
