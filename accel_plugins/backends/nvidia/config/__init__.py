"""NVIDIA's plugin config file (format v1) and its merge with flags and environment.

Owns the settings dataclasses, the file's schema and value syntax
(``config_syntax``) and the CLI > env > file precedence. It reads files and flags
only: it may import ``container_contract`` (its strategies and Allocate settings), the replica
policies' names from ``allocation`` and the project's config helpers, never NVML,
discovery, health, the backend or another capability (import-linter contract in
pyproject.toml).
"""
