"""The web pages, loaded from the running service by headless Chromium; assertions on the DOM.
Screenshots (desktop and phone width) are left in /tmp/placement-auditor-shots for a person."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from dbsupport import engine_for
from httpsupport import call, serving
from storedata import seeded_store

from auditor.service.api import create_app
from auditor.service.runner import AuditRunner
from auditor.sources.manifests import Tools
from auditor.store.repository import FindingFilter

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)")
SHOTS = Path("/tmp/placement-auditor-shots")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars"]


class _Scheduler:
    running = True

    def submit(self, run_id: int, target: str) -> None:
        raise AssertionError("not used")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, int]]]:
    tmp = tmp_path_factory.mktemp("web")
    with engine_for("sqlite", tmp) as engine:
        store, _, settings = seeded_store(tmp, engine)
        ids = {f["workload"]["name"]: f["id"] for f in store.findings(FindingFilter(), 100).items}
        app = create_app(store, AuditRunner(settings, store, Tools(None, None)), _Scheduler(), "")  # type: ignore[arg-type]
        with serving(app) as base:
            yield base, ids


def dom(url: str) -> str:
    done = subprocess.run(
        [CHROMIUM, *FLAGS, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True
    )  # type: ignore[list-item]
    return done.stdout


def shot(url: str, name: str, size: str) -> None:
    SHOTS.mkdir(exist_ok=True)
    subprocess.run(
        [CHROMIUM, *FLAGS, f"--window-size={size}", f"--screenshot={SHOTS / name}", url],
        capture_output=True,
        timeout=120,
        check=True,
    )  # type: ignore[list-item]


class Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def elements(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = Elements()
    parser.feed(html)
    return parser.tags


def test_findings_page_and_its_filters(site: tuple[str, dict[str, int]]) -> None:
    base, _ = site
    page = elements(dom(f"{base}/"))
    rules = [a["data-rule"] for t, a in page if t == "tr" and a.get("class") == "finding"]
    assert sorted(rules) == [
        "cross-zone-blocked",
        "cross-zone-blocked",
        "cross-zone-traffic",
        "cross-zone-traffic",
    ]
    filtered = elements(dom(f"{base}/?rule=cross-zone-blocked&target=lab"))
    assert [a["data-rule"] for t, a in filtered if t == "tr" and a.get("class") == "finding"] == [
        "cross-zone-blocked"
    ]
    none = dom(f"{base}/?severity=low")
    assert 'id="empty"' in none
    assert not any(t == "script" for t, _ in page)  # no script at all, no CDN
    assert not any((a.get("src") or a.get("href") or "").startswith("http") for _, a in page if a)
    shot(f"{base}/", "web-findings-desktop.png", "1280,900")
    shot(f"{base}/", "web-findings-phone.png", "390,844")


def test_the_map_shows_the_blocked_edge_and_names_the_policies(site: tuple[str, dict[str, int]]) -> None:
    base, ids = site
    html = dom(f"{base}/findings/{ids['trainer-workers']}")
    tags = elements(html)
    edges = [a for t, a in tags if t == "path" and "edge" in (a.get("class") or "")]
    assert [e["class"] for e in edges] == ["edge blocked"]
    assert (edges[0]["data-from"], edges[0]["data-to"]) == ("zone-a", "zone-b")
    for policy in ("gpu-workers-stay-in-zone-a", "zone-a-only", "zone-b-only"):
        assert f"decided by CiliumNetworkPolicy ml-demo/{policy}" in html
    assert html.count("<tr><td>") >= 2  # the history has both runs
    shot(f"{base}/findings/{ids['trainer-workers']}", "web-finding-map.png", "1280,1000")


def test_hostile_finding_text_is_escaped(site: tuple[str, dict[str, int]]) -> None:
    base, ids = site
    html = dom(f"{base}/findings/{ids['evil-job']}")
    tags = elements(html)
    assert not any(t == "script" for t, _ in tags)
    assert not any("onmouseover" in a for _, a in tags)
    assert "&lt;script&gt;alert" in html and "deny-&lt;all&gt;" in html


def test_target_trends_are_drawn(site: tuple[str, dict[str, int]]) -> None:
    base, _ = site
    html = dom(f"{base}/targets/lab")
    tags = elements(html)
    assert sum(1 for t, a in tags if t == "svg" and a.get("class") == "chart") == 2
    assert sum(1 for t, _ in tags if t == "circle") == 4  # two runs on each chart
    assert call(f"{base}/targets/..%2Fetc")[0] in (404, 422)
    shot(f"{base}/targets/lab", "web-target.png", "1280,900")


def console(url: str) -> list[str]:
    """What the page logged to Chromium's console (CSP violations are logged there)."""
    done = subprocess.run(
        [CHROMIUM, *FLAGS, "--enable-logging=stderr", "--v=0", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )  # type: ignore[list-item]
    assert "</html>" in done.stdout
    return [line for line in done.stderr.splitlines() if ":CONSOLE" in line]


def test_the_pages_render_under_their_content_security_policy(site: tuple[str, dict[str, int]]) -> None:
    base, ids = site
    for path in ("/", f"/findings/{ids['trainer-workers']}", f"/findings/{ids['evil-job']}", "/targets/lab"):
        status, _, headers = call(f"{base}{path}")
        assert status == 200
        csp = headers["content-security-policy"]
        assert "default-src 'none'" in csp and "'sha256-" in csp and "unsafe-inline" not in csp
        assert [m for m in console(f"{base}{path}") if "Content Security Policy" in m] == [], path
