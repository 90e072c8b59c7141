"""The config file: typed, validated once, unknown keys rejected with file, line and key path."""

from __future__ import annotations

from pathlib import Path

import pytest

from auditor.settings.config import ConfigError, load_settings


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "auditor.yaml"
    p.write_text(text)
    return p


def test_defaults_and_values(tmp_path: Path) -> None:
    s = load_settings(
        write(
            tmp_path,
            "kubernetes: {version: '1.34'}\ncost:\n  provider: azure\n  default_gradient_bytes: 1000\n",
        )
    )
    assert s.kubernetes.version_tuple() == (1, 34)
    assert s.topology.effective_pod_zone_labels(s.kubernetes) == ()
    assert s.cost.price().provider == "azure" and s.cost.price().per_moved_byte_usd == 0
    assert s.cost.default_gradient_bytes == 1000


def test_custom_price_needs_date_and_source(tmp_path: Path) -> None:
    ok = load_settings(
        write(
            tmp_path,
            "cost:\n  provider: onprem\n  prices:\n    onprem:\n      usd_per_unit: 0.005\n"
            "      unit: GiB\n      as_of: '2026-11-01'\n      source: contract 42\n",
        )
    )
    assert ok.cost.price().usd_per_unit == 0.005
    with pytest.raises(ConfigError) as err:
        load_settings(write(tmp_path, "cost:\n  prices:\n    onprem: {usd_per_unit: 0.005, unit: GB}\n"))
    assert (
        err.value.key == "cost.prices.onprem" and "as_of, source" in err.value.message and err.value.line == 3
    )


@pytest.mark.parametrize(
    ("text", "key", "line"),
    [
        ("kubernets: {}\n", "kubernets", 1),
        (
            "network:\n  cni: cilium\n  cilium:\n    enforcment_mode: always\n",
            "network.cilium.enforcment_mode",
            4,
        ),
        ("cost:\n  provider: aws\n  price: 1\n", "cost.price", 3),
        ("network: {cni: weave}\n", "network.cni", 1),
        ("cost: {provider: ibm}\n", "cost.provider", 1),
        ("kubernetes: {version: latest}\n", "kubernetes.version", 1),
        # YAML true is not a number, though Python's bool is an int.
        ("prometheus:\n  url: http://p\n  timeout_seconds: true\n", "prometheus.timeout_seconds", 3),
        ("cost:\n  intra_zone_gbps: false\n", "cost.intra_zone_gbps", 2),
        ("service:\n  port: true\n", "service.port", 2),
        ("network:\n  cni: generic\n  ephemeral_ports: 60999-32768\n", "network.ephemeral_ports", 3),
        ("network:\n  ephemeral_ports: 0-1000\n", "network.ephemeral_ports", 2),
        ("network:\n  ephemeral_ports: 32768-65536\n", "network.ephemeral_ports", 2),
        ("network:\n  ephemeral_ports: lots\n", "network.ephemeral_ports", 2),
        ("network:\n  ephemeral_ports: 32768\n", "network.ephemeral_ports", 2),  # an int, not a range
        ("network:\n  ephemeral_port: 32768-60999\n", "network.ephemeral_port", 2),
        ("sources:\n  kustomize_remote: yes please\n", "sources.kustomize_remote", 2),
        ("sources:\n  kustomise_remote: true\n", "sources.kustomise_remote", 2),
        (
            "sources:\n  kustomize_remote: false\n  render_timeout_seconds: 0\n",
            "sources.render_timeout_seconds",
            3,
        ),
        ("sources:\n  max_render_bytes: 1.5\n", "sources.max_render_bytes", 2),
    ],
)
def test_bad_keys_are_named(tmp_path: Path, text: str, key: str, line: int) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(write(tmp_path, text))
    assert err.value.key == key and err.value.line == line and str(tmp_path) in err.value.file


def test_sources_default_to_no_remote_and_can_opt_in(tmp_path: Path) -> None:
    assert load_settings(None).sources.kustomize_remote is False
    s = load_settings(write(tmp_path, "sources:\n  kustomize_remote: true\n  render_timeout_seconds: 30\n"))
    assert s.sources.kustomize_remote is True and s.sources.render_timeout_seconds == 30
    assert s.sources.max_render_bytes == 16 * 1024 * 1024


def test_ephemeral_ports_default_to_linux_and_can_be_set(tmp_path: Path) -> None:
    assert load_settings(None).network.ephemeral_ports == (32768, 60999)
    s = load_settings(write(tmp_path, "network:\n  ephemeral_ports: 1024-65535\n"))
    assert s.network.ephemeral_ports == (1024, 65535)
    assert load_settings(
        write(tmp_path, "network: {ephemeral_ports: '49152 65535'}\n")
    ).network.ephemeral_ports == (
        49152,
        65535,
    )
