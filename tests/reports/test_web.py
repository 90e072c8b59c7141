"""The web pages, loaded from the running service by headless Chromium (over the DevTools
protocol): assertions on the DOM, on what the page logs (CSP violations, errors) and on its layout
at desktop and phone width. Screenshots are left in /tmp/placement-auditor-shots for a person."""

from __future__ import annotations

from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from browser import CHROMIUM, Browser
from dbsupport import engine_for
from factory import finding
from httpsupport import call, serving
from storedata import seeded_store

from auditor.service.api import create_app
from auditor.service.runner import AuditRunner
from auditor.sources.manifests import Tools
from auditor.store.repository import FindingFilter, RunOutcome, TargetSpec

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)")
SHOTS = Path("/tmp/placement-auditor-shots")
SHA = "89abcdef0123456789abcdef0123456789abcdef"
RANK = {"critical": 0, "high": 1, "medium": 2, "low": 3}


class _Scheduler:
    running = True

    def submit(self, run_id: int, target: str) -> None:
        raise AssertionError("not used")

    def refresh_schedules(self) -> None:
        raise AssertionError("not used")


Site = tuple[str, dict[str, int], Browser]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("web")
    with engine_for("sqlite", tmp) as engine:
        store, _, settings = seeded_store(tmp, engine)
        # A Git target on GitHub (scp-like remote), audited at SHA: its findings link to the file.
        store.sync_targets(
            [
                *(TargetSpec(t.name, t.kind, t.location) for t in store.targets()),
                TargetSpec("gh", "git", "git@github.com:acme/ml-infra.git"),
            ]
        )
        run_id = store.claim_run("gh", None, "cli", "h:1")
        store.complete_run(
            run_id,
            RunOutcome(
                "succeeded",
                SHA,
                [
                    finding("cheap-job", severity="high", cost=5.0),
                    finding("dear-job", severity="high", cost=900.0),
                    finding("low-job", severity="low", cost=5000.0),
                ],
            ),
        )
        ids = {f.workload.name: f.id for f in store.findings(FindingFilter(), 100).items}
        runner = AuditRunner(settings, store, Tools(None, None))
        app = create_app(store, runner, _Scheduler(), "")  # type: ignore[arg-type]
        with serving(app) as base, Browser() as browser:
            yield base, ids, browser


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


def load(site: Site, path: str, shot: str) -> str:
    """The page at desktop and phone width: it renders, logs nothing, has no script and no
    external asset, and does not overflow a 390 px wide phone screen."""
    base, _, browser = site
    desktop = browser.load(f"{base}{path}", 1280, 900, SHOTS / f"{shot}-desktop.png")
    assert desktop.messages == [], (path, desktop.messages)
    phone = browser.load(f"{base}{path}", 390, 844, SHOTS / f"{shot}-phone.png")
    assert phone.messages == [], (path, phone.messages)
    assert phone.scroll_width <= phone.viewport_width == 390, (path, phone.scroll_width)
    tags = elements(desktop.html)
    assert not any(t == "script" for t, _ in tags)  # no script at all, no CDN
    assert not any((a.get("src") or "").startswith("http") for _, a in tags)
    assert not any(t == "link" and (a.get("href") or "").startswith("http") for t, a in tags)
    return desktop.html


def test_the_fleet_overview_counts_by_severity_and_rule_with_cost_trend_and_top_groups(site: Site) -> None:
    html = load(site, "/", "web-overview")
    tags = elements(html)
    cards = {a["data-severity"]: a for t, a in tags if t == "a" and a.get("data-severity")}
    assert set(cards) == {"critical", "high", "medium", "low"}
    # lab: 1 cross-zone-blocked (critical) + 1 cross-zone-traffic; infra: evil (critical) + big-job
    # (medium); gh: two high and one low.
    assert (
        '<a class="card sev-critical" href="/findings?severity=critical" data-severity="critical"><b>2</b>'
        in html
    )
    assert 'data-severity="high"><b>2</b>' in html and 'data-severity="low"><b>1</b>' in html
    rules = [a["data-rule"] for t, a in tags if t == "tr" and a.get("data-rule")]
    assert rules[0] == "cross-zone-traffic" and "cross-zone-blocked" in rules
    assert sum(1 for t, a in tags if t == "svg" and a.get("class") == "chart") == 2
    assert [a["data-target"] for t, a in tags if t == "tr" and a.get("class") == "target"] == [
        "gh",
        "infra",
        "lab",
        "web",
    ]
    groups = html.split('id="top-groups"')[1]
    assert (
        groups.index("evil-job")
        < groups.index("dear-job")
        < groups.index("cheap-job")
        < groups.index("low-job")
    )
    assert "$2,450.00" in html  # big-job's cost in the total and its group


def test_findings_are_sorted_by_severity_then_cost_and_filter(site: Site) -> None:
    html = load(site, "/findings", "web-findings")
    rows = [a for t, a in elements(html) if t == "tr" and a.get("class") == "finding"]
    keys = [(RANK[a["data-severity"] or ""], -float(a["data-cost"] or 0)) for a in rows]
    assert keys == sorted(keys) and len(rows) == 7
    base, _, browser = site
    filtered = browser.load(f"{base}/findings?rule=cross-zone-blocked&target=lab").html
    assert [a["data-rule"] for t, a in elements(filtered) if t == "tr" and a.get("class") == "finding"] == [
        "cross-zone-blocked"
    ]
    assert 'id="empty"' in browser.load(f"{base}/findings?severity=low&target=lab").html
    assert call(f"{base}/findings?severity=bogus")[0] == 422


