"""Where the kubelet keeps what both modes meet it through (the defaults of their flags)."""

from pathlib import Path

# Where the kubelet's plugin watcher looks for registration sockets.
DEFAULT_PLUGINS_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
