"""The generic /dev backend: path globs, USB IDs and udev matchers, with hotplug.

Reads squat's generic-device-plugin configuration format unchanged and extends
a group with ``udev`` matchers. See ``config.py`` for the format.
"""
