"""The one parser of the shim's settings: environment variables, ``activate()`` keywords and CLI options.

Precedence: defaults < environment < keyword arguments. A :class:`Config` can be turned back into
environment variables (:meth:`Config.to_env`) so every child process comes up with the same settings.
"""
from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping

from .errors import ConfigError

BACKENDS = ("npu", "sim", "auto")
SIM_LAYERS = ("real", "builtin", "auto")
LOG_LEVELS = ("debug", "info", "warning", "error", "off")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")
_ID_RE = re.compile(r"^[A-Za-z0-9_.*?\[\]-]+$")
#: the most devices the emulator supports (``kMaxDevices`` of its C++ backend)
MAX_SIM_DEVICES = 64
SIM_HCCL_AVG = ("reject", "sum_div")
#: ``ASCEND_SHIM_COMPILE_BACKEND`` values known without importing dynamo (which takes a second): ``none``, the
#: backends torch registers itself (torch 2.4 to 2.14), and those torch_npu registers (``npu``; ``npugraph_ex`` and
#: ``npugraphs`` in 2.13, declared in its entry points, which the emulator's real layer answers only once enabled)
COMPILE_BACKENDS = (
    "eager", "aot_eager", "inductor", "none", "npu", "npugraph_ex", "npugraphs", "aot_eager_decomp_partition",
    "aot_eager_decomp_partition_crossref", "aot_eager_decomp_partition_with_mode", "aot_eager_default_partitioner",
    "aot_ts", "cudagraphs", "dynamo_accuracy_minifier_backend", "dynamo_minifier_backend", "eager_debug",
    "eager_noexcept", "invoke_subgraph", "onnxrt", "openxla", "openxla_eval", "pre_dispatch_eager", "ts", "tvm",
)


@dataclasses.dataclass(frozen=True)
class EnvVar:
    name: str
    field: str
    default: str
    values: str
    doc: str
    flag: str = ""  # the command-line option setting it ("" when only the environment does)
    flag_help: str = ""
    choices: tuple[str, ...] = ()
    switch: bool = False  # the option takes no value (sets 1)
    metavar: str = ""


