"""Utilities with no knowledge of devices, kubelets or modes.

Flags with environment twins, typed reads of configuration documents, YAML files,
logging, Kubernetes names and quantities, filesystem and inotify helpers, lazy
package attributes, the dataclass bytecode cache, NFD feature files, terminal colour.

May import only ``accel_plugins.errors`` and the standard library (and PyYAML, lazily).
"""
