"""``accel-plugins demo``: real plugins and an emulated kubelet, on any Linux machine.

May import the modes, the backends (simulated NVML, a fake ``/dev``), metrics and the
kubelet emulator; nothing but the command line imports it.
"""