#: Every setting, in documentation order: its environment variable and, where it has one, its command-line
#: option. The configuration table of the documentation and the CLI options are generated from this.
ENV_VARS: tuple[EnvVar, ...] = (
    EnvVar("ASCEND_SHIM", "enabled", "0", "0 | 1",
           "Activate the shim in every Python process of the environment that loads the bootstrap or example "
           "`sitecustomize` (set by `ascend-shim run` for its children)."),
    EnvVar("ASCEND_SHIM_BACKEND", "backend", "auto", "npu | sim | auto",
           "`npu`: the real torch_npu. `sim`: the CPU-backed emulated NPU. `auto`: torch_npu if importable, "
           "else an error (never a silent CPU fallback).",
           flag="--backend", flag_help="npu | sim | auto", choices=BACKENDS),
    EnvVar("ASCEND_SHIM_DISABLE", "disable", "", "comma list of patch-set or patch ids (globs allowed, `*` = all)",
           "Patch sets or single patches not to apply.",
           flag="--disable", flag_help="comma list of patch-set / patch ids not to apply", metavar="IDS"),
    EnvVar("ASCEND_SHIM_ONLY", "only", "", "comma list of patch-set or patch ids",
           "Apply only these patch sets or patches.",
           flag="--only", flag_help="comma list of the only patch sets / patches to apply", metavar="IDS"),
    EnvVar("ASCEND_SHIM_ENABLE", "enable", "", "comma list of patch-set ids",
           "Turn on patch sets that are off by default (e.g. `fast_ops`).",
           flag="--enable", flag_help="comma list of off-by-default patch sets to turn on", metavar="IDS"),
    EnvVar("ASCEND_SHIM_STRICT", "strict", "0", "0 | 1",
           "A patch that cannot apply (missing attribute, version out of range, error) stops the program "
           "instead of being skipped and reported.",
           flag="--strict", flag_help="a patch that cannot apply is an error", switch=True),
    EnvVar("ASCEND_SHIM_LOG", "log", "warning", " | ".join(LOG_LEVELS),
           "Level of the `ascend_shim` logger (stderr); `off` also silences the exit summary.",
           flag="--log-level", flag_help="ascend_shim logger level", choices=LOG_LEVELS),
    EnvVar("ASCEND_SHIM_REPORT", "report", "", "path of a .json file",
           "Write the migration report of each process as JSON (rank or pid added to the name for workers).",
           flag="--report", flag_help="write JSON reports to PATH", metavar="PATH"),
    EnvVar("ASCEND_SHIM_PATCH_MODULES", "patch_modules", "", "comma list of importable module names",
           "Extra modules defining `PATCH_SETS` (user or third-party patch sets).",
           flag="--patch-modules", flag_help="extra patch-set modules", metavar="MODULES"),
    EnvVar("ASCEND_SHIM_CUDA_CAPABILITY", "cuda_capability", "8.0", "major.minor",
           "What `torch.cuda.get_device_capability()` answers user code: 8.0 leads code to bf16 paths and away "
           "from fp8 / Hopper-only kernels, which the NPU lacks."),
    EnvVar("ASCEND_SHIM_COMPILE_BACKEND", "compile_backend", "eager", "eager | aot_eager | inductor | none",
           "The backend `torch.compile` uses on the NPU when the code asks for inductor (`none`: do not compile)."),
    EnvVar("ASCEND_SHIM_SAVE_DEVICE", "save_device", "cuda", "cuda | npu",
           "Device named in checkpoints (`torch.save`, distributed checkpoints): `cuda` writes what the code "
           "believes it saved, a CUDA checkpoint that opens anywhere; `npu` keeps npu tags for pipelines that "
           "load on NPUs without the shim."),
    EnvVar("ASCEND_SHIM_REWRITE", "rewrite", "1", "0 | 1",
           "Rewrite `x.device.type == \"cuda\"`-style comparisons in the user's own modules so they hold on the NPU."),
    EnvVar("ASCEND_SHIM_GC_FREEZE", "gc_freeze", "1", "0 | 1",
           "When a process starts under the shim (`run`, and the processes the bootstrap activates), the objects "
           "that exist before the program's first line (the interpreter's start-up and the shim's own modules, "
           "all long-lived) move to the garbage collector's permanent generation (`gc.freeze()`), so that the "
           "collector's passes over the program never walk them. 0: leave the collector untouched."),
    EnvVar("ASCEND_SHIM_USER_PACKAGES", "user_packages", "", "comma list of package or module names",
           "Packages treated as CUDA code like the user's (told CUDA is available, their `\"cuda\"` comparisons "
           "rewritten, `x.type()` reading `torch.cuda.*`) even where a patch set declares them NPU-native; "
           "`pkg.sub` names part of a package."),
    EnvVar("ASCEND_SHIM_NATIVE_PACKAGES", "native_packages", "", "comma list of package or module names",
           "Packages treated as NPU-native (they see the real device and are never rewritten) although no "
           "patch set declares them so: for a library with NPU support of its own."),
    EnvVar("ASCEND_SHIM_USER_ROOTS", "user_roots", "", "directories separated by the path separator",
           "Only these directory trees hold the user's own code among the files outside the environment "
           "(default: every file outside the interpreter's prefixes, site-packages and the shim). Installed "
           "libraries follow the NPU-native rule whatever the roots."),
    EnvVar("ASCEND_SHIM_SIM_DEVICES", "sim_devices", "8", f"1 .. {MAX_SIM_DEVICES}",
           "Number of emulated NPUs (`sim` backend)."),
    EnvVar("ASCEND_SHIM_SIM_LAYER", "sim_layer", "auto", "real | builtin | auto",
           "The `torch_npu` Python that runs over the emulated NPU. `real`: Huawei's torch_npu package, prepared "
           "by `ascend-shim fetch-torch-npu`, over a stand-in of its native layer; the shim then runs its `npu` "
           "backend code, as on hardware. `builtin`: the emulator's own torch_npu. `auto`: `real` when it is "
           "prepared for the installed torch.",
           flag="--sim-layer", flag_help="real | builtin | auto", choices=SIM_LAYERS),
    EnvVar("ASCEND_SHIM_TORCH_NPU_DIR", "torch_npu_dir", "", "a directory",
           "Where `fetch-torch-npu` keeps the prepared torch_npu packages (default `~/.cache/ascend_shim/torch_npu`)."),
    EnvVar("ASCEND_SHIM_SIM_BUILD_DIR", "sim_build_dir", "", "a directory",
           "Where the emulator's C++ extensions are built and cached (default `~/.cache/ascend_shim/sim`)."),
    EnvVar("ASCEND_SHIM_SIM_BUILD_VERBOSE", "sim_build_verbose", "0", "0 | 1",
           "Show the compiler output when the emulator's extensions are built."),
    EnvVar("ASCEND_SHIM_SIM_BUILD_TIMEOUT", "sim_build_timeout", "1200", "seconds, 1 .. 86400",
           "How long a process waits for another process's build of the emulator's extensions (every rank "
           "but one waits on a first run) before it gives up with an error; after a few seconds it says "
           "what it waits for."),
    EnvVar("ASCEND_SHIM_SIM_CANN_VERSION", "sim_cann_version", "", "a CANN version, e.g. 8.3.RC1",
           "The CANN version the emulated `torch_npu` reports (default: the line paired with the installed torch)."),
    EnvVar("ASCEND_SHIM_SIM_HCCL_AVG", "sim_hccl_avg", "", "reject | sum_div",
           "How the emulated HCCL treats `ReduceOp.AVG` (default: as the torch_npu paired with the installed "
           "torch: `sum_div` from torch 2.6, `reject` before)."),
    EnvVar("ASCEND_SHIM_SIM_HCCL_NO_ALIAS", "sim_hccl_no_alias", "0", "0 | 1",
           "Tests only: the emulated HCCL copies through host memory instead of aliasing npu memory."),
)
_BY_FIELD = {v.field: v for v in ENV_VARS}


