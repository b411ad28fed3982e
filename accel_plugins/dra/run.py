"""``accel-plugins <backend> --kubelet-api dra``: the backend served as a DRA driver.

Imported only in DRA mode, as is the API side (``accel_plugins.dra.kube``,
lightkube, the ``[dra]`` extra): the device-plugin path never pays for either.
The API side is looked up by module name at run time, so a framework-only
install reports the missing extra instead of failing to import.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import signal
from typing import Any

from accel_plugins.dra.driver import BackendFactory, DraDriver, DraSettings
from accel_plugins.errors import ConfigError
from accel_plugins.plugin.device import Device
from accel_plugins.plugin.dra_attributes import DraDescriber, DraDeviceInfo

log = logging.getLogger(__name__)

API_SIDE = "accel_plugins.dra.kube"
EXTRA_HINT = "pip install 'accel-plugins[dra]'"


def api_side() -> Any:
    """The API side's module; ConfigError naming the extra when its client is missing."""
    try:
        return importlib.import_module(API_SIDE)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            "--kubelet-api dra",
            "",
            f"needs the Kubernetes client ({exc.name} is not installed): {EXTRA_HINT}",
        ) from exc


async def serve_dra(factory: BackendFactory, settings: DraSettings, kubeconfig: str | None) -> int:
    """Run the driver until SIGTERM/SIGINT (exit 0); SIGHUP rebuilds the backend."""
    kube = api_side()
    client = kube.make_client(kube.client.load_config(kubeconfig))
    driver: DraDriver | None = None

    def describe(resource: str, device: Device) -> DraDeviceInfo:
        # The backend running now: it is rebuilt after a crash and on SIGHUP.
        backend = driver.backend if driver is not None else None
        if isinstance(backend, DraDescriber):
            return backend.dra_device(resource, device)
        return DraDeviceInfo()

    slices = kube.KubeSlicePublisher(
        client, driver=settings.driver_name, node=settings.node_name, describe=describe
    )
    driver = DraDriver(factory, settings, kube.KubeClaimSource(client), slices)
    loop = asyncio.get_running_loop()

    def stop() -> None:
        log.info("stopping")
        assert driver is not None
        driver.stop()

    loop.add_signal_handler(signal.SIGTERM, stop)
    loop.add_signal_handler(signal.SIGINT, stop)
    loop.add_signal_handler(signal.SIGHUP, driver.reload)
    try:
        await driver.run()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
        await client.close()
    return 0
