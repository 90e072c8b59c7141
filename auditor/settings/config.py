"""Typed settings, validated once; unknown keys are rejected with the file, line and key.

Every setting says its unit, default and why (`schema.setting`). The config file is YAML with the
sections declared below (`Settings`) and the service's ones (`auditor.settings.service`); a commented
example is in docs/config.md, and docs/config-reference.md lists every key (generated from these
declarations by `config_reference`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from auditor import yamlio
from auditor.errors import ConfigError
from auditor.model.cost import DEFAULT_PRICES, NetworkModel, Price
from auditor.model.objects import REGION_KEY, ZONE_KEY
from auditor.reachability import cni as cni_settings
from auditor.settings.admission import AdmissionSettings
from auditor.settings.schema import Invalid, Where, field_docs, json_schema, read, setting
from auditor.settings.service import (
    HTTP_URL,
    AuthSettings,
    DatabaseSettings,
    DigestSettings,
    ReportSettings,
    ServiceSettings,
    TargetSettings,
    warnings_for,
)
from auditor.workloads.dataports import LINUX_EPHEMERAL, PortRange, parse_range, range_text

# The newest stable Kubernetes minor release when this version of the tool was written.
NEWEST_KUBERNETES = "1.37"
# PodTopologyLabels admission: beta and on by default from 1.35 (KEP-4742).
POD_TOPOLOGY_LABELS_SINCE = (1, 35)


def _version(text: str) -> tuple[int, int]:
    major, _, minor = text.lstrip("v").partition(".")
    return int(major), int(minor.split(".")[0] or 0)


def _version_problem(text: str) -> str | None:
    try:
        _version(text)
    except ValueError:
        return f"must look like 1.35, got {text!r}"
    return None


@dataclass(frozen=True, slots=True)
class KubernetesSettings:
    """The cluster the manifests are for."""

    version: str = setting(
        NEWEST_KUBERNETES,
        doc="Kubernetes minor release (e.g. 1.35).",
        why="defaults that changed between releases follow it (pod topology labels from 1.35).",
        check=_version_problem,
    )
    default_namespace: str = setting("default", doc="Namespace of manifests without metadata.namespace.")
    extended_resource_toleration: bool = setting(
        False,
        doc="The ExtendedResourceToleration admission plugin runs: pods requesting e.g. nvidia.com/gpu "
        "tolerate NoSchedule taints of that key.",
        why="off upstream by default; GKE (and clusters that enable it) do it.",
    )

    def version_tuple(self) -> tuple[int, int]:
        return _version(self.version)


def _pod_zone_labels(raw: Any) -> tuple[tuple[str, str], ...] | None:
    if raw is None:
        return None
    if isinstance(raw, list):
        return tuple((str(k), str(k)) for k in raw)
    if isinstance(raw, Mapping):
        return tuple((str(k), str(v)) for k, v in raw.items())
    raise Invalid(f"a list of label keys or a mapping pod label → node label (got {type(raw).__name__})")


@dataclass(frozen=True, slots=True)
class TopologySettings:
    """Which node labels name zones and regions."""

    zone_key: str = setting(ZONE_KEY, doc="Node label naming the zone.")
    region_key: str = setting(REGION_KEY, doc="Node label naming the region.")
    pod_zone_labels: tuple[tuple[str, str], ...] | None = setting(
        None,
        doc="Labels copied from the node onto the pod at binding (a list of keys, or pod label → node "
        "label); null: follow the Kubernetes version (zone and region from 1.35, nothing before).",
        parse=_pod_zone_labels,
        json={
            "anyOf": [
                {"type": "array", "items": {"type": "string"}},
                {"type": "object", "additionalProperties": {"type": "string"}},
                {"type": "null"},
            ]
        },
    )

    def effective_pod_zone_labels(self, k8s: KubernetesSettings) -> tuple[tuple[str, str], ...]:
        if self.pod_zone_labels is not None:
            return self.pod_zone_labels
        if k8s.version_tuple() >= POD_TOPOLOGY_LABELS_SINCE:
            return ((ZONE_KEY, ZONE_KEY), (REGION_KEY, REGION_KEY))
        return ()


def _label_filter(text: str) -> str | None:
    try:
        cni_settings.LabelFilter.from_setting(text)
    except ValueError as exc:
        return str(exc)
    return None


def _cidr_modes(text: str) -> frozenset[str]:
    return frozenset(m for m in text.replace(" ", ",").split(",") if m)


def _cidr_problem(text: str) -> str | None:
    unknown = _cidr_modes(text) - {"pods", "nodes"}
    return f"unknown value(s) {', '.join(sorted(unknown))} (pods, nodes)" if unknown else None


@dataclass(frozen=True, slots=True)
class CiliumConfig:
    """Cilium's settings that change verdicts (its `cilium-config` keys, when no ConfigMap is scanned)."""

    enforcement_mode: str = setting(
        "default", doc="Cilium `enable-policy`.", choices=cni_settings.ENFORCEMENT_MODES
    )
    labels: str = setting("", doc="Cilium `labels`: identity-relevant label patterns.", check=_label_filter)
    policy_cidr_match_mode: str = setting(
        "", doc="Cilium `policy-cidr-match-mode`: pods and/or nodes.", check=_cidr_problem
    )
    enable_node_selector_labels: bool = setting(False, doc="Cilium `enable-node-selector-labels`.")
    cluster_name: str = setting("default", doc="Cilium `cluster-name`.")


