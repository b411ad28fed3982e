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
