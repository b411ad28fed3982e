"""The test node's network namespace: every packet and iptables rule of the node stays in it.

Made with ``ip netns add`` (a named bind mount under /run/netns, so a killed run's
namespace is found and deleted at the next start), with ``lo`` up and a veth pair whose
one end carries the node IP and the default route (the kubelet refuses a loopback node
IP and needs a default route to pick its address; this kernel has no dummy driver).
Both ends stay inside: nothing routes out of it.

The pytest process itself enters it (setns on the main thread, before the node's
processes start), so the node's daemons inherit it and the tests reach the API server,
the pods and their /metrics without a proxy. ``ip netns exec`` is not used: it also
remounts /sys, which hides the cgroup mounts from the kubelet
(../shared/k8s/README.md).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/run/netns")


@dataclass(frozen=True)
class NetNs:
    name: str
    node_ip: str  # with the veth's prefix length: 10.213.0.2/24
    pod_subnet: str

    @property
    def path(self) -> Path:
        return NETNS_DIR / self.name

    @property
    def address(self) -> str:
        return self.node_ip.split("/")[0]

    def exists(self) -> bool:
        return self.path.exists()

    def create(self) -> None:
        _ip("netns", "add", self.name)
        _ip("-n", self.name, "link", "set", "lo", "up")
        _ip("-n", self.name, "link", "add", "node0", "type", "veth", "peer", "name", "node1")
        _ip("-n", self.name, "addr", "add", self.node_ip, "dev", "node0")
        _ip("-n", self.name, "link", "set", "node0", "up")
        _ip("-n", self.name, "link", "set", "node1", "up")
        _ip("-n", self.name, "route", "add", "default", "dev", "node0")

    def delete(self) -> None:
        if self.exists():
            _ip("netns", "delete", self.name)


class Entered:
    """This process's network namespace switched to ``netns`` until :meth:`leave`.

    setns changes the calling thread only; threads started afterwards inherit it, and
    sockets keep the namespace they were made in. Enter from the main thread before any
    client of the node is made.
    """

    def __init__(self, netns: NetNs) -> None:
        self._home = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        _setns(os.open(netns.path, os.O_RDONLY | os.O_CLOEXEC))

    def leave(self) -> None:
        _setns(self._home)


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"setns: {os.strerror(code)}")
    finally:
        os.close(fd)


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
