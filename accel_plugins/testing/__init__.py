"""Test a backend end to end from pytest: fixtures, a fake host and a served backend.

The pytest plugin (:mod:`accel_plugins.testing.plugin`, loaded automatically
through the ``pytest11`` entry point) gives tests the ``accel_host``,
``accel_plugin_dir``, ``accel_kubelet``, ``accel_kubelet_events`` and
``accel_serve`` fixtures. The names below are the types those fixtures return
and helpers to use with them::

    from accel_plugins.testing import FakeHost, ServeBackend

    async def test_discovers(accel_host: FakeHost, accel_serve: ServeBackend) -> None:
        accel_host.node("/dev/fpga0", major=240, minor=0)
        served = await accel_serve(lambda: MyBackend(accel_host.dev))
        await served.wait_for_devices("example.com/fpga", 1)

Importing this package is cheap: the names that need grpc (everything but
FakeHost) are loaded on first use.

May import: the device-plugin mode, metrics, the runtime, the interface and the
kubelet emulator; the product never imports it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from accel_plugins.testing.host import FakeHost

if TYPE_CHECKING:
    from accel_plugins.testing.serve import (
        Scrape,
        ServeBackend,
        ServedBackend,
        command_factory,
        emulated_kubelet,
        short_tempdir,
    )

__all__ = [
    "FakeHost",
    "Scrape",
    "ServeBackend",
    "ServedBackend",
    "command_factory",
    "emulated_kubelet",
    "short_tempdir",
]

_LAZY = {
    "Scrape": "accel_plugins.testing.serve",
    "ServeBackend": "accel_plugins.testing.serve",
    "ServedBackend": "accel_plugins.testing.serve",
    "command_factory": "accel_plugins.testing.serve",
    "emulated_kubelet": "accel_plugins.testing.serve",
    "short_tempdir": "accel_plugins.testing.serve",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
