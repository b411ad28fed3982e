"""``--nfd-features-file``: labels written at each backend build, from simulated and fake NVML."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from accel_plugins.backends.nvidia.command import COMMAND
from accel_plugins.backends.nvidia.discovery import discover
from accel_plugins.backends.nvidia.labels.label_facts import read_label_facts
from accel_plugins.backends.nvidia.nvml import session
from accel_plugins.cli.main import add_options
from accel_plugins.plugin.command import BackendContext, BackendFactory
from tests.fixtures.nvidia import FakeNvml

UUID0 = "GPU-00000000-1111-2222-3333-444444444444"
UUID1 = "GPU-55555555-6666-7777-8888-999999999999"


def parse(*argv: str) -> dict[str, object]:
    parser = argparse.ArgumentParser()
    add_options(parser, COMMAND.options)
    return vars(parser.parse_args(argv))


def build(*argv: str) -> BackendFactory:
    return COMMAND.build(BackendContext(options=parse(*argv)))


def read_labels(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def test_off_by_default_with_an_environment_twin(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse()["nfd_features_file"] == ""
    monkeypatch.setenv("ACCEL_PLUGINS_NFD_FEATURES_FILE", "/etc/nfd/features.d/x")
    assert parse()["nfd_features_file"] == "/etc/nfd/features.d/x"


def test_labels_follow_the_config_at_each_build(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\n")
    features = tmp_path / "features.d" / "accel-plugins-nvidia"
    features.parent.mkdir()
    factory = build(
        "--simulate", "dgx-a100", "--config", str(config), "--nfd-features-file", str(features)
    )
    factory()
    labels = read_labels(features)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.replicas"] == "1"
    assert labels["nvidia.com/gpu.compute.major"] == "8"
    assert labels["nvidia.com/mig.capable"] == "true"
    unchanged = features.stat().st_ino

    factory()  # a rebuild that changes nothing leaves the file alone
    assert features.stat().st_ino == unchanged

    config.write_text(
        "version: v1\nsharing:\n  timeSlicing:\n"
        "    resources: [{name: nvidia.com/gpu, replicas: 4}]\n"
    )
    factory()  # what a live reload does
    labels = read_labels(features)
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-SHARED"


def test_an_unwritable_file_is_logged_and_the_backend_still_builds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    features = tmp_path / "absent" / "accel-plugins-nvidia"
    backend = build("--simulate", "pcie-4gpu", "--nfd-features-file", str(features))()
    assert backend is not None
    assert f"cannot write the node labels to {features}" in caplog.text


def test_pynvml_reads_versions_capability_and_mig_support(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(
        f"gpu {UUID0} 0 81920 00000000:07:00.0 0 0 NVIDIA A100-SXM4-80GB",
        f"gpu {UUID1} 1 15360 00000000:0F:00.0 0 0 Tesla T4",
        "driver 535.104.05 12020",
        "cc 0 8 0",
        "cc 1 7 5",
        "nomig 1",
    )
    nvml = fake_nvml.adapter()
    with session(nvml):
        node = discover(nvml)
        facts = read_label_facts(nvml, node)
    assert facts.driver_version == "535.104.05"
    assert facts.cuda_driver_version == 12020
    assert facts.compute_capability == {UUID0: (8, 0), UUID1: (7, 5)}
    assert facts.mig_capable == frozenset({UUID0})
