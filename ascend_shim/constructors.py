"""Translating inside the constructor of a C extension type, so that the class itself stays the real one.

``torch.device``, ``torch.Generator``, ``torch.Stream`` and ``torch.Event`` are C types. A stand-in class put in
their place breaks ``type(x) is torch.device``, pickling by reference (the stand-in is "not the same object as
torch.device") and ``torch.compile`` (dynamo knows the real class only). Instead the type's constructor slot
(``tp_new``) is pointed at CPython's generic ``slot_tp_new`` -- the slot of every Python class that defines
``__new__`` -- and the type's ``__new__`` becomes a function that translates, then calls the original C
constructor. The class stays the identical object; calling it, ``cls.__new__(cls, ...)``, subclasses, the
reduce protocol of ``copy``/``pickle`` and dynamo's constant folding of ``torch.device("cuda")`` all end in
that one function. CPython's own slot propagates errors, so ``torch.device("bogus")`` raises exactly as before.

Nothing about the type's memory layout is assumed: the slot is located by matching ``PyType_GetSlot`` answers
against the type object, on the target and on reference types, before anything is written. Whatever cannot
be verified raises :class:`~ascend_shim.errors.TargetMissing` (the patch is skipped and reported).
"""
from __future__ import annotations

import ctypes
import gc
import sys
import threading

from ascend_shim.errors import TargetMissing

# slot ids of Include/typeslots.h (stable ABI: they never change)
_PY_TP_ALLOC, _PY_TP_INIT, _PY_TP_NEW = 47, 60, 65
_HEAPTYPE = 1 << 9
_SCAN_WORDS = 48  # tp_new lies well inside the first 48 pointer-sized words of every PyTypeObject layout
_lock = threading.Lock()


def _api():
    if sys.implementation.name != "cpython" or sys.version_info < (3, 10):
        raise TargetMissing("needs CPython >= 3.10 (PyType_GetSlot on static types)")
    api = ctypes.pythonapi
    get_slot = api.PyType_GetSlot
    get_slot.argtypes, get_slot.restype = (ctypes.py_object, ctypes.c_int), ctypes.c_void_p
    modified = api.PyType_Modified
    modified.argtypes, modified.restype = (ctypes.py_object,), None
    return get_slot, modified


def _words(cls) -> ctypes.Array:
    return (ctypes.c_void_p * _SCAN_WORDS).from_address(id(cls))


def _tp_new_index(cls, get_slot) -> int:
    """The word index of ``tp_new`` in ``cls``: the only place holding tp_new preceded by tp_alloc and tp_init."""
    new, alloc, init = (get_slot(cls, s) for s in (_PY_TP_NEW, _PY_TP_ALLOC, _PY_TP_INIT))
    if not (new and alloc and init):
        raise TargetMissing(f"{cls.__qualname__}: PyType_GetSlot gives no tp_new/tp_alloc/tp_init")
    words = _words(cls)
    hits = [i for i in range(2, _SCAN_WORDS) if words[i] == new and words[i - 1] == alloc and words[i - 2] == init]
    if len(hits) != 1:
        raise TargetMissing(f"cannot locate tp_new in {cls.__qualname__} ({len(hits)} candidate slots)")
    return hits[0]


class _Probe:  # a Python class with __new__: its tp_new is CPython's slot_tp_new
    def __new__(cls):
        return object.__new__(cls)


def _layout(cls) -> tuple[int, int]:
    """(word index of tp_new, address of slot_tp_new), checked against reference types of each kind."""
    get_slot, _ = _api()
    index = _tp_new_index(cls, get_slot)
    for ref in (int, dict, _Probe):  # static builtins and a heap type must agree on the layout
        if _tp_new_index(ref, get_slot) != index:
            raise TargetMissing(f"the tp_new slot of {ref.__qualname__} is not where {cls.__qualname__}'s is")
    slot_tp_new = get_slot(_Probe, _PY_TP_NEW)
    if slot_tp_new in (get_slot(object, _PY_TP_NEW), _words(cls)[index]):
        raise TargetMissing("cannot tell CPython's slot_tp_new from the original constructor")
    return index, slot_tp_new


_NEWFUNC = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object, ctypes.py_object, ctypes.c_void_p)


def _type_dict(cls) -> dict:
    """The real dict behind ``cls.__dict__`` (a static type refuses setattr)."""
    found = [d for d in gc.get_referents(cls.__dict__) if isinstance(d, dict)]
    if len(found) != 1:
        raise TargetMissing(f"cannot reach the namespace of {cls.__qualname__}")
    return found[0]


def _heap_subclasses(cls):
    seen, todo = set(), list(type.__subclasses__(cls))
    while todo:
        sub = todo.pop()
        if id(sub) in seen:
            continue
        seen.add(id(sub))
        todo.extend(type.__subclasses__(sub))
        if sub.__flags__ & _HEAPTYPE:
            yield sub


def hook_constructor(cls: type, make_new, probe=()):
    """Route every construction of the C type ``cls`` through ``make_new(original)``; return the undo.

    ``original(klass, args, kwargs)`` calls the C constructor; ``make_new`` returns the new
    ``__new__(klass, *args, **kwargs)``. Subclasses that inherited the C constructor are routed too.
    ``cls(*probe)`` must be a cheap valid construction: it proves the route before the real hook stays.
    """
    seen = []

    def probing(original):
        def __new__(klass, *args, **kwargs):
            seen.append(klass)
            return original(klass, args, kwargs)
        return __new__

    undo = _install(cls, probing)
    try:
        made = cls(*probe)
    finally:
        undo()
    if seen != [cls] or type(made) is not cls:
        raise TargetMissing(f"constructing {cls.__qualname__} does not go through its constructor slot")
    return _install(cls, make_new)


def _install(cls: type, make_new):
    if cls.__flags__ & _HEAPTYPE:
        raise TargetMissing(f"{cls.__qualname__} is not a C extension type")
    builtin_new = cls.__dict__.get("__new__")
    if builtin_new is None or getattr(builtin_new, "__self__", None) is not cls:
        raise TargetMissing(f"{cls.__qualname__} has no constructor of its own")
    _, modified = _api()
    index, slot_tp_new = _layout(cls)
    namespace = _type_dict(cls)
    words = _words(cls)
    original_ptr = words[index]
    c_new = _NEWFUNC(original_ptr)

    def original(klass, args, kwargs):
        return c_new(klass, args, id(kwargs) if kwargs else None)

    new = make_new(original)
    new.__name__, new.__qualname__, new.__module__ = "__new__", f"{cls.__qualname__}.__new__", cls.__module__
    new.__wrapped__ = builtin_new
    new.__ascend_shim_original__ = original  # the untranslated constructor (keeps the foreign function alive)

    with _lock:
        rerouted = [sub for sub in _heap_subclasses(cls) if _words(sub)[index] == original_ptr]
        namespace["__new__"] = staticmethod(new)  # the dict first: the slot below looks it up
        modified(cls)
        for sub in rerouted:
            _words(sub)[index] = slot_tp_new
            modified(sub)
        words[index] = slot_tp_new

    def undo():
        with _lock:
            words[index] = original_ptr  # the slot first: the builtin __new__ calls it
            for sub in _heap_subclasses(cls):
                if _words(sub)[index] == slot_tp_new and "__new__" not in sub.__dict__:
                    _words(sub)[index] = original_ptr  # rerouted, or made while hooked
                    modified(sub)
            namespace["__new__"] = builtin_new
            modified(cls)

    return undo
