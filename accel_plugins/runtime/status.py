"""What one resource's server reports of itself: for /metrics and /healthz."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PluginStatus:
    resource: str
    serving: bool
    registered: bool
    devices: int
    healthy: int
    open_streams: int
    registrations: int
