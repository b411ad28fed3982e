"""The DRA mode: a backend served as a Dynamic Resource Allocation driver (resource.k8s.io).

Owns the kubelet side (the DRAPlugin v1/v1beta1 services, the registration socket,
Prepare and Unprepare, the checkpoint, per-claim CDI specs, the health stream) and,
in :mod:`accel_plugins.dra.kube`, the API side (ResourceSlices, ResourceClaims).
``model`` is the contract between the two sides.

May import: :mod:`accel_plugins.runtime`, :mod:`accel_plugins.switch`,
:mod:`accel_plugins.kube`, :mod:`accel_plugins.metrics`, :mod:`accel_plugins.plugin`,
:mod:`accel_plugins.util`, ``errors`` and ``api``. Never the device-plugin mode, a
backend, the command line or the kubelet emulator.
"""
