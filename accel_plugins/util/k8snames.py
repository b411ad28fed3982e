"""The Kubernetes naming rules behind extended resource names, in one place.

The kubelet emulator (what Register accepts) and the backends' config checks
(what they will ask to register) must agree, so both read these.
"""

from __future__ import annotations

import re

NATIVE_NAMESPACE = "kubernetes.io/"
QUOTA_PREFIX = "requests."
DNS1123_SUBDOMAIN_MAX = 253
NAME_MAX = 63
# Quota checks "requests.<domain>/<name>", so the domain has 9 characters less.
DOMAIN_MAX = DNS1123_SUBDOMAIN_MAX - len(QUOTA_PREFIX)

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_RE = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
NAME_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def qualified_name_problems(value: str) -> list[str]:
    """Why ``value`` is not a Kubernetes qualified name (``[prefix/]name``); empty if it is."""
    parts = value.split("/")
    if len(parts) == 1:
        prefix, name = "", parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return ["prefix part must be non-empty"]
        if len(prefix) > DNS1123_SUBDOMAIN_MAX:
            return [f"prefix part must be no more than {DNS1123_SUBDOMAIN_MAX} characters"]
        if not DNS1123_SUBDOMAIN_RE.fullmatch(prefix):
            return [
                "prefix part must be a DNS-1123 subdomain: lowercase alphanumerics, '-' "
                "and '.', starting and ending with an alphanumeric"
            ]
    else:
        return ["must be a name with at most one '/' (prefix/name)"]
    problems = []
    if not name:
        problems.append("name part must be non-empty")
    elif len(name) > NAME_MAX:
        problems.append(f"name part must be no more than {NAME_MAX} characters")
    if name and not NAME_RE.fullmatch(name):
        problems.append(
            "name part must consist of alphanumerics, '-', '_' or '.', "
            "starting and ending with an alphanumeric"
        )
    return problems


def resource_name_problem(resource_name: str) -> str | None:
    """Why ``resource_name`` is not a valid extended resource name, or None when it is."""
    if "/" not in resource_name:
        reason = "it has no domain prefix (expected domain/name, e.g. vendor.example.com/widget)"
    elif NATIVE_NAMESPACE in resource_name:
        reason = f"names in the {NATIVE_NAMESPACE} namespace are reserved for native resources"
    elif resource_name.startswith(QUOTA_PREFIX):
        reason = f"the {QUOTA_PREFIX!r} prefix is reserved for quota"
    else:
        # The kubelet checks the name as quota will see it, "requests.<name>".
        domain = resource_name.split("/", 1)[0]
        limit = DOMAIN_MAX
        if not domain:
            reason = "domain part must be non-empty"
        elif len(domain) > limit:
            reason = f"domain part must be no more than {limit} characters"
        else:
            problems = qualified_name_problems(QUOTA_PREFIX + resource_name)
            if not problems:
                return None
            reason = "; ".join(p.replace("prefix part", "domain part") for p in problems)
    return f"invalid extended resource name {resource_name!r}: {reason}"
