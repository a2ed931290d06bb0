"""Built-in patch sets, one module (or package) per target; installed as ``ascend_shim.patches``.

Each module defines ``PATCH_SETS``: a list of :class:`ascend_shim.registry.PatchSet`. Modules here must be
cheap to import: they hold declarations and thin factories, which import their target's code from
``ascend_shim.providers`` when that target is imported (tests/core/test_patch_modules.py holds them to it).
"""
