"""A real single-node Kubernetes (v1.34, or v1.36) on this machine, as root, offline.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler from
``$KUBEBUILDER_ASSETS``, containerd 2.x (CDI on) with runc and the CNI bridge, and a
kubelet registered as the Node ``accel-node``; all inside the node's network namespace
(tests/node/netns.py). The configs are tests/node/configs/*, commented; both versions
run with the same ones and their own default feature gates.

Every process is started here and stopped by PID; what the node changes on the machine
is undone by tests/node/host.py, at teardown or, after a killed run, at the next start.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import os
import shutil
import ssl
import stat
import string
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.node import host
from tests.node.netns import Entered, NetNs

CONFIGS = Path(__file__).parent / "configs"
ASSETS_ENV = "KUBEBUILDER_ASSETS"
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
NODE_BINARIES = ("kubelet", "containerd", "containerd-shim-runc-v2", "ctr")
# The Kubernetes versions a node can run, and the suffix of their binaries in
# $KUBEBUILDER_ASSETS (../shared/k8s: kubelet-v1.36 beside kubelet, which is v1.34);
# etcd and containerd are the same for both.
DEFAULT_VERSION = "1.34"
VERSION_SUFFIX = {"1.34": "", "1.36": "-v1.36"}
VERSIONED = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet")
CNI_PLUGINS = ("bridge", "host-local", "loopback")
CNI_BIN = Path("/usr/lib/cni")

NODE_NAME = "accel-node"
WORK = Path("/var/lib/accel-node")  # persistent state: containerd's root, etcd, pki, logs
STATE = Path("/run/accel-node")  # what a reboot loses: containerd's state, the PID list
KUBELET_ROOT = Path("/var/lib/kubelet")  # fixed: the chart's hostPaths name it
# Created by the kubelet or the plugins when missing; removed only when the node made them.
NODE_DIRS = (KUBELET_ROOT, Path("/var/log/pods"), Path("/var/log/containers"), Path("/etc/cdi"))
CDI_RUN_DIR = Path("/var/run/cdi")
# The generic backend's devices on this node: character devices made for the suite (the
# numbers of /dev/null, so a container may open them harmlessly), removed at teardown.
DEVICE_PREFIX = "accel-node"
DEVICES = tuple(Path(f"/dev/{DEVICE_PREFIX}{i}") for i in range(3))
LOCK = Path("/run/lock/accel-plugins-node.lock")
NETNS = NetNs("accel-node", node_ip="10.213.0.2/24", pod_subnet="10.214.0.0/24")
API_PORT = 6443
ADMIN_TOKEN = "node-suite-admin"
NODE_TOKEN = "node-suite-kubelet"
SANDBOX_IMAGE = "localhost/accel-node/pause:1"
READY_TIMEOUT = 60.0


class NodeUnavailable(Exception):  # noqa: N818 (a reason to skip, not a failure)
    """The machine cannot run the node (no root, a binary missing, no cgroups, ...)."""


class NodeStartError(Exception):
    """A piece of the node did not start: its name, why, and its log's tail."""

    def __init__(self, piece: str, why: str, log: Path | None = None) -> None:
        tail = _tail(log) if log else ""
        super().__init__(f"{piece}: {why}" + (f"\n--- {log} (tail) ---\n{tail}" if tail else ""))
        self.piece = piece


def binary_name(name: str, version: str) -> str:
    """The file name of ``name`` for Kubernetes ``version`` in $KUBEBUILDER_ASSETS."""
    return name + VERSION_SUFFIX[version] if name in VERSIONED else name


