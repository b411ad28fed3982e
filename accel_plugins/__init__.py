"""accel-plugins: Kubernetes device plugins for GPUs and /dev hardware."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("accel-plugins")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
