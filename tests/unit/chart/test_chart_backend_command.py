"""generic.command: the generic DaemonSet runs another installed backend from its image.

docs/deploying-a-backend.md shows these values for examples/fpga-backend; CI renders,
lints and validates them (charts/accel-plugins/ci/third-party-backend-values.yaml).
"""

from __future__ import annotations

import re

import pytest
import yaml

from tests.support.chart import ROOT, ci_values, container, daemonset, helm_sdk, render

PAGE = ROOT / "docs" / "deploying-a-backend.md"


def test_the_command_runs_with_its_own_flags_only() -> None:
    objects = render(ci_values("third-party-backend"))
    fpga = container(daemonset(objects, "generic"))
    assert fpga["command"] == ["accel-plugins", "fpga"]
    # The generic backend's own flags (--domain, --udev-source, --config) are left out.
    assert fpga["args"] == ["--dev-root=/host/dev", "--sys-root=/host/sys"]
    assert fpga["image"] == "ghcr.io/accel-fpga:0.1.0"
    assert not [o for o in objects if o["kind"] == "ConfigMap"]


def test_without_a_command_the_generic_backend_runs() -> None:
    generic = container(daemonset(render(ci_values("generic-only")), "generic"))
    assert "command" not in generic  # the image's entrypoint: accel-plugins generic
    assert any(arg.startswith("--domain=") for arg in generic["args"])


def test_a_command_with_generic_devices_is_refused() -> None:
    helm = helm_sdk()
    values = ci_values("third-party-backend")
    values["devices"] = [{"name": "fuse", "groups": [{"paths": [{"path": "/dev/fuse"}]}]}]
    with pytest.raises(helm.HelmRenderError, match=r'generic.command "fpga" runs another backend'):
        render(values)


def test_the_page_shows_the_ci_values() -> None:
    shown = re.search(r"```yaml\n(# values for accel-fpga\n.*?)```", PAGE.read_text(), re.DOTALL)
    assert shown is not None
    assert yaml.safe_load(shown.group(1)) == ci_values("third-party-backend")
