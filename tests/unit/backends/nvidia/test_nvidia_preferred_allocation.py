"""The NVIDIA backend's preferred allocation on simulated nodes, and where its policy is set."""

from __future__ import annotations

import argparse
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from accel_plugins.backends.nvidia.backend import NvidiaBackend
from accel_plugins.backends.nvidia.command import COMMAND
from accel_plugins.backends.nvidia.config.config import (
    ReplicaDevices,
    ReplicatedResource,
    TimeSlicing,
    share_all,
)
from accel_plugins.backends.nvidia.factory import load_settings
from accel_plugins.backends.nvidia.facts import gpu_facts
from accel_plugins.cli.main import add_options
from accel_plugins.errors import AllocationError, ConfigError
from accel_plugins.plugin.backend import PreferredAllocator
from accel_plugins.plugin.device import Device
from tests.fixtures.nvidia import simulated_backend
from tests.support.chart import container, daemonset, render

GPU = "nvidia.com/gpu"


def built(spec: str, **options: Any) -> tuple[NvidiaBackend, dict[str, list[Device]]]:
    backend, _ = simulated_backend(spec, **options)
    node = backend.check()
    return backend, backend.build(node)


def short(device: Device) -> str:
    """``3`` for GPU 3, ``3::1`` for its replica 1, ``0:2`` for a MIG device."""
    n = gpu_facts(device).replica
    index = gpu_facts(device).index
    return index if n is None else f"{index}::{n}"


def ask(
    backend: NvidiaBackend,
    resource: str,
    devices: list[Device],
    available: list[str],
    must: list[str],
    size: int,
) -> list[str]:
    by_name = {short(d): d for d in devices}
    ids = backend.preferred_allocation(
        resource, [by_name[a] for a in available], [by_name[m] for m in must], size
    )
    names = {d.id: short(d) for d in devices}
    return sorted(
        (names[i] for i in ids), key=lambda s: [int(p) for p in s.replace("::", ":").split(":")]
    )


def test_the_backend_offers_preferred_allocation() -> None:
    backend, _ = built("pcie-4gpu")
    assert isinstance(backend, PreferredAllocator)


@pytest.mark.parametrize(
    ("available", "must", "size", "expected"),
    [
        pytest.param(
            ["0", "2", "3", "4", "5", "6", "7"], [], 1, ["0"], id="keeps-free-pairs-whole"
        ),
        pytest.param(["1", "2", "3", "4", "6", "7"], [], 2, ["2", "3"], id="linked-pair"),
        pytest.param(["0", "1", "2", "3", "4", "5", "6", "7"], ["5"], 2, ["4", "5"], id="must"),
        pytest.param(
            ["0", "2", "4", "5", "6", "7"], [], 4, ["4", "5", "6", "7"], id="whole-switch"
        ),
    ],
)
def test_whole_gpus_on_nvlink_pairs(
    available: list[str], must: list[str], size: int, expected: list[str]
) -> None:
    backend, resources = built("pcie-8gpu-nvlink-pairs")
    assert ask(backend, GPU, resources[GPU], available, must, size) == expected


ALL_REPLICAS = [f"{g}::{n}" for g in range(8) for n in range(4)]


@pytest.mark.parametrize(
    ("policy", "available", "must", "size", "expected"),
    [
        pytest.param("spread", ALL_REPLICAS, [], 4, ["0::0", "1::0", "2::0", "3::0"], id="spread"),
        pytest.param(
            "spread",
            [r for r in ALL_REPLICAS if not r.startswith("0::")],
            ["1::2"],
            2,
            ["1::2", "2::0"],
            id="spread-with-must-include",
        ),
        pytest.param(
            "spread",
            [r for r in ALL_REPLICAS if r not in ("2::0", "2::1", "3::0")],
            [],
            1,
            ["0::0"],
            id="spread-single-on-a-gpu-with-most-free",
        ),
        pytest.param("packed", ALL_REPLICAS, [], 4, ["0::0", "0::1", "0::2", "0::3"], id="packed"),
        pytest.param(
            "packed",
            [r for r in ALL_REPLICAS if r not in ("2::0", "2::1", "3::0")],
            [],
            2,
            ["2::2", "2::3"],
            id="packed-best-fit",
        ),
    ],
)
def test_time_sliced_replicas(
    policy: str, available: list[str], must: list[str], size: int, expected: list[str]
) -> None:
    backend, resources = built("dgx-h100", sharing=share_all(4))
    backend.settings = replace(backend.settings, replica_policy=policy)
    assert ask(backend, GPU, resources[GPU], available, must, size) == expected


def test_shared_and_whole_gpus_in_one_resource_spread_over_replicas_first() -> None:
    # GPUs 0 and 1 time-sliced under the same name; GPUs 2 and 3 stay whole.
    sharing = TimeSlicing(
        resources=(ReplicatedResource(GPU, GPU, ReplicaDevices(refs=("0", "1")), 2, "test"),)
    )
    backend, resources = built("pcie-4gpu", sharing=sharing)
    names = [short(d) for d in resources[GPU]]
    assert ask(backend, GPU, resources[GPU], names, [], 2) == ["0::0", "1::0"]
    assert ask(backend, GPU, resources[GPU], ["0::0", "2", "3"], [], 2) == ["0::0", "2"]


