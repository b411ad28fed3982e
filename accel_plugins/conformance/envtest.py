"""A real etcd and kube-apiserver on loopback, the way controller-runtime's envtest runs them.

The binaries come from the directory ``$KUBEBUILDER_ASSETS`` names (``etcd``,
``kube-apiserver``, and ``kube-scheduler`` where present: then it runs too, and
``ApiServer.scheduler`` says so; tests that need it skip with
:func:`scheduler_missing`'s reason otherwise).
The API server authenticates bearer tokens from a static file: an admin token
(``system:masters``) and one token per name in :data:`NODES`, each a kubelet
identity (``system:node:<name>`` in ``system:nodes``), so the Node authorizer
and NodeRestriction treat it as that node. TLS is the server's self-signed
certificate; clients skip verification (loopback only).

Standard library only (the SA signing key comes from ``openssl``). The
conformance kit starts it when it is given no kubeconfig, and the tests start it
for the API side; with ``driver_process`` it is one of the two modules of the
package that start processes (tests/security/test_no_shell.py names them).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ASSETS_ENV = "KUBEBUILDER_ASSETS"
NODES = tuple(f"node-{i}" for i in range(256))
ADMIN_TOKEN = "admin-token"
READY_TIMEOUT = 60.0


class EnvtestUnavailable(Exception):  # noqa: N818 (a reason to skip, not a failure)
    """The binaries (or openssl) are not there: tests that need the server skip."""


@dataclass(frozen=True)
class ApiServer:
    """A running API server: its URL and bearer tokens."""

    url: str
    admin_token: str
    node_tokens: Mapping[str, str] = field(hash=False)
    workdir: Path
    scheduler: bool = False  # a kube-scheduler runs against it

    def kubeconfig(self, token: str | None = None) -> dict[str, Any]:
        """A kubeconfig (as a dict) for ``token`` (default: the admin's)."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "envtest",
                    "cluster": {"server": self.url, "insecure-skip-tls-verify": True},
                }
            ],
            "users": [{"name": "user", "user": {"token": token or self.admin_token}}],
            "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": "user"}}],
            "current-context": "envtest",
        }

    def node_kubeconfig(self, node: str) -> dict[str, Any]:
        """A kubeconfig acting as the kubelet of ``node`` (one of :data:`NODES`)."""
        return self.kubeconfig(self.node_tokens[node])


def assets() -> Path:
    """The binaries' directory; EnvtestUnavailable saying why when it is not usable."""
    where = os.environ.get(ASSETS_ENV)
    if not where:
        raise EnvtestUnavailable(
            f"{ASSETS_ENV} is unset (export {ASSETS_ENV}=$(../shared/k8s/unpack /tmp/k8s-assets))"
        )
    path = Path(where)
    for binary in ("etcd", "kube-apiserver"):
        if not os.access(path / binary, os.X_OK):
            raise EnvtestUnavailable(f"{ASSETS_ENV}={where} has no executable {binary}")
    if shutil.which("openssl") is None:
        raise EnvtestUnavailable("openssl is not installed (it makes the service-account key)")
    return path


def _free_ports(count: int) -> list[int]:
    # Bound together so they differ; released just before the servers bind them.
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _wait_ready(
    url: str, token: str, process: subprocess.Popen[bytes], log: Path, name: str
) -> None:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(f"{url}/readyz", headers=headers)
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited {process.returncode}:\n{_tail(log)}")
        with (
            contextlib.suppress(urllib.error.URLError, OSError),
            urllib.request.urlopen(request, timeout=2, context=context) as answer,
        ):
            if answer.status == 200:
                return
        time.sleep(0.1)  # no event to wait on: the server only answers when ready
    raise RuntimeError(f"{name} not ready after {READY_TIMEOUT:.0f} s:\n{_tail(log)}")


def _tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


SCHEDULER = "kube-scheduler"


def scheduler_missing(binaries: Path | None = None) -> str | None:
    """Why no kube-scheduler runs (None when one does): a reason to skip."""
    where = binaries or Path(os.environ.get(ASSETS_ENV, ""))
    if not os.access(where / SCHEDULER, os.X_OK):
        return f"{ASSETS_ENV}={where} has no executable {SCHEDULER} (../shared/k8s ships none)"
    return None


