"""``python -m kestrel``: the ``kestrel`` command."""

import sys

from kestrel.cli import main

sys.exit(main())
