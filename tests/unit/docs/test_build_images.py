"""hack/build-images: versioned images with OCI labels, a packaged chart, --push.

No container engine runs here, so the build and push commands are checked
through ``--dry-run`` (the script prints each command it would run, shell-quoted);
the chart package is made for real (``--chart-only``) and loaded with Helm's SDK.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from tests.support.chart import ROOT, helm_sdk, package_version

SCRIPT = ROOT / "hack" / "build-images"
OCI_KEYS = ("version", "revision", "source", "created", "licenses")


def build_images(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=os.environ | {"SOURCE_DATE_EPOCH": "0"} | env,
    )


def commands(output: str) -> list[list[str]]:
    """The commands a dry run printed (its own ``build-images:`` notes left out)."""
    return [
        shlex.split(line) for line in output.splitlines() if not line.startswith("build-images:")
    ]


def head_commit() -> str:
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.strip()


@pytest.mark.parametrize("engine", ["docker", "buildah"])
def test_dry_run_builds_versioned_labelled_images_then_pushes(engine: str, tmp_path: Path) -> None:
    result = build_images(
        "--dry-run", "--engine", engine, "--registry", "registry.example/team", "--push",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    ran = commands(result.stdout)
    version = package_version()
    builds = [c for c in ran if c[:2] in (["docker", "build"], ["buildah", "build"])]
    assert [c[c.index("--target") + 1] for c in builds] == ["nvidia", "generic"]
    for build, vendor in zip(builds, ("nvidia", "generic"), strict=True):
        assert build[0] == engine
        args = dict(
            build[i + 1].split("=", 1) for i, word in enumerate(build) if word == "--build-arg"
        )
        assert args == {
            "VERSION": version,
            "REVISION": head_commit(),
            "CREATED": "1970-01-01T00:00:00Z",  # SOURCE_DATE_EPOCH=0
            "SOURCE": "https://github.com/accel-plugins/accel-plugins",
        }
        tag = build[build.index("--tag") + 1]
        assert tag == f"registry.example/team/accel-plugins-{vendor}:{version}"
    package = tmp_path / f"accel-plugins-{version}.tgz"
    assert [engine, "push", f"registry.example/team/accel-plugins-nvidia:{version}"] in ran
    assert [engine, "push", f"registry.example/team/accel-plugins-generic:{version}"] in ran
    assert ran[-1] == ["helm", "push", str(package), "oci://registry.example/team/charts"]
    # Pushes come after every build and the chart package.
    first_push = next(i for i, c in enumerate(ran) if "push" in c)
    assert all(ran.index(b) < first_push for b in builds)
    assert not package.exists()  # a dry run writes nothing


def test_without_push_nothing_is_pushed(tmp_path: Path) -> None:
    result = build_images("--dry-run", "--engine", "docker", "nvidia", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    ran = commands(result.stdout)
    assert [c[:2] for c in ran if c[0] == "docker"] == [["docker", "build"]]
    assert not any("push" in c for c in ran)


def test_chart_package_is_versioned_and_installable(tmp_path: Path) -> None:
    result = build_images("--chart-only", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    package = tmp_path / f"accel-plugins-{package_version()}.tgz"
    with tarfile.open(package) as archive:
        names = archive.getnames()
        chart_yaml = archive.extractfile("accel-plugins/Chart.yaml")
        assert chart_yaml is not None
        chart = yaml.safe_load(chart_yaml.read())
    assert chart["version"] == chart["appVersion"] == package_version()
    assert "accel-plugins/values.schema.json" in names
    assert "accel-plugins/README.md" in names
    assert not any(n.startswith("accel-plugins/ci") for n in names)  # .helmignore
    helm = helm_sdk()
    with helm.Chart.load(package) as loaded:
        rendered = loaded.render({}, name="rel", namespace="ns")
    assert any(path.endswith("daemonset.yaml") for path in rendered)


def test_dockerfile_labels_every_oci_key_from_build_args() -> None:
    text = (ROOT / "Dockerfile").read_text()
    labels = dict(re.findall(r"org\.opencontainers\.image\.(\w+)=\"([^\"]*)\"", text))
    for key in OCI_KEYS:
        assert key in labels, key
    assert labels["licenses"] == "Apache-2.0"
    for key, arg in (("version", "VERSION"), ("revision", "REVISION"), ("created", "CREATED")):
        assert labels[key] == "${" + arg + "}"
        assert f"ARG {arg}=" in text
    assert labels["source"] == "${SOURCE}"


def test_unknown_argument_exits_2() -> None:
    result = build_images("--dry-run", "--bogus")
    assert result.returncode == 2
    assert "unknown argument '--bogus'" in result.stderr
