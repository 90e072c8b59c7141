"""CNI settings that change verdicts, and the label views each policy dialect sees.

Cilium enforces every policy kind (NetworkPolicy included) through security identities built
from a *filtered* label set: labels its `labels` setting drops cannot be selected by any policy.
Its current upstream default drops `topology.kubernetes.io/*` (cilium/cilium#43725), so a selector
on the zone label that Kubernetes 1.35 copies onto pods matches nothing unless the setting keeps it.
Calico and plain NetworkPolicy implementations see every label.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from auditor.reachability.endpoints import PodEndpoint

CNI_KINDS: tuple[str, ...] = ("generic", "cilium", "calico")
ENFORCEMENT_MODES: tuple[str, ...] = ("default", "always", "never")

# Cilium's identity pseudo-labels (pkg/k8s/apis/cilium.io const.go).
CILIUM_NS_LABEL = "io.kubernetes.pod.namespace"
CILIUM_NS_META = "io.cilium.k8s.namespace.labels."
CILIUM_SA_LABEL = "io.cilium.k8s.policy.serviceaccount"
CILIUM_CLUSTER_LABEL = "io.cilium.k8s.policy.cluster"

# The upstream default label filter (pkg/labelsfilter defaultLabelPrefixCfg, docs
# "Limiting Identity-Relevant Labels", plus topology.kubernetes.io since cilium/cilium#43725).
_DEFAULT_CILIUM_PATTERNS: tuple[str, ...] = (
    "reserved:.*",
    re.escape(CILIUM_NS_LABEL),
    re.escape(CILIUM_NS_META.rstrip(".")),
    re.escape("app.kubernetes.io"),
    re.escape(CILIUM_CLUSTER_LABEL),
    r"!io\.kubernetes",
    r"!kubernetes\.io",
    r"!statefulset\.kubernetes\.io/pod-name",
    r"!apps\.kubernetes\.io/pod-index",
    r"!batch\.kubernetes\.io/job-completion-index",
    r"!batch\.kubernetes\.io/controller-uid",
    r"!.*beta\.kubernetes\.io",
    r"!k8s\.io",
    r"!topology\.kubernetes\.io",
    r"!pod-template-generation",
    r"!pod-template-hash",
    r"!controller-revision-hash",
    r"!annotation.*",
    r"!controller-uid",
    r"!etcd_node",
)


@dataclass(frozen=True, slots=True)
class LabelPattern:
    source: str  # "" or "any" for every source
    regex: str
    ignore: bool

    def match_length(self, source: str, key: str) -> int:
        """Length of the match at the start of `key`, or -1 when the pattern does not apply."""
        if self.source not in ("", "any") and self.source != source:
            return -1
        m = _compiled(self.regex).match(key)
        return m.end() if m else -1


@lru_cache(maxsize=4096)
def _compiled(regex: str) -> re.Pattern[str]:
    return re.compile(regex)


def parse_label_pattern(text: str) -> LabelPattern:
    source, sep, rest = text.partition(":")
    if not sep:
        source, rest = "", text
    ignore = rest.startswith("!")
    if ignore:
        rest = rest[1:]
    if not rest:
        raise ValueError(f"invalid label pattern {text!r}: empty prefix")
    try:
        _compiled(rest)
    except re.error as exc:
        raise ValueError(f"invalid label pattern {text!r}: {exc}") from exc
    return LabelPattern(source, rest, ignore)


@dataclass(frozen=True, slots=True)
class LabelFilter:
    """Cilium's identity-relevant label filter (`labels` in cilium-config)."""

    patterns: tuple[LabelPattern, ...]
    whitelist: bool = False
    description: str = "Cilium upstream default"
    # Every label of every identity goes through the filter and the answer depends on the key
    # only: remember it per filter (a shared cache would hash all the patterns on every look-up).
    _memo: dict[tuple[str, str], bool] = field(
        default_factory=dict, init=False, compare=False, hash=False, repr=False
    )

    @staticmethod
    def cilium_default() -> LabelFilter:
        return _DEFAULT_FILTER

    @staticmethod
    def from_setting(text: str) -> LabelFilter:
        """The default patterns plus the space-separated user patterns, as cilium-agent builds it."""
        extra = tuple(parse_label_pattern(t) for t in text.split() if t)
        whitelist = any(not p.ignore for p in extra)
        return LabelFilter(_DEFAULT_FILTER.patterns + extra, whitelist, f"cilium default + {text.strip()!r}")

    def keeps(self, key: str, source: str = "k8s") -> bool:
        found = self._memo.get((key, source))
        if found is None:
            found = self._memo[(key, source)] = self._decide(key, source)
        return found

    def _decide(self, key: str, source: str) -> bool:
        included = ignored = 0
        for p in self.patterns:
            n = p.match_length(source, key)
            if n < 0:
                continue
            if p.ignore:
                # Go code keeps the shortest ignore match and the longest include match.
                if ignored == 0 or n < ignored:
                    ignored = n
            elif n > included:
                included = n
        return (not self.whitelist and ignored == 0) or included > ignored


_DEFAULT_FILTER = LabelFilter(tuple(parse_label_pattern(p) for p in _DEFAULT_CILIUM_PATTERNS))


@dataclass(frozen=True, slots=True)
class CiliumSettings:
    enforcement_mode: str = "default"
    label_filter: LabelFilter = field(default_factory=LabelFilter.cilium_default)
    # policy-cidr-match-mode: CIDR rules match in-cluster pods / nodes only when told to.
    cidr_match_pods: bool = False
    cidr_match_nodes: bool = False
    node_selector_labels: bool = False
    cluster_name: str = "default"