def _ephemeral(raw: Any) -> PortRange:
    found = parse_range(raw) if isinstance(raw, str) else None
    if found is None:
        raise Invalid(
            f"must be LO-HI with 1 <= LO <= HI <= 65535 (e.g. 32768-60999), got {raw!r}",
        )
    return found


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    """The CNI and how it enforces policy."""

    cni: str = setting(
        "auto", doc="auto: detected from the scanned objects.", choices=("auto", *cni_settings.CNI_KINDS)
    )
    ipblock_matches_pod_ips: bool = setting(
        True,
        doc="ipBlock rules match pod IPs (plain NetworkPolicy implementations do; Cilium only with "
        "policy-cidr-match-mode: pods).",
    )
    host_network_pods: str = setting(
        "node",
        doc="How a generic CNI treats hostNetwork pods: node (their traffic is the node's) or pod.",
        choices=("node", "pod"),
    )
    cilium: CiliumConfig = setting(doc="Cilium settings.", factory=CiliumConfig)
    ephemeral_ports: PortRange = setting(
        LINUX_EPHEMERAL,
        doc="Ports (inclusive) the kernel picks from when NCCL, Gloo or MPI's TCP transport listen on "
        "port 0: the nodes' net.ipv4.ip_local_port_range (a pod's own sysctl narrows it).",
        why="a data-plane edge is blocked only when every port of this range is denied.",
        parse=_ephemeral,
        json={"type": "string", "pattern": "^[0-9]+-[0-9]+$", "default": range_text(LINUX_EPHEMERAL)},
    )

    def to_settings(self, cni_kind: str, source: str) -> cni_settings.NetworkSettings:
        if cni_kind == "cilium":
            c = self.cilium
            modes = _cidr_modes(c.policy_cidr_match_mode)
            labels = (
                cni_settings.LabelFilter.from_setting(c.labels)
                if c.labels
                else cni_settings.LabelFilter.cilium_default()
            )
            cilium = cni_settings.CiliumSettings(
                c.enforcement_mode,
                labels,
                "pods" in modes,
                "nodes" in modes,
                c.enable_node_selector_labels,
                c.cluster_name or "default",
            )
            return cni_settings.NetworkSettings("cilium", cilium, True, source)
        return cni_settings.NetworkSettings(
            cni_kind,
            cni_settings.CiliumSettings(),
            self.ipblock_matches_pod_ips,
            source,
            self.host_network_pods,
        )


