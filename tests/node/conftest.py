"""Fixtures of the real-node suite (docs/node-tests.md).

- ``node``: the single-node Kubernetes of tests/node/cluster.py for the whole session,
  with the test image imported; torn down by PID at the end, whatever failed.
- ``kube``: an admin lightkube Client on it (the tests run inside the node's network
  namespace, so it reaches the API server, the pods and their /metrics directly).

The suite runs only when named (``pytest tests/node``): a plain ``pytest`` leaves it out,
since it takes the machine's kubelet ports and minutes. Where the machine cannot run a
node, its tests skip with the reason; under ``CI=true`` they fail instead.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.node.cluster import Node, NodeStartError, NodeUnavailable, running_node
from tests.node.images import ImageUnavailable, write_test_image

if TYPE_CHECKING:
    from lightkube import Client

HERE = Path(__file__).parent
TEST_TIMEOUT = 600


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.parent != HERE or not collection_path.name.startswith("test_"):
        return None
    named = any(Path(arg.split("::")[0]).resolve().is_relative_to(HERE) for arg in config.args)
    return None if named else True


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The first test to ask for the project's images waits for their build (minutes);
    # every later wait ends on an event, so the bound matters only for a stuck one.
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.timeout(TEST_TIMEOUT))


def unavailable(reason: str) -> None:
    """Skip outside CI; under CI=true the node is required, so fail."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"the real node cannot run here: {reason}", pytrace=False)
    pytest.skip(f"the real node cannot run here: {reason}")


@pytest.fixture(scope="session")
def node() -> Iterator[Node]:
    pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")
    with tempfile.TemporaryDirectory(prefix="node-images-") as workdir:
        try:
            with running_node(lambda _: [write_test_image(Path(workdir))]) as started:
                yield started
        except (NodeUnavailable, ImageUnavailable, NodeStartError) as exc:
            unavailable(str(exc))


@pytest.fixture(scope="session")
def kube(node: Node) -> Iterator[Client]:
    from lightkube import Client, KubeConfig

    client = Client(KubeConfig.from_dict(node.kubeconfig()), field_manager="helm", trust_env=False)
    yield client
    client.close()
