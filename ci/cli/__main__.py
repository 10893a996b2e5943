"""``python -m ci.cli``: the ``solci`` command."""

import sys

from ci.cli.main import main

sys.exit(main())
