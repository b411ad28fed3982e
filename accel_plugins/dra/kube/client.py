"""The driver's API client: :mod:`accel_plugins.kubeclient`, shared with the kubelet emulator."""

from accel_plugins.kubeclient import FIELD_MANAGER, KUBECONFIG_ENV, load_config, make_client

__all__ = ["FIELD_MANAGER", "KUBECONFIG_ENV", "load_config", "make_client"]
