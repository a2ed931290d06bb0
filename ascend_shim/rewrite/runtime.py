"""Runtime helpers the rewritten comparisons call. Imported by the rewritten module itself (an inserted
``from ascend_shim.rewrite.runtime import eq as __ascend_shim_eq__, ...``), so it must stay tiny: no torch
import (``torch.device`` is recognised only once torch is in ``sys.modules``), no regular expressions (they
would break ``torch.compile`` tracing of user code).

The one rule: *first compare exactly as the original expression; only if that gave the CUDA-negative answer,
translate the runtime value to its CUDA counterpart and compare again.* The counterpart of a value is

* ``"npu"`` -> ``"cuda"``; ``"npu:N"`` (ASCII digits) -> ``"cuda:N"``; ``"hccl"`` -> ``"nccl"`` (for ``str`` and
  ``str`` subclasses such as ``torch.distributed.Backend``);
* a backend spec, a comma list of ``dev:backend`` items holding ``npu:hccl``: ``"cpu:gloo,npu:hccl"`` ->
  ``"cpu:gloo,cuda:nccl"``;
* ``torch.device("npu", N)`` -> ``torch.device("cuda", N)``, ``torch.device("npu")`` -> ``torch.device("cuda")``
  (so the index rule is torch's own: ``cuda:1 == npu:1``, ``cuda != npu:0``);
* anything else: none, and the original result stands unchanged.

So ``x == "cuda"`` becomes true for ``"npu"`` (and ``torch.device("cuda:1") == npu:1``), ``"nccl" == b`` for
``"hccl"``, and nothing else changes: a non-device string, a number, a tensor, an array (whose ``==`` returns
a non-bool, which is passed through untouched), ``"npu:0 rest"``, ``"my_npu"`` all compare exactly as before.
The one deliberate change for a value that may not be "a device" is the bare string ``"npu"`` / ``"npu:N"`` /
``"hccl"`` compared with a CUDA/NCCL literal (``name == "cuda"`` with ``name = "npu"`` is now true).

Each time a counterpart decides a result, the caller's line is counted in the report as a ``translated``
event with detail :data:`HIT_DETAIL`, named by the comparison that made the call (the column of the call tells
two comparisons on one line apart); not while ``torch.compile`` traces (compiled code does not call back).
"""
from __future__ import annotations

import collections
import collections.abc
import itertools
import sys

from ..report import REPORT, REWRITE_HIT_DETAIL as HIT_DETAIL

__ascend_shim_internal__ = True

_device_cls = None  # the real torch.device class, once torch is imported
_cuda_devices: dict = {}  # index -> torch.device("cuda", index): built once
#: (filename, line) -> {column: snippet}, registered when a module is rewritten
_sites: dict[tuple[str, int], dict[int, str]] = {}


def register_sites(sites) -> None:
    for s in sites:
        if s.rewritten:
            _sites.setdefault((s.filename, s.line), {}).setdefault(s.col, s.snippet)


