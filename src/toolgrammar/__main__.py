"""``python -m toolgrammar``: the same command line as ``toolgrammar``."""

import sys

from toolgrammar.cli.app import main

sys.exit(main())
