"""The per-node switch between the device-plugin and the DRA mode (issue 26).

A plugin starting in one mode first waits until the other mode holds nothing and
advertises nothing on this node (:mod:`.probes`, :mod:`.wait`); a plugin stopping on a
switch stops advertising first (:mod:`.stopping`). docs/migration.md is the runbook.
"""

from accel_plugins.switch.model import Blockers, HeldDevice, Mode, SwitchSettings

__all__ = ["Blockers", "HeldDevice", "Mode", "SwitchSettings"]
