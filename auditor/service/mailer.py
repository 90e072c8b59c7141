"""Sending the digest outbox over SMTP (STARTTLS, implicit TLS or plain; login from the config,
password from the environment), exactly once as receivers see it.

- Each digest carries one Message-ID for its team and day, the same on every attempt: when the
  server accepted a message but the acknowledgement was lost (a client-side timeout), the resend is
  a duplicate receivers drop.
- A temporary failure (a 4xx answer, a refused connection, a timeout, a refused login) keeps the
  digest pending with the error, to be retried on the next attempt.
- A permanent failure (every recipient refused with 5xx, a 5xx for the sender or the data, an
  address that is not one, a header value with a line break) marks the digest failed with the
  reason; it is never retried and never stops the other teams' digests.
"""

from __future__ import annotations

import hashlib
import logging
import re
import smtplib
import ssl
from collections.abc import Mapping
from datetime import date
from email import policy
from email.message import EmailMessage
from email.utils import format_datetime

from auditor.settings.service import SmtpSettings, address_problem, team_name_problem
from auditor.store.records import DigestRecord
from auditor.store.repository import Store

_POLICY = policy.default.clone(max_line_length=998)
log = logging.getLogger("auditor.mailer")


class MailError(RuntimeError):
    """A digest was not sent; `permanent` when sending it again cannot succeed."""

    def __init__(self, message: str, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


def message_id(team: str, day: date, domain: str) -> str:
    """`<digest-TEAM-DAY-HASH@DOMAIN>`: TEAM reduced to letters, digits and dashes (readable), HASH
    of the exact team name and day (distinct teams never share one)."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", team).strip("-")[:40].strip("-") or "team"
    digest = hashlib.sha256(f"{team}\x1f{day.isoformat()}".encode()).hexdigest()[:12]
    return f"<digest-{slug}-{day.isoformat()}-{digest}@{domain}>"


def message(smtp: SmtpSettings, digest: DigestRecord, now_header: str) -> EmailMessage:
    """The e-mail of one outbox row; MailError (permanent) when the row cannot make a safe one."""
    team = digest.team
    problem = team_name_problem(team)
    if problem:
        raise MailError(f"team name: {problem}", permanent=True)
    recipients = digest.recipients
    if not recipients:
        raise MailError("no recipients", permanent=True)
    for address in recipients:
        problem = address_problem(address)
        if problem:
            raise MailError(f"recipient {problem}", permanent=True)
    ident = digest.message_id or message_id(team, digest.period_end.date(), smtp.message_id_domain)
    # Headers unfolded up to SMTP's line limit: a Message-ID on one line, as naive receivers expect.
    msg = EmailMessage(policy=_POLICY)
    try:
        msg["From"] = smtp.sender
        msg["To"] = ", ".join(str(a) for a in recipients)
        msg["Subject"] = digest.subject
        msg["Date"] = now_header
        msg["Message-ID"] = ident
    except ValueError as exc:  # a line break in a header value: an injected header
        raise MailError(f"unsafe header: {exc}", permanent=True) from None
    msg.set_content(digest.text)
    msg.add_alternative(digest.html, subtype="html")
    return msg


def _answer(code: int, text: bytes | str) -> str:
    return f"{code} {text.decode(errors='replace') if isinstance(text, bytes) else text}".strip()


def _classified(exc: smtplib.SMTPException | OSError, where: str) -> MailError:
    if isinstance(exc, smtplib.SMTPAuthenticationError):
        return MailError(f"the SMTP server {where} refused the login ({exc.smtp_code})")
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        detail = "; ".join(f"{a}: {_answer(c, t)}" for a, (c, t) in sorted(exc.recipients.items()))
        permanent = all(500 <= code < 600 for code, _ in exc.recipients.values())
        return MailError(f"{where} refused every recipient: {detail}", permanent)
    if isinstance(exc, smtplib.SMTPSenderRefused | smtplib.SMTPDataError):
        what = "sender" if isinstance(exc, smtplib.SMTPSenderRefused) else "message"
        return MailError(
            f"{where} refused the {what}: {_answer(exc.smtp_code, exc.smtp_error)}",
            500 <= exc.smtp_code < 600,
        )
    # Connection refused or lost, a timeout (perhaps after the server accepted: the resend carries
    # the same Message-ID), any other answer: try again later.
    return MailError(f"sending through {where} failed: {type(exc).__name__}: {exc}")


def send(smtp: SmtpSettings, msg: EmailMessage, environ: Mapping[str, str]) -> dict[str, str]:
    """Send one message; the recipients the server refused while accepting others (address →
    answer). MailError, temporary or permanent, when nothing was accepted."""
    password = environ.get(smtp.password_env, "")
    context = ssl.create_default_context()
    where = f"{smtp.host}:{smtp.port}"
    client: smtplib.SMTP | None = None
    try:
        if smtp.security == "tls":
            client = smtplib.SMTP_SSL(smtp.host, smtp.port, timeout=smtp.timeout_seconds, context=context)
        else:
            client = smtplib.SMTP(smtp.host, smtp.port, timeout=smtp.timeout_seconds)
        client.ehlo()
        if smtp.security == "starttls":
            client.starttls(context=context)
            client.ehlo()
        if smtp.username:
            if smtp.security == "none":
                log.warning(
                    "SMTP login %s to %s:%s without TLS: the password crosses the network "
                    "unencrypted (set digest.smtp.security to starttls or tls)",
                    smtp.username,
                    smtp.host,
                    smtp.port,
                )
            client.login(smtp.username, password)
        refused = client.send_message(msg)
    except (smtplib.SMTPException, OSError) as exc:
        if client is not None:
            client.close()  # no QUIT: its answer could be a late one to an earlier command
        raise _classified(exc, where) from None
    try:
        client.quit()
    except (smtplib.SMTPException, OSError):
        client.close()  # accepted already; a lost QUIT changes nothing
    return {str(a): _answer(c, t) for a, (c, t) in refused.items()}


def flush(store: Store, smtp: SmtpSettings, environ: Mapping[str, str]) -> tuple[int, list[str]]:
    """Send every pending digest, each on its own (one failing never stops the others);
    (sent, errors)."""
    sent, errors = 0, []
    for digest in store.pending_digests():
        ident = digest.id
        try:
            refused = send(smtp, message(smtp, digest, format_datetime(store.clock())), environ)
        except MailError as exc:
            store.digest_attempt(ident, str(exc), permanent=exc.permanent)
            state = "failed" if exc.permanent else "kept for a retry"
            errors.append(f"digest {ident} for {digest.team!r} {state}: {exc}")
            continue
        note = None
        if refused:
            note = "refused recipients: " + "; ".join(f"{a}: {r}" for a, r in sorted(refused.items()))
            errors.append(f"digest {ident} for {digest.team!r} sent; {note}")
        store.digest_attempt(ident, None, note=note)
        sent += 1
    return sent, errors
