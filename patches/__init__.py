"""Built-in patch sets, one module (or package) per target; installed as ``ascend_shim.patches``.

Each module defines ``PATCH_SETS``: a list of :class:`ascend_shim.registry.PatchSet`. Modules here must be
cheap to import (declarations only): a patch's factory imports its target when that target is imported.
"""
