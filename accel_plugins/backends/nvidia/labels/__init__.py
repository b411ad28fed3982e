"""The node labels of NVIDIA's gpu-feature-discovery, and the NFD feature file.

Owns the label names and values (``node_labels``), the extra NVML reads they need
behind a Protocol of their own (``label_facts``) and ``--nfd-features-file``
(``feature_file``). It may import the core, ``config`` and the framework; to label
a node as served it builds the backend (``feature_file``), but it never imports
CDI, MPS, allocation or simulation itself (import-linter contract in
pyproject.toml).
"""
