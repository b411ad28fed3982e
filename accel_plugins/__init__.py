"""accel-plugins: Kubernetes device plugins for GPUs and /dev hardware."""

# Kept equal to pyproject.toml's version by a test. Read from the installed
# metadata it would cost every start-up the import of importlib.metadata.
__version__ = "0.1.0"