def preflight(version: str = DEFAULT_VERSION) -> Path:
    """The binaries' directory; NodeUnavailable naming what this machine lacks."""
    if os.geteuid() != 0:
        raise NodeUnavailable("the node runs as root (kubelet, containerd, mounts, cgroups)")
    where = os.environ.get(ASSETS_ENV)
    if not where:
        raise NodeUnavailable(f"{ASSETS_ENV} is unset (../shared/k8s/unpack /tmp/k8s-assets)")
    assets = Path(where)
    for binary in (binary_name(b, version) for b in (*CONTROL_PLANE, *NODE_BINARIES)):
        if not os.access(assets / binary, os.X_OK):
            raise NodeUnavailable(f"{ASSETS_ENV}={where} has no executable {binary}")
    for plugin in CNI_PLUGINS:
        if not os.access(CNI_BIN / plugin, os.X_OK):
            raise NodeUnavailable(f"no CNI plugin {CNI_BIN / plugin} (containernetworking-plugins)")
    for tool in ("runc", "ip", "openssl", "umount", "gcc"):
        if shutil.which(tool) is None:
            raise NodeUnavailable(f"{tool} is not installed")
    filesystems = Path("/proc/filesystems").read_text()
    if "overlay" not in filesystems:
        raise NodeUnavailable("the kernel has no overlayfs (containerd's snapshotter)")
    controllers = (
        {d.name for d in host.CGROUP_ROOT.iterdir()} if host.CGROUP_ROOT.is_dir() else set()
    )
    if not ({"memory", "cpu", "pids"} <= controllers or "cgroup.controllers" in controllers):
        raise NodeUnavailable(f"no cgroup v1 memory/cpu/pids or cgroup v2 under {host.CGROUP_ROOT}")
    if KUBELET_ROOT.exists() and not (STATE / "footprint.json").exists():
        # Not left by a killed run of this suite: a kubelet of the machine's own. Never take it.
        raise NodeUnavailable(f"{KUBELET_ROOT} exists: another kubelet may own this machine")
    return assets


@dataclass(frozen=True)
class Paths:
    assets: Path
    version: str = DEFAULT_VERSION

    def binary(self, name: str) -> Path:
        return self.assets / binary_name(name, self.version)

    @property
    def containerd_socket(self) -> Path:
        return STATE / "containerd" / "containerd.sock"

    @property
    def logs(self) -> Path:
        return WORK / "logs"

    def log(self, name: str) -> Path:
        return self.logs / f"{name}.log"


