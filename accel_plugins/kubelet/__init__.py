"""The kubelet emulator's earlier import path, kept so code written against it runs as before.

The emulator lives in :mod:`accel_plugins.kubelet_emulator`; new code imports it from
there. This package holds nothing else and nothing in ``accel_plugins`` imports it.
"""

from accel_plugins.kubelet_emulator import *  # noqa: F403
from accel_plugins.kubelet_emulator import __all__ as __all__
