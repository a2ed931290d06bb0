"""Test fixture (written for ascend_shim, not realhf's code): realhf's CUDA patterns in a few lines.

Named ``realhf`` (version file as in AReaL @ c5711f06a7a8) so that the realhf patch set applies to it.
"""
from .version import __version__  # noqa: F401
