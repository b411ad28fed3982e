"""A fresh API server with the generic DRA driver's objects, for tests that run the
driver as a process beside the conformance kit's kubelet side."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from accel_plugins.conformance.cluster import Cluster
from accel_plugins.conformance.envtest import ApiServer, EnvtestUnavailable, api_server
from accel_plugins.kube.client import make_client
from accel_plugins.testing import short_tempdir
from tests.conformance.test_our_drivers import dra_argv
from tests.e2e.test_kubelet_admit_cli import fake_node

GENERIC_DRIVER = "generic.accel-plugins.io"


@dataclass(frozen=True)
class GenericDriverEnv:
    """The API server, a Cluster for ``node``, the driver's argv and its directories
    (``root / "plugins"``, ``"registry"`` and ``"cdi"``)."""

    server: ApiServer
    cluster: Cluster
    argv: list[str]
    root: Path


@contextlib.asynccontextmanager
async def generic_driver_env(
    tmp_path: Path, node: str, prefix: str
) -> AsyncIterator[GenericDriverEnv]:
    """Skips without the envtest binaries; the fake node's devices under ``tmp_path``
    (its ``generic.yaml`` may be rewritten before the driver starts)."""
    from lightkube import KubeConfig

    try:
        server_cm = api_server(scheduler=False)
        server = server_cm.__enter__()
    except EnvtestUnavailable as exc:
        pytest.skip(str(exc))
    try:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(json.dumps(server.kubeconfig()))
        client = make_client(KubeConfig.from_dict(server.kubeconfig()))
        cluster = Cluster(client, GENERIC_DRIVER, node)
        await cluster.discover()
        await cluster.ensure_node()
        await cluster.prepare_objects()
        with short_tempdir(prefix) as root:
            argv = [
                a.replace("{node}", node)
                .replace("{kubeconfig}", str(kubeconfig))
                .replace("{registry}", str(root / "registry"))
                .replace("{cdi_dir}", str(root / "cdi"))
                for a in dra_argv(fake_node(tmp_path), root / "plugins")
            ]
            yield GenericDriverEnv(server, cluster, argv, root)
        await cluster.cleanup()
        await client.close()
    finally:
        server_cm.__exit__(None, None, None)
