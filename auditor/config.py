"""Typed settings, validated once; unknown keys are rejected with the file, line and key.

Every setting says its unit, default and why. The config file is YAML:

    kubernetes:
      version: "1.37"            # drives defaults that changed between releases
      default_namespace: default # for manifests without metadata.namespace
      extended_resource_toleration: false  # admission plugin: GPU pods tolerate their resource's taint
    topology:
      zone_key: topology.kubernetes.io/zone
      region_key: topology.kubernetes.io/region
      pod_zone_labels: null      # pod label → node label copied at binding; null = by version
    network:
      cni: auto                  # auto | generic | cilium | calico
      ipblock_matches_pod_ips: true
      host_network_pods: node    # node | pod: how a generic CNI treats hostNetwork pods
      ephemeral_ports: 32768-60999  # nodes' net.ipv4.ip_local_port_range: NCCL/Gloo/MPI data ports
      cilium:
        enforcement_mode: default
        labels: ""               # Cilium's `labels` setting (identity-relevant labels)
        policy_cidr_match_mode: ""
        enable_node_selector_labels: false
        cluster_name: default
    sources:
      kustomize_remote: false    # allow Kustomize to fetch remote resources (URLs, git repos)
      render_timeout_seconds: 120
      max_render_bytes: 16777216 # output of one kubectl kustomize / helm template
    cost: …                      # see CostSettings
    cluster:
      read_deadline_seconds: 300 # one live read, all pages and retries: past it the audit is partial
      snapshot_annotations: []   # extra annotation keys (or prefixes ending in /) a snapshot keeps
    database: …                  # the service's sections: see service_config.py
    service: …
    targets: […]
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from auditor import service_config, yamlio
from auditor.cost import DEFAULT_PRICES, NetworkModel, Price
from auditor.errors import ConfigError
from auditor.model.objects import REGION_KEY, ZONE_KEY
from auditor.reachability import cni as cni_settings
from auditor.service_config import (
    DatabaseSettings,
    DigestSettings,
    ReportSettings,
    ServiceSettings,
    TargetSettings,
)
from auditor.workloads.dataports import LINUX_EPHEMERAL, PortRange, parse_range

SECTIONS = (
    "kubernetes",
    "topology",
    "cluster",
    "network",
    "cost",
    "sources",
    "database",
    "service",
    "targets",
    "prometheus",
    "digest",
    "reports",
)

# The newest stable Kubernetes minor release when this version of the tool was written.
NEWEST_KUBERNETES = "1.37"
# PodTopologyLabels admission: beta and on by default from 1.35 (KEP-4742).
POD_TOPOLOGY_LABELS_SINCE = (1, 35)


@dataclass(frozen=True, slots=True)
class KubernetesSettings:
    version: str = NEWEST_KUBERNETES
    default_namespace: str = "default"
    # The ExtendedResourceToleration admission plugin: off upstream by default; GKE (and clusters
    # that enable it) make pods requesting e.g. nvidia.com/gpu tolerate NoSchedule taints of that key.
    extended_resource_toleration: bool = False

    def version_tuple(self) -> tuple[int, int]:
        major, _, minor = self.version.lstrip("v").partition(".")
        return int(major), int(minor.split(".")[0] or 0)


@dataclass(frozen=True, slots=True)
class TopologySettings:
    zone_key: str = ZONE_KEY
    region_key: str = REGION_KEY
    # (pod label, node label) pairs copied from the node onto the pod when it is bound. None
    # means: follow the Kubernetes version (zone and region from 1.35, nothing before).
    pod_zone_labels: tuple[tuple[str, str], ...] | None = None

    def effective_pod_zone_labels(self, k8s: KubernetesSettings) -> tuple[tuple[str, str], ...]:
        if self.pod_zone_labels is not None:
            return self.pod_zone_labels
        if k8s.version_tuple() >= POD_TOPOLOGY_LABELS_SINCE:
            return ((ZONE_KEY, ZONE_KEY), (REGION_KEY, REGION_KEY))
        return ()


@dataclass(frozen=True, slots=True)
class CiliumConfig:
    enforcement_mode: str = "default"
    labels: str = ""
    policy_cidr_match_mode: str = ""
    enable_node_selector_labels: bool = False
    cluster_name: str = "default"


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    cni: str = "auto"
    ipblock_matches_pod_ips: bool = True
    host_network_pods: str = "node"  # node | pod (generic CNI only; see reachability/cni.py)
    cilium: CiliumConfig = field(default_factory=CiliumConfig)
    # Ports (inclusive) the kernel picks from when NCCL, Gloo or MPI's TCP transport listen on
    # port 0: the nodes' net.ipv4.ip_local_port_range. Default: Linux's 32768-60999. A pod's own
    # sysctl of that name narrows it for that pod (workloads/dataports.py).
    ephemeral_ports: PortRange = LINUX_EPHEMERAL

    def to_settings(self, cni_kind: str, source: str) -> cni_settings.NetworkSettings:
        if cni_kind == "cilium":
            data = {
                "enable-policy": self.cilium.enforcement_mode,
                "labels": self.cilium.labels,
                "policy-cidr-match-mode": self.cilium.policy_cidr_match_mode,
                "enable-node-selector-labels": str(self.cilium.enable_node_selector_labels).lower(),
                "cluster-name": self.cilium.cluster_name,
            }
            settings, _ = cni_settings.settings_from_cilium_config(data, source)
            return settings
        return cni_settings.NetworkSettings(
            cni_kind,
            cni_settings.CiliumSettings(),
            self.ipblock_matches_pod_ips,
            source,
            self.host_network_pods,
        )


@dataclass(frozen=True, slots=True)
class CostSettings:
    """Inter-zone traffic pricing and the training defaults used when annotations are absent."""

    provider: str = "aws"  # key into prices
    prices: tuple[tuple[str, Price], ...] = tuple(DEFAULT_PRICES.items())
    default_gradient_bytes: float | None = None  # bytes per step; None: no estimate without annotation
    default_steps_per_second: float | None = None
    intra_zone_gbps: float = 100.0
    inter_zone_gbps: float = 25.0
    intra_zone_latency_ms: float = 0.05
    inter_zone_latency_ms: float = 1.0

    def price(self) -> Price:
        return dict(self.prices)[self.provider]

    def network(self) -> NetworkModel:
        return NetworkModel(
            self.intra_zone_gbps, self.inter_zone_gbps, self.intra_zone_latency_ms, self.inter_zone_latency_ms
        )


@dataclass(frozen=True, slots=True)
class SourcesSettings:
    """How a scanned tree's Kustomize directories and Helm charts are rendered (docs/config.md)."""

    # Remote Kustomize resources, bases and components (URLs, git@…, github.com/…): refused by
    # default, because auditing a repository must not reach the network or run what it fetches.
    kustomize_remote: bool = False
    # Seconds one `kubectl kustomize` or `helm template` may run before it is killed.
    render_timeout_seconds: float = 120.0
    # Bytes one render may print; the rendered YAML is read with the same ceiling as a file.
    max_render_bytes: int = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class PrometheusSettings:
    """Measured signals for live audits. Without a URL the model is used, and findings say so."""

    url: str = ""  # e.g. http://prometheus.monitoring:9090
    timeout_seconds: float = 10.0
    window: str = "1h"  # rate() window for bytes sent and drops
    bearer_token_env: str = ""  # variable holding a token for a protected Prometheus


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """Live cluster reads and snapshots of them."""

    # Seconds one read of a cluster may take, across every list page and retry: an API server
    # that stalls (answers slowly, never finishes a list) ends the read with what it has, and
    # the audit is partial instead of hanging a service run. Five minutes reads 150,000 pods.
    read_deadline_seconds: float = 300.0
    # Annotation keys a snapshot keeps beyond those the built-in audit reads (for CEL rules that
    # read `annotations`): exact keys, or prefixes ending in "/". Every other annotation is dropped.
    snapshot_annotations: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Settings:
    kubernetes: KubernetesSettings = field(default_factory=KubernetesSettings)
    topology: TopologySettings = field(default_factory=TopologySettings)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    cost: CostSettings = field(default_factory=CostSettings)
    source: str = "defaults"
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    service: ServiceSettings = field(default_factory=ServiceSettings)
    targets: tuple[TargetSettings, ...] = ()
    prometheus: PrometheusSettings = field(default_factory=PrometheusSettings)
    digest: DigestSettings | None = None
    reports: ReportSettings = field(default_factory=ReportSettings)
    sources: SourcesSettings = field(default_factory=SourcesSettings)
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    # Settings that work but expose a secret (service_config.warnings_for); the CLI prints them.
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def target(self, name: str) -> TargetSettings:
        for t in self.targets:
            if t.name == name:
                return t
        known = ", ".join(t.name for t in self.targets) or "none configured"
        raise ConfigError(self.source, 0, "--target", f"no target named {name!r} (known: {known})")