def add_options(parser, *fields: str) -> None:
    """Add the command-line options of the settings ``fields`` to an argparse parser (``dest`` = the field)."""
    for field in fields:
        v = _BY_FIELD[field]
        help_text = f"{v.flag_help} ({v.name})"
        if v.switch:
            parser.add_argument(v.flag, dest=v.field, action="store_true", default=None, help=help_text)
        else:
            parser.add_argument(v.flag, dest=v.field, choices=v.choices or None, help=help_text,
                                metavar=v.metavar or None)


def _parse_bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean; use 1 or 0")


_ID_HINT = "id; ids use ASCII letters, digits, '_', '.', '-' and the glob characters '*', '?', '[', ']'"
_MODULE_HINT = "module name; module names use ASCII letters, digits, '_' and '.', and do not start with a digit or '.'"


def _parse_list(name: str, raw, *, pattern=_ID_RE, hint: str = _ID_HINT) -> tuple[str, ...]:
    if raw is None:
        return ()
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    out = []
    for item in items:
        item = str(item).strip()
        if not item:
            if isinstance(raw, str) and raw.strip():
                raise ConfigError(f"{name}={raw!r} is malformed: empty item in a comma list (e.g. 'a,,b')")
            continue
        if not pattern.match(item):
            raise ConfigError(f"{name}: {item!r} is not a valid {hint}")
        out.append(item)
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class Config:
    enabled: bool = False
    backend: str = "auto"
    disable: tuple[str, ...] = ()
    only: tuple[str, ...] = ()
    enable: tuple[str, ...] = ()
    strict: bool = False
    log: str = "warning"
    report: str = ""
    patch_modules: tuple[str, ...] = ()
    cuda_capability: str = "8.0"
    compile_backend: str = "eager"
    save_device: str = "cuda"
    rewrite: bool = True
    gc_freeze: bool = True
    user_packages: tuple[str, ...] = ()
    native_packages: tuple[str, ...] = ()
    user_roots: tuple[str, ...] = ()
    sim_devices: int = 8
    sim_layer: str = "auto"
    torch_npu_dir: str = ""
    sim_build_dir: str = ""
    sim_build_verbose: bool = False
    sim_build_timeout: int = 1200
    sim_cann_version: str = ""
    sim_hccl_avg: str = ""
    sim_hccl_no_alias: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides) -> Config:
        """Read the environment, then apply keyword overrides (``None`` means: keep the environment's)."""
        env = os.environ if environ is None else environ
        values = {}
        for var in ENV_VARS:
            raw = env.get(var.name)
            if raw is not None:
                values[var.field] = _coerce(var, raw)
        for field, value in overrides.items():
            if field not in _BY_FIELD:
                raise TypeError(f"unknown setting {field!r}; known: {', '.join(_BY_FIELD)}")
            if value is not None:
                values[field] = _coerce(_BY_FIELD[field], value)
        return cls(**values)

    def to_env(self) -> dict[str, str]:
        """The environment variables that reproduce this configuration in a child process."""
        out = {}
        for var in ENV_VARS:
            value = getattr(self, var.field)
            if var.field in _SIM_FIELDS and value == getattr(Config, var.field):
                continue  # a default the emulator applies itself: nothing to pass on
            if isinstance(value, bool):
                out[var.name] = "1" if value else "0"
            elif var.field == "user_roots":
                out[var.name] = os.pathsep.join(value)
            elif isinstance(value, tuple):
                out[var.name] = ",".join(value)
            else:
                out[var.name] = str(value)
        return out


_SIM_FIELDS = frozenset(v.field for v in ENV_VARS if v.name.startswith("ASCEND_SHIM_SIM_"))


