"""The daily digest sent to a real SMTP server (aiosmtpd): both parts, routing per team, the
outbox retried after a temporary refusal, nothing sent twice, failed authentication kept in the
outbox, one Message-ID per team and day (a resend after a late acknowledgement is a duplicate), a
permanent failure marks only that digest failed, and the config rejects unsafe names and addresses."""

from __future__ import annotations

import asyncio
import email
import re
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, timedelta
from email.message import Message
from pathlib import Path

import pytest
from admissionsupport import HOSTILE_MESSAGE, decision
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, Envelope, Session
from dbsupport import engine_for
from storedata import seeded_store

from auditor.service import digests
from auditor.settings.config import ConfigError, load_settings
from auditor.store.repository import FindingFilter


class Inbox:
    """An SMTP handler that can refuse the first N messages."""

    def __init__(self, refuse: int = 0) -> None:
        self.messages: list[tuple[list[str], Message]] = []
        self.refuse = refuse

    async def handle_DATA(self, server: object, session: Session, envelope: Envelope) -> str:
        if self.refuse > 0:
            self.refuse -= 1
            return "451 4.3.0 mailbox busy, try again later"
        raw = envelope.content if isinstance(envelope.content, bytes) else str(envelope.content).encode()
        self.messages.append((list(envelope.rcpt_tos), email.message_from_bytes(raw)))
        return "250 OK"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def smtp() -> Iterator[tuple[Inbox, int]]:
    inbox = Inbox()
    port = _port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield inbox, port
    finally:
        controller.stop()


def _config(port: int, extra: str = "") -> str:
    return (
        "digest:\n  base_url: http://auditor.example:8080\n"
        f"  smtp: {{host: 127.0.0.1, port: {port}, security: none, from: auditor@example.com, timeout_seconds: 5{extra}}}\n"
        "  teams:\n"
        "    - {name: ml-platform, to: [ml@example.com], namespaces: ['ml-r*', 'ml-p*']}\n"
        "    - {name: lab-owners, to: [lab@example.com, oncall@example.com], targets: [lab]}\n"
    )


def _parts(msg: Message) -> dict[str, str]:
    return {
        part.get_content_type(): part.get_payload(decode=True).decode()
        for part in msg.walk()
        if not part.is_multipart()
    }


def test_digests_are_routed_sent_once_and_escaped(tmp_path: Path, smtp: tuple[Inbox, int]) -> None:
    inbox, port = smtp
    with engine_for("sqlite", tmp_path) as engine:
        store, clock, settings = seeded_store(tmp_path, engine, _config(port))
        queued, sent, errors = digests.run(settings, store, {})  # type: ignore[arg-type]
        assert (queued, sent, errors) == (2, 2, [])
        by_rcpt = {tuple(r): m for r, m in inbox.messages}
        ml = by_rcpt[("ml@example.com",)]
        lab = by_rcpt[("lab@example.com", "oncall@example.com")]
        assert ml["From"] == "auditor@example.com" and ml.is_multipart()
        parts = _parts(ml)
        assert set(parts) == {"text/plain", "text/html"}
        # ml-platform sees the ml-* namespaces of every target: the blocked evil-job first, big-job's cost.
        assert (
            "BLOCKED TRAINING GROUPS: 1 (1 blocked edge finding)" in parts["text/plain"]
            and "evil-job" in parts["text/plain"]
        )
        assert "$2,450.00/month ml-prod/big-job" in parts["text/plain"]
        assert "until 2026-12-10: moving next quarter" in parts["text/plain"]  # waiver expiring soon
        assert "<script>" not in parts["text/html"] and "&lt;script&gt;" in parts["text/html"]
        html = parts["text/html"]
        assert "<svg" not in html  # mail clients do not render inline SVG: the map is a link
        assert re.search(r'href="http://auditor\.example:8080/findings/\d+"[^>]*>map and details</a>', html)
        # The summary comes first, and the first digest says it is the first (no "+$… since the last").
        text = parts["text/plain"]
        assert text.index("SUMMARY") < text.index("TOP GROUPS") < text.index("BLOCKED TRAINING GROUPS")
        assert "This is the first digest for ml-platform" in text and "since the last digest" not in text
        assert html.index('class="summary"') < html.index('class="groups"') < html.index('class="blocked"')
        assert "first digest" in html and "since the last digest" not in html
        assert "trainer-workers" not in parts["text/plain"]  # not this team's namespace
        # lab-owners see the lab target only, and the coverage problem of nothing else.
        lab_text = _parts(lab)["text/plain"]
        assert "trainer-workers" in lab_text and "evil-job" not in lab_text
        assert "1 blocked" in lab["Subject"]
        # Running again the same day sends nothing twice.
        assert digests.run(settings, store, {}) == (0, 0, [])  # type: ignore[arg-type]
        assert len(inbox.messages) == 2
        # Coverage: the failed target is reported to the team that covers every target, not to lab-owners.
        assert "web: last run failed: FileNotFoundError" in parts["text/plain"]
        assert "web:" not in lab_text
        # The next day there is a new digest.
        clock.advance(days=1)
        assert digests.run(settings, store, {})[:2] == (2, 2)  # type: ignore[arg-type]
        second = _parts(inbox.messages[-1][1])["text/plain"]
        assert "first digest" not in second and "Changes since the last digest" in second
        assert "+$0.00 since the last digest" in second  # nothing changed in cost


