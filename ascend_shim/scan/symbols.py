"""The symbol naming scheme shared by ``scan`` and patch-set authors (``Patch.covers``).

Every CUDA-ism that ``ascend-shim scan`` finds is named by one **symbol**. A patch declares what it handles by
listing symbols in ``covers`` (its normalised ``target`` counts too), so a user learns, before booking NPU
time, which lines of their repository the shim takes care of. Build symbols with :func:`symbol_for` or the
constants below rather than by hand::

    from ascend_shim.scan.symbols import NCCL, DEVICE_STRING_CUDA, symbol_for
    covers=(symbol_for("api", "torch.cuda:memory_allocated"), DEVICE_STRING_CUDA, NCCL)

Symbols, by category
====================

``torch.cuda``      ``torch.cuda.<name>``: the full dotted name with import aliases resolved
                    (``import torch.cuda as tc; tc.synchronize()``, ``from torch.cuda import memory_allocated``,
                    ``torch.cuda.amp.autocast``); ``torch.cuda`` for the module itself (``import torch.cuda``).
``device-string``   ``device-string:cuda`` for a ``"cuda"`` / ``"cuda:N"`` / ``f"cuda:{i}"`` literal anywhere
                    (``torch.device("cuda", i)``, ``.to("cuda")``, ``device="cuda:0"``; the index is dropped,
                    the literal stays in the finding's ``text``); ``method:cuda`` for a ``.cuda()`` call;
                    ``torch.amp.GradScaler`` for a GradScaler built with its implicit ``"cuda"`` default.
``device-compare``  ``device-compare:cuda`` for a comparison with ``"cuda"`` (``x.device.type == "cuda"``,
                    ``str(d).startswith("cuda")``, ``"cuda" in s``, ``d in ("cuda", "cpu")``,
                    ``torch.device("cuda") == t.device``); ``device-compare:nccl`` for one with ``"nccl"``
                    (``dist.get_backend() == "nccl"``); ``device-compare:is_cuda`` for ``.is_cuda``;
                    ``device-compare:tensor-type`` for one with a CUDA tensor type name
                    (``x.type() == "torch.cuda.FloatTensor"``, ``p.type() in ["torch.cuda.HalfTensor", ...]``).
``nccl``            ``nccl`` for a backend string (``init_process_group("nccl")``, ``"cpu:gloo,cuda:nccl"``);
                    torch names containing NCCL by their dotted name (``torch.distributed.is_nccl_available``,
                    ``torch.distributed.Backend.NCCL``, ``torch.cuda.nccl.*``);
                    ``torch.distributed.ReduceOp.AVG`` (HCCL has no AVG reduction).
``flash-attn``      ``flash_attn[.<name>...]`` (FA2), ``flash_attn_interface[.<name>]`` (FA3), and the
                    kernels-hub loaders ``kernels.get_kernel``, ``kernels.has_kernel``, ...
``triton``          ``triton`` / ``triton.<name>`` (``triton.jit`` for ``@triton.jit``); ``triton.language`` is
                    reported where it is imported, not at each ``tl.*`` use.
``torch.compile``   ``torch.compile`` (and ``torch._inductor.*``).
``fp8``             ``torch.float8_e4m3fn`` and the other ``torch.float8_*`` dtypes, ``torch._scaled_mm``.
``cuda-graph``      ``torch.cuda.graph``, ``torch.cuda.CUDAGraph``, ``torch.cuda.make_graphed_callables``,
                    ``torch.cuda.graph_pool_handle``.
``nvml``            ``pynvml[.<name>]`` (also ``py3nvml``, ``GPUtil``); ``program:nvidia-smi`` for
                    ``nvidia-smi`` in a string (``subprocess.run(["nvidia-smi", ...])``).
``env``             ``env:<VAR>`` for a CUDA / NCCL variable the program reads or sets: ``CUDA_*``, ``NCCL_*``,
                    ``TORCH_NCCL_*``, ``PYTORCH_CUDA_ALLOC_CONF``, ``PYTORCH_ALLOC_CONF`` (the NPU allocator reads
                    ``PYTORCH_NPU_ALLOC_CONF``), ``CUDNN_*``, ``CUBLAS_*``, ``NVIDIA_*`` -- in
                    ``os.environ[...]``, ``os.environ.get/setdefault/pop``, ``os.getenv``, ``"X" in os.environ``
                    and ``env={...}`` dicts; a name that only appears in a message is not a finding.
``cuda-ext``        dotted names under ``apex``, ``bitsandbytes``, ``liger_kernel``, ``deepspeed.ops``,
                    ``cupy``, ``pycuda``, ``xformers``, ``transformer_engine``;
                    ``torch.utils.cpp_extension.CUDAExtension``.
``cuda-backends``   ``torch.backends.cuda.<...>``, ``torch.backends.cudnn.<...>``, ``torch.version.cuda``.
``data-parallel``   ``torch.nn.DataParallel`` (also spelled ``torch.nn.parallel.DataParallel``),
                    ``torch.nn.parallel.data_parallel``, ``torch.cuda.comm.<name>`` (also spelled
                    ``torch.nn.parallel.comm.<name>``): single-process multi-device scatter/gather.

Keys: how a finding is matched
==============================

A finding carries its symbol and a short list of **keys**, most specific first:

* the symbol itself;
* its parent names, for dotted symbols (``torch.cuda.nvtx.range_push`` -> ``torch.cuda.nvtx`` -> ``torch.cuda``;
  ``flash_attn.bert_padding.pad_input`` -> ``flash_attn.bert_padding`` -> ``flash_attn``; never bare ``torch``),
  so a patch replacing ``torch.cuda:nvtx`` or ``torch.backends:cudnn`` covers everything below it;
* the family: ``fp8`` (fp8 dtypes, ``_scaled_mm``), ``cuda-graph``, ``nccl`` (torch NCCL names);
* fixed alternatives where the receiver's type is unknown statically: ``method:cuda`` is also matched by
  ``Tensor.cuda`` / ``Module.cuda``; ``device-compare:is_cuda`` by ``Tensor.is_cuda`` (then
  ``device-compare:cuda``); ``torch.distributed.ReduceOp.AVG`` by ``ReduceOp.AVG``;
  ``torch.amp.GradScaler`` by ``device-string:cuda``.

A patch matches a key *exactly* when the key is one of its ``covers`` entries or equals its normalised
``target`` (``"torch.cuda:synchronize"`` -> ``torch.cuda.synchronize``; ``"env:CUDA_VISIBLE_DEVICES"`` stays as
is: env targets are symbols already), and *broadly* when a ``covers`` entry is a glob matching it
(``torch.cuda.*``, ``env:NCCL_*``) or the patch is a ``provide-module`` patch whose module contains it (a
provided ``flash_attn`` contains ``flash_attn.flash_attn_func``).

The first key that some selected patch matches decides, exact matches before broad ones; the patch's
``fidelity`` gives the verdict (:mod:`ascend_shim.fidelity`). One patch is named per finding: of several on one key, the
best fidelity, then the patch whose target is that symbol itself, then the first declared (the torch sets come
before library and project sets). When no
patch matches any key, a finding matching :data:`KNOWN_UNSUPPORTED` (CUDA features with no NPU equivalent) is
``unsupported`` and anything else is ``not covered``.
"""
from __future__ import annotations