_SCHEMA: dict[str, dict[str, type | tuple[type, ...]]] = {
    "kubernetes": {"version": str, "default_namespace": str, "extended_resource_toleration": bool},
    "topology": {"zone_key": str, "region_key": str, "pod_zone_labels": (list, dict, type(None))},
    "network": {
        "cni": str,
        "ipblock_matches_pod_ips": bool,
        "host_network_pods": str,
        "ephemeral_ports": str,
        "cilium": dict,
    },
    "cost": {
        "provider": str,
        "prices": dict,
        "default_gradient_bytes": (int, float, type(None)),
        "default_steps_per_second": (int, float, type(None)),
        "intra_zone_gbps": (int, float),
        "inter_zone_gbps": (int, float),
        "intra_zone_latency_ms": (int, float),
        "inter_zone_latency_ms": (int, float),
    },
    "sources": {
        "kustomize_remote": bool,
        "render_timeout_seconds": (int, float),
        "max_render_bytes": int,
    },
    "cluster": {"read_deadline_seconds": (int, float), "snapshot_annotations": list},
    "prometheus": {"url": str, "timeout_seconds": (int, float), "window": str, "bearer_token_env": str},
    "cost.prices.*": {"usd_per_unit": (int, float), "unit": str, "charged": str, "as_of": str, "source": str},
    "network.cilium": {
        "enforcement_mode": str,
        "labels": str,
        "policy_cidr_match_mode": str,
        "enable_node_selector_labels": bool,
        "cluster_name": str,
    },
}


