"""accel-fpga: FPGA cards as the Kubernetes resource ``example.com/fpga``.

An example of a third-party backend for accel-plugins; see ``accel_fpga.backend``
for the backend and ``accel_fpga.command`` for its ``accel-plugins fpga`` command.
"""