def test_mig_devices_stay_on_one_gpu() -> None:
    # a100-mig, mixed: GPU 0 has two 1g.5gb devices (0:2, 0:3), GPU 1 has seven.
    backend, resources = built("a100-mig", mig_strategy="mixed")
    migs = resources["nvidia.com/mig-1g.5gb"]
    names = [short(d) for d in migs]
    resource = "nvidia.com/mig-1g.5gb"
    assert ask(backend, resource, migs, names, [], 2) == ["0:2", "0:3"]
    assert ask(backend, resource, migs, names, [], 3) == ["1:0", "1:1", "1:2"]
    assert ask(backend, resource, migs, names, ["1:4"], 2) == ["1:0", "1:4"]


@pytest.mark.parametrize(
    ("available", "must", "size", "problem"),
    [
        pytest.param(["0", "1"], [], 3, "larger than the 2 available", id="too-large"),
        pytest.param(["0", "1"], ["2"], 1, "are not available", id="must-not-available"),
        pytest.param(["0", "1"], [], 0, "must be positive", id="zero"),
    ],
)
def test_bad_requests_raise_allocation_errors(
    available: list[str], must: list[str], size: int, problem: str
) -> None:
    backend, resources = built("pcie-4gpu")
    with pytest.raises(AllocationError, match=problem):
        ask(backend, GPU, resources[GPU], available, must, size)


