"""Measured signals for live audits, from the Prometheus HTTP query API (`/api/v1/query`): for each
training group whose pods run now (observed findings), the bytes its pods send (priced: the cost
*from measurement* replaces the model's), GPU utilisation and policy drops of a blocked group
(queries and metrics: docs/cluster.md, "Measured signals"). For a group split across zones the
inter-AZ share is what each pod sends times the share of its peers in other zones (peers exchange
evenly, as in ring and tree all-reduce). Without a Prometheus URL (or when it does not answer) the
model is kept and the finding says so.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from auditor.inventory import Inventory
from auditor.model.cost import SECONDS_PER_MONTH
from auditor.model.findings import Finding
from auditor.model.objects import LivePod
from auditor.placement.observed import Observation, observe
from auditor.settings.config import PrometheusSettings, Settings

log = logging.getLogger("auditor.prometheus")

_LABEL_VALUE = re.compile(r"^[A-Za-z0-9._-]+$")  # namespace and pod names: safe inside a regex
_BLOCKED = ("cross-zone-blocked", "traffic-blocked")


class PrometheusError(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class Sample:
    labels: Mapping[str, str]
    value: float


class PrometheusClient:
    def __init__(self, settings: PrometheusSettings, token: str = "") -> None:
        self.base = settings.url.rstrip("/")
        self.timeout = settings.timeout_seconds
        self.token = token

    def query(self, promql: str) -> list[Sample]:
        url = f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode("utf-8", "replace")
            raise PrometheusError(f"HTTP {exc.code} for {promql!r}: {detail}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise PrometheusError(f"{self.base} did not answer: {exc}") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            raise PrometheusError(
                f"query {promql!r} failed: {body.get('error') if isinstance(body, dict) else body}"
            )
        data = body.get("data") or {}
        if data.get("resultType") != "vector":
            return []
        out = []
        for item in data.get("result") or []:
            try:
                out.append(Sample(dict(item.get("metric") or {}), float(item["value"][1])))
            except (KeyError, IndexError, TypeError, ValueError):
                continue
        return out


def _by_pod(samples: Iterable[Sample]) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in samples:
        pod = s.labels.get("pod") or s.labels.get("exported_pod") or ""
        if pod:
            out[pod] = out.get(pod, 0.0) + s.value
    return out


@dataclass(frozen=True, slots=True)
class GroupSignals:
    bytes_per_second: dict[str, float]  # pod → bytes/s sent
    gpu_util: dict[str, float]  # pod → %
    drops_per_second: float | None


def _group_signals(
    client: PrometheusClient, namespace: str, pods: Sequence[LivePod], window: str
) -> GroupSignals:
    names = "|".join(p.name for p in pods if _LABEL_VALUE.match(p.name))
    if not names or not _LABEL_VALUE.match(namespace):
        return GroupSignals({}, {}, None)
    sel = f'namespace="{namespace}", pod=~"{names}"'
    sent = _by_pod(
        client.query(f"sum by (pod) (rate(container_network_transmit_bytes_total{{{sel}}}[{window}]))")
    )
    gpu = _by_pod(
        client.query(
            f"avg by (pod) (DCGM_FI_DEV_GPU_UTIL{{{sel}}}) or avg by (exported_pod) "
            f'(DCGM_FI_DEV_GPU_UTIL{{exported_namespace="{namespace}", exported_pod=~"{names}"}})'
        )
    )
    towards = f'reason="POLICY_DENIED", destination=~"{namespace}/({names})"'
    drops_samples = client.query(f"sum(rate(hubble_drop_total{{{towards}}}[{window}]))")
    drops = sum(s.value for s in drops_samples) if drops_samples else None
    return GroupSignals(sent, gpu, drops)


def enrich(
    findings: Sequence[Finding],
    inv: Inventory,
    settings: Settings,
    environ: Mapping[str, str],
    observation: Observation | None = None,
) -> list[Finding]:
    """Observed findings with measured cost and evidence (or a note that the model was used).
    `observation`: where the live pods run, as the scan worked it out (computed here if None)."""
    observed = [f for f in findings if f.certainty == "observed"]
    if not observed:
        return list(findings)
    prom = settings.prometheus
    if not prom.url:
        note = "no Prometheus configured: cost from the model, no measured evidence"
        return [_note(f, note) if f.certainty == "observed" else f for f in findings]
    client = PrometheusClient(prom, environ.get(prom.bearer_token_env, "") if prom.bearer_token_env else "")
    if observation is None:
        observation = observe(inv.workloads, inv.live_pods, inv.nodes, settings.topology.zone_key)

    def group_of(f: Finding) -> list[tuple[LivePod, str]]:
        """The pods on both ends of the finding's edge (its workload's roles and the peer role)."""
        peer = f.edge.to_role if f.edge is not None else None
        w = f.workload
        out: list[tuple[LivePod, str]] = []
        for role, seen in observation.roles.items():
            ref = role.workload
            own = (ref.kind, ref.namespace, ref.name) == (w.kind, w.namespace, w.name)
            if own or (ref.namespace == w.namespace and role.name == peer):
                out.extend(seen.pods)
        return out

    price = settings.cost.price()
    out: list[Finding] = []
    for f in findings:
        if f.certainty != "observed" or f.rule not in ("cross-zone-traffic", *_BLOCKED):
            out.append(f)
            continue
        group = group_of(f)
        try:
            signals = _group_signals(client, f.workload.namespace, [p for p, _ in group], prom.window)
        except PrometheusError as exc:
            log.warning("Prometheus: %s", exc)
            out.append(
                _note(f, f"Prometheus did not answer ({exc}): cost from the model, no measured evidence")
            )
            continue
        out.append(_measured(f, group, signals, price.per_moved_byte_usd, prom.window, price.provider))
    return out


def _note(f: Finding, text: str) -> Finding:
    return dataclasses.replace(f, assumptions=(*f.assumptions, text))


def _measured(
    f: Finding,
    group: Sequence[tuple[LivePod, str]],
    signals: GroupSignals,
    per_byte_usd: float,
    window: str,
    provider: str,
) -> Finding:
    evidence: list[str] = []
    monthly = f.estimated_monthly_cost_usd
    assumptions = f.assumptions
    zones = Counter(z for _, z in group)
    total = len(group)
    if signals.bytes_per_second and f.rule == "cross-zone-traffic" and total >= 2:
        crossing = 0.0
        for pod, zone in group:
            rate = signals.bytes_per_second.get(pod.name, 0.0)
            crossing += rate * (total - zones[zone]) / (total - 1)
        sent = sum(signals.bytes_per_second.values())
        monthly = round(crossing * SECONDS_PER_MONTH * per_byte_usd, 2)
        evidence.append(
            f"the group's {total} pods send {sent / 1e6:,.1f} MB/s (container_network_transmit_bytes_total, "
            f"rate over {window}); about {crossing / 1e6:,.1f} MB/s crosses zones"
        )
        assumptions = (
            f"cost from measurement: crossing bytes × {SECONDS_PER_MONTH:,} s/month × the {provider} price; "
            "peers exchange evenly (ring or tree all-reduce)",
        )
    if signals.gpu_util and f.rule in _BLOCKED:
        mean = sum(signals.gpu_util.values()) / len(signals.gpu_util)
        evidence.append(
            f"GPU utilisation of the group's pods: {mean:.0f}% on average (DCGM_FI_DEV_GPU_UTIL, "
            f"{len(signals.gpu_util)} pod(s)) — {'idle behind the closed door' if mean < 5 else 'busy'}"
        )
    if signals.drops_per_second is not None and f.rule in _BLOCKED:
        evidence.append(
            f"policy drops towards the group: {signals.drops_per_second:.2f}/s "
            f"(hubble_drop_total, reason POLICY_DENIED, rate over {window})"
        )
    if not evidence:
        evidence.append("Prometheus has no series for these pods: cost from the model")
    return dataclasses.replace(
        f, estimated_monthly_cost_usd=monthly, assumptions=assumptions, evidence=tuple(evidence)
    )