class Node:
    """The running node: its processes, its API, and the restarts node-life tests need."""

    def __init__(self, assets: Path, version: str = DEFAULT_VERSION) -> None:
        self.paths = Paths(assets, version)
        self.version = version
        self.name = NODE_NAME
        self.ip = NETNS.address
        self.url = f"https://{self.ip}:{API_PORT}"
        self._processes: dict[str, subprocess.Popen[bytes]] = {}

    # -- the API ----------------------------------------------------------------------------

    def kubeconfig(self, token: str = ADMIN_TOKEN) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "node", "cluster": {"server": self.url, "insecure-skip-tls-verify": True}}
            ],
            "users": [{"name": "user", "user": {"token": token}}],
            "contexts": [{"name": "node", "context": {"cluster": "node", "user": "user"}}],
            "current-context": "node",
        }

    def api_get(self, path: str) -> tuple[int, bytes]:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        request = urllib.request.Request(
            f"{self.url}{path}", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=5, context=context) as answer:
                return int(answer.status), bytes(answer.read())
        except urllib.error.HTTPError as exc:
            return int(exc.code), bytes(exc.read())
        except (urllib.error.URLError, OSError):
            return 0, b""  # not listening yet

    def ctr(self, *args: str) -> str:
        done = subprocess.run(
            [
                str(self.paths.binary("ctr")),
                "--address",
                str(self.paths.containerd_socket),
                "-n",
                "k8s.io",
                *args,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise NodeStartError("ctr", f"ctr {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    # -- start and stop ---------------------------------------------------------------------

    def start_control_plane(self) -> None:
        self.paths.logs.mkdir(parents=True, exist_ok=True)
        pki = WORK / "pki"
        pki.mkdir(exist_ok=True)
        key, pub = pki / "sa.key", pki / "sa.pub"
        if not key.exists():
            _run("openssl", "genrsa", "-out", str(key), "2048")
            _run("openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pub))
        (pki / "tokens.csv").write_text(
            f"{ADMIN_TOKEN},admin,admin-uid,system:masters\n"
            f"{NODE_TOKEN},system:node:{NODE_NAME},kubelet-uid,system:nodes\n"
        )
        self._spawn(
            "etcd",
            f"--data-dir={WORK / 'etcd'}",
            "--listen-client-urls=http://127.0.0.1:2379",
            "--advertise-client-urls=http://127.0.0.1:2379",
            "--listen-peer-urls=http://127.0.0.1:2380",
            "--initial-advertise-peer-urls=http://127.0.0.1:2380",
            "--initial-cluster=default=http://127.0.0.1:2380",
            "--listen-metrics-urls=http://127.0.0.1:2381",
            # The API server's watch cache learns etcd's current revision from these
            # notifications; at etcd's 10 min default, a watch of a quiet resource waited
            # for a fresh cache until it failed ("Too large resource version").
            "--experimental-watch-progress-notify-interval=1s",
        )
        self._spawn(
            "kube-apiserver",
            "--etcd-servers=http://127.0.0.1:2379",
            "--bind-address=0.0.0.0",  # the node's namespace only: its loopback and veth
            f"--advertise-address={self.ip}",
            f"--secure-port={API_PORT}",
            f"--cert-dir={pki}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pub}",
            f"--service-account-signing-key-file={key}",
            f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--service-cluster-ip-range=10.96.0.0/24",
            "--endpoint-reconciler-type=none",
            # The node's name does not resolve: logs and exec go to its InternalIP.
            "--kubelet-preferred-address-types=InternalIP,Hostname",
        )
        self._await("kube-apiserver", lambda: self.api_get("/readyz")[0] == 200)
        admin = WORK / "admin.kubeconfig"
        admin.write_text(json.dumps(self.kubeconfig()))
        # It removes the node's not-ready taint, makes each namespace's default
        # ServiceAccount and publishes kube-root-ca.crt (the server's own certificate).
        self._spawn(
            "kube-controller-manager",
            f"--kubeconfig={admin}",
            f"--authentication-kubeconfig={admin}",
            f"--authorization-kubeconfig={admin}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--cert-dir={WORK / 'kcm-pki'}",
            f"--service-account-private-key-file={key}",
            f"--root-ca-file={pki / 'apiserver.crt'}",
            "--use-service-account-credentials=false",
        )
        self._spawn(
            "kube-scheduler",
            f"--kubeconfig={admin}",
            f"--authentication-kubeconfig={admin}",
            f"--authorization-kubeconfig={admin}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--cert-dir={WORK / 'scheduler-pki'}",
        )

    def start_containerd(self) -> None:
        state = STATE
        config = WORK / "containerd.toml"
        cni_dir = WORK / "cni"
        cni_dir.mkdir(parents=True, exist_ok=True)
        values = {
            "root": str(WORK),
            "state": str(state),
            "containerd_socket": str(self.paths.containerd_socket),
            "sandbox_image": SANDBOX_IMAGE,
            "cni_conf_dir": str(cni_dir),
            "pod_subnet": NETNS.pod_subnet,
        }
        config.write_text(_fill("containerd.toml", values))
        (cni_dir / "10-accel-node.conflist").write_text(_fill("cni.conflist", values))
        self._spawn("containerd", f"--config={config}")
        self._await("containerd", lambda: _quiet_ok(self.ctr, "version"))

    def start_kubelet(self) -> None:
        values = {"containerd_socket": str(self.paths.containerd_socket)}
        config = WORK / "kubelet.yaml"
        config.write_text(_fill("kubelet.yaml", values))
        kubeconfig = WORK / "kubelet.kubeconfig"
        kubeconfig.write_text(json.dumps(self.kubeconfig(NODE_TOKEN)))
        self._spawn(
            "kubelet",
            f"--config={config}",
            f"--kubeconfig={kubeconfig}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={self.ip}",  # it refuses a loopback address
            f"--root-dir={KUBELET_ROOT}",
            "--v=2",
        )

    def node_ready(self, since: datetime.datetime | None = None) -> bool:
        """Ready, untainted, and the default ServiceAccount made (pods can be admitted);
        with ``since``, reported Ready by a heartbeat after that time (a restarted kubelet
        finds its predecessor's Ready in the Node's status)."""
        status, body = self.api_get(f"/api/v1/nodes/{NODE_NAME}")
        if status != 200:
            return False
        node = json.loads(body)
        after = since or datetime.datetime.min.replace(tzinfo=datetime.UTC)
        ready = any(
            c["type"] == "Ready"
            and c["status"] == "True"
            and datetime.datetime.fromisoformat(c["lastHeartbeatTime"]) > after
            for c in node.get("status", {}).get("conditions", [])
        )
        taints = node.get("spec", {}).get("taints", [])
        default_sa = self.api_get("/api/v1/namespaces/default/serviceaccounts/default")[0] == 200
        return ready and not taints and default_sa

    def await_kubelet(self, since: datetime.datetime | None = None) -> None:
        self._await("kubelet", lambda: self.node_ready(since), READY_TIMEOUT)

    def stop(self, name: str) -> None:
        process = self._processes.pop(name, None)
        if process is not None:
            host.kill_all([process.pid], timeout=host.STOP_TIMEOUT)
            process.wait()
            self._record_pids()

    def pid(self, name: str) -> int:
        return self._processes[name].pid

    def running(self, name: str) -> bool:
        process = self._processes.get(name)
        return process is not None and process.poll() is None

    def kill_containers(self) -> None:
        """Every container and shim of the node gone, as a power cut leaves them."""
        host.kill_all(host.pod_pids(), timeout=5)
        host.kill_all(host.pids_with_argument(str(self.paths.containerd_socket)), timeout=5)

    def restart_kubelet(self) -> None:
        self.stop("kubelet")
        since = _now()
        self.start_kubelet()
        self.await_kubelet(since)

    def reboot(self) -> None:
        """What a reboot does to the node, the control plane aside (another machine's):
        every container and mount gone, /run emptied (containerd's state, the pods'
        network namespaces and addresses, the CDI specs of /var/run/cdi), then containerd
        and the kubelet started again. /var/lib (the kubelet's checkpoints, containerd's
        images) and the /dev nodes stay, as on a disk."""
        self.stop("kubelet")
        self.kill_containers()
        self.stop("containerd")
        host.unmount_all([KUBELET_ROOT, STATE])
        host.remove_pod_cgroups()
        for lost in (STATE / "containerd", STATE / "cni", CDI_RUN_DIR):
            host.remove_tree(lost)
        CDI_RUN_DIR.mkdir(parents=True)  # tmpfs-backed /run keeps the directory, not its files
        since = _now()
        self.start_containerd()
        self.start_kubelet()
        self.await_kubelet(since)

    def keep_logs(self, into: Path) -> None:
        """The daemons' logs and every pod's (our plugins' among them), for a failed run."""
        for source in (self.paths.logs, Path("/var/log/pods")):
            if source.is_dir():
                shutil.copytree(source, into / source.name, dirs_exist_ok=True, symlinks=True)

    def stop_all(self) -> None:
        stops = [functools.partial(self.stop, name) for name in reversed(CONTROL_PLANE)]
        each(
            lambda: self.stop("kubelet"),
            self.kill_containers,
            lambda: self.stop("containerd"),
            *stops,
        )

    # -- internals --------------------------------------------------------------------------

    def _spawn(self, name: str, *args: str) -> None:
        self.paths.logs.mkdir(parents=True, exist_ok=True)
        with self.paths.log(name).open("ab") as log:
            env = dict(os.environ, PATH=f"{self.paths.assets}:{os.environ.get('PATH', '')}")
            self._processes[name] = subprocess.Popen(
                [str(self.paths.binary(name)), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # a Ctrl-C reaches pytest; the teardown stops these
            )
        self._record_pids()

    def _record_pids(self) -> None:
        STATE.mkdir(parents=True, exist_ok=True)
        pids = {str(p.pid): p.args[0] for p in self._processes.values() if isinstance(p.args, list)}
        (STATE / "pids.json").write_text(json.dumps(pids))

    def _await(self, name: str, ready: Any, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            process = self._processes[name]
            if process.poll() is not None:
                raise NodeStartError(name, f"exited {process.returncode}", self.paths.log(name))
            if ready():
                return
            time.sleep(0.2)  # these daemons announce readiness only by answering
        raise NodeStartError(name, f"not ready after {timeout:.0f} s", self.paths.log(name))


def clean_machine(containerd_socket: Path) -> None:
    """Undo everything a node (this run's or a killed one's) left; safe when nothing is left."""
    recorded = STATE / "pids.json"
    if recorded.exists():
        for pid, binary in json.loads(recorded.read_text()).items():
            if str(binary).encode() in _cmdline(int(pid)):
                host.kill_all([int(pid)], timeout=5)
    host.kill_all(host.pod_pids(), timeout=5)
    host.kill_all(host.pids_with_argument(str(containerd_socket)), timeout=5)
    host.unmount_all([KUBELET_ROOT, WORK, STATE])
    host.remove_pod_cgroups()
    footprint_file = STATE / "footprint.json"
    created: tuple[str, ...] = ()
    if footprint_file.exists():
        footprint = host.Footprint.load(footprint_file.read_text())
        host.write_sysctls(footprint.sysctls)
        created = footprint.created_dirs
    NETNS.delete()
    for device in Path("/dev").glob(f"{DEVICE_PREFIX}*"):
        device.unlink()
    for directory in created:
        host.remove_tree(Path(directory))
    host.remove_tree(WORK)
    host.remove_tree(STATE)


def make_device(path: Path) -> None:
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))


@contextlib.contextmanager
def unplugged(device: str) -> Iterator[None]:
    """The /dev node gone, as when its hardware is pulled; plugged back after."""
    path = Path(device)
    assert path in DEVICES, device
    path.unlink()
    try:
        yield
    finally:
        make_device(path)


def record_footprint() -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    created = tuple(str(p) for p in (*NODE_DIRS, CDI_RUN_DIR) if not p.exists())
    footprint = host.Footprint(host.read_sysctls(), created)
    (STATE / "footprint.json").write_text(footprint.dump())


@contextlib.contextmanager
def running_node(
    archives: Callable[[Node], Iterable[Path]],
    lock_timeout: float = 600.0,
    logs: Path | None = None,
    version: str = DEFAULT_VERSION,
) -> Iterator[Node]:
    """Boot the node of Kubernetes ``version`` (after cleaning a stale one), yield it,
    tear it all down.

    ``archives(node)`` names the OCI archives to import once containerd runs (the
    sandbox image among them), before the kubelet starts. With ``logs``, the node's
    logs are copied there before the teardown removes them.
    """
    assets = preflight(version)
    with host.machine_lock(LOCK, lock_timeout):
        node = Node(assets, version)
        clean_machine(node.paths.containerd_socket)
        record_footprint()
        entered: Entered | None = None
        try:
            NETNS.create()
            entered = Entered(NETNS)
            node.start_control_plane()
            for device in DEVICES:
                make_device(device)
            node.start_containerd()
            for archive in archives(node):
                node.ctr("images", "import", str(archive))
            node.start_kubelet()
            node.await_kubelet()
            yield node
        finally:
            # Every step, whatever failed before: a node left running would hold the machine.
            each(
                node.stop_all,
                lambda: node.keep_logs(logs) if logs is not None else None,
                lambda: entered.leave() if entered is not None else None,
                lambda: clean_machine(node.paths.containerd_socket),
            )


def each(*steps: Callable[[], object]) -> None:
    """Run every step even when one fails; then raise the first failure."""
    failures: list[Exception] = []
    for step in steps:
        try:
            step()
        except Exception as exc:  # collected: raised once the rest ran
            failures.append(exc)
    if failures:
        raise failures[0]


def _now() -> datetime.datetime:
    # The API's times have whole seconds: a heartbeat in this very second may be the old one.
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _fill(template: str, values: dict[str, str]) -> str:
    return string.Template((CONFIGS / template).read_text()).substitute(values)


def _quiet_ok(call: Any, *args: str) -> bool:
    try:
        call(*args)
    except NodeStartError:
        return False
    return True


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)


def _tail(log: Path, lines: int = 25) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
