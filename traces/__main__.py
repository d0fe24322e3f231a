"""``python -m pvfs.traces``: the ``replay`` and ``trace`` subcommands without ``pvfs-admin``."""

import sys

from pvfs.traces.cli import main

sys.exit(main())
