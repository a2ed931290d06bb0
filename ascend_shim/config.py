"""The one parser of the shim's settings: environment variables, ``activate()`` keywords and CLI options.

Every setting is one field of :class:`Config`, declared by its row: an :class:`EnvVar` of the kind its values
are (:class:`Bool`, :class:`Choice`, :class:`IntRange`, :class:`IdList` ...), which names the variable, its
default, what it does and its command-line option, and parses its values, so that a bad one is the same
one-line error wherever it comes from. The documentation's table, the CLI options, the keywords of
``activate()`` and the environment children inherit are all read from these rows (:data:`ENV_VARS`): a new
setting is one row.

Precedence: defaults < environment < keyword arguments. A :class:`Config` can be turned back into environment
variables (:meth:`Config.to_env`) so every child process comes up with the same settings.
"""
from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from .errors import ConfigError

BACKENDS = ("npu", "sim", "auto")
SIM_LAYERS = ("real", "builtin", "auto")
LOG_LEVELS = ("debug", "info", "warning", "error", "off")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")
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
#: the emulator's own settings: a default is applied by the emulator itself, so children need not be told it
_SIM_PREFIX = "ASCEND_SHIM_SIM_"


# -- the kinds of rows --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class EnvVar:
    """One setting, whose value is free text; the subclasses parse their kind of value.

    ``default`` is written as the variable holds it (the documentation shows it so); the :class:`Config` default
    is that text parsed. ``values`` is what the documentation says the variable takes (the kind's own wording when
    empty). ``flag`` is the command-line option setting it ("" when only the environment does), ``keyword`` whether
    ``activate()`` takes it. ``field`` (the :class:`Config` field) is filled in from the class.
    """

    name: str
    default: str
    doc: str
    _: dataclasses.KW_ONLY
    values: str = ""
    flag: str = ""
    flag_help: str = ""
    metavar: str = ""
    keyword: bool = True
    field: str = ""
    default_value: Any = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.values:
            object.__setattr__(self, "values", self.describe_values())
        object.__setattr__(self, "default_value", self.parse(self.default))

    # what a subclass says about its kind
    def describe_values(self) -> str:
        return "text"

    def parse(self, raw: str) -> Any:
        """The value of the variable (or command-line option) text ``raw``; :class:`ConfigError` when bad."""
        return raw

    def accept(self, value: object) -> Any:
        """The value of a keyword argument: ``TypeError`` naming the setting when it is not of a type the setting
        takes, else as :meth:`parse` (a string) or checked like it."""
        if isinstance(value, str):
            return self.parse(value)
        raise TypeError(f"{self.field} must be a str, not {type(value).__name__}")

    def format(self, value: Any) -> str:
        """``value`` as the variable holds it (what a child process inherits)."""
        return str(value)

    @property
    def switch(self) -> bool:
        """Does the option take no value (present: on)?"""
        return False

    def option(self) -> dict[str, Any]:
        """How ``argparse`` declares the option (besides its name, ``dest`` and help)."""
        return {"metavar": self.metavar or None}

    # shared
    def from_env(self, environ: Mapping[str, str]) -> Any:
        raw = environ.get(self.name)
        return self.default_value if raw is None else self.parse(raw)

    def _bad(self, raw: object, why: str) -> ConfigError:
        return ConfigError(f"{self.name}={raw!r} {why}")


@dataclasses.dataclass(frozen=True)
class Bool(EnvVar):
    """On or off: ``1``/``0`` (and true/false, yes/no, on/off); a keyword takes ``True`` or ``False``. Its option
    is a switch."""

    def describe_values(self) -> str:
        return "0 | 1"

    def parse(self, raw: str) -> bool:
        value = raw.strip().lower()
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        raise self._bad(raw, "is not a boolean; use 1 or 0")

    def accept(self, value: object) -> bool:
        if isinstance(value, bool):
            return value
        raise TypeError(f"{self.field} must be True or False, not {type(value).__name__}")

    def format(self, value: Any) -> str:
        return "1" if value else "0"

    @property
    def switch(self) -> bool:
        return True

    def option(self) -> dict[str, Any]:
        return {"action": "store_true", "default": None}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Choice(EnvVar):
    """One of ``choices`` (case-insensitive); ``noun`` names what a value is in the error. ``blank``: an empty
    value means the default (as the emulator reads it)."""

    choices: tuple[str, ...]
    noun: str
    blank: bool = False

    def describe_values(self) -> str:
        return " | ".join(self.choices)

    def parse(self, raw: str) -> str:
        value = raw.strip().lower()
        if not value and self.blank:
            return self.default
        if value not in self.choices:
            raise self._bad(raw, f"is not a {self.noun}; valid values: {', '.join(self.choices)}")
        return value

    def option(self) -> dict[str, Any]:
        return {"choices": self.choices, "metavar": self.metavar or None}


