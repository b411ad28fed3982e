"""NVIDIA GPUs and MIG devices through NVML, a drop-in for NVIDIA's device plugin."""