def _section(raw: Any, name: str, file: str) -> dict[str, Any]:
    try:
        return service_config.mapping(raw, name, _SCHEMA[name], file)
    except service_config.ServiceConfigError as exc:
        raise ConfigError(exc.file, exc.line, exc.key, exc.message) from None


def parse_settings(data: Any, file: str) -> Settings:
    if data is None:
        return Settings(source=file)
    if not isinstance(data, Mapping):
        raise ConfigError(file, 1, "(top)", "the config file must be a mapping")
    for key in data:
        if key not in SECTIONS:
            raise ConfigError(
                file,
                yamlio.key_line(data, str(key)),
                str(key),
                f"unknown section (known: {', '.join(sorted(SECTIONS))})",
            )
    base = Path(file).resolve().parent if file not in ("", "defaults") else Path.cwd()
    try:
        database = service_config.parse_database(data.get("database"), file)
        service = service_config.parse_service(data.get("service"), file, base)
        targets = service_config.parse_targets(data.get("targets"), file, base)
        digest = service_config.parse_digest(data.get("digest"), file)
        reports = service_config.parse_reports(data.get("reports"), file)
    except service_config.ServiceConfigError as exc:
        raise ConfigError(exc.file, exc.line, exc.key, exc.message) from None
    k8s = _section(data.get("kubernetes"), "kubernetes", file)
    topo = _section(data.get("topology"), "topology", file)
    net = _section(data.get("network"), "network", file)
    cil = _section(net.pop("cilium", None), "network.cilium", file)
    kubernetes = KubernetesSettings(**k8s)
    try:
        kubernetes.version_tuple()
    except ValueError:
        raise ConfigError(
            file,
            yamlio.key_line(data.get("kubernetes"), "version"),
            "kubernetes.version",
            f"must look like 1.35, got {kubernetes.version!r}",
        ) from None
    pzl = topo.pop("pod_zone_labels", None)
    pairs: tuple[tuple[str, str], ...] | None = None
    if isinstance(pzl, list):
        pairs = tuple((str(k), str(k)) for k in pzl)
    elif isinstance(pzl, Mapping):
        pairs = tuple((str(k), str(v)) for k, v in pzl.items())
    if net.get("cni", "auto") not in ("auto", *cni_settings.CNI_KINDS):
        raise ConfigError(
            file,
            yamlio.key_line(data.get("network"), "cni"),
            "network.cni",
            f"must be auto, {', '.join(cni_settings.CNI_KINDS)}; got {net['cni']!r}",
        )
    if net.get("host_network_pods", "node") not in ("node", "pod"):
        raise ConfigError(
            file,
            yamlio.key_line(data.get("network"), "host_network_pods"),
            "network.host_network_pods",
            "must be node or pod",
        )
    if "ephemeral_ports" in net:
        ports = parse_range(net["ephemeral_ports"])
        if ports is None:
            raise ConfigError(
                file,
                yamlio.key_line(data.get("network"), "ephemeral_ports"),
                "network.ephemeral_ports",
                "must be LO-HI with 1 <= LO <= HI <= 65535 (e.g. 32768-60999), "
                f"got {net['ephemeral_ports']!r}",
            )
        net["ephemeral_ports"] = ports
    if cil.get("enforcement_mode", "default") not in cni_settings.ENFORCEMENT_MODES:
        raise ConfigError(
            file,
            0,
            "network.cilium.enforcement_mode",
            f"must be one of {', '.join(cni_settings.ENFORCEMENT_MODES)}",
        )
    return Settings(
        kubernetes,
        TopologySettings(**topo, pod_zone_labels=pairs),
        NetworkConfig(**net, cilium=CiliumConfig(**cil)),
        _cost(data.get("cost"), file),
        source=file,
        database=database,
        service=service,
        targets=targets,
        prometheus=_prometheus(data.get("prometheus"), file),
        digest=digest,
        reports=reports,
        sources=_sources(data.get("sources"), file),
        cluster=_cluster(data.get("cluster"), file),
        warnings=service_config.warnings_for(targets, digest, file),
    )


