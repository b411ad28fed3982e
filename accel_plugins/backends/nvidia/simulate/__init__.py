"""The simulated NVML: a node described by a data table, behind the real adapter.

Owns the profile format that ``--simulate FILE`` reads (``simulated_profile``),
the built-in nodes (``builtin_profiles``) and the :class:`Nvml` implementation
that answers from a profile (``simulate``). It may import the NVML adapter's
Protocol and types, the NVML errors and the pair score's link parser, nothing
above the adapter; only ``factory``, the MPS start-up and ``demo`` choose it
(import-linter contracts in pyproject.toml).
"""
