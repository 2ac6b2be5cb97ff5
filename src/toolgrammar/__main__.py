"""``python -m toolgrammar``: the same command line as ``toolgrammar``."""

import sys

from .cli import main

sys.exit(main())