@dataclasses.dataclass(frozen=True, kw_only=True)
class IntRange(EnvVar):
    """A whole number from ``low`` to ``high``, in ASCII digits; ``blank``: an empty value means the default."""

    low: int
    high: int
    blank: bool = False

    def describe_values(self) -> str:
        return f"{self.low} .. {self.high}"

    def parse(self, raw: str) -> int:
        text = raw.strip()
        if not text and self.blank:
            return int(self.default)
        if not re.fullmatch(r"[0-9]+", text):
            raise self._bad(raw, f"is not a whole number from {self.low} to {self.high}")
        return self._in_range(int(text), raw)

    def accept(self, value: object) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return self._in_range(value, value)
        if isinstance(value, str):
            return self.parse(value)
        raise TypeError(f"{self.field} must be an int or a str, not {type(value).__name__}")

    def _in_range(self, value: int, raw: object) -> int:
        if not self.low <= value <= self.high:
            raise self._bad(raw, f"is out of range: use {self.low} to {self.high}")
        return value


@dataclasses.dataclass(frozen=True)
class IdList(EnvVar):
    """A comma list of patch-set or patch ids (globs allowed); a keyword also takes a list of str."""

    pattern: ClassVar[re.Pattern[str]] = re.compile(r"^[A-Za-z0-9_.*?\[\]-]+$")
    hint: ClassVar[str] = ("id; ids use ASCII letters, digits, '_', '.', '-' and the glob characters '*', '?', '[', "
                           "']'")

    def describe_values(self) -> str:
        return "comma list of patch-set or patch ids"

    def parse(self, raw: str) -> tuple[str, ...]:
        if raw.strip() and "" in (item.strip() for item in raw.split(",")):
            raise self._bad(raw, "is malformed: empty item in a comma list (e.g. 'a,,b')")
        return self._checked(raw.split(","))

    def accept(self, value: object) -> tuple[str, ...]:
        if isinstance(value, str):
            return self.parse(value)
        if isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(v, str) for v in value):
            return self._checked(value)
        raise TypeError(f"{self.field} must be a comma-separated str or a list of str, not {type(value).__name__}")

    def _checked(self, items: Iterable[str]) -> tuple[str, ...]:
        out = tuple(item.strip() for item in items if item.strip())
        for item in out:
            if not self.pattern.match(item):
                raise ConfigError(f"{self.name}: {item!r} is not a valid {self.hint}")
        return out

    def format(self, value: Any) -> str:
        return ",".join(value)


@dataclasses.dataclass(frozen=True)
class ModuleList(IdList):
    """A comma list of importable module (or package) names."""

    pattern: ClassVar[re.Pattern[str]] = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
    hint: ClassVar[str] = ("module name; module names use ASCII letters, digits, '_' and '.', and do not start with "
                           "a digit or '.'")

    def describe_values(self) -> str:
        return "comma list of importable module names"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Form(EnvVar):
    """Text of a given form (``regex``, after stripping blanks); ``wrong`` says what a bad value is not.
    ``blank``: empty is allowed (the default: the emulator decides)."""

    regex: str
    wrong: str
    blank: bool = False

    def parse(self, raw: str) -> str:
        value = raw.strip()
        if (value or not self.blank) and not re.fullmatch(self.regex, value):
            raise self._bad(raw, self.wrong)
        return value


@dataclasses.dataclass(frozen=True)
class CompileBackend(EnvVar):
    """A backend ``torch.compile`` accepts: a known one, or one a package declares through dynamo's entry-point
    group (read only for a name not known), or ``none``."""

    def parse(self, raw: str) -> str:
        value = raw.strip()
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value) or not _is_compile_backend(value):
            raise self._bad(raw, f"is not a torch.compile backend; use none or a backend dynamo registers, e.g. "
                                 f"{', '.join(COMPILE_BACKENDS[:4])}")
        return value


