"""``python -m toolgrammar``: the same command line as ``toolgrammar``."""

import sys

from toolgrammar.cli import main

sys.exit(main())
