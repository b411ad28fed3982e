"""The default allocation policy and request checks, as a specification table."""

from __future__ import annotations

import pytest

from accel_plugins.errors import AllocationError
from accel_plugins.plugin.allocation import (
    check_preferred_request,
    merge,
    natural_key,
    prefer_fewest_numa_nodes,
    resolve,
)
from accel_plugins.plugin.device import Device, DeviceNode, Health, Mount


def dev(i: str, *numa: int, healthy: bool = True) -> Device:
    return Device(i, Health.HEALTHY if healthy else Health.UNHEALTHY, numa_nodes=numa)


# Eight devices, four per NUMA node, like a two-socket server.
TWO_NODES = [dev(f"d{i}", i // 4) for i in range(8)]


@pytest.mark.parametrize(
    ("available", "must", "size", "expected"),
    [
        pytest.param(TWO_NODES, [], 1, ["d0"], id="one-device-lowest-id"),
        pytest.param(TWO_NODES, [], 4, ["d0", "d1", "d2", "d3"], id="fills-one-node"),
        pytest.param(TWO_NODES, [], 5, ["d0", "d1", "d2", "d3", "d4"], id="spills-to-second"),
        pytest.param(TWO_NODES, ["d5"], 2, ["d4", "d5"], id="stays-on-must-include-node"),
        pytest.param(TWO_NODES, ["d5"], 4, ["d4", "d5", "d6", "d7"], id="must-node-first"),
        pytest.param(TWO_NODES, ["d0", "d7"], 2, ["d0", "d7"], id="must-include-only"),
        pytest.param(
            [TWO_NODES[0], *TWO_NODES[4:]], [], 2, ["d4", "d5"], id="node-with-room-beats-lower-id"
        ),
        pytest.param(
            [dev("a"), dev("b", 1), dev("c", 1)], [], 2, ["b", "c"], id="numa-before-unknown"
        ),
        pytest.param([dev("a"), dev("b", 1)], [], 2, ["a", "b"], id="unknown-numa-fills-the-rest"),
        pytest.param(
            [dev("x0", 0, healthy=False), dev("x1", 0), dev("x2", 1)],
            [],
            1,
            ["x1"],
            id="healthy-first",
        ),
        pytest.param(
            [dev("gpu10", 0), dev("gpu2", 0), dev("gpu1", 0)],
            [],
            2,
            ["gpu1", "gpu2"],
            id="natural-id-order",
        ),
        pytest.param(
            [dev("m", 0, 1), dev("n", 0), dev("o", 2)], [], 2, ["m", "n"], id="multi-node-device"
        ),
    ],
)
def test_prefer_fewest_numa_nodes(
    available: list[Device], must: list[str], size: int, expected: list[str]
) -> None:
    by_id = {d.id: d for d in available}
    answer = prefer_fewest_numa_nodes(available, [by_id[m] for m in must], size)
    assert answer == expected
    # Same input, same answer: the policy has no hidden state.
    assert prefer_fewest_numa_nodes(list(reversed(available)), [by_id[m] for m in must], size) == (
        expected
    )


@pytest.mark.parametrize(
    ("size", "must", "message"),
    [
        pytest.param(0, [], "allocation_size must be positive", id="zero-size"),
        pytest.param(-3, [], "allocation_size must be positive", id="negative-size"),
        pytest.param(9, [], "larger than the 8 available", id="too-large"),
        pytest.param(1, ["d0", "d1"], "do not fit in allocation_size 1", id="must-exceeds-size"),
        pytest.param(2, ["zz"], "'zz' are not available", id="must-not-available"),
    ],
)
def test_impossible_preferred_requests(size: int, must: list[str], message: str) -> None:
    must_devices = [dev(m, 0) for m in must]
    with pytest.raises(AllocationError, match=message):
        check_preferred_request("example.com/w", TWO_NODES, must_devices, size)


KNOWN = {d.id: d for d in [dev("a"), dev("b"), dev("sick", healthy=False)]}


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        pytest.param([], "names no devices", id="empty"),
        pytest.param(["a", "nope"], "unknown device IDs 'nope'", id="unknown"),
        pytest.param(["sick"], "unhealthy device IDs 'sick'", id="unhealthy"),
        pytest.param(["a", "b", "a"], "duplicate device IDs 'a'", id="duplicate"),
        pytest.param(
            ["x", "sick", "a", "a"],
            "unknown device IDs 'x'; unhealthy device IDs 'sick'; duplicate device IDs 'a'",
            id="all-problems-named",
        ),
    ],
)
def test_resolve_rejects(ids: list[str], message: str) -> None:
    with pytest.raises(AllocationError, match=message):
        resolve("example.com/w", ids, KNOWN, require_healthy=True)


