"""The driver's registration socket for the kubelet's plugin watcher.

The same pluginregistration v1 exchange as a device plugin's (see
``accel_plugins.runtime.plugin_watcher``), with DRA's answers: type
``DRAPlugin`` (the kubelet's handler key for DRA drivers), the driver's name,
the absolute path of its ``dra.sock``, and the gRPC service names it serves as
supported versions (the kubelet picks v1 when offered, else v1beta1).
"""

from __future__ import annotations

from accel_plugins.api import pluginregistration_v1_pb2 as reg
from accel_plugins.dra.service import SUPPORTED_VERSIONS
from accel_plugins.runtime.plugin_watcher import RegistrationServicer, StatusCallback

PLUGIN_TYPE = "DRAPlugin"


def registration_socket_name(driver: str, uid: str = "") -> str:
    """``<driver>-reg.sock``, or ``<driver>-<uid>-reg.sock`` for one pod of a rolling
    update: the names Kubernetes' own DRA helper library gives it."""
    return f"{driver}-{uid}-reg.sock" if uid else f"{driver}-reg.sock"


class DraRegistrationServicer(RegistrationServicer):
    """What the kubelet's plugin watcher asks the driver's registration socket."""

    def __init__(self, driver: str, endpoint: str, on_status: StatusCallback) -> None:
        super().__init__(driver, endpoint, on_status)
        self.driver = driver

    def info(self) -> reg.PluginInfo:
        return reg.PluginInfo(
            type=PLUGIN_TYPE,
            name=self.driver,
            endpoint=self.endpoint,
            supported_versions=list(SUPPORTED_VERSIONS),
        )
