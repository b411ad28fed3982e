"""The ``accel-plugins`` command: flags, subcommands, and running a backend in either mode.

Owns the parser (common flags, each backend's options, the operator commands),
the installed backends (entry points), and ``serve``, the composition root that
turns parsed flags into a served device-plugin manager or DRA driver.

May import every other package; nothing imports this one except
``accel_plugins.launch`` (the console script).
"""
