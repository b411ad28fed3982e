"""The test suite's fixtures and markers.

Fixtures live in ``tests/fixtures/``, one module per area, each loaded as a pytest plugin
below; helpers that are not fixtures live in ``tests/support/``. Every test gets the marker
of the suite it is in (its folder), and ``apiserver`` when it uses a real API server, so
``pytest -m unit`` or ``-m "not apiserver"`` picks a part (docs/testing.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

# Their asserts are rewritten like the tests' own (they import each other on load).
pytest.register_assert_rewrite("tests.fixtures", "tests.support")

pytest_plugins = [
    "tests.fixtures.dra_kube",
    "tests.fixtures.dra_plugin",
    "tests.fixtures.framework",
    "tests.fixtures.generic",
    "tests.fixtures.kubelet",
    "tests.fixtures.nvidia",
    "tests.fixtures.plugin_watcher",
]

TESTS = Path(__file__).resolve().parent
# The folder a test is in gives its suite's marker (registered in pyproject.toml).
SUITE_MARKERS = {
    "unit": "unit",
    "e2e": "e2e",
    "reliability": "e2e",
    "security": "unit",
    "node": "node",
    "gpu": "gpu",
}
# Fixtures that start a real kube-apiserver (and etcd): the tests using them need
# KUBEBUILDER_ASSETS and skip, saying so, without it.
APISERVER_FIXTURES = {"kube_apiserver", "apiservers", "kube", "kube_node", "node_client"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        try:
            suite = item.path.resolve().relative_to(TESTS).parts[0]
        except ValueError:
            continue
        marker = SUITE_MARKERS.get(suite)
        if marker is not None:
            item.add_marker(marker)
        if APISERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker("apiserver")
