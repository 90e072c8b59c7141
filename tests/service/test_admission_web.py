"""The admission webhook's answers on the web page and through GET /api/v1/admission, served by
uvicorn over real HTTP, on SQLite and PostgreSQL: escaped, counted over the last 24 hours of the
store's clock, paged, behind the read token when reads need it, and 4xx for bad filters."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from datetime import timedelta
from html.parser import HTMLParser
from pathlib import Path

import pytest
from admissionsupport import HOSTILE_MESSAGE, decision
from dbsupport import Clock
from httpsupport import call, serving
from sqlalchemy import Engine

from auditor.service.api import create_app
from auditor.service.runner import AuditRunner
from auditor.settings.config import load_settings
from auditor.sources.manifests import Tools
from auditor.store.repository import Store, TargetSpec

TOKEN = "adm1ssion-t0ken"


class _Scheduler:
    running = True

    def submit(self, run_id: int, target: str) -> None:
        raise AssertionError("not used")

    def refresh_schedules(self) -> None:
        raise AssertionError("not used")


Served = tuple[str, str, Store, Clock]  # open base URL, token-guarded base URL, store, clock


@pytest.fixture
def served(tmp_path: Path, engine: Engine, clock: Clock) -> Iterator[Served]:
    config = tmp_path / "auditor.yaml"
    config.write_text(f"service: {{catch_up: false}}\ntargets:\n  - name: lab\n    directory: '{tmp_path}'\n")
    settings = load_settings(config)
    store = Store(engine, clock)
    store.sync_targets(TargetSpec(t.name, t.kind, t.location) for t in settings.targets)
    runner = AuditRunner(settings, store, Tools(None, None), owner="test:1")
    now = clock()
    for answer in (
        decision("hostile", now - timedelta(minutes=5), messages=(HOSTILE_MESSAGE,), name="evil-apply"),
        decision("warned", now - timedelta(minutes=10), "warned", user="bob", groups=("ml-research/w",)),
        decision("dry", now - timedelta(minutes=1), "denied", dry_run=True, name="dry-apply"),
        decision("allowed", now - timedelta(minutes=2), "allowed"),
        decision("yesterday", now - timedelta(hours=30), "denied", cluster="lab", name="old-apply"),
    ):
        assert store.record_admission(answer)
    open_app = create_app(store, runner, _Scheduler(), TOKEN)  # type: ignore[arg-type]
    guarded = create_app(store, runner, _Scheduler(), TOKEN, read_token_required=True)  # type: ignore[arg-type]
    with serving(open_app) as base, serving(guarded) as guarded_base:
        yield base, guarded_base, store, clock


class _Text(HTMLParser):
    """The text of the element with id `section`, and every tag inside it."""

    def __init__(self, section: str) -> None:
        super().__init__()
        self.section, self.depth, self.text = section, 0, ""
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.depth or dict(attrs).get("id") == self.section:
            self.depth += 1
            self.tags.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if self.depth:
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.depth:
            self.text += data


def _section(html: str) -> _Text:
    parser = _Text("admission")
    parser.feed(html)
    return parser


def test_the_overview_lists_denials_and_warnings_escaped(served: Served) -> None:
    base, _, _, _ = served
    status, html, _ = call(f"{base}/")
    assert status == 200
    section = _section(html)
    assert "Admission" in section.text
    # The hostile message is text, never markup.
    assert "<script>alert" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(&#34;admit&#34;)&lt;/script&gt;" in html
    assert HOSTILE_MESSAGE in section.text and "script" not in section.tags and "img" not in section.tags
    rows = html[html.index('id="admission-decisions"') :]
    # Newest first: the dry run, the denial, the warning; not the allowed answer.
    assert rows.index('data-uid="dry"') < rows.index('data-uid="hostile"') < rows.index('data-uid="warned"')
    assert 'data-uid="allowed"' not in rows
    assert "dry-apply" in section.text and "(dry run)" in section.text
    assert "CREATE PyTorchJob ml-research/evil-apply" in section.text and "alice@example.com" in section.text
    assert "bob" in section.text and "ml-research/w" in section.text and "cross-zone-blocked" in section.text


def test_the_overview_counts_the_last_24_hours_of_the_store_clock(served: Served) -> None:
    base, _, _, clock = served

    def card(html: str, outcome: str) -> str:
        start = html.index(f'data-outcome="{outcome}"><b>') + len(f'data-outcome="{outcome}"><b>')
        return html[start : html.index("</b>", start)]

    html = call(f"{base}/")[1]
    # The denial of 30 hours ago is listed (the latest denials) but not counted; the dry run is
    # counted apart.
    assert [card(html, o) for o in ("denied", "warned", "allowed", "dry-run-denied")] == ["1", "1", "1", "1"]
    assert "old-apply" in html
    clock.advance(
        hours=23, minutes=58, seconds=30
    )  # the window now starts 90 s before the start: the dry run
    html = call(f"{base}/")[1]
    assert [card(html, o) for o in ("denied", "warned", "allowed", "dry-run-denied")] == ["0", "0", "0", "1"]


def test_the_api_pages_and_filters(served: Served) -> None:
    base, _, _, clock = served
    status, page, _ = call(f"{base}/api/v1/admission?limit=2")
    assert status == 200 and [d["uid"] for d in page["items"]] == ["dry", "allowed"]
    first = page["items"][0]
    assert first["dry_run"] is True and first["at"].endswith("Z") and first["rules"] == ["cross-zone-blocked"]
    assert set(first) >= {"cluster", "namespace", "kind", "name", "user", "outcome", "messages", "groups"}
    rest = call(f"{base}/api/v1/admission?limit=2&cursor={page['next_cursor']}")[1]
    assert [d["uid"] for d in rest["items"]] == ["hostile", "warned"]
    last = call(f"{base}/api/v1/admission?limit=2&cursor={rest['next_cursor']}")[1]
    assert [d["uid"] for d in last["items"]] == ["yesterday"] and last["next_cursor"] is None
    denied = call(f"{base}/api/v1/admission?outcome=denied")[1]
    assert [d["uid"] for d in denied["items"]] == ["dry", "hostile", "yesterday"]
    assert [d["uid"] for d in call(f"{base}/api/v1/admission?cluster=lab")[1]["items"]] == ["yesterday"]
    since = urllib.parse.quote((clock() - timedelta(minutes=3)).isoformat())
    assert [d["uid"] for d in call(f"{base}/api/v1/admission?since={since}")[1]["items"]] == [
        "dry",
        "allowed",
    ]
    failed = call(f"{base}/api/v1/admission?outcome=failed-open")[1]
    assert failed == {"items": [], "next_cursor": None}
    spec = call(f"{base}/api/v1/openapi.json")[1]
    assert "/api/v1/admission" in spec["paths"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("since=yesterday", 422),
        ("since=" + urllib.parse.quote("2026-13-01T00:00:00Z"), 422),
        ("outcome=rejected", 422),
        ("outcome=" + urllib.parse.quote("denied' OR '1'='1"), 422),
        ("cluster=" + urllib.parse.quote("a' OR 1=1 --"), 422),
        ("limit=0", 422),
        ("limit=501", 422),
        ("cursor=not-a-cursor", 400),
        # A findings cursor is not an admission one.
        ("cursor=djE6MTIz", 400),
        ("cursor=" + "A" * 100, 422),
    ],
)
def test_bad_filters_get_4xx_json(served: Served, query: str, expected: int) -> None:
    base, _, _, _ = served
    status, body, headers = call(f"{base}/api/v1/admission?{query}")
    assert status == expected and "json" in headers.get("content-type", ""), body
    assert isinstance(body, dict) and ("error" in body or "detail" in body)


def test_the_api_and_the_page_need_the_token_when_reads_do(served: Served) -> None:
    _, guarded, _, _ = served
    assert call(f"{guarded}/api/v1/admission")[0] == 401
    assert call(f"{guarded}/api/v1/admission", token="wrong")[0] == 401
    assert call(f"{guarded}/")[0] == 401
    status, page, _ = call(f"{guarded}/api/v1/admission", token=TOKEN)
    assert status == 200 and len(page["items"]) == 5
    assert call(f"{guarded}/api/v1/admission?since=nope", token=TOKEN)[0] == 422
