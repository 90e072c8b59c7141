"""Which ports a data-plane edge carries: the destination's kernel range (cluster setting, pod
sysctl), Open MPI's declared TCP BTL ports, or the ports the manifest declares."""

from __future__ import annotations

import pytest
from support import inventory

from auditor.workloads.dataports import parse_range
from auditor.workloads.edges import comm_edges

Edge = tuple[str, str, int | None, tuple[int, int]]


def edges(text: str, ephemeral: tuple[int, int] = (32768, 60999)) -> set[Edge]:
    inv = inventory(text=text)
    assert inv.errors == []
    return {
        (e.source.name, e.destination.name, e.port, e.ports) for e in comm_edges(inv.workloads, (), ephemeral)
    }


PYTORCH = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: train, namespace: ml}
spec:
  pytorchReplicaSpecs:
    Master: {replicas: 1, template: {spec: {containers: [{name: t, image: x}]}}}
    Worker: {replicas: 2, template: {spec: {WORKER_SPEC containers: [{name: t, image: x}]}}}
"""
SYSCTL = "securityContext: {sysctls: [{name: net.ipv4.ip_local_port_range, value: 'VALUE'}]}, "


def test_ring_edges_carry_the_cluster_range() -> None:
    got = edges(PYTORCH.replace("WORKER_SPEC ", ""), (1024, 65535))
    assert ("Worker", "Worker", None, (1024, 65535)) in got
    assert ("Worker", "Master", 23456, (23456, 23456)) in got  # the rendezvous keeps its port


def test_the_destination_pods_sysctl_narrows_its_range() -> None:
    got = edges(PYTORCH.replace("WORKER_SPEC ", SYSCTL.replace("VALUE", "40000 40999")))
    # The listening (destination) pod's kernel picks the port: edges *to* workers use their range.
    assert ("Worker", "Worker", None, (40000, 40999)) in got
    assert ("Master", "Worker", None, (40000, 40999)) in got
    assert ("Worker", "Master", None, (32768, 60999)) in got


@pytest.mark.parametrize("value", ["60999 32768", "abc", "0 100", "1024 70000", ""])
def test_an_invalid_sysctl_leaves_the_cluster_range(value: str) -> None:
    got = edges(PYTORCH.replace("WORKER_SPEC ", SYSCTL.replace("VALUE", value)))
    assert ("Worker", "Worker", None, (32768, 60999)) in got


MPI = """
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: mpi, namespace: ml}
spec:
  mpiReplicaSpecs:
    Launcher: {replicas: 1, template: {spec: {containers: [{name: l, image: x, LAUNCHER}]}}}
    Worker: {replicas: 2, template: {spec: {containers: [{name: w, image: x, WORKER}]}}}
"""


def mpi(launcher: str = "command: [mpirun]", worker: str = "command: [sshd]") -> str:
    return MPI.replace("LAUNCHER", launcher).replace("WORKER", worker)


@pytest.mark.parametrize(
    ("launcher", "worker", "expected"),
    [
        ("command: [mpirun]", "command: [sshd]", (32768, 60999)),
        (
            "env: [{name: OMPI_MCA_btl_tcp_port_min_v4, value: '5000'}, "
            "{name: OMPI_MCA_btl_tcp_port_range_v4, value: '100'}]",
            "command: [sshd]",
            (5000, 5099),
        ),
        ("command: [sshd]", "env: [{name: OMPI_MCA_btl_tcp_port_min_v4, value: '6000'}]", (6000, 65535)),
        (
            "args: [mpirun, --mca, btl_tcp_port_min_v4, '7000', --mca, btl_tcp_port_range_v4, '10']",
            "command: [x]",
            (7000, 7009),
        ),
    ],
    ids=["default", "launcher-env", "worker-env-min-only", "mpirun-args"],
)
def test_open_mpi_tcp_port_settings_are_the_data_plane_range(
    launcher: str, worker: str, expected: tuple[int, int]
) -> None:
    got = edges(mpi(launcher, worker))
    assert ("Worker", "Worker", None, expected) in got
    assert ("Launcher", "Worker", 22, (22, 22)) in got


VOLCANO = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: vc, namespace: ml}
spec:
  plugins: PLUGINS
  tasks:
  - {name: master, replicas: 1, template: {spec: {containers: [{name: t, image: x MASTER_PORTS}]}}}
  - {name: worker, replicas: 2, template: {spec: {containers: [{name: t, image: x}]}}}
"""


def volcano(plugins: str, master_ports: str = "") -> str:
    return VOLCANO.replace("PLUGINS", plugins).replace(" MASTER_PORTS", master_ports)


def test_volcano_svc_edges_use_the_declared_container_ports() -> None:
    got = edges(volcano("{svc: []}", ", ports: [{containerPort: 8080}, {containerPort: 9090}]"))
    to_master = {(e[2], e[3]) for e in got if e[1] == "master"}
    assert to_master == {(8080, (8080, 8080)), (9090, (9090, 9090))}  # declared: no range
    assert ("master", "worker", None, (32768, 60999)) in got  # workers declare none: the range


def test_volcano_pytorch_plugin_honours_its_port_argument_and_adds_the_ring() -> None:
    got = edges(volcano('{pytorch: ["--master=master", "--worker=worker", "--port=29500"]}'))
    assert ("worker", "master", 29500, (29500, 29500)) in got
    assert ("worker", "worker", None, (32768, 60999)) in got  # NCCL between ranks
    assert not [e for e in got if e[2] == 23456]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("32768-60999", (32768, 60999)),
        ("32768 60999", (32768, 60999)),
        ("9100-9100", (9100, 9100)),
        ("60999-32768", None),
        ("0-10", None),
        ("1-65536", None),
        ("a-b", None),
        ("1024", None),
    ],
)
def test_parse_range(text: str, expected: tuple[int, int] | None) -> None:
    assert parse_range(text) == expected