@dataclass(frozen=True, slots=True)
class NetworkSettings:
    """Which CNI enforces policy and the settings of it that change verdicts.

    `source` says where they came from (a cilium-config ConfigMap, the config file, or defaults),
    so reports can state the assumption.
    """

    cni: str = "generic"
    cilium: CiliumSettings = field(default_factory=CiliumSettings)
    # Plain NetworkPolicy implementations (Calico, kube-router, ...) match ipBlock against pod IPs
    # as the Kubernetes e2e suite expects; Cilium only with policy-cidr-match-mode=pods.
    ipblock_matches_pod_ips: bool = True
    source: str = "defaults"
    # NetworkPolicy for hostNetwork pods is implementation-defined. "node" (Cilium, Calico and most
    # plugins): selectors ignore them and their traffic is the node's. "pod": they are selected and
    # matched like any pod (what np-guard's netpol-analyzer assumes).
    host_network_pods: str = "node"

    def ipblock_matches_pods(self) -> bool:
        if self.cni == "cilium":
            return self.cilium.cidr_match_pods
        return self.ipblock_matches_pod_ips

    def ipblock_matches_nodes(self) -> bool:
        if self.cni == "cilium":
            return self.cilium.cidr_match_nodes
        return True

    def host_network_pods_are_pods(self) -> bool:
        return self.cni == "generic" and self.host_network_pods == "pod"

    def describe(self) -> str:
        if self.cni != "cilium":
            return (
                f"cni={self.cni} (from {self.source}), hostNetwork pods treated as {self.host_network_pods}"
            )
        c = self.cilium
        modes = [m for m, on in (("pods", c.cidr_match_pods), ("nodes", c.cidr_match_nodes)) if on]
        return (
            f"cni=cilium (from {self.source}): policy enforcement {c.enforcement_mode}, identity labels "
            f"{c.label_filter.description}, policy-cidr-match-mode={','.join(modes) or '(none)'}, "
            f"enable-node-selector-labels={str(c.node_selector_labels).lower()}"
        )


def settings_from_cilium_config(data: Mapping[str, object], source: str) -> tuple[NetworkSettings, list[str]]:
    """Read the verdict-relevant keys of a `cilium-config` ConfigMap's `data`.

    Returns the settings and a list of problems (key: message) for values we could not use.
    """
    problems: list[str] = []

    def text(key: str, default: str) -> str:
        value = data.get(key, default)
        return default if value is None else str(value).strip()

    mode = text("enable-policy", "default").lower()
    if mode not in ENFORCEMENT_MODES:
        problems.append(
            f"enable-policy: {mode!r} is not one of {', '.join(ENFORCEMENT_MODES)}; using default"
        )
        mode = "default"
    label_filter = LabelFilter.cilium_default()
    labels_setting = text("labels", "")
    if labels_setting:
        try:
            label_filter = LabelFilter.from_setting(labels_setting)
        except ValueError as exc:
            problems.append(f"labels: {exc}")
    cidr_modes = {
        m.strip() for m in text("policy-cidr-match-mode", "").replace(" ", ",").split(",") if m.strip()
    }
    unknown = cidr_modes - {"pods", "nodes"}
    if unknown:
        problems.append(f"policy-cidr-match-mode: unknown value(s) {', '.join(sorted(unknown))}")
    node_labels = text("enable-node-selector-labels", "false").lower() == "true"
    cluster = text("cluster-name", "default") or "default"
    cilium = CiliumSettings(
        mode, label_filter, "pods" in cidr_modes, "nodes" in cidr_modes, node_labels, cluster
    )
    return NetworkSettings("cilium", cilium, True, source), problems


def k8s_view(pod: PodEndpoint, settings: NetworkSettings) -> dict[str, str]:
    """The pod labels a NetworkPolicy / AdminNetworkPolicy selector can match under this CNI."""
    labels = pod.label_map
    if settings.cni == "cilium":
        keep = settings.cilium.label_filter.keeps
        return {k: v for k, v in labels.items() if keep(k)}
    return labels


def cilium_view(pod: PodEndpoint, settings: NetworkSettings) -> dict[str, str]:
    """The pod's Cilium identity labels, keyed both `key` and `k8s:key` (selectors may use either)."""
    keep = settings.cilium.label_filter.keeps
    raw: dict[str, str] = dict(pod.labels)
    raw[CILIUM_NS_LABEL] = pod.namespace
    for k, v in pod.namespace_labels:
        raw[CILIUM_NS_META + k] = v
    raw[CILIUM_SA_LABEL] = pod.service_account
    raw[CILIUM_CLUSTER_LABEL] = settings.cilium.cluster_name
    view: dict[str, str] = {}
    for k, v in raw.items():
        if keep(k):
            view[k] = v
            view["k8s:" + k] = v
    return view


def calico_view(pod: PodEndpoint) -> dict[str, str]:
    """Labels a Calico selector sees on a workload endpoint (pod labels, profile labels)."""
    view = dict(pod.labels)
    view["projectcalico.org/namespace"] = pod.namespace
    view["projectcalico.org/orchestrator"] = "k8s"
    view["projectcalico.org/serviceaccount"] = pod.service_account
    for k, v in pod.namespace_labels:
        view["pcns." + k] = v
    return view


def calico_namespace_view(pod: PodEndpoint) -> dict[str, str]:
    view = dict(pod.namespace_labels)
    view["projectcalico.org/name"] = pod.namespace
    return view
