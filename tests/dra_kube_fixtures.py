"""Fixtures for the DRA API side against a real API server (tests/envtest.py).

- ``kube_apiserver``: etcd and kube-apiserver for the whole session (they take
  seconds and hundreds of MB to start), so tests work on their own node names.
- ``kube``: an admin lightkube AsyncClient on the session's API server.
- ``kube_node``: a Node object of a name no other test uses (one the API
  server has a kubelet token for), its slices and itself deleted at teardown.
- ``node_client``: ``node_client(name)`` is a client acting as that node's kubelet.
- ``kube_namespace``: a Namespace of its own for the test's claims and pods.

Skipped, with the reason, when ``KUBEBUILDER_ASSETS`` is unset or lightkube
(the ``[dra]`` extra) is not installed.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING

import pytest

from tests.envtest import NODES, ApiServer, EnvtestUnavailable, api_server, assets

if TYPE_CHECKING:
    from lightkube import AsyncClient


_names: Iterator[str] = iter(NODES)
_namespaces: Iterator[str] = (f"test-{i}" for i in itertools.count())
NodeClient = Callable[[str], "AsyncClient"]


def _lightkube() -> None:
    pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")


@pytest.fixture(scope="session")
def kube_apiserver() -> Iterator[ApiServer]:
    try:
        assets()
    except EnvtestUnavailable as exc:
        pytest.skip(f"no real API server: {exc}")
    with api_server() as started:
        yield started


@pytest.fixture
async def kube(kube_apiserver: ApiServer) -> AsyncIterator[AsyncClient]:
    _lightkube()
    from lightkube import KubeConfig

    from accel_plugins.dra.kube import make_client

    client = make_client(KubeConfig.from_dict(kube_apiserver.kubeconfig()))
    yield client
    await client.close()


@pytest.fixture
async def node_client(kube_apiserver: ApiServer) -> AsyncIterator[NodeClient]:
    _lightkube()
    from lightkube import KubeConfig

    from accel_plugins.dra.kube import make_client

    clients: list[AsyncClient] = []

    def make(node: str) -> AsyncClient:
        config = KubeConfig.from_dict(kube_apiserver.node_kubeconfig(node))
        clients.append(make_client(config))
        return clients[-1]

    yield make
    for client in clients:
        await client.close()


async def delete_slices(kube: AsyncClient, node: str) -> None:
    from lightkube.resources.resource_v1 import ResourceSlice

    async for item in kube.list(ResourceSlice, fields={"spec.nodeName": node}):
        assert item.metadata is not None
        assert item.metadata.name is not None
        await kube.delete(ResourceSlice, item.metadata.name)


@pytest.fixture
async def kube_node(kube: AsyncClient) -> AsyncIterator[str]:
    """A fresh Node (no controller manager runs, so nothing else touches it)."""
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Node

    try:
        name = next(_names)
    except StopIteration:
        pytest.fail(f"more Nodes asked for than the API server has tokens for ({len(NODES)})")
    await kube.create(Node(metadata=ObjectMeta(name=name)))
    yield name
    await delete_slices(kube, name)
    with contextlib.suppress(Exception):
        await kube.delete(Node, name)


@pytest.fixture
async def kube_namespace(kube: AsyncClient) -> AsyncIterator[str]:
    """A fresh Namespace. Deleting it only marks it: no namespace controller runs to empty it."""
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Namespace

    name = next(_namespaces)
    await kube.create(Namespace(metadata=ObjectMeta(name=name)))
    yield name
    with contextlib.suppress(Exception):
        await kube.delete(Namespace, name)
