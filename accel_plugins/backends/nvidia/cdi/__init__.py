"""CDI specs for NVIDIA devices, as NVIDIA's plugin writes them.

Owns the spec (``cdi_spec``) and what it reads from the host: the driver's files
under a driver root (``driver_files``, ``graphics_files``, the linker cache in
``ldcache``) and each GPU's DRM nodes (``drm_nodes``). It may import the core
(``discovery``, ``container_contract``) and the framework, but no config, health,
MPS, labels, simulation or serving module: the backend hands it discovered devices
and options (import-linter contract in pyproject.toml).
"""
