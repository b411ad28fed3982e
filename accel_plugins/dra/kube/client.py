"""The driver's API client: :mod:`accel_plugins.kube.client`, shared with the kubelet emulator."""

from accel_plugins.kube.client import FIELD_MANAGER, KUBECONFIG_ENV, load_config, make_client

__all__ = ["FIELD_MANAGER", "KUBECONFIG_ENV", "load_config", "make_client"]
