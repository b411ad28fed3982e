"""The built-in vendor backends: NVIDIA (NVML) and generic ``/dev`` nodes (udev).

Each describes devices and answers hooks through :mod:`accel_plugins.plugin` alone, as a
third-party backend does: never grpc, the runtime, a mode or another backend.
"""