def test_devices_without_gpu_facts_use_the_numa_default() -> None:
    backend, _ = built("pcie-4gpu")
    devices = [Device(id=f"d{i}", numa_nodes=(1 - i // 2,)) for i in range(4)]
    assert list(backend.preferred_allocation(GPU, devices, [], 2)) == ["d2", "d3"]


@pytest.mark.parametrize(
    ("spec", "resource", "pick", "expected"),
    [
        pytest.param("pcie-4gpu", GPU, ["0"], False, id="one GPU: nothing to choose"),
        pytest.param("pcie-4gpu", GPU, ["0", "1"], True, id="two GPUs"),
        pytest.param("a100-mig", "nvidia.com/mig-1g.5gb", ["0:2", "0:3"], False, id="MIGs on one"),
        pytest.param("a100-mig", "nvidia.com/mig-1g.5gb", ["0:2", "1:0"], True, id="MIGs on two"),
    ],
)
def test_a_preference_needs_two_physical_gpus(
    spec: str, resource: str, pick: list[str], expected: bool
) -> None:
    backend, resources = built(spec, mig_strategy="mixed")
    by_name = {short(d): d for d in resources[resource]}
    assert backend.has_preference(resource, [by_name[p] for p in pick]) is expected


def test_replicas_of_one_gpu_are_interchangeable() -> None:
    backend, resources = built("pcie-4gpu", sharing=share_all(4))
    replicas = [d for d in resources[GPU] if gpu_facts(d).gpu_index == 0]
    assert len(replicas) == 4
    assert not backend.has_preference(GPU, replicas)
    assert backend.has_preference(GPU, resources[GPU])


def test_devices_without_gpu_facts_fall_back_to_numa() -> None:
    backend, _ = built("pcie-4gpu")
    assert backend.has_preference(GPU, [Device("a", numa_nodes=(0,)), Device("b", numa_nodes=(1,))])
    assert not backend.has_preference(GPU, [Device("a", numa_nodes=(0,)), Device("b")])


# -- where the replica policy is set ---------------------------------------------------------


def parse(argv: list[str]) -> dict[str, Any]:
    """The option values ``accel-plugins nvidia ARGV`` gives COMMAND.build."""
    parser = argparse.ArgumentParser(prog="accel-plugins nvidia", exit_on_error=False)
    add_options(parser, COMMAND.options)
    return vars(parser.parse_args(argv))


def config_file(tmp_path: Path, policy: str | None) -> Path:
    line = f"    replicaPolicy: {policy}\n" if policy else ""
    text = (
        "version: v1\nsharing:\n  timeSlicing:\n"
        + line
        + "    resources:\n    - {name: nvidia.com/gpu, replicas: 2}\n"
    )
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize(
    ("argv", "env", "file", "expected"),
    [
        pytest.param([], None, None, "spread", id="default"),
        pytest.param([], None, "packed", "packed", id="file"),
        pytest.param([], "spread", "packed", "spread", id="env-over-file"),
        pytest.param(["--replica-policy", "packed"], "spread", None, "packed", id="flag-over-env"),
        pytest.param(["--replica-policy=spread"], None, "packed", "spread", id="flag-over-file"),
    ],
)
def test_replica_policy_precedence(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    env: str | None,
    file: str | None,
    expected: str,
) -> None:
    monkeypatch.delenv("CONFIG_FILE", raising=False)
    if env is None:
        monkeypatch.delenv("ACCEL_PLUGINS_REPLICA_POLICY", raising=False)
    else:
        monkeypatch.setenv("ACCEL_PLUGINS_REPLICA_POLICY", env)
    if file is not None:
        argv = ["--config", str(config_file(tmp_path, file)), *argv]
    assert load_settings(parse(argv), environ={}).replica_policy == expected


def test_bad_replica_policy_in_the_file_names_the_field(tmp_path: Path) -> None:
    path = config_file(tmp_path, "scatter")
    with pytest.raises(ConfigError) as caught:
        load_settings(parse(["--config", str(path)]), environ={})
    assert str(caught.value) == (
        f"{path}: sharing.timeSlicing.replicaPolicy: 'scatter' is not one of spread, packed"
    )


def test_bad_replica_policy_flag_and_env_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACCEL_PLUGINS_REPLICA_POLICY", raising=False)
    with pytest.raises(argparse.ArgumentError, match="invalid choice: 'scatter'"):
        parse(["--replica-policy", "scatter"])
    monkeypatch.setenv("ACCEL_PLUGINS_REPLICA_POLICY", "scatter")
    with pytest.raises(SystemExit):
        parse([])


def nvidia_config_file(tmp_path: Path, shared: str, ours: str | None = None) -> Path:
    """A config with NVIDIA's flags.plugin.sharedDevicesAllocationPolicy (and our alias)."""
    alias = f"    replicaPolicy: {ours}\n" if ours else ""
    text = (
        f"version: v1\nflags:\n  plugin:\n    sharedDevicesAllocationPolicy: {shared}\n"
        "sharing:\n  timeSlicing:\n"
        + alias
        + "    resources:\n    - {name: nvidia.com/gpu, replicas: 2}\n"
    )
    path = tmp_path / "nvidia.yaml"
    path.write_text(text)
    return path


POLICY_ENV = (
    "SHARED_DEVICES_ALLOCATION_POLICY",
    "ACCEL_PLUGINS_SHARED_DEVICES_ALLOCATION_POLICY",
    "ACCEL_PLUGINS_REPLICA_POLICY",
)


@pytest.mark.parametrize(
    ("argv", "env", "file", "expected"),
    [
        pytest.param([], {}, "packed", "packed", id="nvidia-file-packed"),
        pytest.param([], {}, "distributed", "spread", id="nvidia-file-distributed"),
        pytest.param(
            ["--shared-devices-allocation-policy", "packed"], {}, None, "packed", id="nvidia-flag"
        ),
        pytest.param(
            [], {"SHARED_DEVICES_ALLOCATION_POLICY": "packed"}, None, "packed", id="nvidia-env"
        ),
        pytest.param(
            ["--shared-devices-allocation-policy=distributed"],
            {},
            "packed",
            "spread",
            id="nvidia-flag-over-nvidia-file",
        ),
        pytest.param(
            ["--replica-policy=spread"], {}, "packed", "spread", id="alias-flag-over-nvidia-file"
        ),
        pytest.param(
            ["--replica-policy=packed", "--shared-devices-allocation-policy=packed"],
            {},
            None,
            "packed",
            id="both-names-agree",
        ),
    ],
)
def test_nvidia_shared_devices_allocation_policy_drives_the_replica_policy(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    env: dict[str, str],
    file: str | None,
    expected: str,
) -> None:
    monkeypatch.delenv("CONFIG_FILE", raising=False)
    for name in POLICY_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if file is not None:
        argv = ["--config", str(nvidia_config_file(tmp_path, file)), *argv]
    assert load_settings(parse(argv), environ={}).replica_policy == expected


def test_names_of_the_policy_that_disagree_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CONFIG_FILE", raising=False)
    for name in POLICY_ENV:
        monkeypatch.delenv(name, raising=False)
    path = nvidia_config_file(tmp_path, "distributed", ours="packed")
    with pytest.raises(ConfigError) as caught:
        load_settings(parse(["--config", str(path)]), environ={})
    assert str(caught.value) == (
        f"{path}: sharing.timeSlicing.replicaPolicy: 'packed' contradicts "
        "flags.plugin.sharedDevicesAllocationPolicy 'distributed' (the same setting: spread is "
        "distributed)"
    )
    agreeing = nvidia_config_file(tmp_path, "distributed", ours="spread")
    assert load_settings(parse(["--config", str(agreeing)]), environ={}).replica_policy == "spread"
    argv = ["--replica-policy=spread", "--shared-devices-allocation-policy=packed"]
    with pytest.raises(ConfigError, match="'spread' contradicts --shared-devices-allocation"):
        load_settings(parse(argv), environ={})
    with pytest.raises(argparse.ArgumentError, match="invalid choice: 'spread'"):
        parse(["--shared-devices-allocation-policy", "spread"])  # NVIDIA's values only


@pytest.mark.parametrize(
    ("policy", "flag"),
    [
        pytest.param("", None, id="unset-leaves-it-to-the-file"),
        pytest.param("packed", "--replica-policy=packed", id="packed"),
    ],
)
def test_chart_passes_the_replica_policy(policy: str, flag: str | None) -> None:
    objects = render({"nvidia": {"replicaPolicy": policy}})
    args = container(daemonset(objects, "nvidia"))["args"]
    assert [a for a in args if a.startswith("--replica-policy")] == ([flag] if flag else [])
