"""``python -m spruce``: the ``spruce`` command (see ``spruce.cli``)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
