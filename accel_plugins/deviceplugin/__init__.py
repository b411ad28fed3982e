"""The device-plugin mode: one DevicePlugin gRPC server per resource, registered with the kubelet.

Owns the manager that keeps one plugin per resource served and registered, each
resource's lifecycle (serve, Register on ``kubelet.sock`` or a plugin-watcher
socket, re-register after a kubelet restart), the DevicePlugin servicer and the
conversion of framework values to v1beta1 messages.

May import: :mod:`accel_plugins.runtime`, :mod:`accel_plugins.metrics`,
:mod:`accel_plugins.plugin`, :mod:`accel_plugins.util`, ``errors`` and ``api``.
Never the DRA mode, a backend, the command line or the kubelet emulator.
"""