import fnmatch
import re

from ..fidelity import FIDELITIES

# -- categories (one per finding; the scan's summary counts per category) -------------------------------------
TORCH_CUDA = "torch.cuda"
DEVICE_STRING = "device-string"
DEVICE_COMPARE = "device-compare"
NCCL_CATEGORY = "nccl"
FLASH_ATTN = "flash-attn"
TRITON = "triton"
COMPILE = "torch.compile"
FP8_CATEGORY = "fp8"
CUDA_GRAPH_CATEGORY = "cuda-graph"
NVML = "nvml"
ENV = "env"
CUDA_EXT = "cuda-ext"
CUDA_BACKENDS = "cuda-backends"
DATA_PARALLEL = "data-parallel"

#: every category, in report order, with a one-line description
CATEGORIES: dict[str, str] = {
    TORCH_CUDA: "torch.cuda API calls and imports",
    DEVICE_STRING: 'device strings ("cuda", "cuda:0", torch.device("cuda", i), .cuda(), .to("cuda"))',
    DEVICE_COMPARE: 'comparisons against "cuda" / "nccl" (device.type == "cuda", startswith("cuda"), is_cuda)',
    NCCL_CATEGORY: 'NCCL backend strings and APIs (init_process_group("nccl"), is_nccl_available)',
    FLASH_ATTN: "flash_attn (FA2), flash_attn_interface (FA3) and kernels-hub imports",
    TRITON: "triton kernels (import triton, @triton.jit)",
    COMPILE: "torch.compile / inductor",
    FP8_CATEGORY: "fp8 dtypes and scaled matmul (torch.float8_*, torch._scaled_mm)",
    CUDA_GRAPH_CATEGORY: "CUDA graphs (torch.cuda.graph, CUDAGraph, make_graphed_callables)",
    NVML: "NVML / nvidia-smi (pynvml imports, nvidia-smi subprocesses)",
    ENV: "CUDA / NCCL environment variables (CUDA_VISIBLE_DEVICES, NCCL_*, PYTORCH_CUDA_ALLOC_CONF)",
    CUDA_EXT: "CUDA extension libraries (apex, bitsandbytes, liger_kernel, deepspeed.ops, cupy, CUDAExtension)",
    CUDA_BACKENDS: "CUDA backend flags and version checks (torch.backends.cuda/cudnn, torch.version.cuda)",
    DATA_PARALLEL: "single-process multi-device data parallelism (nn.DataParallel, torch.cuda.comm)",
}