def test_a_refused_digest_stays_in_the_outbox_and_is_retried(tmp_path: Path, smtp: tuple[Inbox, int]) -> None:
    inbox, port = smtp
    inbox.refuse = 1
    with engine_for("sqlite", tmp_path) as engine:
        store, _clock, settings = seeded_store(tmp_path, engine, _config(port))
        queued, sent, errors = digests.run(settings, store, {})  # type: ignore[arg-type]
        assert queued == 2 and sent == 1 and len(errors) == 1 and "451" in errors[0]
        assert sorted(d.status for d in store.digests()) == ["pending", "sent"]
        queued, sent, errors = digests.run(settings, store, {})  # type: ignore[arg-type]
        assert (queued, sent, errors) == (0, 1, [])
        assert len(inbox.messages) == 2 and {d.status for d in store.digests()} == {"sent"}
        assert max(d.attempts for d in store.digests()) == 2


class _Auth:
    def __call__(
        self, server: object, session: object, envelope: object, mechanism: str, auth_data: object
    ) -> AuthResult:
        ok = (
            getattr(auth_data, "login", b"") == b"auditor" and getattr(auth_data, "password", b"") == b"right"
        )
        return AuthResult(success=ok, handled=False)


def test_rejected_authentication_and_a_server_that_is_down(tmp_path: Path) -> None:
    inbox = Inbox()
    port = _port()
    controller = Controller(
        inbox,
        hostname="127.0.0.1",
        port=port,
        authenticator=_Auth(),
        auth_required=True,
        auth_require_tls=False,
    )
    controller.start()
    try:
        with engine_for("sqlite", tmp_path) as engine:
            store, _, settings = seeded_store(
                tmp_path, engine, _config(port, ", username: auditor, password_env: SMTP_PASSWORD")
            )
            _, sent, errors = digests.run(settings, store, {"SMTP_PASSWORD": "wrong"})  # type: ignore[arg-type]
            assert sent == 0 and len(errors) == 2 and "refused the login" in errors[0]
            assert {d.status for d in store.digests()} == {"pending"}
            _, sent, errors = digests.run(settings, store, {"SMTP_PASSWORD": "right"})  # type: ignore[arg-type]
            assert (sent, errors) == (2, [])
            assert inbox.messages and "wrong" not in str(store.digests())
    finally:
        controller.stop()
    down = _port()
    (tmp_path / "2").mkdir()
    with engine_for("sqlite", tmp_path / "2") as engine:
        store, _, settings = seeded_store(tmp_path, engine, _config(down))
        _, sent, errors = digests.run(settings, store, {})  # type: ignore[arg-type]
        assert (
            sent == 0
            and errors
            and "failed" in errors[0]
            and {d.status for d in store.digests()} == {"pending"}
        )


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_teams_routed_by_workload_label(tmp_path: Path, smtp: tuple[Inbox, int], backend: str) -> None:
    """The labels come from the audited manifests (the seed's trainer-workers has app: trainer),
    through the store, to the team whose label patterns they match."""
    inbox, port = smtp
    config = (
        "digest:\n"
        f"  smtp: {{host: 127.0.0.1, port: {port}, security: none, from: auditor@example.com}}\n"
        "  teams:\n"
        "    - {name: trainers, to: [trainers@example.com], labels: {app: 'train*'}}\n"
        "    - {name: serving, to: [serving@example.com], labels: {app: serving}}\n"
        "    - {name: trainers-elsewhere, to: [x@example.com], labels: {app: trainer}, namespaces: [prod]}\n"
    )
    with engine_for(backend, tmp_path) as engine:
        store, _clock, settings = seeded_store(tmp_path, engine, config)
        page = store.findings(FindingFilter(target="lab"), 10)
        assert [f.workload.labels for f in page.items] == [{"app": "trainer"}]
        assert digests.run(settings, store, {})[1] == 3  # type: ignore[arg-type]
        by_rcpt = {tuple(r): _parts(m)["text/plain"] for r, m in inbox.messages}
        assert "trainer-workers" in by_rcpt[("trainers@example.com",)]
        assert "trainer-workers" not in by_rcpt[("serving@example.com",)]
        assert "evil-job" not in by_rcpt[("trainers@example.com",)]  # a workload without that label
        assert "trainer-workers" not in by_rcpt[("x@example.com",)]  # labels AND namespaces


