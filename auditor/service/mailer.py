"""Sending the digest outbox over SMTP (STARTTLS, implicit TLS or plain; login from the config,
password from the environment). A digest is marked sent only after the server accepted it; a
failure keeps it pending with the error, to be retried on the next attempt."""

from __future__ import annotations

import logging
import smtplib
import ssl
from collections.abc import Mapping
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid

from auditor.service_config import SmtpSettings
from auditor.store.repository import Store

log = logging.getLogger("auditor.mailer")


class MailError(RuntimeError):
    pass


def message(smtp: SmtpSettings, digest: Mapping[str, object], now_header: str) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = smtp.sender
    msg["To"] = ", ".join(digest["recipients"])  # type: ignore[arg-type]
    msg["Subject"] = str(digest["subject"])
    msg["Date"] = now_header
    msg["Message-ID"] = make_msgid(f"digest-{digest['id']}", domain="placement-auditor")
    msg.set_content(str(digest["text"]))
    msg.add_alternative(str(digest["html"]), subtype="html")
    return msg


def send(smtp: SmtpSettings, msg: EmailMessage, environ: Mapping[str, str]) -> None:
    password = environ.get(smtp.password_env, "") if smtp.password_env else ""
    context = ssl.create_default_context()
    try:
        client: smtplib.SMTP
        if smtp.security == "tls":
            client = smtplib.SMTP_SSL(smtp.host, smtp.port, timeout=smtp.timeout_seconds, context=context)
        else:
            client = smtplib.SMTP(smtp.host, smtp.port, timeout=smtp.timeout_seconds)
        with client:
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
            client.send_message(msg)
    except smtplib.SMTPAuthenticationError as exc:
        raise MailError(
            f"the SMTP server {smtp.host}:{smtp.port} refused the login ({exc.smtp_code})"
        ) from None
    except (smtplib.SMTPException, OSError) as exc:
        raise MailError(
            f"sending through {smtp.host}:{smtp.port} failed: {type(exc).__name__}: {exc}"
        ) from None


def flush(store: Store, smtp: SmtpSettings, environ: Mapping[str, str]) -> tuple[int, list[str]]:
    """Send every pending digest; (sent, errors)."""
    sent, errors = 0, []
    for digest in store.pending_digests():
        try:
            send(smtp, message(smtp, digest, format_datetime(store.clock())), environ)
        except MailError as exc:
            store.digest_attempt(int(digest["id"]), str(exc))
            errors.append(f"digest {digest['id']} for {digest['team']}: {exc}")
            continue
        store.digest_attempt(int(digest["id"]), None)
        sent += 1
    return sent, errors
