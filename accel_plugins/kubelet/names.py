"""Validation of what a plugin sends in Register: API version and resource name.

The resource-name rules are the Kubernetes ones for *extended resources*: a
qualified name ``prefix/name`` outside the ``kubernetes.io/`` namespace, that
stays a valid qualified name once the quota prefix ``requests.`` is put in front.
"""

from __future__ import annotations

from accel_plugins.k8snames import (
    DNS1123_SUBDOMAIN_MAX as _DNS1123_SUBDOMAIN_MAX,
)
from accel_plugins.k8snames import (
    DNS1123_SUBDOMAIN_RE as _DNS1123_SUBDOMAIN_RE,
)
from accel_plugins.k8snames import DOMAIN_MAX as _DOMAIN_MAX
from accel_plugins.k8snames import NAME_MAX as _NAME_MAX
from accel_plugins.k8snames import NAME_RE as _NAME_RE
from accel_plugins.k8snames import NATIVE_NAMESPACE as _NATIVE_NAMESPACE
from accel_plugins.k8snames import QUOTA_PREFIX as _QUOTA_PREFIX

SUPPORTED_VERSIONS: tuple[str, ...] = ("v1beta1",)


def version_problem(version: str) -> str | None:
    """Why the kubelet would refuse this API version, or None when it is supported."""
    if version in SUPPORTED_VERSIONS:
        return None
    return f"API version {version!r} is not supported; supported versions: " + ", ".join(
        SUPPORTED_VERSIONS
    )


def qualified_name_problems(value: str) -> list[str]:
    """Why ``value`` is not a Kubernetes qualified name (``[prefix/]name``); empty if it is."""
    parts = value.split("/")
    if len(parts) == 1:
        prefix, name = "", parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return ["prefix part must be non-empty"]
        if len(prefix) > _DNS1123_SUBDOMAIN_MAX:
            return [f"prefix part must be no more than {_DNS1123_SUBDOMAIN_MAX} characters"]
        if not _DNS1123_SUBDOMAIN_RE.fullmatch(prefix):
            return [
                "prefix part must be a DNS-1123 subdomain: lowercase alphanumerics, '-' "
                "and '.', starting and ending with an alphanumeric"
            ]
    else:
        return ["must be a name with at most one '/' (prefix/name)"]
    problems = []
    if not name:
        problems.append("name part must be non-empty")
    elif len(name) > _NAME_MAX:
        problems.append(f"name part must be no more than {_NAME_MAX} characters")
    if name and not _NAME_RE.fullmatch(name):
        problems.append(
            "name part must consist of alphanumerics, '-', '_' or '.', "
            "starting and ending with an alphanumeric"
        )
    return problems


def resource_name_problem(resource_name: str) -> str | None:
    """Why ``resource_name`` is not a valid extended resource name, or None when it is."""
    if "/" not in resource_name:
        reason = "it has no domain prefix (expected domain/name, e.g. vendor.example.com/widget)"
    elif _NATIVE_NAMESPACE in resource_name:
        reason = f"names in the {_NATIVE_NAMESPACE} namespace are reserved for native resources"
    elif resource_name.startswith(_QUOTA_PREFIX):
        reason = f"the {_QUOTA_PREFIX!r} prefix is reserved for quota"
    else:
        # The kubelet checks the name as quota will see it, "requests.<name>".
        domain = resource_name.split("/", 1)[0]
        limit = _DOMAIN_MAX
        if not domain:
            reason = "domain part must be non-empty"
        elif len(domain) > limit:
            reason = f"domain part must be no more than {limit} characters"
        else:
            problems = qualified_name_problems(_QUOTA_PREFIX + resource_name)
            if not problems:
                return None
            reason = "; ".join(p.replace("prefix part", "domain part") for p in problems)
    return f"invalid extended resource name {resource_name!r}: {reason}"
