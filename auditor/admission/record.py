"""One admission answer as the store, the metrics, the web page and the digest keep it.

The webhook (auditor/admission/server.py) makes one `AdmissionRecord` per AdmissionReview it
answers, whatever the answer: allowed, warned, denied, or allowed because it failed open (not
synced, a broken watch, over the time budget, an error). Plain values only: the store writes it,
the core never sees it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

OUTCOMES = ("allowed", "warned", "denied", "failed-open", "ignored")
"""`allowed`: nothing found; `warned`: allowed with warnings (warn mode); `denied`: deny mode and a
finding; `failed-open`: allowed with a warning because no answer could be trusted in time;
`ignored`: not ours to check (a subresource, a kind we do not audit, mode `off`)."""

MODES = ("warn", "deny", "off")


@dataclass(frozen=True, slots=True)
class AdmissionRecord:
    uid: str  # the AdmissionReview request uid
    at: datetime  # aware UTC, from the injected clock
    cluster: str  # the cluster the webhook serves (its context name, or "in-cluster")
    operation: str  # CREATE | UPDATE | DELETE | CONNECT
    api_version: str  # of the object (request.kind group/version)
    kind: str
    namespace: str  # "" for a cluster-scoped object
    name: str
    user: str  # request.userInfo.username
    mode: str  # warn | deny | off: the namespace's mode when answered
    outcome: str  # one of OUTCOMES
    dry_run: bool
    latency_ms: float  # from the request's arrival to the answer
    rules: tuple[str, ...] = ()  # rule ids of the findings it answered about (sorted, unique)
    groups: tuple[str, ...] = ()  # "namespace/name" of the workloads cut or checked with findings
    messages: tuple[str, ...] = ()  # the warning lines, or the denial message, as sent
    reason: str = ""  # failed-open and ignored: why (e.g. "model not synced")
    fingerprints: tuple[str, ...] = field(default=())  # the findings' fingerprints
