"""The ``accel-plugins`` console script: the cyclic collector stays off while it starts.

Start-up imports build tens of thousands of long-lived objects (modules,
classes, protobuf descriptors) and almost no cyclic garbage, yet they would
trigger dozens of collections, the older generations walking the whole heap.
:func:`accel_plugins.cli.main.main` turns the collector back on: at once for the
one-shot commands, and in a plugin process once it serves, after freezing what
start-up built so that later full collections skip it.

It also installs :mod:`accel_plugins.util.codecache` first, so the methods of the
dataclasses imported on the way come compiled from a file, as modules do.
"""

from __future__ import annotations

import gc

from accel_plugins.util import codecache


def main() -> int:
    gc.disable()
    codecache.install()
    from accel_plugins.cli.main import main as cli_main

    return cli_main()