def _prices(raw: Any) -> tuple[tuple[str, Price], ...]:
    prices = dict(DEFAULT_PRICES)
    if raw is None:
        return tuple(prices.items())
    if not isinstance(raw, Mapping):
        raise Invalid("must be a mapping of provider → price")
    known = {"usd_per_unit": (int, float), "unit": str, "charged": str, "as_of": str, "source": str}
    for provider, entry in raw.items():
        name = str(provider)
        line = yamlio.key_line(raw, name)
        if not isinstance(entry, Mapping):
            raise Invalid("must be a mapping", name, line)
        for key, value in entry.items():
            if key not in known:
                raise Invalid(f"unknown key (known: {', '.join(sorted(known))})", f"{provider}.{key}", line)
            if isinstance(value, bool) or not isinstance(value, known[key]):  # type: ignore[arg-type]
                raise Invalid(f"has the wrong type ({type(value).__name__})", f"{provider}.{key}", line)
        missing = {"usd_per_unit", "unit", "as_of", "source"} - set(entry)
        if missing:
            raise Invalid(
                f"missing {', '.join(sorted(missing))}: "
                "every price needs its amount, unit, date (as_of) and source",
                name,
                line,
            )
        charged = entry.get("charged", "sender")
        if entry["unit"] not in ("GB", "GiB") or charged not in ("sender", "both directions"):
            raise Invalid("unit must be GB or GiB; charged must be 'sender' or 'both directions'", name, line)
        prices[name] = Price(
            name, float(entry["usd_per_unit"]), entry["unit"], charged, entry["as_of"], entry["source"]
        )
    return tuple(prices.items())


@dataclass(frozen=True, slots=True)
class CostSettings:
    """Inter-zone traffic pricing and the training defaults used when annotations are absent."""

    provider: str = setting("aws", doc="Key into prices.")
    prices: tuple[tuple[str, Price], ...] = setting(
        tuple(DEFAULT_PRICES.items()),
        doc="Provider → {usd_per_unit, unit: GB|GiB, charged: sender|both directions, as_of, source}, "
        "added to the built-in prices.",
        parse=_prices,
        json={
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "properties": {
                    "usd_per_unit": {"type": "number", "minimum": 0, "description": "USD per unit moved."},
                    "unit": {"enum": ["GB", "GiB"], "description": "The unit the price is per."},
                    "charged": {
                        "enum": ["sender", "both directions"],
                        "description": "Who pays: the sending side only, or both sides (AWS).",
                        "default": "sender",
                    },
                    "as_of": {"type": "string", "description": "Date the price was read (YYYY-MM-DD)."},
                    "source": {"type": "string", "description": "Where the price was read (a URL)."},
                },
                "required": ["usd_per_unit", "unit", "as_of", "source"],
                "additionalProperties": False,
            },
        },
    )
    default_gradient_bytes: float | None = setting(
        None,
        doc="Bytes per step when a workload has no gradient annotation; null: no estimate.",
        unit="bytes",
    )
    default_steps_per_second: float | None = setting(
        None, doc="Steps per second when a workload has no annotation; null: no estimate.", unit="steps/s"
    )
    intra_zone_gbps: float = setting(
        100.0, doc="Bandwidth inside a zone.", unit="Gbit/s", exclusive_minimum=0
    )
    inter_zone_gbps: float = setting(25.0, doc="Bandwidth between zones.", unit="Gbit/s", exclusive_minimum=0)
    intra_zone_latency_ms: float = setting(0.05, doc="Latency inside a zone.", unit="ms", minimum=0)
    inter_zone_latency_ms: float = setting(1.0, doc="Latency between zones.", unit="ms", minimum=0)

    def validated(self, raw: Any, where: Where, path: str, line: int) -> CostSettings:
        if self.provider not in dict(self.prices):
            raise where.error(
                f"{path}.provider",
                yamlio.key_line(raw, "provider", line),
                f"no price for {self.provider!r} (have: {', '.join(sorted(dict(self.prices)))})",
            )
        return self

    def price(self) -> Price:
        return dict(self.prices)[self.provider]

    def network(self) -> NetworkModel:
        return NetworkModel(
            self.intra_zone_gbps, self.inter_zone_gbps, self.intra_zone_latency_ms, self.inter_zone_latency_ms
        )


@dataclass(frozen=True, slots=True)
class SourcesSettings:
    """How a scanned tree's Kustomize directories and Helm charts are rendered (docs/config.md)."""

    kustomize_remote: bool = setting(
        False,
        doc="Allow remote Kustomize resources, bases and components (URLs, git@…, github.com/…).",
        why="auditing a repository must not reach the network or run what it fetches.",
    )
    render_timeout_seconds: float = setting(
        120.0,
        doc="One `kubectl kustomize` or `helm template` may run this long before it is killed.",
        unit="seconds",
        exclusive_minimum=0,
    )
    max_render_bytes: int = setting(
        16 * 1024 * 1024,
        doc="Bytes one render may print; the rendered YAML is read with the same ceiling as a file.",
        unit="bytes",
        exclusive_minimum=0,
    )


