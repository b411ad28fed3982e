"""The per-node switch between the device-plugin and the DRA mode, under one name.

A plugin starting in one mode first waits until the other mode holds nothing and
advertises nothing on this node (:mod:`.probes`, :mod:`.wait`); ``migrate`` is the
operator's ``accel-plugins migrate NODE --to dra|device-plugin`` that flips a node.
(Leaving NVIDIA's or squat's plugin for ours is a different move: docs/migration.md.)

May import: :mod:`accel_plugins.kube`, :mod:`accel_plugins.util` and ``api``; it reads
the other mode's sockets and files, never its code, so both modes can import it.
"""

from accel_plugins.switch.model import Blockers, HeldDevice, Mode, SwitchSettings

__all__ = ["Blockers", "HeldDevice", "Mode", "SwitchSettings"]
