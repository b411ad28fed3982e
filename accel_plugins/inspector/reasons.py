"""Why each device is Unhealthy, for ``inspect``: read from the plugin's own /metrics.

ListAndWatch has no field for a reason, and inspect only speaks the public
device plugin API to the socket, so the reason comes from the one place our
plugins publish it outside the API server: the
``accel_plugins_device_health_reason`` series on ``--metrics-address`` (the
chart sets ``ACCEL_PLUGINS_METRICS_ADDRESS`` in the plugin's pod, so
``kubectl exec`` into it finds them with no flag). The series whose
``resource`` owns the socket (its name is ``<domain>_<name>.sock``) are the
ones read. Another vendor's plugin has no such series: inspect then says the
reasons are unavailable and reports the rest as before.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

SERIES = "accel_plugins_device_health_reason"


@dataclass(frozen=True, slots=True)
class Reasons:
    """Device ID -> its reason (``kind`` or ``kind code``), read from ``url``; ``problem``
    says why none could be read."""

    url: str
    by_device: Mapping[str, str] = field(default_factory=dict)
    problem: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"url": self.url, "error": self.problem or None}


def metrics_url(address: tuple[str, int]) -> str:
    """Where to scrape a plugin listening on ``address`` from the same host."""
    host, port = address
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/metrics"


def resource_of(socket: Path, resources: set[str]) -> str | None:
    """The resource whose socket is ``socket`` (any prefix before ``<domain>_<name>.sock``)."""
    for resource in sorted(resources):
        if socket.name.endswith(f"{resource.replace('/', '_', 1)}.sock"):
            return resource
    return None


def parse_reasons(text: str, socket: Path) -> dict[str, str]:
    """Device ID -> reason from a scrape's text, for the resource served on ``socket``."""
    rows = [
        sample.labels
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == SERIES and sample.value == 1
    ]
    resource = resource_of(socket, {labels.get("resource", "") for labels in rows})
    return {
        labels["device"]: " ".join(p for p in (labels.get("kind", ""), labels.get("code", "")) if p)
        for labels in rows
        if labels.get("resource") == resource
    }


def read_reasons(address: tuple[str, int], socket: Path, timeout: float) -> Reasons:
    """Scrape the plugin at ``address`` (blocking: run it in a thread)."""
    url = metrics_url(address)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            text = response.read().decode()
    except (OSError, urllib.error.URLError, ValueError) as exc:
        return Reasons(url, problem=str(getattr(exc, "reason", exc)))
    if SERIES not in text:
        return Reasons(url, problem=f"no {SERIES} series there (not an accel-plugins plugin?)")
    return Reasons(url, parse_reasons(text, socket))
