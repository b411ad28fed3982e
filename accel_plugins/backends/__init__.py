"""Vendor backends: each one describes devices and never speaks gRPC."""
