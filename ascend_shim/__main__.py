"""``python -m ascend_shim``: see :mod:`ascend_shim.cli` (the same as the ``ascend-shim`` console script)."""
import sys

from .cli import main

sys.exit(main())
