"""Traffic, price and slowdown model for a training group split across zones (pure).

Ring all-reduce: each of the N ring links carries 2(N−1)/N × G bytes per step (G = gradient bytes);
with the ring laid over k zones about k links cross a zone boundary. Parameter server: every worker
sends and receives G per step, so the workers outside the servers' zone move 2G each.
Monthly bytes = crossing bytes per step × steps per second × 30 days. Cost = bytes × price, in the
unit the provider bills (GB or GiB) and on the side it bills (both directions or the sender).
Slowdown: the extra communication time per step at inter-zone bandwidth and latency, relative to
the measured step time (assumes communication is not overlapped with compute).
"""

from __future__ import annotations

from dataclasses import dataclass

SECONDS_PER_MONTH = 30 * 24 * 3600


@dataclass(frozen=True, slots=True)
class Price:
    """Inter-zone transfer price. `per_moved_gb_usd` is what one byte moved between zones costs
    in total (AWS charges $0.01/GB on each side: $0.02 per GB moved)."""

    provider: str
    usd_per_unit: float
    unit: str  # GB | GiB
    charged: str  # "both directions" | "sender"
    as_of: str
    source: str

    @property
    def per_moved_byte_usd(self) -> float:
        per_byte = self.usd_per_unit / (1e9 if self.unit == "GB" else float(1 << 30))
        return per_byte * (2 if self.charged == "both directions" else 1)

    def describe(self) -> str:
        return (
            f"{self.provider}: ${self.usd_per_unit}/{self.unit} charged {self.charged} "
            f"(as of {self.as_of}, {self.source})"
        )


DEFAULT_PRICES: dict[str, Price] = {
    "aws": Price(
        "aws",
        0.01,
        "GB",
        "both directions",
        "2026-12-01",
        "aws.amazon.com/ec2/pricing/on-demand, Data Transfer within the same AWS Region",
    ),
    "gcp": Price("gcp", 0.01, "GiB", "sender", "2026-12-01", "cloud.google.com/vpc/pricing"),
    "azure": Price(
        "azure",
        0.0,
        "GB",
        "sender",
        "2026-12-01",
        "learn.microsoft.com, availability zones overview (no inter-zone charge)",
    ),
}


@dataclass(frozen=True, slots=True)
class NetworkModel:
    intra_zone_gbps: float = 100.0  # EFA/RDMA-class fabric inside a zone
    inter_zone_gbps: float = 25.0  # TCP between zones (EFA/RDMA does not cross zones on AWS)
    intra_zone_latency_ms: float = 0.05
    inter_zone_latency_ms: float = 1.0


@dataclass(frozen=True, slots=True)
class Estimate:
    monthly_cost_usd: float
    slowdown_pct: float | None
    assumptions: tuple[str, ...]


def estimate(
    pattern: str,
    ranks: int,
    gradient_bytes: float,
    steps_per_second: float,
    price: Price,
    network: NetworkModel,
    zones: int = 2,
    workers_outside: int | None = None,
) -> Estimate:
    if pattern == "parameter-server":
        outside = workers_outside if workers_outside is not None else ranks // 2
        per_step = 2 * outside * gradient_bytes
        model = f"parameter server: 2 × {outside} workers outside the servers' zone × G"
    else:
        per_step = zones * 2 * (ranks - 1) / ranks * gradient_bytes if ranks >= 2 and zones >= 2 else 0.0
        model = f"ring all-reduce over {ranks} ranks laid over {zones} zones: {zones} × 2(N−1)/N × G per step"
    monthly = per_step * steps_per_second * SECONDS_PER_MONTH
    cost = monthly * price.per_moved_byte_usd
    link_bytes = 2 * (ranks - 1) / ranks * gradient_bytes if ranks >= 2 else 0.0
    hops = 2 * (ranks - 1)
    t_intra = link_bytes * 8 / (network.intra_zone_gbps * 1e9) + hops * network.intra_zone_latency_ms / 1e3
    t_inter = link_bytes * 8 / (network.inter_zone_gbps * 1e9) + hops * network.inter_zone_latency_ms / 1e3
    step = 1.0 / steps_per_second if steps_per_second > 0 else 0.0
    slowdown = round(100 * (t_inter - t_intra) / step, 1) if step else None
    assumptions = (
        model,
        f"G = {gradient_bytes:.0f} gradient bytes, {steps_per_second} steps/s, 30-day month",
        f"price {price.describe()}",
        f"slowdown: {network.intra_zone_gbps} Gbit/s and {network.intra_zone_latency_ms} ms inside a zone, "
        f"{network.inter_zone_gbps} Gbit/s and {network.inter_zone_latency_ms} ms across, "
        "no overlap with compute",
    )
    return Estimate(round(cost, 2), slowdown, assumptions)