def _start_scheduler(
    binaries: Path, server: ApiServer, gates: Sequence[str] = ()
) -> subprocess.Popen[bytes]:
    """kube-scheduler as kubeadm runs it, on loopback and a free port.

    Flags from the kube-scheduler reference (kubernetes.io/docs/reference/
    command-line-tools-reference/kube-scheduler/) and kubeadm's static pod:
    ``--kubeconfig`` for the API, ``--authentication-kubeconfig`` and
    ``--authorization-kubeconfig`` so its HTTPS server can delegate (``/readyz``
    is in ``--authorization-always-allow-paths`` by default, so readiness needs
    no token), ``--leader-elect=false`` (one scheduler: no Lease to win first),
    and its own self-signed certificate in ``--cert-dir``. The admin token: this
    checks our driver with the real scheduler, not the scheduler's RBAC. ``gates`` are the
    API server's ``--feature-gates`` flag, which the scheduler takes too (a gated scheduler
    plugin, e.g. DRAExtendedResource's, needs the gate on both).
    """
    workdir = server.workdir
    kubeconfig = workdir / "scheduler.kubeconfig"
    kubeconfig.write_text(json.dumps(server.kubeconfig()))  # JSON is YAML, as client-go reads it
    (port,) = _free_ports(1)
    log_path = workdir / "kube-scheduler.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                str(binaries / SCHEDULER),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={workdir / 'scheduler-pki'}",
                *gates,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_ready(f"https://127.0.0.1:{port}", "", process, log_path, SCHEDULER)
    except BaseException:
        _stop(process)
        raise
    return process


@contextlib.contextmanager
def api_server(
    binary: str = "kube-apiserver",
    *,
    feature_gates: Mapping[str, bool] | None = None,
    runtime_config: Mapping[str, bool] | None = None,
    scheduler: bool = True,
) -> Iterator[ApiServer]:
    """Start etcd and kube-apiserver in a temp dir; stop both (by PID) and remove it.

    ``binary`` names another API server in the assets (``kube-apiserver-v1.33``);
    ``feature_gates`` and ``runtime_config`` become its flags of those names; a
    kube-scheduler (where present) runs unless ``scheduler`` is False.
    """
    binaries = assets()
    if not os.access(binaries / binary, os.X_OK):
        raise EnvtestUnavailable(f"{ASSETS_ENV}={binaries} has no executable {binary}")
    extra = [
        f"--{flag}={','.join(f'{k}={str(v).lower()}' for k, v in sorted(values.items()))}"
        for flag, values in (("feature-gates", feature_gates), ("runtime-config", runtime_config))
        if values
    ]
    workdir = Path(tempfile.mkdtemp(prefix="envtest-"))
    etcd_port, peer_port, metrics_port, api_port = _free_ports(4)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        etcd_log = (workdir / "etcd.log").open("wb")
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        processes.append(
            subprocess.Popen(
                [
                    str(binaries / "etcd"),
                    f"--data-dir={workdir / 'etcd'}",
                    f"--listen-client-urls={etcd_url}",
                    f"--advertise-client-urls={etcd_url}",
                    f"--listen-peer-urls={peer_url}",
                    f"--initial-advertise-peer-urls={peer_url}",
                    f"--initial-cluster=default={peer_url}",
                    f"--listen-metrics-urls=http://127.0.0.1:{metrics_port}",
                ],
                stdout=etcd_log,
                stderr=subprocess.STDOUT,
            )
        )
        key, pub = workdir / "sa.key", workdir / "sa.pub"
        subprocess.run(
            ["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True
        )
        subprocess.run(
            ["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pub)],
            check=True,
            capture_output=True,
        )
        node_tokens = {node: f"{node}-token" for node in NODES}
        (workdir / "tokens.csv").write_text(
            f"{ADMIN_TOKEN},admin,admin-uid,system:masters\n"
            + "".join(
                f"{token},system:node:{node},{node}-uid,system:nodes\n"
                for node, token in node_tokens.items()
            )
        )
        api_log_path = workdir / "kube-apiserver.log"
        api_log = api_log_path.open("wb")
        api = subprocess.Popen(
            [
                str(binaries / binary),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--cert-dir={workdir / 'pki'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={pub}",
                f"--service-account-signing-key-file={key}",
                f"--token-auth-file={workdir / 'tokens.csv'}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                "--service-cluster-ip-range=10.96.0.0/24",
                "--endpoint-reconciler-type=none",
                *extra,
            ],
            stdout=api_log,
            stderr=subprocess.STDOUT,
        )
        processes.append(api)
        url = f"https://127.0.0.1:{api_port}"
        _wait_ready(url, ADMIN_TOKEN, api, api_log_path, "kube-apiserver")
        server = ApiServer(url, ADMIN_TOKEN, node_tokens, workdir)
        if scheduler and scheduler_missing(binaries) is None:
            gates = [flag for flag in extra if flag.startswith("--feature-gates=")]
            processes.append(_start_scheduler(binaries, server, gates))
            server = replace(server, scheduler=True)
        yield server
    finally:
        for process in reversed(processes):
            _stop(process)
        shutil.rmtree(workdir, ignore_errors=True)