def test_git_findings_link_to_the_file_and_line_at_the_audited_revision(site: Site) -> None:
    base, ids, browser = site
    html = browser.load(f"{base}/findings?target=gh").html
    links = [
        a["href"] for t, a in elements(html) if t == "a" and (a.get("href") or "").startswith("https://")
    ]
    assert f"https://github.com/acme/ml-infra/blob/{SHA}/jobs/dear-job.yaml#L3" in links
    page = browser.load(f"{base}/findings/{ids['dear-job']}").html
    assert f'href="https://github.com/acme/ml-infra/blob/{SHA}/jobs/dear-job.yaml#L3"' in page
    # A directory target's paths stay text, and so does a Git host we do not know (example.com).
    lab = browser.load(f"{base}/findings?target=lab").html
    assert not any((a.get("href") or "").startswith("http") for t, a in elements(lab) if t == "a")
    assert 'class="source"><code>' in lab


def test_the_finding_page_has_the_map_history_and_fix_link(site: Site) -> None:
    _, ids, _ = site
    html = load(site, f"/findings/{ids['trainer-workers']}", "web-finding")
    tags = elements(html)
    edges = [a for t, a in tags if t == "path" and a.get("data-edge")]
    assert [e["class"] for e in edges] == ["edge denied crossing"]
    assert (edges[0]["data-from"], edges[0]["data-to"]) == ("zone-a", "zone-b")
    for policy in ("gpu-workers-stay-in-zone-a", "zone-a-only", "zone-b-only"):
        assert f"CiliumNetworkPolicy ml-demo/{policy}" in html
    assert html.count("<tr><td>") >= 2  # the history has both runs
    assert 'id="fix-link"' in html and 'id="group-link"' in html


def test_hostile_finding_text_is_escaped(site: Site) -> None:
    _, ids, _ = site
    html = load(site, f"/findings/{ids['evil-job']}", "web-hostile")
    tags = elements(html)
    assert not any(t == "script" for t, _ in tags)
    assert not any("onmouseover" in a for _, a in tags)
    assert "&lt;script&gt;alert" in html and "deny-&lt;all&gt;" in html


def test_target_page_counts_and_trends(site: Site) -> None:
    html = load(site, "/targets/lab", "web-target")
    tags = elements(html)
    assert sum(1 for t, a in tags if t == "svg" and a.get("class") == "chart") == 2
    assert sum(1 for t, _ in tags if t == "circle") == 4  # two runs on each chart
    assert 'data-severity="critical"><b>1</b>' in html
    assert 'id="cluster-map-link"' in html
    base, _, _ = site
    assert call(f"{base}/targets/..%2Fetc")[0] in (404, 422)


def test_the_cluster_map_shows_shut_zone_doors_and_the_groups_across_them(site: Site) -> None:
    html = load(site, "/targets/lab/map", "web-cluster-map")
    tags = elements(html)
    assert any(t == "svg" and a.get("class") == "clustermap" for t, a in tags)
    overall = {
        (a["data-from"], a["data-to"]): a["class"] for t, a in tags if t == "rect" and a.get("data-from")
    }
    # The seed lab's policies keep each zone to itself: zone-a → zone-b is shut for training traffic.
    assert overall[("zone-a", "zone-b")] in ("sq closed", "sq partial")
    assert overall[("zone-a", "zone-a")] in ("sq open", "sq partial")
    assert any(t == "g" and a.get("data-namespace") == "ml-demo" for t, a in tags)
    shut = [a for t, a in tags if t == "tr" and a.get("class") == "straddler shut"]
    assert shut and "ml-demo/trainer-workers" in html


def test_the_group_page_draws_the_whole_group(site: Site) -> None:
    html = load(site, "/targets/lab/groups/ml-demo/trainer-workers", "web-group")
    tags = elements(html)
    boxes = {(a["data-role"], a["data-zone"]) for t, a in tags if t == "g" and a.get("class") == "box"}
    assert ("trainer-workers", "zone-a") in boxes
    assert ("trainer-coordinator", "zone-b") in boxes  # the Deployment trainer-coordinator, one role
    assert "×4" in html  # replica count from the scan
    edges = [a for t, a in tags if t == "path" and a.get("data-edge")]
    assert any(e["class"].startswith("edge denied") for e in edges)
    base, _, _ = site
    assert call(f"{base}/targets/lab/groups/ml-demo/nope")[0] == 404


def test_maps_of_a_target_that_cannot_be_read_say_why(site: Site) -> None:
    base, ids, _ = site
    status, body, _ = call(f"{base}/targets/web/map")  # its directory does not exist
    assert status == 409 and "/nonexistent" in str(body)
    status, body, _ = call(f"{base}/targets/gh/map")  # in the store, no longer in the config
    assert status == 409 and "no target named 'gh'" in str(body)
    assert call(f"{base}/findings/{ids['dear-job']}/fix")[0] == 409


def test_the_fix_page_shows_the_proposed_diff(site: Site) -> None:
    _, ids, _ = site
    html = load(site, f"/findings/{ids['trainer-workers']}/fix", "web-fix")
    assert 'class="diff"' in html and '<span class="add">+' in html
    assert "topology.kubernetes.io/zone" in html


def test_the_pages_send_a_strict_content_security_policy(site: Site) -> None:
    base, ids, _ = site
    for path in ("/", "/findings", f"/findings/{ids['trainer-workers']}", "/targets/lab", "/targets/lab/map"):
        status, _, headers = call(f"{base}{path}")
        assert status == 200, path
        csp = headers["content-security-policy"]
        assert "default-src 'none'" in csp and "'sha256-" in csp and "unsafe-inline" not in csp
