"""``python -m accel_plugins.cli``: the ``accel-plugins`` command without the console script."""

import sys

from accel_plugins.cli.main import main

sys.exit(main())