def _snippet(code, offset: int, line: int) -> str:
    """The rewritten comparison whose helper call is the instruction at ``offset`` of ``code`` (on ``line``)."""
    by_column = _sites.get((code.co_filename, line))
    if not by_column:
        return "rewritten comparison"
    try:  # one position per 2-byte code unit; the call's is the comparison's, which the rewrite copied
        column = next(itertools.islice(code.co_positions(), offset // 2, None))[2]
    except (AttributeError, StopIteration):  # no positions (python -X no_debug_ranges, or before 3.11)
        column = None
    return by_column.get(column) or next(iter(by_column.values()))


def _torch_device_class():
    global _device_cls
    if _device_cls is None:
        torch = sys.modules.get("torch")
        dev = getattr(torch, "device", None) if torch is not None else None
        if dev is None:
            return None
        try:
            _device_cls = type(dev("cpu"))  # the real class even if torch.device has been wrapped
        except Exception:  # noqa: BLE001 - torch half-initialised
            return None
    return _device_cls


def _cuda_device(cls, idx):
    """A real cuda ``torch.device``: under the shim the class's constructor turns "cuda" into npu, so its
    untranslated constructor is used when the shim exposes one."""
    args = ("cuda",) if idx is None else ("cuda", idx)
    original = getattr(cls.__new__, "__ascend_shim_original__", None)
    return original(cls, args, None) if original is not None else cls(*args)


def _backend_spec(v: str) -> str | None:
    parts = v.split(",")
    out, changed = [], False
    for p in parts:
        dev, sep, be = p.partition(":")
        if not sep or not dev.isidentifier() or not be.isidentifier():
            return None
        if dev == "npu" and be == "hccl":
            out.append("cuda:nccl")
            changed = True
        else:
            out.append(p)
    return ",".join(out) if changed else None


def counterpart(v):
    """The CUDA/NCCL counterpart of an NPU/HCCL device or backend value, else ``None``."""
    if isinstance(v, str):
        if v == "npu":
            return "cuda"
        if v == "hccl":
            return "nccl"
        if v.startswith("npu:"):
            idx = v[4:]
            return "cuda:" + idx if idx.isdigit() and idx.isascii() else None
        if "npu:hccl" in v:
            return _backend_spec(v)
        return None
    cls = _device_cls or _torch_device_class()
    if cls is not None and type(v) is cls and v.type == "npu":
        idx = v.index
        dev = _cuda_devices.get(idx)
        if dev is None:
            dev = _cuda_devices[idx] = _cuda_device(cls, idx)
        return dev
    return None


def _hit(depth: int = 2) -> None:
    """Count a decided comparison for the rewritten code ``depth`` frames up (the helper's caller)."""
    torch = sys.modules.get("torch")
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and getattr(compiler, "is_compiling", None) and compiler.is_compiling():
        return
    try:
        frame = sys._getframe(depth)
    except ValueError:  # called straight from C: no site to count
        return
    key = (id(frame.f_code), frame.f_lasti, HIT_DETAIL)
    if REPORT.seen(key):
        return
    site = (frame.f_code.co_filename, frame.f_lineno)
    REPORT.event("translated", _snippet(frame.f_code, frame.f_lasti, frame.f_lineno), HIT_DETAIL, site=site,
                 seen_as=key, code=frame.f_code)


def eq(a, b):
    """``a == b``, also true when ``a`` or ``b`` is the NPU counterpart of the other."""
    r = a == b
    if r is not False:
        return r
    c = counterpart(a)
    if c is not None:
        r = c == b
        if r is True:
            _hit()
        return r
    c = counterpart(b)
    if c is not None:
        r = a == c
        if r is True:
            _hit()
    return r


def ne(a, b):
    """``a != b``, false when ``a`` or ``b`` is the NPU counterpart of the other."""
    r = a != b
    if r is not True:
        return r
    c = counterpart(a)
    if c is not None:
        r = c != b
        if r is False:
            _hit()
        return r
    c = counterpart(b)
    if c is not None:
        r = a != c
        if r is False:
            _hit()
    return r


_SEQUENCES = (list, tuple, collections.deque)  # ordered values with no lookup of their own: value semantics
_SETS = (set, frozenset, collections.abc.Set)  # hashed lookups (``x in s`` agrees with ``s.remove(x)``)


def contains(item, container) -> bool:
    """``item in container`` as the CUDA program would see it, never disagreeing with the container's own lookup.

    * a device/backend string also contains what its counterpart contains (``"cuda" in "npu:0"``);
    * lists, tuples, deques (and the displays the rewrite meets, ``v in ("cuda", "mps")``): the item's
      counterpart is looked for too, and an element whose counterpart equals the item counts
      (``"cuda" in ["npu", "cpu"]``);
    * sets and frozensets (``v in {"cuda", "xpu"}``): their own lookup of the item, then of its counterpart;
      stored elements are never translated, so ``"cuda:0" in s`` is true only if ``s.remove("cuda:0")`` works;
    * mappings and every other container: their own answer only, so ``"cuda:0" in d`` agrees with
      ``d["cuda:0"]`` and ``d.get("cuda:0")``;
    * a one-shot iterator (a generator) is walked once, as ``in`` walks it, with the sequence rule.
    """
    if isinstance(container, _SEQUENCES):
        if item in container:
            return True
        c = counterpart(item)
        if c is not None and c in container:
            _hit()
            return True
        for element in container:
            c = counterpart(element)
            if c is not None and (c is item or c == item):
                _hit()
                return True
        return False
    if isinstance(container, str):
        if item in container:
            return True
        c = counterpart(container)
        if c is not None and isinstance(c, str) and isinstance(item, str) and item in c:
            _hit()
            return True
        return False
    if isinstance(container, _SETS):
        if item in container:
            return True
        c = counterpart(item)
        if c is not None and c in container:
            _hit()
            return True
        return False
    if isinstance(container, collections.abc.Iterator) and not hasattr(type(container), "__contains__"):
        return _in_iterator(item, container)
    return item in container


def _in_iterator(item, iterator) -> bool:
    """One pass over ``iterator``, stopping where ``in`` would stop (at the first match)."""
    c_item = counterpart(item)
    for element in iterator:
        if element is item or element == item:
            return True
        if c_item is not None and (element is c_item or element == c_item):
            _hit(3)
            return True
        c = counterpart(element)
        if c is not None and (c is item or c == item):
            _hit(3)
            return True
    return False


def startswith(obj, *args):
    """``obj.startswith(*args)``; for a device/backend string also tried on its counterpart."""
    r = obj.startswith(*args)
    if r is False and isinstance(obj, str):
        c = counterpart(obj)
        if c is not None:
            r = c.startswith(*args)
            if r is True:
                _hit()
    return r
