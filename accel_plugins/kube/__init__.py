"""Adapters to the Kubernetes API server, for what both modes may ask of it.

Owns the one lightkube client (``--kubeconfig`` or the pod's service account), the
optional client of device-plugin mode, Node Events and the Node's cordon
annotation. lightkube and its models (the ``[dra]`` extra) load here, lazily.

May import: :mod:`accel_plugins.runtime` (the sinks and sources it implements),
:mod:`accel_plugins.util` and ``errors``. Never a mode, a backend or the command line.
"""
