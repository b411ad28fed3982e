"""The backend's lifecycle: init failures, --fail-on-init-error, the CLI factory."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from accel_plugins.backends.nvidia.backend import IdleBackend, NvidiaBackend, create_backend
from accel_plugins.backends.nvidia.command import COMMAND
from accel_plugins.backends.nvidia.config.config import (
    NvidiaSettings,
    ReplicaDevices,
    ReplicatedResource,
    TimeSlicing,
    share_all,
)
from accel_plugins.backends.nvidia.errors import NvmlInitError
from accel_plugins.backends.nvidia.factory import simulated_backend
from accel_plugins.backends.nvidia.facts import gpu_facts
from accel_plugins.backends.nvidia.resources import MigStrategyError
from accel_plugins.backends.nvidia.simulate.simulate import SimulatedNvml
from accel_plugins.cli.main import add_options
from accel_plugins.errors import ConfigError
from accel_plugins.plugin.backend import Allocator, Backend
from accel_plugins.plugin.command import BackendContext
from tests.fixtures.nvidia import RunNvidia, profile, settings


def test_backend_implements_the_framework_protocols() -> None:
    backend = NvidiaBackend(SimulatedNvml(profile("pcie-4gpu")), settings())
    assert isinstance(backend, Backend)
    assert isinstance(backend, Allocator)


@pytest.mark.parametrize(
    ("nvml", "strategy", "error"),
    [
        pytest.param(
            SimulatedNvml(profile("pcie-4gpu"), init_error="NVML: driver not loaded"),
            "none",
            NvmlInitError,
            id="init-fails",
        ),
        pytest.param(
            SimulatedNvml(profile("a100-mig")), "single", MigStrategyError, id="mig-misfit"
        ),
    ],
)
async def test_fail_on_init_error_decides_between_error_and_idling(
    run_nvidia: RunNvidia, nvml: SimulatedNvml, strategy: str, error: type[Exception]
) -> None:
    with pytest.raises(error):
        create_backend(nvml, settings(mig_strategy=strategy, fail_on_init_error=True))
    idle = create_backend(nvml, settings(mig_strategy=strategy, fail_on_init_error=False))
    assert isinstance(idle, IdleBackend)
    recorder = await run_nvidia(idle)
    assert recorder.trees == [{}]


def test_a_sharing_entry_for_a_missing_device_is_a_config_error_even_when_idling() -> None:
    sharing = TimeSlicing(
        resources=(
            ReplicatedResource(
                "nvidia.com/gpu", "nvidia.com/gpu", ReplicaDevices(refs=("9",)), 2, "entry"
            ),
        )
    )
    with pytest.raises(ConfigError, match=r"no nvidia\.com/gpu device matches '9'"):
        create_backend(
            SimulatedNvml(profile("pcie-4gpu")),
            settings(sharing=sharing, fail_on_init_error=False),
        )


def test_the_check_leaves_nvml_shut_down() -> None:
    nvml = SimulatedNvml(profile("dgx-a100"))
    create_backend(nvml, settings())
    assert (nvml.init_calls, nvml.shutdown_calls) == (1, 1)


def parse(argv: list[str]) -> BackendContext:
    """What ``accel-plugins nvidia ARGV`` hands COMMAND.build, in an empty environment."""
    parser = argparse.ArgumentParser()
    add_options(parser, COMMAND.options)
    return BackendContext(options=vars(parser.parse_args(argv)))


async def test_cli_factory_serves_a_simulated_node(
    run_nvidia: RunNvidia, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CONFIG_FILE", raising=False)
    factory = COMMAND.build(parse(["--simulate", "dgx-h100"]))
    recorder = await run_nvidia(factory())
    gpus = list(recorder.latest["nvidia.com/gpu"].values())
    assert len(gpus) == 8
    assert gpu_facts(gpus[0]).links == ("X", *["NODE"] * 3, *["SYS"] * 4)  # NVSwitch links


async def test_cli_factory_rereads_the_config_on_each_call(
    tmp_path: Path, run_nvidia: RunNvidia
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\n")
    factory = COMMAND.build(parse(["--simulate", "pcie-4gpu", "--config", str(config)]))
    first = await run_nvidia(factory())
    assert len(first.latest["nvidia.com/gpu"]) == 4
    config.write_text(
        "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n"
        "    resources: [{name: nvidia.com/gpu, replicas: 2}]\n"
    )
    second = await run_nvidia(factory())  # what the manager does on SIGHUP
    assert list(second.latest) == ["nvidia.com/gpu.shared"]
    assert len(second.latest["nvidia.com/gpu.shared"]) == 8


def test_cli_factory_maps_an_init_failure_per_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("CONFIG_FILE", "FAIL_ON_INIT_ERROR", "ACCEL_PLUGINS_FAIL_ON_INIT_ERROR"):
        monkeypatch.delenv(name, raising=False)
    missing = str(tmp_path / "libnvidia-ml.so.1")
    strict = COMMAND.build(parse(["--nvml-library", missing]))
    with pytest.raises(NvmlInitError, match="could not be loaded"):
        strict()
    lenient = COMMAND.build(parse(["--nvml-library", missing, "--fail-on-init-error=false"]))
    assert isinstance(lenient(), IdleBackend)


async def test_demo_helper_serves_a_time_sliced_dgx(run_nvidia: RunNvidia) -> None:
    backend = simulated_backend(
        "dgx-h100", NvidiaSettings(time_slicing=share_all(4, rename_by_default=True))
    )
    recorder = await run_nvidia(backend)
    assert list(recorder.latest) == ["nvidia.com/gpu.shared"]
    assert len(recorder.latest["nvidia.com/gpu.shared"]) == 32
