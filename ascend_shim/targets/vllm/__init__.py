"""vLLM on the NPU (evaluation steps, AReaL / TRL rollout servers): vllm-ascend as the platform,
CUDA-only engine arguments translated, eager mode by default, version pairing checked.

vLLM runs on Ascend through the vllm-ascend platform plugin (entry point ``vllm.platform_plugins`` name
``ascend``). Every way a CUDA script starts vLLM builds an ``EngineArgs``: ``vllm.LLM(...)`` constructs one,
``AsyncEngineArgs(...)`` / ``EngineArgs(...)`` are built by hand for ``AsyncLLMEngine.from_engine_args``, and
``vllm serve`` / ``python -m vllm.entrypoints.openai.api_server`` / ``trl vllm-serve`` (which execs
``python -m vllm.entrypoints.cli.main serve``) parse the command line and call ``from_cli_args``, i.e.
``cls(**namespace)``. So the set wraps the dataclass ``__init__`` of ``EngineArgs`` and ``AsyncEngineArgs``
(keyword arguments are translated *before* vLLM's own ``__post_init__`` converts them) and the CLI parser's
``--enforce-eager`` default. Server children get the shim through the bootstrap ``sitecustomize``
(``ASCEND_SHIM=1`` survives ``os.environ.copy()``).

What vllm-ascend already does (read in its ``platform.py``; NOT duplicated here): compilation / cudagraph
mode mapping to ACL graph (``_update_compilation_modes``), resetting NVIDIA-only knobs (cascade attention,
NVTX, flashinfer/cudnn/trtllm attention flags, ...), ignoring ``VLLM_ATTENTION_BACKEND``, quantization
auto-detection, ``ASCEND_RT_VISIBLE_DEVICES`` as the device-control variable, and ``PYTORCH_NPU_ALLOC_CONF``.
What it does not do, and this set does: ``kv_cache_dtype="fp8*"`` (its attention backends ignore the KV dtype:
fp8 caches would reach the NPU kernels) -> ``"auto"``, reported; quantization methods outside
``NPUPlatform.supported_quantization`` (``awq_marlin``, ``gptq_marlin``, ``bitsandbytes``, ...) -> a clear
error naming the option (vLLM's own message only says "not supported in npu"); ``weight_transfer_config``
``nccl``/``ipc`` -> vllm-ascend's ``hccl``/``npu_ipc`` engines (registered since vllm-ascend 0.23; trl
vllm-serve passes ``{"backend": "nccl"}``); ``device="cuda"`` (vLLM <= 0.10 had a ``device`` field) ->
``"auto"``; ``enforce_eager=True`` unless the caller chose (ACL graph capture is the most fragile part of
vllm-ascend; ``--no-enforce-eager`` / ``enforce_eager=False`` keeps graphs); ``VLLM_PLUGINS`` without
``ascend`` gets it appended. ``distributed_executor_backend`` needs nothing: vLLM's values (mp, ray, uni,
external_launcher) all exist on vllm-ascend.
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet


vllm = PatchSet(
    native=("vllm", "vllm_ascend"),
    id="vllm", title="vLLM: vllm-ascend platform, CUDA-only engine args, enforce_eager default, version pairing",
    requires={"vllm": ">=0.9,<0.34"},
    checked_against="vllm 0.33.0 (PyPI wheel, installed --no-deps: EngineArgs / AsyncEngineArgs / serve parser "
                    "exercised on CPU with a stand-in NPU platform); vllm-ascend source main @ 182b75e "
                    "(2026-08) and tags v0.9.1..v0.23.0 (read, not installed)", implementation=f"{__name__}.impl"
)

_WHY_ARGS = ("every way of starting vLLM (vllm.LLM, AsyncLLMEngine.from_engine_args, vllm serve, trl "
             "vllm-serve, AReaL's server) builds an EngineArgs; CUDA-only values in it (fp8 KV cache, Marlin "
             "quantization, the NCCL weight-transfer engine, device='cuda') fail deep inside vllm-ascend.")
_WHAT_ARGS = ("before vLLM's own __post_init__: checks vllm-ascend is installed, registered and allowed by "
              "VLLM_PLUGINS, and the vllm / vllm-ascend / torch / torch_npu / numpy pairing (ShimError listing "
              "every problem); kv_cache_dtype fp8*/fp4 -> 'auto' (reported fallback); an unsupported "
              "quantization -> UnsupportedOnNPUError naming it; weight_transfer_config nccl/ipc -> hccl/npu_ipc; "
              "device='cuda' -> 'auto'; enforce_eager=True when the caller did not choose.")


vllm.patch("vllm.engine.arg_utils:EngineArgs.__init__",
           why=_WHY_ARGS, what=_WHAT_ARGS,
           remove_when="https://github.com/vllm-project/vllm-ascend/blob/182b75ea84ff13ece27b57391331ef8935410aea/"
                       "vllm_ascend/platform.py: check_and_update_config translates no fp8 KV cache, CUDA "
                       "quantization or device='cuda'",
           factory="engine_args_init")


vllm.patch("vllm.engine.arg_utils:AsyncEngineArgs.__init__",
           why="AsyncEngineArgs (AsyncLLMEngine, the OpenAI server) is a dataclass with its own generated "
               "__init__; " + _WHY_ARGS, what=_WHAT_ARGS,
           remove_when="https://github.com/vllm-project/vllm-ascend/blob/182b75ea84ff13ece27b57391331ef8935410aea/"
                       "vllm_ascend/platform.py: check_and_update_config translates no fp8 KV cache, CUDA "
                       "quantization or device='cuda'",
           factory="engine_args_init")


vllm.patch("vllm.engine.arg_utils:EngineArgs.add_cli_args",
           why="vllm serve / the OpenAI api_server / trl vllm-serve build EngineArgs from every parsed option, "
               "so 'not given' and '--no-enforce-eager' look the same by then; the NPU default must be the "
               "parser's.",
           what="after vLLM adds its options, the parser default of --enforce-eager is True on the NPU "
                "(--no-enforce-eager keeps ACL graphs), reported when a parser is built.",
           remove_when="https://github.com/vllm-project/vllm-ascend/blob/182b75ea84ff13ece27b57391331ef8935410aea/"
                       "docs/source/user_guide/feature_guide/graph_mode.md: ACL graph mode is verified for some "
                       "models only; eager is safe",
           factory="add_cli_args")


vllm.patch("vllm.entrypoints.llm:LLM.__init__",
           why="vllm.LLM(...) passes its own enforce_eager=False default on to EngineArgs explicitly, so only "
               "here can 'not given' be told apart from a user's choice.",
           what="defaults enforce_eager=True (reported) when the caller did not pass it; the EngineArgs patch "
                "does the platform check and the argument translation.",
           remove_when="https://github.com/vllm-project/vllm-ascend/blob/182b75ea84ff13ece27b57391331ef8935410aea/"
                       "docs/source/user_guide/feature_guide/graph_mode.md: ACL graph mode is verified for some "
                       "models only; eager is safe",
           factory="llm_init")


vllm.patch("env:VLLM_PLUGINS", kind="env",
           why="VLLM_PLUGINS is an allow-list of vLLM plugins; a CUDA setup that sets it (to trim general "
               "plugins) would keep vllm-ascend's platform plugin from loading.",
           what="when VLLM_PLUGINS is set and lacks 'ascend', ',ascend' is appended (children inherit it).",
           remove_when="never: the allow-list is the user's, the platform is the NPU's", factory="vllm_plugins")


PATCH_SETS = [vllm]
