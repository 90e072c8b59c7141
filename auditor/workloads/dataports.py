"""Which ports a data-plane connection (NCCL/Gloo all-reduce, MPI's TCP transport) can land on (pure).

Those transports listen on a port the kernel picks (bind to port 0), so a peer connects to some
port of the *destination* pod's ephemeral range, a different one per connection:

1. a transport's own port settings, where the manifest declares them: Open MPI's TCP BTL
   `btl_tcp_port_min_v4` and `btl_tcp_port_range_v4` (as `OMPI_MCA_…` env on the destination or on
   the workload's launcher — mpirun forwards MCA parameters from its environment — or as
   `--mca NAME VALUE` in the launcher's command or args): ports min … min+range−1;
2. else the pod's own kernel range: the namespaced safe sysctl `net.ipv4.ip_local_port_range`
   ("lo hi") in `spec.securityContext.sysctls`;
3. else the cluster's range (`network.ephemeral_ports`, Linux default 32768–60999).
"""

from __future__ import annotations

import re

from auditor.model.objects import Role

PortRange = tuple[int, int]

# Linux's default net.ipv4.ip_local_port_range.
LINUX_EPHEMERAL: PortRange = (32768, 60999)
SYSCTL = "net.ipv4.ip_local_port_range"
OMPI_PORT_MIN = "btl_tcp_port_min_v4"
OMPI_PORT_RANGE = "btl_tcp_port_range_v4"
# Open MPI's documented default for btl_tcp_port_range_v4 (ports 1024 … 65534 with the default min).
OMPI_DEFAULT_RANGE = 64511

_RANGE_TEXT = re.compile(r"^\s*(\d{1,5})\s*[- \t]\s*(\d{1,5})\s*$")


def parse_range(text: str) -> PortRange | None:
    """`lo-hi` or the sysctl's `lo hi`, within 1..65535 and lo ≤ hi; else None."""
    m = _RANGE_TEXT.match(text)
    if m is None:
        return None
    lo, hi = int(m.group(1)), int(m.group(2))
    return (lo, hi) if 1 <= lo <= hi <= 65535 else None


def range_text(ports: PortRange) -> str:
    return str(ports[0]) if ports[0] == ports[1] else f"{ports[0]}-{ports[1]}"


def sysctl_range(role: Role) -> PortRange | None:
    """The pod's `net.ipv4.ip_local_port_range`, if its template sets a valid one."""
    value = next((v for name, v in role.template.sysctls if name == SYSCTL), None)
    return None if value is None else parse_range(value)


def _mca_settings(role: Role) -> dict[str, str]:
    """Open MPI MCA parameters a role's containers set, from env and `--mca NAME VALUE` arguments."""
    found: dict[str, str] = {}
    for c in role.template.containers:
        for name, value in c.env:
            if name.startswith("OMPI_MCA_"):
                found[name.removeprefix("OMPI_MCA_")] = value
        words = [w for a in (*c.command, *c.args) for w in a.split()]
        for i, word in enumerate(words[:-2]):
            if word in ("--mca", "-mca"):
                found[words[i + 1]] = words[i + 2]
    return found


def ompi_range(role: Role, launcher: Role | None = None) -> PortRange | None:
    """Open MPI TCP BTL listening ports declared for the role (its own settings, else those of
    the workload's launcher, whose mpirun forwards them)."""
    for source in (role, launcher) if launcher is not None else (role,):
        mca = _mca_settings(source)
        low = mca.get(OMPI_PORT_MIN, "")
        if low.isdigit() and int(low) > 0:
            count = mca.get(OMPI_PORT_RANGE, "")
            span = int(count) if count.isdigit() and int(count) > 0 else OMPI_DEFAULT_RANGE
            lo = min(int(low), 65535)
            return lo, min(lo + span - 1, 65535)
    return None


def data_port_range(role: Role, cluster: PortRange = LINUX_EPHEMERAL) -> PortRange:
    """The kernel's range for a data-plane connection to `role` (steps 2 and 3 of the module
    docstring; an MPI edge asks `ompi_range` first)."""
    return sysctl_range(role) or cluster
