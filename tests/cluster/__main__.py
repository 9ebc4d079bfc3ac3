"""``python -m tests.cluster up|down|status``: see :mod:`tests.cluster.launcher`."""

import sys

from .launcher import main

sys.exit(main())
