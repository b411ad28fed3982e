"""The pytest plugin of accel-plugins: fixtures for testing a backend end to end.

Installed with the package and loaded by pytest through the ``pytest11`` entry
point, so in any project that has ``accel-plugins`` installed a test can ask for:

``accel_host``
    a :class:`~accel_plugins.testing.FakeHost`: a fake ``/dev`` and ``/sys`` in the
    test's temp dir.
``accel_plugin_dir``
    a short empty directory under /tmp (unix socket paths are limited to 107 bytes).
``accel_kubelet``
    the kubelet emulator (:class:`accel_plugins.kubelet_emulator.Kubelet`) started on
    ``accel_plugin_dir``; ``accel_kubelet_events`` lists what it reported.
``accel_serve``
    ``await accel_serve(backend_or_factory, **manager_settings)``: the backend run by
    the real framework ``Manager`` against ``accel_kubelet``; returns a
    :class:`~accel_plugins.testing.ServedBackend`, stopped at teardown.

The async fixtures need pytest-asyncio (``pip install 'accel-plugins[testing]'``).
This module is imported in every pytest run of every project that installs
accel-plugins, so it imports nothing heavy: grpc, the framework and the emulator
are imported inside the fixtures that use them.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

import pytest

from accel_plugins.testing.host import FakeHost

if TYPE_CHECKING:
    from accel_plugins.kubelet_emulator import Kubelet
    from accel_plugins.plugin.backend import Backend
    from accel_plugins.testing.serve import ServeBackend, ServedBackend

__all__ = [
    "accel_host",
    "accel_kubelet",
    "accel_kubelet_events",
    "accel_plugin_dir",
    "accel_serve",
]

_P = ParamSpec("_P")
_R = TypeVar("_R")

NEEDS_ASYNCIO = (
    "accel_plugins.testing: the async fixtures need pytest-asyncio "
    "(pip install 'accel-plugins[testing]')"
)


def _async_fixture(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """pytest-asyncio's fixture decorator (works in its strict and auto modes), or,
    without pytest-asyncio, a fixture that fails the test saying what to install."""
    try:
        import pytest_asyncio
    except ImportError:

        @functools.wraps(function)
        def missing(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            pytest.fail(NEEDS_ASYNCIO)

        return cast("Callable[_P, _R]", pytest.fixture(missing))
    return cast("Callable[_P, _R]", pytest_asyncio.fixture(function))


@pytest.fixture
def accel_host(tmp_path: Path) -> FakeHost:
    """A fake host ``/dev`` and ``/sys`` under the test's ``tmp_path / "host"``."""
    return FakeHost(tmp_path / "host")


@pytest.fixture
def accel_plugin_dir() -> Iterator[Path]:
    """An empty device-plugin directory directly under /tmp, removed at teardown."""
    from accel_plugins.testing.serve import short_tempdir

    with short_tempdir("ap-") as path:
        yield path


@pytest.fixture
def accel_kubelet_events() -> list[str]:
    """Every line ``accel_kubelet`` reported (registrations, device changes, allocations)."""
    return []


@_async_fixture
async def accel_kubelet(
    accel_plugin_dir: Path, accel_kubelet_events: list[str]
) -> AsyncIterator[Kubelet]:
    """The kubelet emulator, started on ``accel_plugin_dir``, stopped at teardown.

    It serves PodResources at ``accel_plugin_dir / "pod-resources" / "kubelet.sock"``.
    """
    from accel_plugins.testing.serve import emulated_kubelet

    emulator = emulated_kubelet(accel_plugin_dir, on_event=accel_kubelet_events.append)
    async with emulator:
        yield emulator


@_async_fixture
async def accel_serve(
    accel_kubelet: Kubelet, accel_plugin_dir: Path
) -> AsyncIterator[ServeBackend]:
    """Factory: serve a backend through the framework's Manager to ``accel_kubelet``.

    ``await accel_serve(backend, expect_crashes=False, **settings)`` takes a
    Backend instance or a factory (a class, a function, or
    :func:`~accel_plugins.testing.command_factory` of a BackendCommand) and
    ManagerSettings fields, and returns a :class:`~accel_plugins.testing.ServedBackend`
    at once (wait on it for devices). Every served backend is stopped at teardown;
    a crash of the manager fails the test, and so does a crash of the backend
    unless ``expect_crashes=True``.
    """
    from accel_plugins.testing.serve import ServedBackend

    served: list[ServedBackend] = []

    async def serve(
        backend: Backend | Callable[[], Backend],
        /,
        *,
        expect_crashes: bool = False,
        **settings: Any,
    ) -> ServedBackend:
        handle = ServedBackend.start(
            backend,
            **({"plugin_dir": accel_plugin_dir} | settings),
            kubelet=accel_kubelet,
            expect_crashes=expect_crashes,
        )
        served.append(handle)
        return handle

    yield serve
    errors: list[BaseException] = []
    for handle in served:
        try:
            await handle.stop()
        except Exception as exc:  # every handle is stopped before the first error is raised
            errors.append(exc)
    if errors:
        raise errors[0]