def _sources(raw: Any, file: str) -> SourcesSettings:
    section = _section(raw, "sources", file)
    for key in ("render_timeout_seconds", "max_render_bytes"):
        if key in section and section[key] <= 0:
            raise ConfigError(file, yamlio.key_line(raw, key), f"sources.{key}", "must be a number > 0")
    return SourcesSettings(**section)


def _cluster(raw: Any, file: str) -> ClusterSettings:
    section = _section(raw, "cluster", file)
    deadline = float(section.get("read_deadline_seconds", 300.0))
    if deadline <= 0:
        raise ConfigError(
            file,
            yamlio.key_line(raw, "read_deadline_seconds"),
            "cluster.read_deadline_seconds",
            f"must be a positive number of seconds, got {section['read_deadline_seconds']!r}",
        )
    keys = section.get("snapshot_annotations", [])
    if not all(isinstance(k, str) and k for k in keys):
        raise ConfigError(
            file,
            yamlio.key_line(raw, "snapshot_annotations"),
            "cluster.snapshot_annotations",
            "must be a list of annotation keys (or prefixes ending in /)",
        )
    return ClusterSettings(deadline, tuple(keys))


def _prometheus(raw: Any, file: str) -> PrometheusSettings:
    section = _section(raw, "prometheus", file)
    url = section.get("url", "")
    if url and not re.match(r"^https?://[^\s/]+", url):
        raise ConfigError(file, yamlio.key_line(raw, "url"), "prometheus.url", f"not an http(s) URL: {url!r}")
    if not re.fullmatch(r"[0-9]+[smhd]", section.get("window", "1h")):
        raise ConfigError(
            file, yamlio.key_line(raw, "window"), "prometheus.window", "a duration such as 5m, 1h or 1d"
        )
    return PrometheusSettings(**section)


def _cost(raw: Any, file: str) -> CostSettings:
    section = _section(raw, "cost", file)
    prices = dict(DEFAULT_PRICES)
    for provider, value in (section.pop("prices", None) or {}).items():
        entry = _section(value, "cost.prices.*", file)
        line = yamlio.key_line(raw.get("prices"), str(provider))
        missing = {"usd_per_unit", "unit", "as_of", "source"} - set(entry)
        if missing:
            raise ConfigError(
                file,
                line,
                f"cost.prices.{provider}",
                f"missing {', '.join(sorted(missing))}: "
                "every price needs its amount, unit, date (as_of) and source",
            )
        charged = entry.get("charged", "sender")
        if entry["unit"] not in ("GB", "GiB") or charged not in ("sender", "both directions"):
            raise ConfigError(
                file,
                line,
                f"cost.prices.{provider}",
                "unit must be GB or GiB; charged must be 'sender' or 'both directions'",
            )
        prices[str(provider)] = Price(
            str(provider),
            float(entry["usd_per_unit"]),
            entry["unit"],
            charged,
            entry["as_of"],
            entry["source"],
        )
    out = CostSettings(prices=tuple(prices.items()), **section)
    if out.provider not in prices:
        raise ConfigError(
            file,
            yamlio.key_line(raw, "provider"),
            "cost.provider",
            f"no price for {out.provider!r} (have: {', '.join(sorted(prices))})",
        )
    return out


def load_settings(path: Path | None) -> Settings:
    if path is None:
        return Settings()
    docs, errors = yamlio.load_file(path, str(path))
    if errors:
        e = errors[0]
        raise ConfigError(e.file, e.line, "(file)", e.message)
    return parse_settings(docs[0].data if docs else None, str(path))


CONFIG_ENV = "AUDITOR_CONFIG"
CONFIG_FILE_NAME = ".placement-auditor.yaml"


def discover_config(start: Path, environ: Mapping[str, str]) -> Path | None:
    """The config file to use when no --config is given: ``$AUDITOR_CONFIG`` if set (it must
    exist), else the first ``.placement-auditor.yaml`` in `start` (the scanned repository's
    root, or the working directory) or a directory above it; None when there is none."""
    named = environ.get(CONFIG_ENV, "")
    if named:
        path = Path(named)
        if not path.is_file():
            raise ConfigError(CONFIG_ENV, 0, CONFIG_ENV, f"{named}: no such config file")
        return path
    here = start.resolve()
    for directory in (here, *here.parents):
        candidate = directory / CONFIG_FILE_NAME
        if candidate.is_file():
            return candidate
    return None