def _is_compile_backend(name: str) -> bool:
    if name in COMPILE_BACKENDS:
        return True
    from .registry import _entry_points

    return any(ep.name == name for ep in _entry_points("torch_dynamo_backends"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Location(EnvVar):
    """A file or directory, made absolute now: the program may change directory (Hydra does) before the shim
    uses it, and every process of a run must name the same place. ``expand``: blanks stripped and ``~`` expanded
    (a cache directory). A keyword also takes a path object."""

    expand: bool = False

    def parse(self, raw: str) -> str:
        value = os.path.expanduser(raw.strip()) if self.expand else raw
        return os.path.abspath(value) if value else ""

    def accept(self, value: object) -> str:
        if isinstance(value, (str, os.PathLike)):
            return self.parse(os.fsdecode(value))
        raise TypeError(f"{self.field} must be a str or a path, not {type(value).__name__}")


@dataclasses.dataclass(frozen=True)
class Directories(EnvVar):
    """Existing directories separated by the path separator (a keyword also takes a list), made absolute."""

    def parse(self, raw: str) -> tuple[str, ...]:
        return self._checked(raw.split(os.pathsep))

    def accept(self, value: object) -> tuple[str, ...]:
        if isinstance(value, str):
            return self.parse(value)
        if isinstance(value, (list, tuple)) and all(isinstance(v, (str, os.PathLike)) for v in value):
            return self._checked([os.fsdecode(v) for v in value])
        raise TypeError(f"{self.field} must be a str or a list of directories, not {type(value).__name__}")

    def _checked(self, items: list[str]) -> tuple[str, ...]:
        roots = tuple(os.path.abspath(p) for p in items if p)
        for root in roots:  # a typo would silently make none of the user's files theirs
            if not os.path.isdir(root):
                raise ConfigError(f"{self.name}: {root!r} is not a directory; name directories that hold your code")
        return roots

    def format(self, value: Any) -> str:
        return os.pathsep.join(value)


def _row(row: EnvVar) -> Any:
    """A :class:`Config` field declared by its row (its default: the row's default, parsed)."""
    return dataclasses.field(default=row.default_value, metadata={"row": row})


# -- the settings ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Config:
    """Every setting, in documentation order, declared by its row (see the module docstring)."""

    enabled: bool = _row(Bool(
        "ASCEND_SHIM", "0",
        "Activate the shim in every Python process of the environment that loads the bootstrap or example "
        "`sitecustomize` (set by `ascend-shim run` for its children).", keyword=False))
    backend: str = _row(Choice(
        "ASCEND_SHIM_BACKEND", "auto",
        "`npu`: the real torch_npu. `sim`: the CPU-backed emulated NPU. `auto`: torch_npu if importable, "
        "else an error (never a silent CPU fallback).",
        choices=BACKENDS, noun="backend", flag="--backend", flag_help="npu | sim | auto"))
    disable: tuple[str, ...] = _row(IdList(
        "ASCEND_SHIM_DISABLE", "", "Patch sets or single patches not to apply.",
        values="comma list of patch-set or patch ids (globs allowed, `*` = all)",
        flag="--disable", flag_help="comma list of patch-set / patch ids not to apply", metavar="IDS"))
    only: tuple[str, ...] = _row(IdList(
        "ASCEND_SHIM_ONLY", "", "Apply only these patch sets or patches.",
        flag="--only", flag_help="comma list of the only patch sets / patches to apply", metavar="IDS"))
    enable: tuple[str, ...] = _row(IdList(
        "ASCEND_SHIM_ENABLE", "", "Turn on patch sets that are off by default (e.g. `fast_ops`).",
        values="comma list of patch-set ids",
        flag="--enable", flag_help="comma list of off-by-default patch sets to turn on", metavar="IDS"))
    strict: bool = _row(Bool(
        "ASCEND_SHIM_STRICT", "0",
        "A patch that cannot apply (missing attribute, version out of range, error) stops the program "
        "instead of being skipped and reported.",
        flag="--strict", flag_help="a patch that cannot apply is an error"))
    log_level: str = _row(Choice(
        "ASCEND_SHIM_LOG", "warning",
        "Level of the `ascend_shim` logger (stderr); `off` also silences the exit summary.",
        choices=LOG_LEVELS, noun="log level", flag="--log-level", flag_help="ascend_shim logger level"))
    report: str = _row(Location(
        "ASCEND_SHIM_REPORT", "",
        "Write the migration report of each process as JSON (rank or pid added to the name for workers).",
        values="path of a .json file", flag="--report", flag_help="write JSON reports to PATH", metavar="PATH"))
    patch_modules: tuple[str, ...] = _row(ModuleList(
        "ASCEND_SHIM_PATCH_MODULES", "", "Extra modules defining `PATCH_SETS` (user or third-party patch sets).",
        flag="--patch-modules", flag_help="extra patch-set modules", metavar="MODULES"))
    cuda_capability: str = _row(Form(
        "ASCEND_SHIM_CUDA_CAPABILITY", "8.0",
        "What `torch.cuda.get_device_capability()` answers user code: 8.0 leads code to bf16 paths and away "
        "from fp8 / Hopper-only kernels, which the NPU lacks.",
        values="major.minor", regex=r"\d+\.\d+", wrong="is not a capability; use major.minor, e.g. 8.0"))
    compile_backend: str = _row(CompileBackend(
        "ASCEND_SHIM_COMPILE_BACKEND", "eager",
        "The backend `torch.compile` uses on the NPU when the code asks for inductor (`none`: do not compile).",
        values="eager | aot_eager | inductor | none"))
    save_device: str = _row(Choice(
        "ASCEND_SHIM_SAVE_DEVICE", "cuda",
        "Device named in checkpoints (`torch.save`, distributed checkpoints): `cuda` writes what the code "
        "believes it saved, a CUDA checkpoint that opens anywhere; `npu` keeps npu tags for pipelines that "
        "load on NPUs without the shim.",
        choices=("cuda", "npu"), noun="checkpoint device"))
    rewrite: bool = _row(Bool(
        "ASCEND_SHIM_REWRITE", "1",
        "Rewrite `x.device.type == \"cuda\"`-style comparisons in the user's own modules so they hold on the NPU."))
    gc_freeze: bool = _row(Bool(
        "ASCEND_SHIM_GC_FREEZE", "1",
        "When a process starts under the shim (`run`, and the processes the bootstrap activates), the objects "
        "that exist before the program's first line (the interpreter's start-up and the shim's own modules, "
        "all long-lived) move to the garbage collector's permanent generation (`gc.freeze()`), so that the "
        "collector's passes over the program never walk them. 0: leave the collector untouched."))
    user_packages: tuple[str, ...] = _row(ModuleList(
        "ASCEND_SHIM_USER_PACKAGES", "",
        "Packages treated as CUDA code like the user's (told CUDA is available, their `\"cuda\"` comparisons "
        "rewritten, `x.type()` reading `torch.cuda.*`) even where a patch set declares them NPU-native; "
        "`pkg.sub` names part of a package.",
        values="comma list of package or module names"))
    native_packages: tuple[str, ...] = _row(ModuleList(
        "ASCEND_SHIM_NATIVE_PACKAGES", "",
        "Packages treated as NPU-native (they see the real device and are never rewritten) although no "
        "patch set declares them so: for a library with NPU support of its own.",
        values="comma list of package or module names"))
    user_roots: tuple[str, ...] = _row(Directories(
        "ASCEND_SHIM_USER_ROOTS", "",
        "Only these directory trees hold the user's own code among the files outside the environment "
        "(default: every file outside the interpreter's prefixes, site-packages and the shim). Installed "
        "libraries follow the NPU-native rule whatever the roots.",
        values="directories separated by the path separator"))
    sim_devices: int = _row(IntRange(
        "ASCEND_SHIM_SIM_DEVICES", "8", "Number of emulated NPUs (`sim` backend).",
        low=1, high=MAX_SIM_DEVICES, blank=True))
    sim_layer: str = _row(Choice(
        "ASCEND_SHIM_SIM_LAYER", "auto",
        "The `torch_npu` Python that runs over the emulated NPU. `real`: Huawei's torch_npu package, prepared "
        "by `ascend-shim fetch-torch-npu`, over a stand-in of its native layer; the shim then runs its `npu` "
        "backend code, as on hardware. `builtin`: the emulator's own torch_npu. `auto`: `real` when it is "
        "prepared for the installed torch.",
        choices=SIM_LAYERS, noun="layer", blank=True, flag="--sim-layer", flag_help="real | builtin | auto"))
    torch_npu_dir: str = _row(Location(
        "ASCEND_SHIM_TORCH_NPU_DIR", "",
        "Where `fetch-torch-npu` keeps the prepared torch_npu packages (default `~/.cache/ascend_shim/torch_npu`).",
        values="a directory", expand=True))
    sim_build_dir: str = _row(Location(
        "ASCEND_SHIM_SIM_BUILD_DIR", "",
        "Where the emulator's C++ extensions are built and cached (default `~/.cache/ascend_shim/sim`).",
        values="a directory", expand=True))
    sim_build_verbose: bool = _row(Bool(
        "ASCEND_SHIM_SIM_BUILD_VERBOSE", "0", "Show the compiler output when the emulator's extensions are built."))
    sim_build_timeout: int = _row(IntRange(
        "ASCEND_SHIM_SIM_BUILD_TIMEOUT", "1200",
        "How long a process waits for another process's build of the emulator's extensions (every rank "
        "but one waits on a first run) before it gives up with an error; after a few seconds it says "
        "what it waits for.",
        values="seconds, 1 .. 86400", low=1, high=86400))
    sim_cann_version: str = _row(Form(
        "ASCEND_SHIM_SIM_CANN_VERSION", "",
        "The CANN version the emulated `torch_npu` reports (default: the line paired with the installed torch).",
        values="a CANN version, e.g. 8.3.RC1", regex=r"\d+\.\d+(\.[A-Za-z0-9]+)*",
        wrong="is not a CANN version; e.g. 8.3.RC1 or 8.0.0", blank=True))
    sim_hccl_avg: str = _row(Choice(
        "ASCEND_SHIM_SIM_HCCL_AVG", "",
        "How the emulated HCCL treats `ReduceOp.AVG` (default: as the torch_npu paired with the installed "
        "torch: `sum_div` from torch 2.6, `reject` before).",
        choices=SIM_HCCL_AVG, noun="policy", blank=True))
    sim_hccl_no_alias: bool = _row(Bool(
        "ASCEND_SHIM_SIM_HCCL_NO_ALIAS", "0",
        "Tests only: the emulated HCCL copies through host memory instead of aliasing npu memory."))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> Config:
        """Read the environment, then apply keyword overrides (``None`` means: keep the environment's). An
        unknown keyword, or a value of a type the setting does not take, is a ``TypeError``."""
        env = os.environ if environ is None else environ
        values = {row.field: row.parse(env[row.name]) for row in ENV_VARS if row.name in env}
        for field, value in overrides.items():
            row = _KEYWORDS.get(field)
            if row is None:
                raise TypeError(f"unknown setting {field!r}; known: {', '.join(_KEYWORDS)}")
            if value is not None:
                values[field] = row.accept(value)
        return cls(**values)

    def to_env(self) -> dict[str, str]:
        """The environment variables that reproduce this configuration in a child process."""
        return {row.name: row.format(getattr(self, row.field)) for row in ENV_VARS
                if not (row.name.startswith(_SIM_PREFIX) and getattr(self, row.field) == row.default_value)}


#: Every setting, in documentation order: its environment variable and, where it has one, its command-line
#: option. The configuration table of the documentation and the CLI options are generated from this.
ENV_VARS: tuple[EnvVar, ...] = tuple(dataclasses.replace(f.metadata["row"], field=f.name)
                                     for f in dataclasses.fields(Config))
_BY_FIELD = {row.field: row for row in ENV_VARS}
_KEYWORDS = {row.field: row for row in ENV_VARS if row.keyword}
#: the keyword arguments ``activate()`` takes for settings (the table's field names)
KEYWORDS: tuple[str, ...] = tuple(_KEYWORDS)


def row(field: str) -> EnvVar:
    """The row of the setting ``field``."""
    return _BY_FIELD[field]


def add_options(parser: Any, *fields: str) -> None:
    """Add the command-line options of the settings ``fields`` (every setting that has one when none are named) to
    an argparse parser; each option's ``dest`` is its field (what :func:`options_given` reads back)."""
    for v in [_BY_FIELD[f] for f in fields] if fields else [v for v in ENV_VARS if v.flag]:
        parser.add_argument(v.flag, dest=v.field, help=f"{v.flag_help} ({v.name})", **v.option())


def options_given(namespace: object) -> dict[str, Any]:
    """The settings given on a command line parsed with :func:`add_options`, by field (the options not given
    are left out: the environment's values stand)."""
    return {v.field: getattr(namespace, v.field) for v in ENV_VARS
            if v.flag and getattr(namespace, v.field, None) is not None}


def value_options() -> frozenset[str]:
    """The options that take a value (every other option of a setting is a switch)."""
    return frozenset(v.flag for v in ENV_VARS if v.flag and not v.switch)


def setting(field: str, environ: Mapping[str, str] | None = None) -> Any:
    """One setting parsed from the environment (its default when unset): the emulator's readers use this."""
    return _BY_FIELD[field].from_env(os.environ if environ is None else environ)


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Parse every ``ASCEND_SHIM_*`` setting of the environment; raise :class:`ConfigError` on the first bad one."""
    Config.from_env(environ)
