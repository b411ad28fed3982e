"""GetPreferredAllocation for NVIDIA resources: which devices to hand out together.

Owns the pair score and link matrix of NVIDIA's best-effort allocator
(``pair_score``), its exact search (``best_effort_search``), replica spreading and
packing (``replica_policy``) and the policy that picks among them
(``preferred_allocation``). Pure policy over facts: it may import the NVML adapter's
types, ``discovery``, ``facts`` and the framework's allocation helpers, never
config, CDI, MPS, labels, simulation, health or the backend (import-linter
contract in pyproject.toml).
"""