@dataclass(frozen=True, slots=True)
class PrometheusSettings:
    """Measured signals for live audits. Without a URL the model is used, and findings say so."""

    url: str = setting(
        "",
        doc="e.g. http://prometheus.monitoring:9090",
        pattern=f"({HTTP_URL})?",
        pattern_text="not an http(s) URL",
    )
    timeout_seconds: float = setting(
        10.0, doc="One query may take this long.", unit="seconds", exclusive_minimum=0
    )
    window: str = setting(
        "1h",
        doc="rate() window for bytes sent and drops.",
        pattern=r"[0-9]+[smhd]",
        pattern_text="a duration such as 5m, 1h or 1d",
    )
    bearer_token_env: str = setting(
        "", doc="Environment variable holding a token for a protected Prometheus."
    )


def _annotation_keys(keys: tuple[str, ...]) -> str | None:
    return None if all(keys) else "must be a list of annotation keys (or prefixes ending in /)"


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """Live cluster reads and snapshots of them."""

    read_deadline_seconds: float = setting(
        300.0,
        doc="One read of a cluster, across every list page and retry, may take this long; past it the "
        "audit is partial.",
        unit="seconds",
        why="an API server that stalls must not hang a service run; five minutes reads 150,000 pods.",
        exclusive_minimum=0,
    )
    snapshot_annotations: tuple[str, ...] = setting(
        (),
        doc="Annotation keys a snapshot keeps beyond those the built-in audit reads (for CEL rules): "
        "exact keys, or prefixes ending in /.",
        check=_annotation_keys,
    )


@dataclass(frozen=True, slots=True)
class AuditSettings:
    """What the audit core reads (inventory, placement, reachability, rules): nothing about
    databases, targets, mail or rendering. `source` names where the settings came from."""

    kubernetes: KubernetesSettings = field(default_factory=KubernetesSettings)
    topology: TopologySettings = field(default_factory=TopologySettings)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    cost: CostSettings = field(default_factory=CostSettings)
    source: str = "defaults"

    @classmethod
    def of(cls, settings: AuditView) -> AuditSettings:
        if isinstance(settings, AuditSettings):
            return settings
        return cls(settings.kubernetes, settings.topology, settings.network, settings.cost, settings.source)


