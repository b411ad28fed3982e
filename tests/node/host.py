"""What the test node changes on the machine, and how each change is undone.

The node runs as root on the machine itself (a real kubelet needs real cgroups and
mounts), so everything it leaves behind is listed here and undone at teardown, or at the
next start when a killed run never tore down:

- kernel-wide sysctls the kubelet sets at start (recorded before, written back after);
- mounts under /var/lib/kubelet and the node's own directories (lazily unmounted);
- the kubelet's pod cgroups (``kubepods`` under each cgroup v1 controller, or v2);
- processes: the ones the fixture started, by PID, and the ones they started (container
  shims and the containers themselves, found by our containerd's socket or our cgroups);
- directories the node created (only those that did not exist before it started).

Network changes need no list: they all happen inside the node's network namespace
(tests/node/netns.py), which goes with them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

# The kubelet writes these at start (setupKernelTunables in kubernetes/kubernetes
# pkg/kubelet/cm/container_manager_linux.go: vm.overcommit_memory, vm.panic_on_oom,
# kernel.panic, kernel.panic_on_oops, kernel.keys.root_maxkeys, kernel.keys.root_maxbytes);
# none of them is namespaced, so the host would keep the kubelet's values.
KUBELET_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
CGROUP_ROOT = Path("/sys/fs/cgroup")
POD_CGROUP = "kubepods"
STOP_TIMEOUT = 15.0


@dataclass(frozen=True)
class Footprint:
    """The machine's state before the node started, as the state file keeps it."""

    sysctls: dict[str, str]
    created_dirs: tuple[str, ...]  # directories the node creates that did not exist

    def dump(self) -> str:
        return json.dumps({"sysctls": self.sysctls, "created_dirs": list(self.created_dirs)})

    @classmethod
    def load(cls, text: str) -> Footprint:
        data = json.loads(text)
        return cls(dict(data["sysctls"]), tuple(data["created_dirs"]))


def read_sysctls(names: Iterable[str] = KUBELET_SYSCTLS) -> dict[str, str]:
    return {name: (Path("/proc/sys") / name).read_text().strip() for name in names}


def write_sysctls(values: dict[str, str]) -> None:
    for name, value in values.items():
        (Path("/proc/sys") / name).write_text(value)


@contextlib.contextmanager
def machine_lock(path: Path, timeout: float) -> Iterator[None]:
    """One node per machine (fixed ports 10248/10250, /var/lib/kubelet): an flock on ``path``.

    Raises TimeoutError naming the holder's PID when another run keeps it past ``timeout``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() > deadline:
                    handle.seek(0)
                    raise TimeoutError(
                        f"another test node holds {path} (pid {handle.read().strip() or '?'})"
                    ) from None
                time.sleep(1)  # flock has no timeout of its own
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def mounts_under(roots: Iterable[Path]) -> list[str]:
    """Mount points at or below any of ``roots``, deepest first."""
    prefixes = [str(root).rstrip("/") for root in roots]
    found: list[str] = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        # Field 5 is the mount point, with spaces and such octal-escaped.
        point = line.split()[4].encode().decode("unicode_escape")
        if any(point == p or point.startswith(p + "/") for p in prefixes):
            found.append(point)
    return sorted(set(found), key=lambda p: (-p.count("/"), p))


def unmount_all(roots: Iterable[Path]) -> None:
    # A bind mount can sit on itself several times (the kubelet's /var/lib/kubelet):
    # repeat until none is left, lazily so a busy one cannot stop the teardown.
    for _ in range(10):
        points = mounts_under(roots)
        if not points:
            return
        for point in points:
            subprocess.run(["umount", "-l", point], check=False, capture_output=True)


def _pod_cgroup_dirs() -> list[Path]:
    """Every directory of the kubelet's pod cgroup tree, deepest first."""
    tops = [d / POD_CGROUP for d in CGROUP_ROOT.iterdir() if (d / POD_CGROUP).is_dir()]
    if (CGROUP_ROOT / POD_CGROUP).is_dir():  # cgroup v2
        tops.append(CGROUP_ROOT / POD_CGROUP)
    found: list[Path] = []
    for top in tops:
        # os.walk skips what vanishes under it: the kubelet removes pod cgroups meanwhile.
        found.extend(Path(d) for d, _, _ in os.walk(top))
    return sorted(found, key=lambda p: -len(p.parts))


def pod_pids() -> set[int]:
    """Processes in the kubelet's pod cgroups: the containers the node ran."""
    pids: set[int] = set()
    for directory in _pod_cgroup_dirs():
        with contextlib.suppress(OSError):
            pids.update(int(p) for p in (directory / "cgroup.procs").read_text().split())
    return pids


def pids_with_argument(argument: str) -> set[int]:
    """Processes whose command line has ``argument`` (e.g. our containerd's socket path)."""
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if argument.encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                found.add(int(entry.name))
    return found


def kill_all(pids: Iterable[int], timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM, then SIGKILL whatever is left after ``timeout``; gone PIDs are fine."""
    remaining = set(pids)
    for pid in remaining:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while remaining and time.monotonic() < deadline:
        remaining = {pid for pid in remaining if _alive(pid)}
        if remaining:
            time.sleep(0.1)  # not our children: no wait() to block on
    for pid in remaining:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def remove_pod_cgroups() -> None:
    kill_all(pod_pids(), timeout=5)
    for directory in _pod_cgroup_dirs():
        with contextlib.suppress(OSError):
            directory.rmdir()


def remove_tree(path: Path) -> None:
    subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=False)
