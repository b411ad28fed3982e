"""``--nfd-features-file``: the node's GPU labels kept in an NFD feature file.

Written each time the backend is built (start, config reload, rebuild after a
crash), before it serves, and only when the labels differ from the file's.
A failure to read NVML or write the file is logged and never stops the
plugin: labels are a convenience, devices are the job.
"""

from __future__ import annotations

import logging
from pathlib import Path

from accel_plugins.backends.nvidia.backend import NvidiaBackend
from accel_plugins.backends.nvidia.config.config import NvidiaSettings
from accel_plugins.backends.nvidia.discovery import discover
from accel_plugins.backends.nvidia.errors import NvmlError
from accel_plugins.backends.nvidia.labels.label_facts import LabelNvml, read_label_facts
from accel_plugins.backends.nvidia.labels.node_labels import Sharing, node_labels, render
from accel_plugins.backends.nvidia.nvml import Nvml, session
from accel_plugins.plugin.backend import Backend
from accel_plugins.plugin.command import BackendFactory
from accel_plugins.util.nfd import write_feature_file

log = logging.getLogger(__name__)


def sharing_of(settings: NvidiaSettings) -> Sharing:
    if settings.mps is not None:
        return Sharing(settings.mps, mps=True)
    return Sharing(settings.time_slicing)


def write_node_labels(nvml: Nvml, settings: NvidiaSettings, path: Path) -> None:
    """Discover the node and write its labels to ``path`` (logged, never raised)."""
    if not isinstance(nvml, LabelNvml):
        log.warning("%s: this NVML cannot tell versions or capabilities; no labels", path)
        return
    try:
        with session(nvml):
            node = discover(nvml)
            facts = read_label_facts(nvml, node)
    except NvmlError as exc:
        log.warning("node labels not updated: %s", exc)
        return
    labels = node_labels(
        node, facts, mig_strategy=settings.mig_strategy, sharing=sharing_of(settings)
    )
    try:
        changed = write_feature_file(path, render(labels))
    except OSError as exc:
        log.warning("cannot write the node labels to %s: %s", path, exc)
        return
    if changed:
        log.info("node labels: %d written to %s", len(labels), path)


def labelled(build: BackendFactory, path: Path) -> BackendFactory:
    """``build``, plus the node's labels written each time it builds an NVIDIA backend."""

    def factory() -> Backend:
        backend = build()
        if isinstance(backend, NvidiaBackend):
            write_node_labels(backend.nvml, backend.settings, path)
        return backend

    return factory
