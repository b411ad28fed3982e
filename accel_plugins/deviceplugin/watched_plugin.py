"""Registration through the kubelet's plugin watcher (pluginregistration v1).

The second way a resource gets registered, chosen by ``ManagerSettings.registration``.
Instead of calling Register on ``kubelet.sock``, each resource serves the kubelet's
``pluginregistration.Registration`` service on a socket in the kubelet's
``plugins_registry`` directory. The kubelet's plugin watcher notices the socket
(inotify), calls GetInfo (type ``DevicePlugin``, name = the resource, endpoint =
the absolute path of the device plugin socket, supported versions ``v1beta1``),
dials that endpoint as it does after a Register, and reports the outcome with
NotifyRegistrationStatus.

Here the kubelet is the caller, so registering again means offering a new
socket: the kubelet registers a socket once per appearance. The socket is
served afresh whenever the device plugin server is (a kubelet restart wiped it,
or new options must be read), when it was removed, and, with backoff, after
the kubelet reported a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from pathlib import Path
from typing import Any

from accel_plugins.api import pluginregistration_v1_pb2 as reg
from accel_plugins.deviceplugin.lifecycle import API_VERSION, ResourcePlugin
from accel_plugins.runtime.plugin_watcher import (
    RegistrationServer,
    RegistrationServicer,
)
from accel_plugins.runtime.server import ServeError

log = logging.getLogger(__name__)

# The kubelet's handler key for device plugins (pluginregistration/v1 constants).
PLUGIN_TYPE = "DevicePlugin"


class DevicePluginRegistrationServicer(RegistrationServicer):
    """What the kubelet's plugin watcher asks one resource's registration socket."""

    def info(self) -> reg.PluginInfo:
        return reg.PluginInfo(
            type=PLUGIN_TYPE,
            name=self.resource,
            endpoint=self.endpoint,
            supported_versions=[API_VERSION],
        )


class WatchedResourcePlugin(ResourcePlugin):
    """A resource the kubelet's plugin watcher registers, instead of a Register call.

    ``register()`` (re)serves the registration socket; ``registered`` is true
    once the kubelet called NotifyRegistrationStatus with plugin_registered=true
    on the socket served now (a new socket starts unregistered).
    """

    def __init__(self, *args: Any, registration_socket: Path, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.registration_socket = registration_socket
        self._registration: RegistrationServer | None = None
        self._token: object | None = None  # the socket whose news counts
        self._accepted = False
        self._failures = 0
        self._reoffer: asyncio.TimerHandle | None = None

    # -- what the manager asks ---------------------------------------------------

    @property
    def registered(self) -> bool:
        registration = self._registration
        return self._accepted and registration is not None and registration.socket_alive()

    def kubelet_started(self, kubelet: int | None) -> None:
        """Nothing to do: a new kubelet finds the registration socket by itself."""

    def check_registration(self, kubelet: int | None) -> None:
        """Serve the registration socket again if it was removed."""
        if self._registering() or self._reoffer is not None:
            return
        if self._registration is None or not self._registration.socket_alive():
            log.info(
                "resource %s: registration socket %s is gone; serving it again",
                self.resource,
                self.registration_socket,
            )
            self.register()

    async def stop(self) -> None:
        self._cancel_registration()
        if self._register_task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._register_task
        await self._stop_registration()
        await super().stop()

    # -- the registration socket -------------------------------------------------

    def _registering(self) -> bool:
        return self._register_task is not None and not self._register_task.done()

    def _cancel_registration(self) -> None:
        if self._reoffer is not None:
            self._reoffer.cancel()
            self._reoffer = None
        super()._cancel_registration()

    async def _stop_registration(self) -> None:
        registration, self._registration = self._registration, None
        self._accepted = False
        self._token = None
        if registration is not None:
            await registration.stop()

    async def _register_until_accepted(self) -> None:
        """Offer a new registration socket, retrying with backoff until it is served.

        What the kubelet makes of it arrives later, through NotifyRegistrationStatus.
        """
        failures = 0
        while True:
            await self._stop_registration()
            try:
                if self._server is None:
                    raise ServeError("the device plugin socket is not served")
                token = self._token = object()
                servicer = DevicePluginRegistrationServicer(
                    self.resource,
                    str(self.socket_path.absolute()),
                    functools.partial(self._on_status, token),
                )
                registration = RegistrationServer(servicer, self.registration_socket)
                try:
                    await registration.start()
                except asyncio.CancelledError:
                    await registration.stop()
                    raise
            except ServeError as exc:
                self._token = None
                failures += 1
                delay = self._backoff.next_delay()
                # Loudly the first time, then quietly until it works.
                log.log(
                    logging.WARNING if failures == 1 else logging.DEBUG,
                    "resource %s: cannot serve the registration socket (%s); retrying in %.1fs",
                    self.resource,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
                continue
            self._registration = registration
            log.info(
                "resource %s: serving %s for the kubelet's plugin watcher",
                self.resource,
                self.registration_socket,
            )
            return

    def _offer_again(self) -> None:
        self._reoffer = None
        super()._cancel_registration()
        self._register_task = asyncio.create_task(
            self._register_until_accepted(), name=f"re-offer {self.resource}"
        )
        self._register_task.add_done_callback(self._report_crash)

    def _on_status(self, token: object, registered: bool, error: str) -> None:
        if token is not self._token:
            return  # news about a socket we no longer serve
        if registered:
            if self._reoffer is not None:  # the kubelet retried by itself and succeeded
                self._reoffer.cancel()
                self._reoffer = None
            self._accepted = True
            self._failures = 0
            self._backoff.reset()
            self.registrations += 1
            self._metrics.registered(self.resource)
            log.info(
                "resource %s: registered by the kubelet's plugin watcher (%s)",
                self.resource,
                self.registration_socket,
            )
            return
        self._accepted = False
        self._failures += 1
        self._metrics.registration_failed(self.resource)
        if self._reoffer is not None:
            return
        delay = self._backoff.next_delay()
        level = logging.WARNING if self._failures == 1 else logging.DEBUG
        log.log(
            level,
            "resource %s: the kubelet did not register it (%s); offering a new socket in %.1fs",
            self.resource,
            error or "no reason given",
            delay,
        )
        # The kubelet registers a socket once per appearance: a new one asks again.
        self._reoffer = asyncio.get_running_loop().call_later(delay, self._offer_again)