def test_label_values_in_the_config_must_be_strings(tmp_path: Path) -> None:
    path = tmp_path / "auditor.yaml"
    path.write_text(
        "digest:\n  teams:\n    - name: t\n      to: [a@example.com]\n      labels:\n        tier: 1\n"
    )
    with pytest.raises(ConfigError) as err:
        load_settings(path)
    assert err.value.key == "digest.teams[0].labels.tier" and err.value.line == 6


class LateInbox(Inbox):
    """Accepts every message, but answers the first DATA only after `delay` seconds: past the
    client's timeout, so the client believes it failed although the message was delivered."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    async def handle_DATA(self, server: object, session: Session, envelope: Envelope) -> str:
        if self.delay:
            delay, self.delay = self.delay, 0.0
            raw = envelope.content if isinstance(envelope.content, bytes) else str(envelope.content).encode()
            self.messages.append((list(envelope.rcpt_tos), email.message_from_bytes(raw)))
            await asyncio.sleep(delay)
            return "250 OK"
        return await super().handle_DATA(server, session, envelope)


class RefusingInbox(Inbox):
    """Refuses some recipients at RCPT TO: permanently (550) or temporarily (450)."""

    def __init__(self, refuse: dict[str, str]) -> None:
        super().__init__()
        self.refused = refuse

    async def handle_RCPT(
        self, server: object, session: Session, envelope: Envelope, address: str, rcpt_options: list[str]
    ) -> str:
        if address in self.refused:
            return self.refused[address]
        envelope.rcpt_tos.append(address)
        return "250 OK"


@contextmanager
def _smtp_server(handler: Inbox) -> Iterator[int]:
    port = _port()
    controller = Controller(handler, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield port
    finally:
        controller.stop()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_resend_after_a_late_acknowledgement_carries_the_same_message_id(
    tmp_path: Path, backend: str
) -> None:
    inbox = LateInbox(delay=3)
    with _smtp_server(inbox) as port, engine_for(backend, tmp_path) as engine:
        config = _config(port).replace("timeout_seconds: 5", "timeout_seconds: 1")
        store, clock, settings = seeded_store(tmp_path, engine, config)
        queued, sent, errors = digests.run(settings, store, {})  # type: ignore[arg-type]
        assert (queued, sent) == (2, 1) and len(errors) == 1 and "kept for a retry" in errors[0]
        assert "TimeoutError" in errors[0] or "timed out" in errors[0]
        [late] = [d for d in store.digests() if d.status == "pending"]
        # The server did accept it: the message is there, the client just never heard.
        deadline = time.monotonic() + 10
        while len(inbox.messages) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert digests.run(settings, store, {}) == (0, 1, [])  # type: ignore[arg-type]
        ids = [m["Message-ID"] for _, m in inbox.messages]
        assert len(ids) == 3 and len(set(ids)) == 2  # the resend is a duplicate receivers drop
        [(first, resent)] = [
            (a, b)
            for i, a in enumerate(inbox.messages)
            for b in inbox.messages[i + 1 :]
            if a[1]["Message-ID"] == b[1]["Message-ID"]
        ]
        assert first[0] == resent[0]
        day = clock.now.astimezone(UTC).date().isoformat()
        team = "ml-platform" if first[0] == ["ml@example.com"] else "lab-owners"
        assert re.fullmatch(rf"<digest-{team}-{day}-[0-9a-f]{{12}}@placement-auditor\.invalid>", ids[0])
        assert {d.message_id for d in store.digests()} == set(ids)
        assert late.message_id == resent[1]["Message-ID"]
        # The next day: new Message-IDs.
        clock.advance(days=1)
        digests.run(settings, store, {})  # type: ignore[arg-type]
        assert len({m["Message-ID"] for _, m in inbox.messages}) == 4


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_permanent_failure_marks_that_digest_failed_and_the_others_are_sent(
    tmp_path: Path, backend: str
) -> None:
    inbox = RefusingInbox(
        {"lab@example.com": "550 5.1.1 no such user", "oncall@example.com": "550 5.1.1 no such user"}
    )
    with _smtp_server(inbox) as port, engine_for(backend, tmp_path) as engine:
        store, clock, settings = seeded_store(tmp_path, engine, _config(port))
        # A row queued by an older version (or by hand): a CRLF team name and no real address.
        now = clock.now
        store.enqueue_digest(
            "evil\r\nBcc: victim@example.com", now, now, ["x@example.com"], "s", "t", "<p>h</p>"
        )
        store.enqueue_digest("bad-address", now, now, ["a@b.example>, victim@example.com"], "s", "t", "h")
        queued, sent, errors = digests.run(settings, store, {})  # type: ignore[arg-type]
        assert (queued, sent) == (2, 1) and len(errors) == 3
        rows = {d.team: d for d in store.digests()}
        assert rows["ml-platform"].status == "sent"
        assert (
            rows["lab-owners"].status == "failed"
            and "550 5.1.1 no such user" in rows["lab-owners"].last_error
        )
        assert rows["evil\r\nBcc: victim@example.com"].status == "failed"
        assert "team name" in rows["evil\r\nBcc: victim@example.com"].last_error
        assert (
            rows["bad-address"].status == "failed"
            and "not a plain e-mail address" in rows["bad-address"].last_error
        )
        assert [r for r, _ in inbox.messages] == [["ml@example.com"]]
        assert all("victim" not in str(m) for _, m in inbox.messages)
        # Failed rows are not retried.
        assert digests.run(settings, store, {}) == (0, 0, [])  # type: ignore[arg-type]
        assert {d.team: d.attempts for d in store.digests()}["lab-owners"] == 1


def test_a_temporarily_refused_recipient_stays_queued(tmp_path: Path) -> None:
    inbox = RefusingInbox({"ml@example.com": "450 4.2.1 mailbox busy"})
    with _smtp_server(inbox) as port, engine_for("sqlite", tmp_path) as engine:
        store, _clock, settings = seeded_store(tmp_path, engine, _config(port))
        _, sent, errors = digests.run(settings, store, {})  # type: ignore[arg-type]
        assert sent == 1 and len(errors) == 1 and "450 4.2.1" in errors[0]
        assert {d.team: d.status for d in store.digests()} == {
            "ml-platform": "pending",
            "lab-owners": "sent",
        }
        inbox.refused = {}
        assert digests.run(settings, store, {})[1:] == (1, [])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("team", "key", "line", "message"),
    [
        (
            '    - name: "ml\\r\\nBcc: victim@example.com"\n      to: [ml@example.com]\n',
            "digest.teams[0].name",
            4,
            "one line",
        ),
        (
            "    - name: ml\n      to:\n        - ml@example.com\n        - 'a,b@example.com'\n",
            "digest.teams[0].to[1]",
            7,
            "not a plain",
        ),
        (
            "    - name: ml\n      to: ['ml@example.com>\\nBcc: v@example.com']\n",
            "digest.teams[0].to[0]",
            5,
            "not a plain",
        ),
        (
            "    - {name: ml, to: [a@example.com]}\n    - {name: ml, to: [b@example.com]}\n",
            "digest.teams[1].name",
            5,
            "duplicate",
        ),
    ],
)
def test_config_rejects_unsafe_team_names_and_addresses(
    tmp_path: Path, team: str, key: str, line: int, message: str
) -> None:
    path = tmp_path / "auditor.yaml"
    path.write_text("digest:\n  smtp: {host: localhost}\n  teams:\n" + team)
    with pytest.raises(ConfigError) as err:
        load_settings(path)
    assert (err.value.key, err.value.line) == (key, line) and message in str(err.value)
    assert str(path) in str(err.value.file)


def test_config_rejects_a_bad_message_id_domain(tmp_path: Path) -> None:
    path = tmp_path / "auditor.yaml"
    path.write_text("digest:\n  smtp:\n    host: localhost\n    message_id_domain: 'x>\\r\\nBcc: y'\n")
    with pytest.raises(ConfigError) as err:
        load_settings(path)
    assert (err.value.key, err.value.line) == ("digest.smtp.message_id_domain", 4)
    assert "a domain name" in err.value.message


def test_the_largest_digest_stays_under_the_clipping_size(tmp_path: Path, smtp: tuple[Inbox, int]) -> None:
    """150 blocked groups with long messages: the HTML part stays below 100 KB (Gmail clips
    past ~102 KB), lists ten of each and says how many more, with a link to the web page."""
    from factory import finding

    from auditor.store.repository import RunOutcome, TargetSpec

    inbox, port = smtp
    with engine_for("sqlite", tmp_path) as engine:
        store, _, settings = seeded_store(tmp_path, engine, _config(port))
        store.sync_targets(
            [
                *(TargetSpec(t.name, t.kind, t.location) for t in store.targets()),
                TargetSpec("big", "git", "https://example.com/big.git"),
            ]
        )
        run_id = store.claim_run("big", None, "cli", "h:1")
        many = [
            finding(
                f"job-{i:03d}",
                rule="cross-zone-blocked",
                severity="critical",
                namespace="ml-research",
                message=f"job-{i:03d}: Worker → Master is denied " + "because of the policy " * 40,
            )
            for i in range(150)
        ]
        store.complete_run(run_id, RunOutcome("succeeded", "0" * 40, many))
        digests.run(settings, store, {})  # type: ignore[arg-type]
        ml = next(m for r, m in inbox.messages if r == ["ml@example.com"])
        parts = _parts(ml)
        html, text = parts["text/html"], parts["text/plain"]
        assert len(html.encode()) < 100_000, len(html.encode())
        assert "<svg" not in html
        assert "Blocked training groups: 151 (151 blocked edge findings)" in html  # evil-job and the 150
        assert html.count('class="blocked"') == 10 and "and 141 more blocked finding(s)" in html
        assert (
            "and 141 more" in text
            and text.count("map and details: http://auditor.example:8080/findings/") == 10
        )
        assert html.count('class="group"') == 10 and "more" in html


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_denials_at_admission_since_the_window_are_listed(
    tmp_path: Path, smtp: tuple[Inbox, int], backend: str
) -> None:
    """A `kubectl apply` the webhook denied in the window reaches the team of its namespace, in both
    parts and escaped; warnings and dry runs are counted, not listed; a denial before the window,
    or in another team's namespace, is not there; a team with nothing stopped gets no section."""
    inbox, port = smtp
    with engine_for(backend, tmp_path) as engine:
        store, clock, settings = seeded_store(tmp_path, engine, _config(port))
        now = clock()
        answers = [
            decision("apply-1", now - timedelta(hours=2), name="evil-apply", messages=(HOSTILE_MESSAGE,)),
            decision("warn-1", now - timedelta(hours=3), "warned"),
            decision("warn-2", now - timedelta(hours=4), "warned"),
            decision("dry-1", now - timedelta(hours=1), "denied", dry_run=True, name="dry-job"),
            decision("old-1", now - timedelta(hours=30), "denied", name="before-the-window"),
            decision("web-1", now - timedelta(hours=1), "denied", namespace="web", name="other-team"),
        ]
        for a in answers:
            assert store.record_admission(a)
        assert digests.run(settings, store, {})[:2] == (2, 2)  # type: ignore[arg-type]
        by_rcpt = {tuple(r): m for r, m in inbox.messages}
        ml = by_rcpt[("ml@example.com",)]
        text, html = _parts(ml)["text/plain"], _parts(ml)["text/html"]
        assert "STOPPED AT ADMISSION: 1 denied since" in text
        assert (
            "CREATE PyTorchJob ml-research/evil-apply [prod-eu] by alice@example.com: cross-zone-blocked"
            in text
        )
        assert "Warned (allowed with warnings): 2; dry runs that would have been denied: 1" in text
        assert "dry-job" not in text and "before-the-window" not in text and "other-team" not in text
        assert text.index("STOPPED AT ADMISSION") < text.index("CHANGES")
        assert 'class="admission"' in html and "evil-apply" in html and "dry-job" not in html
        assert "<script>alert" not in html and "&lt;script&gt;alert(&#34;admit&#34;)" in html
        assert "<img src=x" not in html
        assert ml["Subject"].endswith(", 1 denied at admission")
        lab = _parts(by_rcpt[("lab@example.com", "oncall@example.com")])
        assert "STOPPED AT ADMISSION" not in lab["text/plain"] and 'class="admission"' not in lab["text/html"]
        assert "at admission" not in by_rcpt[("lab@example.com", "oncall@example.com")]["Subject"]
        # The next digest covers only what came after this one.
        clock.advance(days=1)
        assert digests.run(settings, store, {})[:2] == (2, 2)  # type: ignore[arg-type]
        latest = {tuple(r): m for r, m in inbox.messages[-2:]}
        later = _parts(latest[("ml@example.com",)])
        assert (
            "STOPPED AT ADMISSION" not in later["text/plain"]
            and 'class="admission"' not in later["text/html"]
        )


def test_no_admission_answer_no_section(tmp_path: Path, smtp: tuple[Inbox, int]) -> None:
    inbox, port = smtp
    with engine_for("sqlite", tmp_path) as engine:
        store, clock, settings = seeded_store(tmp_path, engine, _config(port))
        # Allowed and failed-open answers are nothing a team must act on.
        store.record_admission(decision("ok-1", clock() - timedelta(hours=1), "allowed"))
        store.record_admission(
            decision("fo-1", clock() - timedelta(hours=1), "failed-open", reason="not synced")
        )
        assert digests.run(settings, store, {})[:2] == (2, 2)  # type: ignore[arg-type]
        for _, message in inbox.messages:
            parts = _parts(message)
            assert "STOPPED AT ADMISSION" not in parts["text/plain"]
            assert 'class="admission"' not in parts["text/html"]
