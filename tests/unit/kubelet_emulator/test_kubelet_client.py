"""PluginClient refuses a bare string where a list of device IDs belongs, before any call.

A ``str`` is itself a ``Sequence[str]``, so ``allocate(["gpu0"])`` (meant:
``allocate([["gpu0"]])``) type-checks and used to send ``g, p, u, 0``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from accel_plugins.kubelet_emulator import PluginClient
from tests.fixtures.kubelet import MakePlugin, widgets

Call = Callable[[Any], Awaitable[object]]

WRONG: list[object] = [
    pytest.param(
        lambda c: c.allocate("w0"),
        "allocate() takes one list of device IDs per container, not the str 'w0' "
        "(one device: [['w0']])",
        id="allocate-bare-string",
    ),
    pytest.param(
        lambda c: c.allocate(b"w0"),
        "allocate() takes one list of device IDs per container, not the bytes b'w0'",
        id="allocate-bytes",
    ),
    pytest.param(
        lambda c: c.allocate(["w0"]),
        "allocate(): container 0 must be a list of device IDs, not the str 'w0' "
        "(one device: ['w0'])",
        id="allocate-container-as-string",
    ),
    pytest.param(
        lambda c: c.allocate([["w0"], "w1"]),
        "allocate(): container 1 must be a list of device IDs, not the str 'w1'",
        id="allocate-second-container-as-string",
    ),
    pytest.param(
        lambda c: c.allocate([[b"w0"]]),
        "allocate(): container 0: a device ID is a str, got b'w0'",
        id="allocate-bytes-id",
    ),
    pytest.param(
        lambda c: c.allocate([[0]]),
        "allocate(): container 0: a device ID is a str, got 0",
        id="allocate-number-id",
    ),
    pytest.param(
        lambda c: c.allocate([None]),
        "allocate(): container 0 must be a list of device IDs, got None",
        id="allocate-container-none",
    ),
    pytest.param(
        lambda c: c.preferred("w0w1", [], 1),
        "preferred(): available must be a list of device IDs, not the str 'w0w1'",
        id="preferred-available",
    ),
    pytest.param(
        lambda c: c.preferred(["w0"], "w0", 1),
        "preferred(): must_include must be a list of device IDs, not the str 'w0'",
        id="preferred-must-include",
    ),
    pytest.param(
        lambda c: c.pre_start("w0"),
        "pre_start(): device_ids must be a list of device IDs, not the str 'w0'",
        id="pre-start",
    ),
]


@pytest.mark.parametrize(("call", "message"), WRONG)
async def test_wrong_id_lists_are_refused_before_any_call(
    make_plugin: MakePlugin, call: Call, message: str
) -> None:
    plugin = await make_plugin(widgets(2))
    async with PluginClient(plugin.socket_path) as client:
        with pytest.raises(TypeError) as caught:
            await call(client)
    assert str(caught.value).startswith(message)
    assert plugin.calls == []


async def test_any_sequence_of_id_lists_still_reaches_the_plugin(make_plugin: MakePlugin) -> None:
    plugin = await make_plugin(widgets(3))
    async with PluginClient(plugin.socket_path) as client:
        responses = await client.allocate((("w0", "w1"), ["w2"], []))
        await client.preferred(("w0", "w1"), (), 1)
        await client.pre_start(("w2",))
    assert plugin.allocate_requests == [[["w0", "w1"], ["w2"], []]]
    assert [r.envs["WIDGETS"] for r in responses] == ["w0,w1", "w2", ""]
    assert plugin.preferred_requests == [(["w0", "w1"], [], 1)]
    assert plugin.pre_start_requests == [["w2"]]