# -- family symbols and fixed symbols -------------------------------------------------------------------------
DEVICE_STRING_CUDA = "device-string:cuda"
METHOD_CUDA = "method:cuda"
DEVICE_COMPARE_CUDA = "device-compare:cuda"
DEVICE_COMPARE_IS_CUDA = "device-compare:is_cuda"
DEVICE_COMPARE_NCCL = "device-compare:nccl"
DEVICE_COMPARE_TENSOR_TYPE = "device-compare:tensor-type"
NCCL = "nccl"
FP8 = "fp8"
CUDA_GRAPH = "cuda-graph"
NVIDIA_SMI = "program:nvidia-smi"
GRAD_SCALER_DEFAULT = "torch.amp.GradScaler"
REDUCE_OP_AVG = "ReduceOp.AVG"
#: the more general keys of ``.cuda()`` / ``.is_cuda`` findings: the receiver's type is unknown statically, so a
#: patch declaring either class's method covers them
METHOD_CUDA_KEYS = (METHOD_CUDA, "Tensor.cuda", "Module.cuda")
IS_CUDA_KEYS = (DEVICE_COMPARE_IS_CUDA, "Tensor.is_cuda", DEVICE_COMPARE_CUDA)

#: the kinds :func:`symbol_for` accepts
KINDS = ("api", "device-string", "device-compare", "method", "env", "program", "family")
_FAMILIES = (NCCL, FP8, CUDA_GRAPH)

#: verdicts, best first
VERDICTS = tuple(f.verdict for f in FIDELITIES) + ("not covered",)

DATA_PARALLEL_SYMBOL = "torch.nn.DataParallel"
_DATA_PARALLEL_NAMES = {"torch.nn.DataParallel": DATA_PARALLEL_SYMBOL,
                        "torch.nn.parallel.DataParallel": DATA_PARALLEL_SYMBOL,
                        "torch.nn.parallel.data_parallel.DataParallel": DATA_PARALLEL_SYMBOL,
                        "torch.nn.parallel.data_parallel": "torch.nn.parallel.data_parallel",
                        "torch.nn.parallel.data_parallel.data_parallel": "torch.nn.parallel.data_parallel"}

