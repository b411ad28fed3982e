"""Validation of what a plugin sends in Register: API version and resource name.

The resource-name rules live in :mod:`accel_plugins.util.k8snames`, shared with the
framework, which refuses a backend's invalid names before registering them.
"""

from __future__ import annotations

from accel_plugins.util.k8snames import qualified_name_problems, resource_name_problem

__all__ = [
    "SUPPORTED_VERSIONS",
    "qualified_name_problems",
    "resource_name_problem",
    "version_problem",
]

SUPPORTED_VERSIONS: tuple[str, ...] = ("v1beta1",)


def version_problem(version: str) -> str | None:
    """Why the kubelet would refuse this API version, or None when it is supported."""
    if version in SUPPORTED_VERSIONS:
        return None
    return f"API version {version!r} is not supported; supported versions: " + ", ".join(
        SUPPORTED_VERSIONS
    )
