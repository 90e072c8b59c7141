"""Every link in the project's Markdown resolves: relative links to files that exist (in the
repository), and `#anchors` to headings of the target page (GitHub's anchor rules, the ones
SARIF helpUri uses). Bare mentions of a `.md` file in prose must exist too."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from auditor.reports.sarif import github_anchor

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
BARE_MD = re.compile(r"(?<![\w/.-])([\w-]+(?:/[\w.-]+)*\.md)\b(?![\w(]|\.\w)")
FENCE = re.compile(r"^(```|~~~)")


def _markdown_files() -> list[Path]:
    tracked = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "*.md"], capture_output=True, text=True, check=True
    )
    files = [ROOT / p for p in tracked.stdout.split()]
    # Third-party material copied verbatim keeps its own links.
    return [f for f in files if f.exists() and not f.is_relative_to(ROOT / "tests" / "data" / "netpol")]


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def _anchors(page: Path) -> set[str]:
    text = page.read_text()
    heads = [line.lstrip("#").strip() for line in _prose(text).splitlines() if line.startswith("#")]
    explicit = re.findall(r"<a (?:name|id)=\"([^\"]+)\"", text)
    # Inline code in headings counts for the anchor (GitHub drops the backticks, keeps the words).
    raw_heads = [line.lstrip("#").strip() for line in text.splitlines() if re.match(r"^#{1,6} ", line)]
    return {github_anchor(h) for h in [*heads, *raw_heads]} | set(explicit)


def _links() -> list[tuple[str, Path, str]]:
    found = []
    for page in _markdown_files():
        text = page.read_text()
        body = re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.S | re.M)
        for target in LINK.findall(body):
            found.append((f"{page.relative_to(ROOT)} -> {target}", page, target))
    return found


LINKS = _links()


@pytest.mark.parametrize("case", LINKS, ids=[c[0] for c in LINKS])
def test_link_resolves(case: tuple[str, Path, str]) -> None:
    _, page, target = case
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http(s):, mailto: — not checked offline
        return
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    assert dest.exists(), f"{page.relative_to(ROOT)}: {target}: no such file"
    assert dest.is_relative_to(ROOT), f"{page.relative_to(ROOT)}: {target} leads outside the repository"
    if anchor and dest.suffix == ".md":
        assert anchor in _anchors(dest), f"{page.relative_to(ROOT)}: {target}: no heading #{anchor}"


def test_bare_mentions_of_markdown_files_exist() -> None:
    missing = []
    for page in _markdown_files():
        prose = LINK.sub("", _prose(page.read_text()))
        for name in BARE_MD.findall(prose):
            candidates = [page.parent / name, ROOT / name, ROOT / "docs" / name]
            if not any(c.exists() for c in candidates):
                missing.append(f"{page.relative_to(ROOT)}: {name}")
    assert missing == []


def test_the_checks_see_links() -> None:
    """Not vacuous: the docs have many relative links, and anchors are checked."""
    assert len([c for c in LINKS if not c[2].startswith("http")]) > 20
    assert any("#" in c[2] for c in LINKS)