#: CUDA features with no NPU equivalent: ``unsupported`` when no patch declares anything about them
#: (glob pattern -> reason). A patch covering one of them (e.g. a neutral stand-in) overrides this.
KNOWN_UNSUPPORTED: dict[str, str] = {
    FP8: "no FP8 on Atlas A2/A3 NPUs (torch._scaled_mm / float8 dtypes)",
    "flash_attn_interface": "FlashAttention-3 is a Hopper-only CUDA kernel",
    "pynvml": "NVML talks to NVIDIA drivers; use npu-smi / torch.npu memory APIs",
    "py3nvml": "NVML talks to NVIDIA drivers",
    "GPUtil": "GPUtil shells out to nvidia-smi",
    NVIDIA_SMI: "no nvidia-smi on Ascend hosts (npu-smi is the counterpart)",
    "cupy": "CuPy runs CUDA kernels",
    "pycuda": "PyCUDA runs CUDA kernels",
    "torch.utils.cpp_extension.CUDAExtension": "builds CUDA sources with nvcc",
    "torch.cuda.jiterator*": "CUDA-only (runtime-compiled CUDA kernels)",
    "torch.cuda.cudart": "CUDA runtime bindings",
    "torch.cuda.list_gpu_processes": "NVML-based, CUDA-only",
    "torch.cuda.temperature": "NVML-based, CUDA-only",
    "torch.cuda.power_draw": "NVML-based, CUDA-only",
    "torch.cuda.clock_rate": "NVML-based, CUDA-only",
    "torch.cuda.GreenContext": "CUDA-only",
    "torch.cuda.CUDAPluggableAllocator": "CUDA-only allocator interface",
    "torch.cuda.tunable*": "CUDA/ROCm-only GEMM tuning",
    DATA_PARALLEL_SYMBOL: "single-process multi-device scatter/gather needs CUDA builds of torch; use DDP",
}

_DEVICE_RE = re.compile(r"^cuda(:\d+)?$")
#: a CUDA tensor type name, as ``x.type()`` gives it on CUDA
CUDA_TENSOR_TYPE_RE = re.compile(r"^torch\.cuda\.[A-Za-z0-9]+Tensor$")
_BACKEND_SPEC_RE = re.compile(r"^([a-z]+:)?nccl$|^([a-z]+:[a-z]+,)+[a-z]+:[a-z]+$")
ENV_VAR_RE = re.compile(
    r"^(CUDA_[A-Z0-9_]+|NCCL_[A-Z0-9_]+|TORCH_NCCL_[A-Z0-9_]+|PYTORCH_(CUDA_)?ALLOC_CONF|PYTORCH_NVML_BASED_CUDA_CHECK"
    r"|CUDNN_[A-Z0-9_]+|CUBLAS_[A-Z0-9_]+|CUBLASLT_[A-Z0-9_]+|NVIDIA_[A-Z0-9_]+)$")
NVIDIA_SMI_RE = re.compile(r"(?<![\w-])nvidia-smi(?![\w-])")

#: top-level modules of CUDA extension libraries (``deepspeed`` only below ``deepspeed.ops``)
CUDA_EXT_MODULES = ("apex", "bitsandbytes", "liger_kernel", "cupy", "pycuda", "xformers", "transformer_engine",
                    "deepspeed.ops")
NVML_MODULES = ("pynvml", "py3nvml", "GPUtil")
FLASH_ATTN_MODULES = ("flash_attn", "flash_attn_interface", "flash_attn_2_cuda", "flash_attn_3")
KERNELS_HUB_NAMES = ("get_kernel", "has_kernel", "get_local_kernel", "load_kernel", "kernelize",
                     "use_kernel_forward_from_hub", "LayerRepository")
#: modules reported where they are imported, not at each attribute use (``tl.load`` is everywhere)
IMPORT_ONLY_MODULES = ("triton.language",)