def setting(field: str, environ: Mapping[str, str] | None = None):
    """One setting parsed from the environment (its default when unset): the emulator's readers use this."""
    env = os.environ if environ is None else environ
    var = _BY_FIELD[field]
    raw = env.get(var.name)
    return getattr(Config, field) if raw is None else _coerce(var, raw)


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Parse every ``ASCEND_SHIM_*`` setting of the environment; raise :class:`ConfigError` on the first bad one."""
    Config.from_env(environ)


def _parse_int(name: str, raw, low: int, high: int) -> int:
    if isinstance(raw, bool):
        raise ConfigError(f"{name}={raw!r} is not a whole number from {low} to {high}")
    if isinstance(raw, int):
        value = raw
    else:
        text = str(raw).strip()
        if not re.fullmatch(r"[0-9]+", text):
            raise ConfigError(f"{name}={raw!r} is not a whole number from {low} to {high}")
        value = int(text)
    if not low <= value <= high:
        raise ConfigError(f"{name}={raw!r} is out of range: use {low} to {high}")
    return value


def _is_compile_backend(name: str) -> bool:
    """Is ``name`` a backend ``torch.compile`` accepts: a known one, or one a package declares through dynamo's
    entry-point group (read only for a name not known)?"""
    if name in COMPILE_BACKENDS:
        return True
    from .registry import _entry_points

    return any(ep.name == name for ep in _entry_points("torch_dynamo_backends"))


def _coerce(var: EnvVar, raw):
    name = var.name
    if var.field == "sim_devices":
        if isinstance(raw, str) and not raw.strip():
            return Config.sim_devices  # empty: unset, as the emulator reads it
        return _parse_int(name, raw, 1, MAX_SIM_DEVICES)
    if var.field == "sim_layer":
        value = str(raw).strip().lower() or "auto"
        if value not in SIM_LAYERS:
            raise ConfigError(f"{name}={raw!r} is not a layer; valid values: {', '.join(SIM_LAYERS)}")
        return value
    if var.field in ("sim_build_dir", "torch_npu_dir"):  # resolved now, as report: one cache whatever the cwd
        value = str(raw).strip()
        return os.path.abspath(os.path.expanduser(value)) if value else ""
    if var.field == "sim_build_timeout":
        return _parse_int(name, raw, 1, 86400)
    if var.field == "sim_cann_version":
        value = str(raw).strip()
        if value and not re.fullmatch(r"\d+\.\d+(\.[A-Za-z0-9]+)*", value):
            raise ConfigError(f"{name}={raw!r} is not a CANN version; e.g. 8.3.RC1 or 8.0.0")
        return value
    if var.field == "sim_hccl_avg":
        value = str(raw).strip().lower()
        if value and value not in SIM_HCCL_AVG:
            raise ConfigError(f"{name}={raw!r} is not a policy; valid values: {', '.join(SIM_HCCL_AVG)}")
        return value
    if var.field in ("enabled", "strict", "rewrite", "gc_freeze", "sim_build_verbose",
                     "sim_hccl_no_alias"):
        return raw if isinstance(raw, bool) else _parse_bool(name, str(raw))
    if var.field == "backend":
        value = str(raw).strip().lower()
        if value not in BACKENDS:
            raise ConfigError(f"{name}={raw!r} is not a backend; valid values: {', '.join(BACKENDS)}")
        return value
    if var.field == "log":
        value = str(raw).strip().lower()
        if value not in LOG_LEVELS:
            raise ConfigError(f"{name}={raw!r} is not a log level; valid values: {', '.join(LOG_LEVELS)}")
        return value
    if var.field == "cuda_capability":
        value = str(raw).strip()
        if not re.fullmatch(r"\d+\.\d+", value):
            raise ConfigError(f"{name}={raw!r} is not a capability; use major.minor, e.g. 8.0")
        return value
    if var.field == "compile_backend":
        value = str(raw).strip()
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value) or not _is_compile_backend(value):
            raise ConfigError(f"{name}={raw!r} is not a torch.compile backend; use none or a backend dynamo "
                              f"registers, e.g. {', '.join(COMPILE_BACKENDS[:4])}")
        return value
    if var.field == "save_device":
        value = str(raw).strip().lower()
        if value not in ("cuda", "npu"):
            raise ConfigError(f"{name}={raw!r} is not a checkpoint device; valid values: cuda, npu")
        return value
    if var.field == "user_roots":
        items = raw.split(os.pathsep) if isinstance(raw, str) else list(raw)
        roots = tuple(os.path.abspath(p) for p in items if p)
        for root in roots:  # a typo would silently make none of the user's files theirs
            if not os.path.isdir(root):
                raise ConfigError(f"{name}: {root!r} is not a directory; name directories that hold your code")
        return roots
    if var.field in ("patch_modules", "user_packages", "native_packages"):
        return _parse_list(name, raw, pattern=re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$"), hint=_MODULE_HINT)
    if var.field in ("disable", "only", "enable"):
        return _parse_list(name, raw)
    if var.field == "report":  # resolved now: the program may change directory (Hydra does) before it is written
        value = os.fspath(raw) if isinstance(raw, os.PathLike) else str(raw)
        return os.path.abspath(value) if value else ""
    return str(raw)
