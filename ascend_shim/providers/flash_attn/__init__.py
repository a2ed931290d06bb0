"""flash_attn's FA2 package (:mod:`.fa2`) and FA3's ``flash_attn_interface`` (:mod:`.fa3`) on NPU fused attention.

The ``flash_attn`` patch set answers ``import flash_attn`` with :mod:`.fa2` and ``import flash_attn_interface``
with :mod:`.fa3`; :mod:`._npu` maps each argument onto the NPU ops, :mod:`._reference` is the exact plain-torch
fallback.
"""
