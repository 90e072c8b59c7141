"""The digest use case: build each team's digest from the store, queue it in the outbox (one per
team per UTC day, with its Message-ID), and send what is pending (retrying temporary failures;
permanent ones are marked failed, see mailer.py)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from auditor.reports import digest as digests
from auditor.service import mailer, wire
from auditor.settings.config import Settings
from auditor.store.repository import Store


class NoDigestConfig(ValueError):
    pass


def build_all(settings: Settings, store: Store) -> list[tuple[digests.Digest, datetime, datetime]]:
    if settings.digest is None or not settings.digest.teams:
        raise NoDigestConfig("no digest section with teams in the config")
    now = store.clock()
    stored = store.export()
    export = wire.record_json(stored)
    trends = {t.name: [wire.record_json(r) for r in store.trend(t.name)] for t in stored.targets}
    out: list[tuple[digests.Digest, datetime, datetime]] = []
    # The admission webhook's answers of each digest window (teams mostly share one).
    admission: dict[datetime, dict[str, Any]] = {}
    for team in settings.digest.teams:
        last = store.last_digest_end(team.name)
        since = last or now - timedelta(days=1)
        changes = wire.record_json(store.changes_since(since))
        if since not in admission:
            admission[since] = wire.record_json(store.admission_summary(since))
        built = digests.build(
            team,
            settings.digest,
            export,
            changes,
            trends,
            since,
            now,
            first=last is None,
            admission=admission[since],
        )
        out.append((built, since, now))
    return out


def run(settings: Settings, store: Store, environ: Mapping[str, str]) -> tuple[int, int, list[str]]:
    """(queued, sent, errors). Each digest's Message-ID is fixed when it is queued: one per team and
    UTC day, whatever the number of attempts."""
    if settings.digest is None:
        raise NoDigestConfig("no digest section with teams in the config")
    queued = 0
    for d, since, now in build_all(settings, store):
        ident = mailer.message_id(
            d.team.name, now.astimezone(UTC).date(), settings.digest.smtp.message_id_domain
        )
        row = store.enqueue_digest(d.team.name, since, now, d.team.to, d.subject, d.text, d.html, ident)
        if row is not None:
            queued += 1
    sent, errors = mailer.flush(store, settings.digest.smtp, environ)
    return queued, sent, errors