def symbol_for(kind: str, name: str = "") -> str:
    """The symbol of a CUDA-ism, as ``scan`` reports it and ``Patch.covers`` should list it.

    ``kind`` is one of :data:`KINDS`:

    * ``"api"``: a Python name, ``"torch.cuda.memory_allocated"`` or a patch target ``"torch.cuda:memory_allocated"``
    * ``"device-string"``: ``symbol_for("device-string", "cuda:1")`` -> ``"device-string:cuda"`` (index dropped)
    * ``"device-compare"``: ``"cuda"``, ``"nccl"``, ``"is_cuda"`` or ``"tensor-type"`` -> ``"device-compare:cuda"`` ...
    * ``"method"``: ``"cuda"`` -> ``"method:cuda"`` (a ``.cuda()`` call)
    * ``"env"``: ``"CUDA_VISIBLE_DEVICES"`` -> ``"env:CUDA_VISIBLE_DEVICES"``
    * ``"program"``: ``"nvidia-smi"`` -> ``"program:nvidia-smi"``
    * ``"family"``: ``"nccl"``, ``"fp8"`` or ``"cuda-graph"`` (the general keys of whole families)
    """
    if kind == "api":
        return target_symbol(name)
    if kind == "device-string":
        if not _DEVICE_RE.match(name or "cuda"):
            raise ValueError(f"not a CUDA device string: {name!r}")
        return DEVICE_STRING_CUDA
    if kind == "device-compare":
        if name not in ("cuda", "nccl", "is_cuda", "tensor-type"):
            raise ValueError(f"device-compare names are 'cuda', 'nccl', 'is_cuda' and 'tensor-type', not {name!r}")
        return f"device-compare:{name}"
    if kind == "method":
        return f"method:{name}"
    if kind == "env":
        if not name or not re.match(r"^[A-Za-z_][A-Za-z0-9_*?]*$", name):
            raise ValueError(f"not an environment variable name: {name!r}")
        return f"env:{name}"
    if kind == "program":
        return f"program:{name}"
    if kind == "family":
        if name not in _FAMILIES:
            raise ValueError(f"families are {', '.join(_FAMILIES)}, not {name!r}")
        return name
    raise ValueError(f"unknown symbol kind {kind!r}; kinds: {', '.join(KINDS)}")


def target_symbol(target: str) -> str:
    """A ``Patch.target`` as a symbol: ``"torch.cuda:memory_allocated"`` -> ``"torch.cuda.memory_allocated"``.

    ``"env:VAR"`` targets keep their form (they are already symbols); ``"module"`` stays ``"module"``.
    """
    target = target.strip()
    if target.startswith("env:"):
        return target
    module, _, attr = target.partition(":")
    return f"{module}.{attr}" if attr else module


