"""The daily digest sent to a real SMTP server (aiosmtpd): both parts, routing per team, the
outbox retried after a refusal, nothing sent twice, and failed authentication kept in the outbox."""

from __future__ import annotations

import email
import socket
from collections.abc import Iterator
from email.message import Message
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, Envelope, Session
from dbsupport import engine_for
from storedata import seeded_store

from auditor.config import ConfigError, load_settings
from auditor.service import digests
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
        assert "BLOCKED TRAINING GROUPS (1)" in parts["text/plain"] and "evil-job" in parts["text/plain"]
        assert "$2,450.00/month ml-prod/big-job" in parts["text/plain"]
        assert "until 2026-12-10: moving next quarter" in parts["text/plain"]  # waiver expiring soon
        assert "<script>" not in parts["text/html"] and "&lt;script&gt;" in parts["text/html"]
        assert 'class="edge blocked"' in parts["text/html"]
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


def test_a_refused_digest_stays_in_the_outbox_and_is_retried(tmp_path: Path, smtp: tuple[Inbox, int]) -> None:
    inbox, port = smtp
    inbox.refuse = 1
    with engine_for("sqlite", tmp_path) as engine:
        store, _clock, settings = seeded_store(tmp_path, engine, _config(port))
        queued, sent, errors = digests.run(settings, store, {})  # type: ignore[arg-type]
        assert queued == 2 and sent == 1 and len(errors) == 1 and "451" in errors[0]
        assert sorted(d["status"] for d in store.digests()) == ["pending", "sent"]
        queued, sent, errors = digests.run(settings, store, {})  # type: ignore[arg-type]
        assert (queued, sent, errors) == (0, 1, [])
        assert len(inbox.messages) == 2 and {d["status"] for d in store.digests()} == {"sent"}
        assert max(d["attempts"] for d in store.digests()) == 2


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
            assert {d["status"] for d in store.digests()} == {"pending"}
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
            and {d["status"] for d in store.digests()} == {"pending"}
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
        assert [f["workload"]["labels"] for f in page.items] == [{"app": "trainer"}]
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
