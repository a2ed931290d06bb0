"""``python -m ascend_shim``: see :mod:`ascend_shim.cli`."""
import sys

from .cli import main
from .errors import ShimError

try:
    sys.exit(main())
except ShimError as exc:
    print(f"ascend-shim: error: {exc}", file=sys.stderr)
    sys.exit(1)