def _module_parents(symbol: str) -> list[str]:
    """``a.b.c`` -> ``["a.b", "a"]``; never the bare ``torch`` (it would match everything)."""
    parts = symbol.split(".")
    return [p for p in (".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)) if p != "torch"]


def _under(name: str, modules) -> str | None:
    for m in modules:
        if name == m or name.startswith(m + "."):
            return m
    return None


def classify_api(qualname: str) -> tuple[str, str, tuple[str, ...]] | None:
    """``(category, symbol, keys)`` of a fully qualified Python name, or None when it is no CUDA-ism.

    ``keys`` run from the symbol itself through its parents (``torch.cuda.nvtx.range_push`` ->
    ``torch.cuda.nvtx`` -> ``torch.cuda``) to the family key (``fp8``, ``cuda-graph``, ``nccl``)."""
    q = qualname
    last = q.rsplit(".", 1)[-1]
    parents = tuple(_module_parents(q))
    if q in _DATA_PARALLEL_NAMES:
        return DATA_PARALLEL, _DATA_PARALLEL_NAMES[q], (_DATA_PARALLEL_NAMES[q],)
    if q.startswith(("torch.cuda.comm.", "torch.nn.parallel.comm.")):
        symbol = "torch.cuda.comm." + last
        return DATA_PARALLEL, symbol, (symbol, "torch.cuda.comm", "torch.cuda")
    if q == "torch.cuda" or q.startswith("torch.cuda."):
        if (q in ("torch.cuda.graph", "torch.cuda.CUDAGraph", "torch.cuda.make_graphed_callables",
                  "torch.cuda.graph_pool_handle") or q.startswith("torch.cuda.graphs")):
            return CUDA_GRAPH_CATEGORY, q, (q, *parents, CUDA_GRAPH)
        if q.startswith("torch.cuda.nccl"):
            return NCCL_CATEGORY, q, (q, *parents, NCCL)
        return TORCH_CUDA, q, (q, *parents)
    if q.startswith("torch."):
        if q in ("torch.distributed.ReduceOp.AVG", "torch.distributed.distributed_c10d.ReduceOp.AVG"):
            # HCCL has no AVG reduction; the short key "ReduceOp.AVG" is accepted too
            return NCCL_CATEGORY, "torch.distributed.ReduceOp.AVG", ("torch.distributed.ReduceOp.AVG",
                                                                     REDUCE_OP_AVG)
        if "nccl" in last.lower():
            return NCCL_CATEGORY, q, (q, *parents, NCCL)
        if q.startswith("torch.float8_") or q in ("torch._scaled_mm", "torch._scaled_mm_v2",
                                                  "torch._scaled_grouped_mm"):
            return FP8_CATEGORY, q, (q, FP8)
        if q == "torch.compile" or q == "torch._inductor" or q.startswith("torch._inductor."):
            return COMPILE, q, (q, *parents)
        if (q.startswith("torch.backends.cuda") or q.startswith("torch.backends.cudnn")
                or q == "torch.version.cuda"):
            return CUDA_BACKENDS, q, (q, *parents)
        if q == "torch.utils.cpp_extension.CUDAExtension":
            return CUDA_EXT, q, (q,)
        return None
    if _under(q, FLASH_ATTN_MODULES):
        return FLASH_ATTN, q, (q, *parents)
    if q.startswith("kernels.") and q.split(".")[1] in KERNELS_HUB_NAMES:
        return FLASH_ATTN, q, (q,)
    if q == "triton" or q.startswith("triton."):
        if any(q.startswith(m + ".") for m in IMPORT_ONLY_MODULES):
            return None
        return TRITON, q, (q, *parents)
    if _under(q, NVML_MODULES):
        return NVML, q, (q, *parents)
    if _under(q, CUDA_EXT_MODULES):
        return CUDA_EXT, q, (q, *parents)
    return None


def classify_string(value: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """CUDA-isms named by a string literal (device strings, backend strings, env vars, nvidia-smi)."""
    out: list[tuple[str, str, tuple[str, ...]]] = []
    if _DEVICE_RE.match(value):
        out.append((DEVICE_STRING, DEVICE_STRING_CUDA, (DEVICE_STRING_CUDA,)))
    elif value == "nccl" or (_BACKEND_SPEC_RE.match(value) and "nccl" in value):
        out.append((NCCL_CATEGORY, NCCL, (NCCL,)))
    elif ENV_VAR_RE.match(value):
        out.append((ENV, f"env:{value}", (f"env:{value}",)))
    if NVIDIA_SMI_RE.search(value):
        out.append((NVML, NVIDIA_SMI, (NVIDIA_SMI,)))
    return out


#: symbols scan reports that are not Python names
FIXED_SYMBOLS = frozenset({DEVICE_STRING_CUDA, DEVICE_COMPARE_CUDA, DEVICE_COMPARE_NCCL, DEVICE_COMPARE_IS_CUDA,
                           DEVICE_COMPARE_TENSOR_TYPE,
                           METHOD_CUDA, NVIDIA_SMI, NCCL, FP8, CUDA_GRAPH, REDUCE_OP_AVG, GRAD_SCALER_DEFAULT,
                           *METHOD_CUDA_KEYS, *IS_CUDA_KEYS})


def is_symbol(entry: str) -> bool:
    """Is ``entry`` a key some scan finding can carry (what a ``Patch.covers`` entry must be)? Globs count
    when their fixed prefix is one."""
    if entry in FIXED_SYMBOLS:
        return True
    if entry.startswith("env:"):
        return bool(ENV_VAR_RE.match(entry[4:]) or re.match(r"^[A-Z0-9_]*[*?]$", entry[4:]))
    head = re.split(r"[*?\[]", entry, maxsplit=1)[0].rstrip(".")
    if head != entry:
        return bool(head) and (head in FIXED_SYMBOLS or classify_api(head) is not None)
    hit = classify_api(entry)
    return hit is not None and entry in hit[2]


def is_cuda_device_string(value: str) -> bool:
    return bool(_DEVICE_RE.match(value))


def known_unsupported(keys) -> str | None:
    """The reason a finding with these keys is unsupported when no patch covers it, or None."""
    for key in keys:
        for pattern, reason in KNOWN_UNSUPPORTED.items():
            if key == pattern or fnmatch.fnmatchcase(key, pattern) or key.startswith(pattern + "."):
                return reason
    return None
