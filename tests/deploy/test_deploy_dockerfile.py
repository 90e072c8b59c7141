"""deploy/Dockerfile, linted without Docker (these machines have no daemon): stages, a numeric
non-root USER, no remote ADD, HEALTHCHECK, ENTRYPOINT/CMD, volumes for every writable path, the
runtime's system packages; and the builder stage's COPY set builds the wheel."""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from deploysupport import DOCKERFILE, ROOT


@dataclass
class Instruction:
    keyword: str
    args: str


@dataclass
class Stage:
    image: str
    name: str
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Dockerfile → (global ARG defaults, stages). Comment lines are dropped (also inside a
    continued instruction, as Docker does) and continuation lines joined."""
    logical: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not current):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    assert not current, "the Dockerfile ends inside a continued instruction"
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        rest = rest.strip()
        if keyword == "FROM":
            m = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", rest, flags=re.IGNORECASE)
            assert m, f"cannot read FROM {rest!r}"
            image = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda v: args[v.group(1) or v.group(2)], m.group(1))
            stages.append(Stage(image, m.group(2) or str(len(stages))))
        elif not stages:
            assert keyword == "ARG", f"{keyword} before the first FROM"
            name, _, default = rest.partition("=")
            args[name] = default.strip('"')
        else:
            stages[-1].instructions.append(Instruction(keyword, rest))
    return args, stages


def exec_form(instruction: Instruction) -> list[str]:
    value = json.loads(instruction.args)
    assert isinstance(value, list), f"{instruction.keyword} must be in exec (JSON) form"
    return [str(v) for v in value]


def env_of(stage: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for i in stage.all("ENV"):
        for key, value in re.findall(r"(\w+)=(\"[^\"]*\"|\S+)", i.args):
            env[key] = value.strip('"')
    return env


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse(DOCKERFILE.read_text(encoding="utf-8"))[1]


def test_parser_reads_continuations_args_and_stages() -> None:
    args, parsed = parse(
        "ARG IMG=python:3.11-slim\nFROM ${IMG} AS b\n# note\nRUN a \\\n  # inner\n  && b\nFROM b\nUSER 1\n"
    )
    assert args == {"IMG": "python:3.11-slim"}
    assert [(s.image, s.name) for s in parsed] == [("python:3.11-slim", "b"), ("b", "1")]
    assert parsed[0].instructions == [Instruction("RUN", "a  && b")]


def test_multi_stage_builder_then_slim_python_311_runtime(stages: list[Stage]) -> None:
    assert len(stages) >= 2
    builder, runtime = stages[0], stages[-1]
    assert builder.name == "builder"
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == ">=3.11"
    for stage in (builder, runtime):
        assert re.fullmatch(r"python:3\.11-slim(-\w+)?", stage.image), stage.image
    # The builder makes wheels; the runtime installs only those, offline.
    assert any("pip wheel" in i.args for i in builder.all("RUN"))
    assert any(i.args.startswith("--from=builder ") for i in runtime.all("COPY"))
    installs = [i.args for i in runtime.all("RUN") if "pip install" in i.args]
    assert installs and all("--no-index" in a and "--find-links" in a for a in installs)


def test_no_add_of_urls_and_no_secrets_in_env(stages: list[Stage]) -> None:
    for stage in stages:
        for i in stage.all("ADD"):
            assert not re.search(r"(https?|git|ssh)://|git@", i.args), f"ADD of a URL: {i.args}"
        for key in env_of(stage):
            assert not re.search(r"TOKEN|PASSWORD|SECRET|DATABASE_URL", key), key


def test_runs_as_numeric_non_root_user(stages: list[Stage]) -> None:
    runtime = stages[-1]
    users = runtime.all("USER")
    assert users, "the runtime stage sets no USER (it would run as root)"
    user = users[-1].args
    assert re.fullmatch(r"\d+(:\d+)?", user), f"USER {user} is not numeric (runAsNonRoot needs a UID)"
    uid, _, gid = user.partition(":")
    assert int(uid) != 0 and (not gid or int(gid) != 0)
    # Nothing after the USER line switches back.
    after = runtime.instructions[runtime.instructions.index(users[-1]) :]
    assert [i.args for i in after if i.keyword == "USER"] == [user]


def test_entrypoint_cmd_and_probes(stages: list[Stage]) -> None:
    runtime = stages[-1]
    assert exec_form(runtime.all("ENTRYPOINT")[-1]) == ["auditor"]
    assert exec_form(runtime.all("CMD")[-1]) == [
        "serve",
        "--config",
        "/etc/auditor/auditor.yaml",
        "--host",
        "0.0.0.0",
        "--port",
        "8080",
    ]
    assert "8080" in " ".join(i.args for i in runtime.all("EXPOSE"))
    health = runtime.all("HEALTHCHECK")
    assert health and "/healthz" in health[-1].args and ":8080/" in health[-1].args


def test_read_only_root_filesystem_writable_paths_are_volumes(stages: list[Stage]) -> None:
    runtime = stages[-1]
    volumes = set(exec_form(runtime.all("VOLUME")[-1]))
    assert "/data" in volumes
    env = env_of(runtime)
    workdir = runtime.all("WORKDIR")[-1].args
    # HOME (git config, caches), TMPDIR and the working directory (SQLite's default
    # ./auditor.db) are the places the process writes without being told: each on a volume.
    for path in (env.get("HOME", "/root"), env.get("TMPDIR", "/tmp"), workdir):
        assert any(path == v or path.startswith(v.rstrip("/") + "/") for v in volumes), path


def test_runtime_installs_git_and_the_libraries_of_runtime_dependencies(stages: list[Stage]) -> None:
    runtime = stages[-1]
    apt = " ".join(i.args for i in runtime.all("RUN") if "apt-get install" in i.args)
    packages = set(apt.split())
    assert "git" in packages, "git targets are fetched with the real git"
    assert "rm -rf /var/lib/apt/lists/*" in apt
    deps = " ".join(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])
    if "weasyprint" in deps.lower():  # WeasyPrint loads Pango with ctypes at run time
        assert {"libpango-1.0-0", "libpangoft2-1.0-0"} <= packages


def _builder_sources(stages: list[Stage]) -> list[str]:
    sources: list[str] = []
    for i in stages[0].all("COPY"):
        if i.args.startswith("--"):
            continue
        *src, _dest = i.args.split()
        sources.extend(src)
    return sources


def test_builder_copies_what_packaging_needs_and_dockerignore_keeps_it(stages: list[Stage]) -> None:
    sources = _builder_sources(stages)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    needed = {"pyproject.toml", "setup.py", pyproject["project"]["readme"], "auditor"}
    needed |= {d for d in pyproject["tool"]["setuptools"]["package-dir"].values() if d != "."}
    assert needed <= set(sources), f"the builder stage does not copy {needed - set(sources)}"
    for src in sources:
        assert (ROOT / src).exists(), src
    ignore = DOCKERFILE.with_name("Dockerfile.dockerignore").read_text().splitlines()
    patterns = [p.strip() for p in ignore if p.strip() and not p.startswith("#")]
    for src in sources:
        for pattern in patterns:
            assert not fnmatch.fnmatch(src, pattern.removeprefix("**/")), f"{pattern} excludes {src}"


def test_builder_context_builds_the_wheel(stages: list[Stage], tmp_path: Path) -> None:
    """What the builder stage does, without Docker: only the copied files, `pip wheel`."""
    context = tmp_path / "src"
    context.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.db", "*.egg-info")
    for src in _builder_sources(stages):
        path = ROOT / src
        if path.is_dir():
            shutil.copytree(path, context / src, ignore=skip)
        else:
            shutil.copy2(path, context / src)
    out = tmp_path / "wheels"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            ".",
        ],
        cwd=context,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    (wheel,) = out.glob("placement_auditor-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for expected in (
        "auditor/cli.py",
        "auditor/examples/service.yaml",
        "auditor/_policies/README.md",
        "auditor/_templates/README.md",
        "auditor/_migrations/env.py",
    ):
        assert expected in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "auditor = auditor.__main__:entry" in zipfile.ZipFile(wheel).read(entry_points).decode()
