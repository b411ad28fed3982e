"""MPS sharing: the MPS root, readiness, and the ``mps-control-daemon`` command.

Owns both sides of NVIDIA's MPS contract. The plugin side (``mps_root``,
``mps_readiness``) tells the backend where the pipe and log directories are and
which MPS resources have a running daemon; the backend imports only these two.
The daemon side (``mps_plan``, ``mps_control``, ``mps_daemon``, ``mps_startup``,
``mps_command``) runs one supervised ``nvidia-cuda-mps-control`` per resource and
may import the core, ``config``, ``factory`` and ``simulate`` to read the plugin's
settings and node as the plugin does. ``fake_mps_control`` is a program started
with ``python -m``, never imported. Import-linter contracts in pyproject.toml hold
these lines.
"""
