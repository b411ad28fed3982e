"""Kubernetes extended resource names: ``<domain>/<name>``.

The rules are the API server's: the domain is a DNS-1123 subdomain outside
``kubernetes.io``, short enough to survive the ``requests.`` quota prefix, and
the name is a qualified-name part of at most 63 characters.
"""

from __future__ import annotations

from accel_plugins.util.k8snames import DNS1123_SUBDOMAIN_RE as _SUBDOMAIN_RE
from accel_plugins.util.k8snames import DOMAIN_MAX as _DOMAIN_MAX
from accel_plugins.util.k8snames import NAME_MAX as _NAME_MAX
from accel_plugins.util.k8snames import NAME_RE as _NAME_RE

DEFAULT_DOMAIN = "accel-plugins.io"


def domain_problem(domain: str) -> str | None:
    """Why ``domain`` cannot prefix an extended resource name, or None."""
    if not domain:
        return "must not be empty"
    if len(domain) > _DOMAIN_MAX:
        return f"must be at most {_DOMAIN_MAX} characters"
    if not _SUBDOMAIN_RE.fullmatch(domain):
        return (
            f"{domain!r} is not a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit)"
        )
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        return f"{domain!r} is reserved for Kubernetes' own resources"
    if domain.startswith("requests."):
        return "the 'requests.' prefix is reserved for quota"
    return None


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be the part after the slash, or None."""
    if not name:
        return "must not be empty"
    if len(name) > _NAME_MAX:
        return f"{name!r} is longer than {_NAME_MAX} characters"
    if not _NAME_RE.fullmatch(name):
        return (
            f"{name!r} is not a valid resource name (letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit)"
        )
    return None


def resource_name(domain: str, name: str) -> str:
    return f"{domain}/{name}"
