"""--metrics-address is honoured: the plugin process listens there and nowhere else.

The process's own listening TCP sockets are read from /proc (its socket
inodes matched against /proc/<pid>/net/tcp and tcp6), so a second listener
or a wider bind would show. gRPC uses unix sockets only, so with metrics off
the process listens on no TCP port at all.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from accel_plugins.kubelet_emulator import Kubelet
from tests.reliability.plugin_process import PluginProcesses, nvidia_node

LISTEN = "0A"
START_TIMEOUT = 20.0


def listening(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket the process listens on."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = set()
    for table, width in (("tcp", 4), ("tcp6", 16)):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != LISTEN or fields[9] not in inodes:
                continue
            address, port = fields[1].split(":")
            # The kernel prints the address as 32-bit words in host (little-endian) order.
            raw = b"".join(bytes.fromhex(address[i : i + 8])[::-1] for i in range(0, width * 2, 8))
            found.add((str(ipaddress.ip_address(raw)), int(port, 16)))
    return found


def free_port(family: socket.AddressFamily, host: str) -> int:
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def ipv6_loopback() -> bool:
    try:
        free_port(socket.AF_INET6, "::1")
    except OSError:
        return False
    return True


@pytest.fixture
async def plugins(kubelet_dir: Path, tmp_path: Path) -> AsyncIterator[PluginProcesses]:
    processes = PluginProcesses(kubelet_dir, tmp_path)
    yield processes
    await processes.stop_all()


def healthz(host: str, port: int) -> int:
    url_host = f"[{host}]" if ":" in host else host
    with urllib.request.urlopen(f"http://{url_host}:{port}/healthz", timeout=5) as response:
        status: int = response.status
        return status


@pytest.mark.parametrize(
    ("family", "host", "flag"),
    [
        pytest.param(socket.AF_INET, "127.0.0.1", "127.0.0.1:{port}", id="ipv4-loopback"),
        pytest.param(socket.AF_INET6, "::1", "[::1]:{port}", id="ipv6-loopback"),
        pytest.param(socket.AF_INET, "0.0.0.0", ":{port}", id="all-ipv4-interfaces"),
    ],
)
async def test_the_process_listens_only_on_the_metrics_address(
    kubelet: Kubelet, plugins: PluginProcesses, family: socket.AddressFamily, host: str, flag: str
) -> None:
    if family == socket.AF_INET6 and not ipv6_loopback():
        pytest.skip("no IPv6 loopback here")
    port = free_port(family, host)
    node = nvidia_node()
    proc = await plugins.spawn(node, "--metrics-address", flag.format(port=port))
    # Metrics are served before the plugin registers.
    await kubelet.wait_for_resource(node.resource, timeout=START_TIMEOUT)
    assert listening(proc.pid) == {(host, port)}
    reach = "127.0.0.1" if host == "0.0.0.0" else host
    assert await asyncio.to_thread(healthz, reach, port) == 200


async def test_no_metrics_address_means_no_tcp_listener(
    kubelet: Kubelet, plugins: PluginProcesses
) -> None:
    node = nvidia_node()  # its argv says --metrics-address ""
    proc = await plugins.spawn(node)
    await kubelet.wait_for_resource(node.resource, timeout=START_TIMEOUT)
    assert listening(proc.pid) == set()
