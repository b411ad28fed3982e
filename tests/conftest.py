"""Shared fixtures; each area keeps its own in a tests/*_fixtures.py module.

Add a line per fixture module; do not remove other areas' lines.
"""

from tests.dra_kube_fixtures import (
    apiservers,
    kube,
    kube_apiserver,
    kube_namespace,
    kube_node,
    node_client,
)
from tests.dra_plugin_fixtures import dra_root, start_driver
from tests.framework_fixtures import logs, plugin_dir, serve_plugin, start_manager
from tests.generic_fixtures import fake_host, run_backend, umockdev_harness, write_config
from tests.kubelet_fixtures import kubelet, kubelet_dir, kubelet_events, make_plugin
from tests.nvidia_fixtures import fake_nvml, fake_nvml_library, run_nvidia
from tests.plugin_watcher_fixtures import (
    registrars,
    registry_dir,
    watcher_events,
    watching_kubelet,
)

__all__ = [
    "apiservers",
    "dra_root",
    "fake_host",
    "fake_nvml",
    "fake_nvml_library",
    "kube",
    "kube_apiserver",
    "kube_namespace",
    "kube_node",
    "kubelet",
    "kubelet_dir",
    "kubelet_events",
    "logs",
    "make_plugin",
    "node_client",
    "plugin_dir",
    "registrars",
    "registry_dir",
    "run_backend",
    "run_nvidia",
    "serve_plugin",
    "start_driver",
    "start_manager",
    "umockdev_harness",
    "watcher_events",
    "watching_kubelet",
    "write_config",
]
