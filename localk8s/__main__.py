"""``python -m localk8s up|down|status``: see :mod:`localk8s.launcher`."""

import sys

from .launcher import main

sys.exit(main())
