"""The built-in targets, one package per library or project: ``ascend_shim/targets/<name>/``.

A target's ``__init__`` declares (``PATCH_SETS``: :class:`ascend_shim.registry.PatchSet` records, pure data, cheap
to import); the code its factories name (``factory="function"`` of ``impl.py``, or ``"module:function"``) lives
beside it and is imported when the first of its patches applies. Helpers several targets use live in
:mod:`._shared`. tests/core/test_patch_modules.py holds every target to this.
"""
