"""Dynamic Resource Allocation (resource.k8s.io) from the same backends.

See ``model`` for the contract between the kubelet side and the API side.
"""