def test_resolve_keeps_request_order() -> None:
    assert [d.id for d in resolve("r", ["b", "a"], KNOWN, require_healthy=True)] == ["b", "a"]


def test_merge_combines_specs() -> None:
    ctl = DeviceNode("/dev/ctl", permissions="r")
    first = Device(
        "one",
        nodes=(DeviceNode("/dev/one", "/dev/x0"), ctl),
        mounts=(Mount("/lib/a", "/a", read_only=True),),
        envs={"A": "1", "SHARED": "first"},
        annotations={"k": "v"},
    )
    second = Device(
        "two",
        nodes=(DeviceNode("/dev/two", "/dev/x1"), DeviceNode("/dev/ctl", permissions="w")),
        mounts=(Mount("/lib/a", "/a", read_only=True),),
        envs={"SHARED": "second"},
    )
    merged = merge([first, second])
    assert [(n.host_path, n.container_path, n.permissions) for n in merged.nodes] == [
        ("/dev/one", "/dev/x0", "rw"),
        ("/dev/ctl", "/dev/ctl", "rw"),
        ("/dev/two", "/dev/x1", "rw"),
    ]
    assert merged.mounts == (Mount("/lib/a", "/a", read_only=True),)
    assert dict(merged.envs) == {"A": "1", "SHARED": "second"}
    assert dict(merged.annotations) == {"k": "v"}
    assert merged.cdi_devices == ()


@pytest.mark.parametrize(
    ("envs", "merged_envs", "warned"),
    [
        pytest.param(
            [{"ACME_VISIBLE_NPUS": "npu0"}, {"ACME_VISIBLE_NPUS": "npu1"}],
            {"ACME_VISIBLE_NPUS": "npu1"},
            [
                "env ACME_VISIBLE_NPUS: the devices of one request set it to 'npu0' and 'npu1'; "
                "the last device's (d1) wins. An Allocator (allocate hook) can combine the "
                "values instead"
            ],
            id="different-values-last-wins-with-a-warning",
        ),
        pytest.param(
            [{"ACME_DRIVER": "on"}, {"ACME_DRIVER": "on"}],
            {"ACME_DRIVER": "on"},
            [],
            id="same-value-no-warning",
        ),
        pytest.param(
            [{"A": "1"}, {"B": "2"}],
            {"A": "1", "B": "2"},
            [],
            id="different-variables-no-warning",
        ),
    ],
)
def test_merge_warns_when_devices_disagree_on_an_env_var(
    envs: list[dict[str, str]],
    merged_envs: dict[str, str],
    warned: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 27: two devices with ACME_VISIBLE_NPUS=npu0 and =npu1 silently gave npu1."""
    devices = [Device(f"d{i}", envs=env) for i, env in enumerate(envs)]
    with caplog.at_level("WARNING", logger="accel_plugins.plugin.allocation"):
        merged = merge(devices)
    assert dict(merged.envs) == merged_envs
    assert [r.getMessage() for r in caplog.records] == warned


def test_a_device_named_by_cdi_is_injected_once_by_its_cdi_names() -> None:
    """Its nodes, mounts and env live in its CDI spec: the response names it, nothing more
    (issue 15: never both a device spec and a CDI device)."""
    plain = Device("zero", nodes=(DeviceNode("/dev/zero"),), envs={"Z": "0"})
    named = Device(
        "one",
        nodes=(DeviceNode("/dev/one"),),
        mounts=(Mount("/lib/a", "/a"),),
        envs={"A": "1"},
        annotations={"k": "v"},
        cdi_devices=("example.com/w=one",),
    )
    other = Device("two", nodes=(DeviceNode("/dev/two"),), cdi_devices=("example.com/w=two",))
    merged = merge([plain, named, other, named])
    assert merged.nodes == (DeviceNode("/dev/zero"),)
    assert merged.mounts == ()
    assert dict(merged.envs) == {"Z": "0"}
    assert dict(merged.annotations) == {"k": "v"}
    assert merged.cdi_devices == ("example.com/w=one", "example.com/w=two")


def test_natural_key_orders_numbers() -> None:
    assert sorted(["d10", "d2", "d1", "e"], key=natural_key) == ["d1", "d2", "d10", "e"]


@pytest.mark.parametrize(
    "permissions", [pytest.param("", id="empty"), pytest.param("rwx", id="bad-letter")]
)
def test_device_node_permissions_checked(permissions: str) -> None:
    with pytest.raises(ValueError, match="permissions"):
        DeviceNode("/dev/x", permissions=permissions)


def test_device_is_hashable_and_frozen() -> None:
    device = Device("a", envs={"K": "V"})
    assert hash(device) == hash(Device("a", envs={"K": "other"}))
    with pytest.raises(AttributeError):
        device.id = "b"  # type: ignore[misc]
    with pytest.raises(TypeError):
        device.envs["K"] = "X"  # type: ignore[index]
