"""The runtime both modes share: what serves a backend, whichever kubelet API it faces.

Owns the pieces the device-plugin mode (:mod:`accel_plugins.deviceplugin`) and the
DRA mode (:mod:`accel_plugins.dra`) both run: the supervisor of the backend and the
settings both modes share (``supervisor``), the rule every backend call follows
(``hooks``), the ``Mode`` the command line picks, the capabilities looked up once per
backend, the unix-socket gRPC server and the plugin watcher's registration socket,
retry pacing, health changes and the Node events and cordons built on them,
configuration reloads, the PodResources cache, CDI checks and the recorder the
metrics attach to.

May import: :mod:`accel_plugins.plugin` (the interface), :mod:`accel_plugins.util`,
``accel_plugins.errors`` and the generated ``api``. Never a mode, a backend, the
command line or the kubelet emulator; the API-server side (lightkube) only through
:mod:`accel_plugins.kube`, which imports this package, not the other way round.
"""