class AuditView(Protocol):
    """Anything carrying the audit's settings (the config file's Settings, or AuditSettings)."""

    @property
    def kubernetes(self) -> KubernetesSettings: ...
    @property
    def topology(self) -> TopologySettings: ...
    @property
    def network(self) -> NetworkConfig: ...
    @property
    def cost(self) -> CostSettings: ...
    @property
    def source(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Settings:
    """The placement-auditor config file (docs/config.md)."""

    kubernetes: KubernetesSettings = setting(
        doc="The cluster the manifests are for.", factory=KubernetesSettings
    )
    topology: TopologySettings = setting(doc="Zone and region labels.", factory=TopologySettings)
    network: NetworkConfig = setting(doc="The CNI and its settings.", factory=NetworkConfig)
    cost: CostSettings = setting(doc="Inter-zone prices and training defaults.", factory=CostSettings)
    source: str = setting("defaults", doc="The file the settings came from.", internal=True)
    database: DatabaseSettings = setting(doc="The service's database.", factory=DatabaseSettings)
    service: ServiceSettings = setting(doc="`auditor serve`.", factory=ServiceSettings)
    targets: tuple[TargetSettings, ...] = setting((), doc="What the service audits.")
    prometheus: PrometheusSettings = setting(doc="Measured signals.", factory=PrometheusSettings)
    digest: DigestSettings | None = setting(None, doc="The daily digest e-mail.")
    reports: ReportSettings = setting(doc="Compliance reports.", factory=ReportSettings)
    sources: SourcesSettings = setting(doc="Rendering Kustomize and Helm.", factory=SourcesSettings)
    cluster: ClusterSettings = setting(doc="Live cluster reads.", factory=ClusterSettings)
    admission: AdmissionSettings = setting(
        doc="The admission webhook (`auditor admit`).", factory=AdmissionSettings
    )
    # Settings that work but expose a secret (service_config.warnings_for); the CLI prints them.
    warnings: tuple[str, ...] = field(default=(), compare=False, metadata={"internal": True})

    def validated(self, raw: Any, where: Where, path: str, line: int) -> Settings:
        names: set[str] = set()
        for i, t in enumerate(self.targets):
            if t.name in names:
                item = raw["targets"][i]
                raise where.error(
                    f"targets[{i}].name", yamlio.line_of(item, line), f"duplicate target name {t.name!r}"
                )
            names.add(t.name)
        cache = self.service.git_cache_dir
        service = replace(self.service, git_cache_dir=str(where.base / cache))
        digest = _team_digests(self.digest, self.service.auth, raw, where, line)
        return replace(
            self,
            source=where.file,
            service=service,
            digest=digest,
            warnings=warnings_for(self.targets, digest, where.file),
        )

    def target(self, name: str) -> TargetSettings:
        for t in self.targets:
            if t.name == name:
                return t
        known = ", ".join(t.name for t in self.targets) or "none configured"
        raise ConfigError(self.source, 0, "--target", f"no target named {name!r} (known: {known})")


def _team_digests(
    digest: DigestSettings | None, auth: AuthSettings | None, raw: Any, where: Where, line: int
) -> DigestSettings | None:
    """With per-team access (service.auth), each team's digest holds its own findings only: a
    digest team named like an access team sees what that team sees (its targets and namespaces,
    everything for an admin team) unless it narrows them itself; any other digest team must say
    what it covers, else it would mail every team's findings."""
    if digest is None or auth is None:
        return digest
    access = {t.name: t for t in auth.teams}
    teams = []
    for i, team in enumerate(digest.teams):
        known = access.get(team.name)
        at = yamlio.line_of(raw.get("digest"), line) if isinstance(raw, dict) else line
        if known is not None and known.role != "admin":
            narrowed = replace(
                team,
                targets=team.targets or known.targets,
                namespaces=team.namespaces or known.namespaces,
            )
            if not narrowed.targets and not narrowed.namespaces:
                raise where.error(
                    f"digest.teams[{i}]",
                    at,
                    f"access team {team.name!r} sees nothing: its digest would be empty",
                )
            # The digest keeps a finding matching both its targets and its namespaces (access: either),
            # so a team with both gets a digest within what it may see, never beyond it.
            teams.append(narrowed)
        elif known is None and not team.targets and not team.namespaces:
            raise where.error(
                f"digest.teams[{i}]",
                at,
                f"with service.auth, digest team {team.name!r} would get every team's findings: name it "
                "after an access team (service.auth.teams) or give it targets or namespaces",
            )
        else:
            teams.append(team)
    return replace(digest, teams=tuple(teams))


def parse_settings(data: Any, file: str) -> Settings:
    if data is None:
        return Settings(source=file)
    base = Path(file).resolve().parent if file not in ("", "defaults") else Path.cwd()
    return read(Settings, data, "", Where(file, base), 1)


def load_settings(path: Path | None) -> Settings:
    if path is None:
        return Settings()
    docs, errors = yamlio.load_file(path, str(path))
    if errors:
        e = errors[0]
        raise ConfigError(e.file, e.line, "(file)", e.message)
    return parse_settings(docs[0].data if docs else None, str(path))


def config_json_schema() -> str:
    """docs/schemas/config.schema.json (a test keeps the file current)."""
    schema = json_schema(
        Settings, "placement-auditor config file", "https://placement-auditor.dev/schemas/config.schema.json"
    )
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def config_reference() -> str:
    """docs/config-reference.md: every key with its default and description (a test keeps it current)."""
    lines = [
        "# Config file reference\n",
        "Generated from the settings declarations (`auditor/settings/config.py`, "
        "`auditor/settings/service.py`), like [schemas/config.schema.json](schemas/config.schema.json). "
        "See [config.md](config.md) for examples.\n",
        "| key | default | what, unit and why |",
        "|---|---|---|",
    ]
    for key, default, text in field_docs(Settings):
        cell = text.replace("|", "\\|").replace("\n", " ")
        shown = default if default in ("", "(required)") else f"`{default}`"
        lines.append(f"| `{key}` | {shown} | {cell} |")
    return "\n".join(lines) + "\n"


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
