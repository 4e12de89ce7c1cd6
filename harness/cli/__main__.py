"""``python -m powercut.cli``: the same as the ``powercut`` command."""

import sys

from powercut.cli import main

sys.exit(main())
