"""Shared fixtures; each area keeps its own in a tests/*_fixtures.py module."""

from tests.kubelet_fixtures import kubelet, kubelet_dir, kubelet_events, make_plugin

__all__ = ["kubelet", "kubelet_dir", "kubelet_events", "make_plugin"]
