"""Running the external renderers (`kubectl kustomize`, `helm template`) on a scanned tree.

A repository is input, not code we trust: the renderers run in a scrubbed environment, with stdin
closed, in their own process group, under a time limit and a limit on the bytes they may print
(what passes and what is withheld: docs/config.md, "Sources"); past a limit the group is killed.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# Only these variables pass from our environment; everything else (HOME, KUBECONFIG, AWS_*,
# GOOGLE_*, AZURE_*, GIT_*, SSH_AUTH_SOCK, *_PROXY, tokens, …) is withheld.
PASSED = ("PATH", "LANG", "LC_ALL", "TZ")
# Passed only when remote Kustomize resources are allowed (sources.kustomize_remote): fetching
# them may need the site's proxy. Credentials still are not passed.
PROXIES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")
STDERR_LIMIT = 64 * 1024


@dataclass(frozen=True, slots=True)
class ToolRun:
    code: int  # 124 timed out, 125 output over the limit, 127 could not start
    stdout: str
    stderr: str


def environment(home: Path, environ: dict[str, str], allow_network: bool) -> dict[str, str]:
    """The renderers' environment: `home` (an empty directory) for every home and cache."""
    env = {k: environ[k] for k in PASSED if k in environ}
    env.setdefault("PATH", os.defpath)
    if allow_network:
        env.update({k: environ[k] for k in PROXIES if k in environ})
    for name in ("HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "TMPDIR"):
        env[name] = str(home)
    env.update(
        HELM_CACHE_HOME=str(home / "helm-cache"),
        HELM_CONFIG_HOME=str(home / "helm-config"),
        HELM_DATA_HOME=str(home / "helm-data"),
        HELM_REGISTRY_CONFIG=str(home / "helm-config" / "registry.json"),
        HELM_REPOSITORY_CONFIG=str(home / "helm-config" / "repositories.yaml"),
        KUBECONFIG=str(home / "kubeconfig"),  # does not exist: no cluster, no credentials
        # Remote bases are fetched with git (when allowed): no prompt, no system or user config.
        GIT_TERMINAL_PROMPT="0",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
    )
    return env


def run(
    cmd: list[str],
    cwd: Path,
    timeout_s: float,
    max_output_bytes: int,
    allow_network: bool = False,
) -> ToolRun:
    """Run `cmd` in `cwd` under the limits above."""
    with tempfile.TemporaryDirectory(prefix="auditor-render-") as home:
        env = environment(Path(home), dict(os.environ), allow_network)
        try:
            proc = subprocess.Popen(
                cmd,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            return ToolRun(127, "", str(exc))
        return _collect(proc, timeout_s, max_output_bytes)


def _collect(proc: subprocess.Popen[bytes], timeout_s: float, max_output_bytes: int) -> ToolRun:
    assert proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    deadline = time.monotonic() + timeout_s
    verdict: tuple[int, str] | None = None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                verdict = (124, f"timed out after {timeout_s:g} s")
                break
            for key, _ in sel.select(timeout=min(left, 1.0)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf: bytearray = key.data
                buf.extend(chunk)
                if buf is err and len(err) > STDERR_LIMIT:
                    del err[STDERR_LIMIT:]
            if len(out) > max_output_bytes:
                verdict = (125, f"printed more than {max_output_bytes} bytes (sources.max_render_bytes)")
                break
    if verdict is not None:
        _kill(proc)
    try:
        code = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill(proc)
        code, verdict = 124, verdict or (124, f"timed out after {timeout_s:g} s")
    proc.stdout.close()
    proc.stderr.close()
    if verdict is not None:
        return ToolRun(verdict[0], "", verdict[1])
    return ToolRun(code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()
