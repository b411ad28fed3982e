"""``accel-plugins inspect``: ask any vendor's device plugin what the kubelet would.

It talks to a plugin's socket with the kubelet emulator's client and reads the
plugin's own ``/metrics``; it imports no mode and no backend, so it can face any
plugin. Nothing but the command line imports it.
"""
