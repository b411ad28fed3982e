"""Which versions and resource names the emulated kubelet accepts in Register."""

from __future__ import annotations

import pytest

from accel_plugins.kubelet_emulator.names import (
    SUPPORTED_VERSIONS,
    qualified_name_problems,
    resource_name_problem,
    version_problem,
)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("nvidia.com/gpu", id="vendor-gpu"),
        pytest.param("nvidia.com/mig-1g.10gb", id="mig-profile-with-dots"),
        pytest.param("squat.ai/serial", id="short-domain"),
        pytest.param("example.com/a_b-c.d", id="underscore-dash-dot"),
        pytest.param("example.com/" + "n" * 63, id="name-63-chars"),
        pytest.param("d" * 244 + "/x", id="domain-244-chars"),
        pytest.param("example.com/X1", id="uppercase-name-part"),
    ],
)
def test_valid_extended_resource_names(name: str) -> None:
    assert resource_name_problem(name) is None


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        pytest.param("gpu", "no domain prefix", id="no-domain"),
        pytest.param("nvidia.com/", "name part must be non-empty", id="empty-name"),
        pytest.param("/gpu", "domain part must be non-empty", id="empty-domain"),
        pytest.param("kubernetes.io/foo", "reserved for native", id="kubernetes-io"),
        pytest.param("gpu.kubernetes.io/foo", "reserved for native", id="kubernetes-io-subdomain"),
        pytest.param("requests.example.com/x", "reserved for quota", id="requests-prefix"),
        pytest.param("Example.com/x", "DNS-1123", id="uppercase-domain"),
        pytest.param("exa_mple.com/x", "DNS-1123", id="underscore-domain"),
        pytest.param("example.com/-x", "starting and ending", id="name-starts-with-dash"),
        pytest.param("example.com/x.", "starting and ending", id="name-ends-with-dot"),
        pytest.param("example.com/a b", "alphanumerics", id="space-in-name"),
        pytest.param("example.com/a/b", "at most one '/'", id="two-slashes"),
        pytest.param("example.com/" + "n" * 64, "no more than 63", id="name-64-chars"),
        pytest.param("d" * 245 + "/x", "no more than 244", id="domain-245-chars"),
    ],
)
def test_invalid_extended_resource_names(name: str, reason: str) -> None:
    problem = resource_name_problem(name)
    assert problem is not None
    assert reason in problem
    assert repr(name) in problem


def test_plain_qualified_names_need_no_prefix() -> None:
    assert qualified_name_problems("cpu") == []
    assert qualified_name_problems("") == ["name part must be non-empty"]


@pytest.mark.parametrize(
    ("version", "ok"),
    [
        pytest.param("v1beta1", True, id="v1beta1"),
        pytest.param("v1alpha", False, id="v1alpha"),
        pytest.param("", False, id="empty"),
        pytest.param("V1BETA1", False, id="wrong-case"),
    ],
)
def test_versions(version: str, ok: bool) -> None:
    problem = version_problem(version)
    assert (problem is None) == ok
    if not ok:
        assert problem is not None
        assert all(v in problem for v in SUPPORTED_VERSIONS)
