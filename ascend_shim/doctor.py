"""``ascend-shim doctor``: check the environment before booking NPU time.

Each check prints one line with a verdict and, when something is wrong, a fix::

    ok    nothing to do
    warn  the run may work, but something is off (a range, a leftover variable, a missing tool)
    FAIL  the run cannot work as configured (exit code 1)
    info  facts worth knowing, never a problem

Checked, in order: the shim's own settings and backend; the Python version against the torch_npu line
(torch_npu's wheels); the torch / torch_npu pairing (the same base version X.Y.Z, ``.postN`` and ``+cpu`` allowed);
the CANN environment (``ASCEND_HOME_PATH`` / ``ASCEND_TOOLKIT_HOME``, ``LD_LIBRARY_PATH`` holding
``<home>/lib64``, ``ASCEND_OPP_PATH``: the effects of sourcing ``set_env.sh``) and the CANN version; the
driver (``/usr/local/Ascend/driver``, its ``version.info``), ``npu-smi`` and the ``/dev/davinciN`` nodes; the
visible devices (``ASCEND_RT_VISIBLE_DEVICES`` vs a leftover ``CUDA_VISIBLE_DEVICES``); the HCCL variables;
leftover ``NCCL_*`` variables; the target libraries of the registered patch sets against the version ranges
those sets declare (read from the patch-set metadata, never from a list kept here); vllm / vllm-ascend against
vllm-ascend's release compatibility matrix (the exact vllm of each vllm-ascend release; for a listed release, the
torch, torch_npu, Python and CANN it is released with, one line per difference) and numpy; flash-attn vs
flash-attn-npu; and, on the emulator, the C++ toolchain it builds with and its build cache
(owner and mode, the integrity of each cached extension, whether a build can be stored there).

**CANN version source.** The version is read from ``<home>/<arch>-linux/ascend_toolkit_install.info``, the
``key=value`` file whose ``version=`` field Ascend's installation guide tells users to ``cat`` (e.g.
``version=8.3.RC1``); torch_npu's ``collect_env`` reads the same ``ascend_*_install.info`` family. Fallbacks:
any ``<home>/*-linux/ascend_*_install.info``, then the legacy ``<home>/version.cfg``. ``<home>`` is
``ASCEND_HOME_PATH`` (else ``ASCEND_TOOLKIT_HOME``, else the default install next to a ``set_env.sh`` found
under ``/usr/local/Ascend``). The driver version is the ``Version=`` line of
``/usr/local/Ascend/driver/version.info``.

With the ``sim`` backend (``--simulate`` or ``ASCEND_SHIM_BACKEND=sim``) doctor says it is checking for the
emulator, and every hardware check (CANN, driver, npu-smi, device nodes, torch_npu presence) is reported as
``info`` instead of failing.

Every check is a small function of a :class:`Environment` -- the environment variables, a root folder under
which the well-known absolute paths (``/usr/local/Ascend``, ``/dev``) are looked up, and lookups for installed
versions, distribution requirements and programs -- so tests build fake environments.
"""
from __future__ import annotations

import argparse
import dataclasses
import glob
import ipaddress
import json
import os
import platform
import re
import shutil
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from . import versions

if TYPE_CHECKING:
    from .config import Config
    from .scan.coverage import CoverageIndex

VERDICTS = ("ok", "warn", "FAIL", "info")

#: where CANN's set_env.sh lives in default installs (toolkit layout; CANN >= 8.5 "cann" layout)
SET_ENV_CANDIDATES = ("/usr/local/Ascend/ascend-toolkit/set_env.sh", "/usr/local/Ascend/cann/set_env.sh")
DRIVER_DIR = "/usr/local/Ascend/driver"
HCCL_CONNECT_TIMEOUT_RANGE = (120, 7200)     # seconds, CANN environment-variable reference
HCCL_BASE_PORT_RANGE = (1024, 65520)         # HCCL_IF_BASE_PORT; HCCL uses 16 ports from it
#: NCCL variables with an HCCL counterpart a user can set instead
NCCL_TO_HCCL = {"NCCL_SOCKET_IFNAME": "HCCL_SOCKET_IFNAME", "NCCL_TIMEOUT": "HCCL_CONNECT_TIMEOUT / HCCL_EXEC_TIMEOUT",
                "NCCL_BUFFSIZE": "HCCL_BUFFSIZE", "NCCL_DEBUG": "ASCEND_GLOBAL_LOG_LEVEL"}


@dataclasses.dataclass
class Check:
    name: str
    verdict: str
    message: str
    fix: str = ""

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"check {self.name}: unknown verdict {self.verdict!r}")

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Environment:
    """Everything the checks read. Build one by hand in tests; :meth:`current` reads this process's."""

    env: Mapping[str, str]
    root: str = "/"
    version_of: Callable[[str], str | None] = versions.installed_version
    requires_of: Callable[[str], list[str] | None] = versions.requirements_of
    which: Callable[[str], str | None] | None = None     # default: shutil.which on env["PATH"]
    python_version: tuple[int, ...] = tuple(sys.version_info[:3])
    machine: str = platform.machine()
    patch_sets: list | None = None                       # default: every registered patch set
    simulate: bool = False

    @classmethod
    def current(cls, simulate: bool = False) -> Environment:
        return cls(env=dict(os.environ), simulate=simulate)

    def path(self, absolute: str) -> str:
        return os.path.join(self.root, absolute.lstrip("/"))

    def find_program(self, name: str) -> str | None:
        if self.which is not None:
            return self.which(name)
        return shutil.which(name, path=self.env.get("PATH", ""))


@dataclasses.dataclass
class _Ctx:
    e: Environment
    backend: str                 # npu | sim | auto
    config: Config | None
    sets: list
    set_errors: list[str]
    index: CoverageIndex         # over the selected patches

    @property
    def hardware(self) -> bool:
        return self.backend != "sim"

    def hw(self, verdict: str) -> str:
        """A hardware verdict: itself on the NPU, ``info`` on the emulator."""
        return verdict if self.hardware else "info"


# -- helpers -------------------------------------------------------------------------------------------------


def _read_kv(path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for raw in fh:
                key, sep, value = raw.strip().partition("=")
                if sep:
                    out.setdefault(key.strip().lower(), value.strip())
    except OSError:
        pass
    return out


def _cann_major_minor(version: str) -> tuple[int, int] | None:
    m = re.match(r"^\s*(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _same_dir(a: str, b: str) -> bool:
    return os.path.normpath(os.path.realpath(a)) == os.path.normpath(os.path.realpath(b))


def _py(v) -> str:
    return ".".join(map(str, v))


# -- checks --------------------------------------------------------------------------------------------------
def check_backend(ctx: _Ctx) -> list[Check]:
    if ctx.backend == "sim":
        return [Check("backend", "info", "backend sim: checking for the emulated NPU (CPU-backed); hardware checks "
                      "(CANN, driver, npu-smi, devices) are informational"), _check_sim_layer(ctx)]
    if ctx.backend == "npu":
        return [Check("backend", "info", "backend npu: checking the real torch_npu / CANN / driver stack")]
    return [Check("backend", "info", "backend auto: resolves to npu when torch_npu is importable (never a silent "
                  "CPU fallback); checking the NPU stack", "use --simulate / ASCEND_SHIM_BACKEND=sim for the emulator")]


def _check_sim_layer(ctx: _Ctx) -> Check:
    """Which torch_npu Python the dry run will use over the emulated NPU."""
    from . import backend as backend_mod
    from .errors import ConfigError
    from .sim.real_layer import prepare

    setting = getattr(ctx.config, "sim_layer", None) or "auto"
    try:
        layer, state = backend_mod.choose_layer("sim", setting)
    except ConfigError as exc:
        return Check("sim-layer", "FAIL", str(exc), "python -m ascend_shim fetch-torch-npu")
    if layer == "real" and state is not None:
        where = state[0]
        problems = prepare.check_files(where, json.loads((where / "prepared.json").read_text()), full=True)
        if problems:  # every file hashed: what the run's own check (file list and sizes) may not see
            shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
            return Check("sim-layer", "FAIL", f"real layer: Huawei's torch_npu prepared in {where} is not as "
                         f"fetch-torch-npu prepared it: {shown}",
                         "python -m ascend_shim fetch-torch-npu (prepares it again)")
        return Check("sim-layer", "ok", f"real layer: Huawei's torch_npu Python prepared in {where} runs over the "
                     f"emulated NPU, and the shim runs its npu backend code, as on hardware (its files as "
                     f"prepared)")
    why = state[2] if state is not None else ""
    advice = ("python -m ascend_shim fetch-torch-npu (then the dry run uses Huawei's torch_npu Python and the "
              "shim's npu backend code)") if setting == "auto" else ""
    return Check("sim-layer", "info", f"builtin layer: the emulator's own torch_npu (ASCEND_SHIM_SIM_LAYER={setting})"
                 + (f": {why}" if why else ""), advice)


def check_python(ctx: _Ctx) -> list[Check]:
    e = ctx.e
    py = tuple(e.python_version[:2])
    npu_v, torch_v = e.version_of("torch_npu"), e.version_of("torch")
    line = versions.line(npu_v) or versions.line(torch_v)
    who = f"torch_npu {line}" if npu_v else f"torch_npu {line} (the line matching torch {torch_v})"
    if line in versions.TORCH_NPU_PYTHON:
        lo, hi = versions.TORCH_NPU_PYTHON[line]
        if lo <= py <= hi:
            return [Check("python", "ok", f"Python {_py(e.python_version)}: {who} supports {_py(lo)}-{_py(hi)}")]
        fits = [ln for ln, (a, b) in versions.TORCH_NPU_PYTHON.items() if a <= py <= b]
        return [Check("python", ctx.hw("FAIL"), f"Python {_py(e.python_version)} is outside {who}'s "
                      f"{_py(lo)}-{_py(hi)}: no torch_npu wheel for it",
                      f"use Python {_py(lo)}-{_py(hi)}" + (f", or a torch/torch_npu line built for "
                                                           f"{_py(py)}: {', '.join(fits)}" if fits else ""))]
    fits = [ln for ln, (a, b) in versions.TORCH_NPU_PYTHON.items() if a <= py <= b]
    if fits:
        return [Check("python", "info", f"Python {_py(e.python_version)}: torch_npu lines with wheels for it: "
                      f"{', '.join(fits)}" + (f" (no record for line {line})" if line else ""))]
    return [Check("python", ctx.hw("FAIL"), f"Python {_py(e.python_version)}: no torch_npu line ships wheels for it",
                  "use Python 3.10-3.13 (supported by every torch_npu line from 2.9 on)")]


def check_torch(ctx: _Ctx) -> list[Check]:
    e = ctx.e
    tv, nv = e.version_of("torch"), e.version_of("torch_npu")
    out = []
    if tv is None:
        want = f"torch=={versions.base(nv)}" if nv else "torch==<the torch_npu base version>"
        return [Check("torch", "FAIL", "torch is not installed",
                      f"pip install {want} --index-url https://download.pytorch.org/whl/cpu")]
    if nv is None:
        if ctx.hardware:
            out.append(Check("torch-npu", "FAIL", f"torch {tv} is installed but torch_npu is not: there is no NPU "
                             "backend", f"pip install torch-npu=={versions.base(tv)} (the same base version as torch); "
                             "or run on the emulator with --simulate"))
        else:
            out.append(Check("torch-npu", "info", f"torch {tv}; torch_npu not installed (not needed on the emulator; "
                             f"for the NPU: pip install torch-npu=={versions.base(tv)})"))
    else:
        pairing = versions.torch_npu_pairing(tv, nv)
        verdict = {True: "ok", None: "warn", False: ctx.hardware and "FAIL" or "warn"}[pairing.ok]
        out.append(Check("torch-npu", verdict, pairing.message, pairing.fix))
    from packaging.version import InvalidVersion, Version

    try:
        local = Version(tv).local or ""
    except InvalidVersion:
        local = ""
    if ctx.hardware and local.startswith(("cu", "rocm")):
        out.append(Check("torch-build", "warn", f"torch {tv} is a {local} build; torch_npu expects the CPU build",
                         f"pip install torch=={versions.base(tv)} --index-url https://download.pytorch.org/whl/cpu"))
    return out


def _cann_home(e: Environment) -> tuple[str | None, str]:
    """(CANN home, how it was found)."""
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        if e.env.get(var):
            return e.env[var], var
    for found in _set_env_scripts(e):
        folder = os.path.dirname(found)
        latest = os.path.join(folder, "latest")
        return (latest if os.path.isdir(latest) else folder), f"default install ({found})"
    return None, ""


def _set_env_scripts(e: Environment) -> list[str]:
    candidates = [e.path(p) for p in SET_ENV_CANDIDATES]
    home = e.env.get("HOME")
    if home:
        candidates += [os.path.join(home, "Ascend/ascend-toolkit/set_env.sh"),
                       os.path.join(home, "Ascend/cann/set_env.sh")]
    return [c for c in candidates if os.path.isfile(c)]


def check_cann_env(ctx: _Ctx) -> list[Check]:
    e, env = ctx.e, ctx.e.env
    scripts = _set_env_scripts(e)
    source_fix = (f"source {scripts[0]}" if scripts else
                  "install the CANN toolkit (Ascend-cann-toolkit_<version>_linux-<arch>.run --install), then "
                  "source /usr/local/Ascend/ascend-toolkit/set_env.sh")
    home_path, tk_home = env.get("ASCEND_HOME_PATH"), env.get("ASCEND_TOOLKIT_HOME")
    home = home_path or tk_home
    if not home:
        found = f" (a CANN install exists: {scripts[0]})" if scripts else " and no CANN install was found"
        return [Check("cann-env", ctx.hw("FAIL"), "CANN environment not sourced: ASCEND_HOME_PATH and "
                      "ASCEND_TOOLKIT_HOME are unset" + found, source_fix)]
    var = "ASCEND_HOME_PATH" if home_path else "ASCEND_TOOLKIT_HOME"
    if not os.path.isdir(home):
        return [Check("cann-env", ctx.hw("FAIL"), f"{var}={home} does not exist", source_fix)]
    out = [Check("cann-env", "ok", f"CANN environment sourced: {var}={home}")]
    if home_path and tk_home and not _same_dir(home_path, tk_home):
        out.append(Check("cann-env", "warn", f"ASCEND_HOME_PATH={home_path} and ASCEND_TOOLKIT_HOME={tk_home} point "
                         "at different CANN installs", "start a fresh shell and source one set_env.sh"))
    ld = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    lib = os.path.join(home, "lib64")
    if any(_same_dir(d, lib) for d in ld):
        out.append(Check("cann-libs", "ok", f"LD_LIBRARY_PATH contains {lib}"))
    else:
        out.append(Check("cann-libs", ctx.hw("FAIL"), f"LD_LIBRARY_PATH lacks {lib}: `import torch_npu` cannot "
                         "load libascendcl / libhccl", source_fix))
    opp = env.get("ASCEND_OPP_PATH")
    if not opp:
        out.append(Check("cann-opp", ctx.hw("warn"), "ASCEND_OPP_PATH is unset: the operator package is not found "
                         "(set_env.sh sets it to <home>/opp)", source_fix))
    elif not os.path.isdir(opp):
        out.append(Check("cann-opp", ctx.hw("warn"), f"ASCEND_OPP_PATH={opp} does not exist", source_fix))
    driver_libs = [e.path(f"{DRIVER_DIR}/lib64/{d}") for d in ("driver", "common")]
    missing = [d for d in driver_libs if os.path.isdir(d) and not any(_same_dir(x, d) for x in ld)]
    if missing:
        out.append(Check("driver-libs", "info", f"driver libraries {', '.join(missing)} are not on LD_LIBRARY_PATH "
                         "(fine when the driver registered them with ldconfig)"))
    return out


def find_cann_version_file(home: str, machine: str) -> str | None:
    """The CANN version file under ``home`` (see the module docstring for the order)."""
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine)
    first = os.path.join(home, f"{arch}-linux", "ascend_toolkit_install.info")
    if os.path.isfile(first):
        return first
    for pattern in (f"{arch}-linux/ascend_*_install.info", "*-linux/ascend_toolkit_install.info",
                    "*-linux/ascend_*_install.info"):
        hits = sorted(glob.glob(os.path.join(home, pattern)))
        if hits:
            return hits[0]
    legacy = os.path.join(home, "version.cfg")
    return legacy if os.path.isfile(legacy) else None


def read_cann_version(path: str) -> str | None:
    kv = _read_kv(path)
    if kv.get("version"):
        return kv["version"]
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            m = re.search(r"(\d+\.\d+\.(?:RC\d+|\d+)(?:\.\w+)?)", fh.read(), re.IGNORECASE)
    except OSError:
        return None
    return m.group(1) if m else None


def installed_cann(e: Environment) -> tuple[str | None, str | None, str | None]:
    """``(home, version file, version)`` of the CANN install (None for what is not found)."""
    home, _ = _cann_home(e)
    if not home or not os.path.isdir(home):
        return None, None, None
    path = find_cann_version_file(home, e.machine)
    return home, path, read_cann_version(path) if path else None


def check_cann_version(ctx: _Ctx) -> list[Check]:
    e = ctx.e
    home, path, version = installed_cann(e)
    if not home:
        return [Check("cann-version", ctx.hw("warn"), "CANN version unknown: no CANN install found",
                      "install the CANN toolkit and source its set_env.sh")]
    if not version:
        return [Check("cann-version", ctx.hw("warn"), f"CANN version unknown: no readable ascend_toolkit_install.info "
                      f"under {home}", "check the CANN install (reinstall the toolkit if the file is missing)")]
    out = [Check("cann-version", "ok", f"CANN {version} (from {path})")]
    nv = e.version_of("torch_npu")
    if nv:
        want = versions.cann_for(nv)
        have, need = _cann_major_minor(version), _cann_major_minor(want or "")
        if want and have and need and have < need:
            out.append(Check("cann-pairing", ctx.hw("warn"), f"torch_npu {nv} was released for CANN {want}; CANN "
                             f"{version} is older (operators may be missing)",
                             f"upgrade CANN to {want}, or install the torch_npu build made for CANN {version} "
                             "(Ascend/pytorch COMPATIBILITY.md)"))
        elif want:
            out.append(Check("cann-pairing", "ok", f"torch_npu {nv} was released for CANN {want}; CANN {version} "
                             "is not older"))
        else:
            out.append(Check("cann-pairing", "info", f"no recorded CANN pairing for torch_npu {nv} (see "
                             "Ascend/pytorch COMPATIBILITY.md)"))
    return out


def check_driver(ctx: _Ctx) -> list[Check]:
    e = ctx.e
    out = []
    drv = e.path(DRIVER_DIR)
    if os.path.isdir(drv):
        version = _read_kv(os.path.join(drv, "version.info")).get("version")
        out.append(Check("driver", "ok", f"Ascend driver {version or '(version.info unreadable)'} at {DRIVER_DIR}"))
    else:
        out.append(Check("driver", ctx.hw("FAIL"), f"no Ascend driver at {DRIVER_DIR}",
                         "install the Ascend HDK driver and firmware; in a container, mount /usr/local/Ascend/driver"))
    smi = e.find_program("npu-smi") or next(
        (p for p in (e.path("/usr/local/bin/npu-smi"), e.path("/usr/local/sbin/npu-smi")) if os.path.isfile(p)), None)
    if smi:
        out.append(Check("npu-smi", "ok", f"npu-smi at {smi} (`npu-smi info` lists the NPUs and their health)"))
    else:
        out.append(Check("npu-smi", ctx.hw("warn"), "npu-smi not found on PATH or in /usr/local/bin",
                         "it ships with the driver; in a container mount /usr/local/bin/npu-smi"))
    nodes = _device_nodes(e)
    if nodes:
        out.append(Check("devices", "ok" if ctx.hardware else "info", f"{len(nodes)} NPU device node(s): "
                         f"{', '.join(os.path.basename(n) for n in nodes)}"))
    else:
        out.append(Check("devices", ctx.hw("warn"), "no /dev/davinciN device nodes: no NPU is visible to this host "
                         "or container", "in a container pass --device /dev/davinciN --device /dev/davinci_manager "
                         "--device /dev/devmm_svm --device /dev/hisi_hdc"))
    return out


def _device_nodes(e: Environment) -> list[str]:
    numbered = []
    for path in glob.glob(e.path("/dev/davinci*")):
        match = re.search(r"davinci(\d+)$", path)
        if match:
            numbered.append((int(match.group(1)), path))
    return [path for _, path in sorted(numbered)]


def _translating_patches(ctx: _Ctx, var: str) -> list[str]:
    return sorted(p.id for p in ctx.index.covering(f"env:{var}"))


def _npu_blocking(fn):
    """A check whose FAILs block NPU runs only: on the emulator they become warnings."""
    import functools

    @functools.wraps(fn)
    def run(ctx: _Ctx) -> list[Check]:
        out = fn(ctx)
        if not ctx.hardware:
            for c in out:
                if c.verdict == "FAIL":
                    c.verdict, c.message = "warn", c.message + " (blocks a run on the NPU, not on the emulator)"
        return out

    return run


@_npu_blocking
def check_visible_devices(ctx: _Ctx) -> list[Check]:
    env = ctx.e.env
    out = []
    arvd, cvd = env.get("ASCEND_RT_VISIBLE_DEVICES"), env.get("CUDA_VISIBLE_DEVICES")
    if arvd is not None:
        ids = [x.strip() for x in arvd.split(",")]
        if not all(re.fullmatch(r"\d+", x) for x in ids):
            out.append(Check("visible-devices", "FAIL", f"ASCEND_RT_VISIBLE_DEVICES={arvd!r} is not a comma list of "
                             "device ids", "e.g. export ASCEND_RT_VISIBLE_DEVICES=0,1,2,3"))
        elif len(set(ids)) != len(ids):
            out.append(Check("visible-devices", "FAIL", f"ASCEND_RT_VISIBLE_DEVICES={arvd} repeats a device id",
                             "list each device once"))
        else:
            count = len(_device_nodes(ctx.e))
            too_big = [x for x in ids if count and int(x) >= count]
            if too_big and ctx.hardware:
                out.append(Check("visible-devices", "warn", f"ASCEND_RT_VISIBLE_DEVICES={arvd} names device(s) "
                                 f"{', '.join(too_big)} but only {count} device node(s) exist",
                                 f"use ids below {count} (npu-smi info)"))
            else:
                out.append(Check("visible-devices", "ok", f"ASCEND_RT_VISIBLE_DEVICES={arvd} ({len(ids)} device(s))"))
    if cvd is not None:
        patches = _translating_patches(ctx, "CUDA_VISIBLE_DEVICES")
        if arvd is None:
            if cvd.strip() == "":
                out.append(Check("visible-devices", "warn", "CUDA_VISIBLE_DEVICES is set but empty (hides every "
                                 "GPU); the NPU runtime ignores it and sees all NPUs",
                                 "unset CUDA_VISIBLE_DEVICES; restrict NPUs with ASCEND_RT_VISIBLE_DEVICES"))
            elif patches:
                out.append(Check("visible-devices", "info", f"CUDA_VISIBLE_DEVICES={cvd} is translated to "
                                 f"ASCEND_RT_VISIBLE_DEVICES by the shim ({', '.join(patches)})"))
            else:
                out.append(Check("visible-devices", "warn", f"leftover CUDA_VISIBLE_DEVICES={cvd}: the NPU runtime "
                                 "ignores it, so every NPU is visible", f"export ASCEND_RT_VISIBLE_DEVICES={cvd}; "
                                 "unset CUDA_VISIBLE_DEVICES"))
        elif cvd != arvd:
            out.append(Check("visible-devices", "warn", f"leftover CUDA_VISIBLE_DEVICES={cvd} differs from "
                             f"ASCEND_RT_VISIBLE_DEVICES={arvd}: the NPUs follow ASCEND_RT_VISIBLE_DEVICES, code that "
                             "reads CUDA_VISIBLE_DEVICES sees another list", "unset CUDA_VISIBLE_DEVICES"))
    if env.get("NPU_VISIBLE_DEVICES") is not None:
        out.append(Check("visible-devices", "warn", "NPU_VISIBLE_DEVICES is set, but neither CANN nor torch_npu "
                         "reads it", f"export ASCEND_RT_VISIBLE_DEVICES={env['NPU_VISIBLE_DEVICES']}"))
    if not out:
        out.append(Check("visible-devices", "info", "ASCEND_RT_VISIBLE_DEVICES unset: every NPU is visible"))
    return out


def _int(value: str) -> int | None:
    try:
        return int(value.strip())
    except (ValueError, AttributeError):
        return None


def _port_ranges(spec: str) -> list[tuple[int, int]] | None:
    out = []
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m:
            return None
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if not (1 <= lo <= hi <= 65535):
            return None
        out.append((lo, hi))
    return out


@_npu_blocking
def check_hccl(ctx: _Ctx) -> list[Check]:
    env = ctx.e.env
    out = []
    ip = env.get("HCCL_IF_IP")
    if ip is not None:
        try:
            addr = ipaddress.ip_address(ip.strip())
        except ValueError:
            out.append(Check("HCCL_IF_IP", "FAIL", f"HCCL_IF_IP={ip!r} is not an IP address",
                             "set it to this host's IP on the training network, e.g. "
                             "export HCCL_IF_IP=$(hostname -I | awk '{print $1}')"))
        else:
            if addr.is_unspecified:
                out.append(Check("HCCL_IF_IP", "FAIL", f"HCCL_IF_IP={ip} is the unspecified address",
                                 "set this host's IP on the training network"))
            elif addr.is_loopback:
                out.append(Check("HCCL_IF_IP", "warn", f"HCCL_IF_IP={ip} is a loopback address: single-host only",
                                 "use the host's network IP for multi-node runs"))
            else:
                out.append(Check("HCCL_IF_IP", "ok", f"HCCL_IF_IP={ip}"))
    wl = env.get("HCCL_WHITELIST_DISABLE")
    if wl is not None:
        if wl.strip() == "1":
            out.append(Check("HCCL_WHITELIST_DISABLE", "ok", "HCCL_WHITELIST_DISABLE=1 (no communication whitelist)"))
        elif wl.strip() == "0":
            wf = env.get("HCCL_WHITELIST_FILE")
            if wf and os.path.isfile(wf):
                out.append(Check("HCCL_WHITELIST_DISABLE", "ok", f"whitelist checking on, HCCL_WHITELIST_FILE={wf}"))
            else:
                out.append(Check("HCCL_WHITELIST_DISABLE", "FAIL", "HCCL_WHITELIST_DISABLE=0 turns whitelist checking "
                                 "on, but HCCL_WHITELIST_FILE " + ("is unset" if not wf else f"{wf} does not exist"),
                                 "export HCCL_WHITELIST_DISABLE=1, or point HCCL_WHITELIST_FILE at the whitelist"))
        else:
            out.append(Check("HCCL_WHITELIST_DISABLE", "FAIL", f"HCCL_WHITELIST_DISABLE={wl!r} must be 0 or 1",
                             "export HCCL_WHITELIST_DISABLE=1"))
    for var in ("HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT"):
        raw = env.get(var)
        if raw is None:
            continue
        n = _int(raw)
        if n is None or n < 0:
            out.append(Check(var, "FAIL", f"{var}={raw!r} is not a whole number of seconds", f"e.g. export {var}=1800"))
        elif var == "HCCL_CONNECT_TIMEOUT" and not HCCL_CONNECT_TIMEOUT_RANGE[0] <= n <= HCCL_CONNECT_TIMEOUT_RANGE[1]:
            lo, hi = HCCL_CONNECT_TIMEOUT_RANGE
            out.append(Check(var, "warn", f"{var}={n} is outside CANN's documented range {lo}-{hi} s",
                             f"use a value in {lo}-{hi}"))
        else:
            out.append(Check(var, "ok", f"{var}={n} s"))
    raw = env.get("HCCL_IF_BASE_PORT")
    if raw is not None:
        n = _int(raw)
        lo, hi = HCCL_BASE_PORT_RANGE
        if n is None or not (lo <= n <= hi):
            out.append(Check("HCCL_IF_BASE_PORT", "FAIL", f"HCCL_IF_BASE_PORT={raw!r} must be a port in {lo}-{hi}",
                             "e.g. export HCCL_IF_BASE_PORT=60000"))
        else:
            out.append(Check("HCCL_IF_BASE_PORT", "ok", f"HCCL_IF_BASE_PORT={n}: HCCL uses ports {n}-{n + 15}",
                             f"reserve them: sysctl -w net.ipv4.ip_local_reserved_ports={n}-{n + 15}"))
    for var in ("HCCL_HOST_SOCKET_PORT_RANGE", "HCCL_NPU_SOCKET_PORT_RANGE"):
        raw = env.get(var)
        if raw is None or raw.strip() == "auto":
            continue
        ranges = _port_ranges(raw)
        if ranges is None:
            out.append(Check(var, "FAIL", f"{var}={raw!r}: expected 'auto' or ports / ranges like 60000-60050,61000",
                             f'e.g. export {var}="60000-60050"'))
        elif any(lo < 1024 for lo, _ in ranges):
            out.append(Check(var, "warn", f"{var}={raw} includes system ports below 1024", "use ports >= 1024"))
        else:
            out.append(Check(var, "ok", f"{var}={raw}"))
    if not out:
        out.append(Check("hccl", "info", "no HCCL_* variables set (single node needs none; for multi-node set "
                         "HCCL_IF_IP or HCCL_SOCKET_IFNAME)"))
    return out


def check_nccl_leftovers(ctx: _Ctx) -> list[Check]:
    names = sorted(v for v in ctx.e.env if v.startswith(("NCCL_", "TORCH_NCCL_")))
    out, ignored = [], []
    for var in names:
        patches = _translating_patches(ctx, var)
        if patches:
            out.append(Check("nccl-env", "info", f"{var} is translated by the shim ({', '.join(patches)})"))
        else:
            ignored.append(var)
    if ignored:
        hints = [f"{v} -> {NCCL_TO_HCCL[v]}" for v in ignored if v in NCCL_TO_HCCL]
        out.append(Check("nccl-env", ctx.hw("warn"), f"leftover {', '.join(ignored)}: ignored by HCCL",
                         "set the HCCL counterparts" + (f" ({'; '.join(hints)})" if hints else "")
                         + " and unset the NCCL variables"))
    return out


def _requirement_map(ctx: _Ctx) -> dict[str, list[tuple[str, str]]]:
    """{distribution: [(owner id, specifier)]} from the selected patch sets and their patches."""
    out: dict[str, list[tuple[str, str]]] = {}
    for s in ctx.sets:
        for dist, spec in s.requires.items():
            out.setdefault(dist, []).append((s.id, spec))
        for p in s.patches:
            for dist, spec in p.requires:
                out.setdefault(dist, []).append((p.id, spec))
    return out


def check_target_libraries(ctx: _Ctx) -> list[Check]:
    out = [Check("patch-sets", "warn", f"a patch-set entry point failed to load: {err}",
                 "fix or uninstall the package providing it") for err in ctx.set_errors]
    for s in ctx.sets:
        if s.project is not None:
            state, where = versions.check_project(s.project)
            verdict = {"absent": "info", "outside": "warn", "ok": "ok"}[state]
            out.append(Check(f"project:{s.project.package}", verdict,
                             f"{where} (gate of patch set {s.id}: {s.project.describe()})",
                             f"use {s.project.package} {s.project.specifier}" if state == "outside" else ""))
    reqs = _requirement_map(ctx)
    if not reqs:
        out.append(Check("libraries", "info", "no selected patch set declares target libraries"))
        return out
    for dist in sorted(reqs, key=str.lower):
        owners = reqs[dist]
        v = ctx.e.version_of(dist)
        names = ", ".join(sorted({o for o, _ in owners}))
        if v is None:
            out.append(Check(f"library:{dist}", "info", f"{dist} not installed (targeted by {names})"))
            continue
        outside = [(o, spec) for o, spec in owners if spec and not versions.satisfies(v, spec)]
        if outside:
            specs = sorted({spec for _, spec in outside})
            out.append(Check(f"library:{dist}", "warn", f"{dist} {v} is outside the range of "
                             + ", ".join(f"{o} ({spec})" for o, spec in outside)
                             + ": those patches will be skipped and their CUDA fixes will not apply",
                             f"pip install '{dist}{specs[0]}'" if len(specs) == 1 else
                             f"install a {dist} version inside {' and '.join(specs)}"))
        else:
            ranges = sorted({spec for _, spec in owners if spec})
            out.append(Check(f"library:{dist}", "ok", f"{dist} {v}" + (f" inside {', '.join(ranges)}" if ranges else "")
                             + f" ({names})"))
    return out


def _numpy_check(ctx: _Ctx, va: str) -> Check:
    """numpy against vllm-ascend ``va``'s requirement."""
    e = ctx.e
    spec, source = versions.numpy_requirement(va, e.requires_of("vllm-ascend") or e.requires_of("vllm_ascend"))
    np_v = e.version_of("numpy")
    if np_v is None:
        return Check("numpy", "warn", "numpy is not installed (vllm-ascend needs it)", f"pip install 'numpy{spec}'")
    if not spec:
        return Check("numpy", "ok", f"numpy {np_v}: {source}")
    if not versions.satisfies(np_v, spec):
        return Check("numpy", "FAIL", f"numpy {np_v} does not satisfy numpy{spec} ({source})",
                     f"pip install 'numpy{spec}'")
    return Check("numpy", "ok", f"numpy {np_v} satisfies numpy{spec} ({source})")


def _vllm_stack(ctx: _Ctx, entry: versions.Release) -> list[Check]:
    """torch, torch_npu, Python and CANN against vllm-ascend's release: one line per mismatch, else one ok line."""
    e = ctx.e
    npu_v = e.version_of("torch_npu")
    cann = installed_cann(e)[2] if ctx.hardware else None
    parts = versions.stack_pairings(entry, e.version_of("torch"), npu_v, e.python_version, cann, e.machine)
    if npu_v is None and not ctx.hardware:
        parts.pop("torch-npu")  # the emulator needs no torch_npu
    bad = {name: p for name, p in parts.items() if p.ok is not True}
    if not bad:
        return [Check("vllm-stack", "ok", f"{', '.join(p.message for p in parts.values())}: as vllm-ascend "
                      f"{entry.ascend} is released")]
    return [Check(f"vllm-{name}", ctx.hw("FAIL" if p.ok is False else "warn"), p.message, p.fix)
            for name, p in bad.items()]


def check_vllm(ctx: _Ctx) -> list[Check]:
    """vllm / vllm-ascend against vllm-ascend's release matrix; for a listed release, torch / torch_npu / Python /
    CANN against what it is released with; numpy against its requirement."""
    e = ctx.e
    vllm, va = e.version_of("vllm"), e.version_of("vllm-ascend") or e.version_of("vllm_ascend")
    if not va:
        if not vllm:
            return []
        pairing = versions.vllm_pairing(vllm, None, e.python_version, e.machine)
        return [Check("vllm", ctx.hw("warn"), pairing.message, pairing.fix)]
    pairing = versions.vllm_pairing(vllm, va, e.python_version, e.machine)
    out = [Check("vllm", {True: "ok", False: "FAIL", None: "warn"}[pairing.ok], pairing.message, pairing.fix)]
    entry = versions.ascend_release(va)
    if entry is not None:
        out += _vllm_stack(ctx, entry)
    return out + [_numpy_check(ctx, va)]


def check_flash_attn(ctx: _Ctx) -> list[Check]:
    e = ctx.e
    fa = e.version_of("flash-attn") or e.version_of("flash_attn")
    fa_npu = e.version_of("flash-attn-npu") or e.version_of("flash_attn_npu")
    providers = sorted(p.id for p in ctx.index.covering("flash_attn"))
    out = []
    if fa_npu:
        out.append(Check("flash-attn", "ok", f"flash-attn-npu {fa_npu} installed (FlashAttention for Ascend)"))
    if fa and ctx.hardware:
        out.append(Check("flash-attn", "warn", f"flash-attn {fa} (a CUDA build) is installed: `import flash_attn` "
                         "loads CUDA kernels that cannot run on an NPU", "pip uninstall flash-attn"
                         + (f" (the shim's flash_attn provider {', '.join(providers)} then serves it)" if providers
                            else "")))
    elif fa:
        out.append(Check("flash-attn", "info", f"flash-attn {fa} installed (a CUDA build; unused on the emulator)"))
    if not fa and not fa_npu:
        if providers:
            out.append(Check("flash-attn", "info", f"flash_attn not installed; `import flash_attn` is served by "
                             f"{', '.join(providers)}"))
        else:
            out.append(Check("flash-attn", "info", "flash_attn not installed and no patch provides it: code that "
                             "imports flash_attn will fail (transformers' attn_implementation='flash_attention_2' has "
                             "its own NPU path)", "pip install flash-attn-npu, or use SDPA"))
    return out


def check_sim_toolchain(ctx: _Ctx) -> list[Check]:
    if ctx.hardware:
        return []
    e = ctx.e
    out = []
    cxx = e.env.get("CXX") or next((p for p in (e.find_program(n) for n in ("c++", "g++", "clang++")) if p), None)
    if cxx:
        out.append(Check("sim-toolchain", "ok", f"C++ compiler {cxx} (the emulator builds its extension on first use)"))
    else:
        out.append(Check("sim-toolchain", "warn", "no C++ compiler (c++ / g++ / clang++): the emulator cannot build "
                         "its extension unless a cached build exists", "install g++ (apt-get install g++)"))
    if e.find_program("ninja") or e.version_of("ninja"):
        out.append(Check("sim-toolchain", "ok", "ninja available"))
    else:
        out.append(Check("sim-toolchain", "warn", "ninja not found: torch.utils.cpp_extension needs it to build the "
                         "emulator", "pip install ninja"))
    return out


def check_sim_cache(ctx: _Ctx) -> list[Check]:
    """The emulator's build cache, judged by the rule its loader applies (nothing on disk is changed)."""
    if ctx.hardware:
        return []
    from . import build_cache
    from .sim import _extension

    out: list[Check] = []
    for ext in (_extension.SIM, _extension.HCCL):
        entry = build_cache.Entry(_extension.build_dir(ext, ctx.e.env), ext.name)
        state = build_cache.inspect(entry)
        if state.status == "ok":
            check = Check("sim-cache", "ok", f"{ext.name}: cached build verified ({entry.directory})")
        elif state.status == "missing":
            check = Check("sim-cache", "info", f"{ext.name}: not built yet; its first use builds it into "
                          f"{entry.directory} (about a minute)")
        elif state.status == "damaged":
            check = Check("sim-cache", "warn", f"{ext.name}: damaged cached build ({state.detail}); the next run "
                          f"rebuilds it (about a minute)", f"nothing to do, or delete {entry.directory}")
        else:  # unsafe or unusable: the run stops
            message, _, fix = state.detail.partition(" Fix: ")
            check = Check("sim-cache", "FAIL", message, fix)
        if all(c.message != check.message for c in out):  # a root-level finding is said once
            out.append(check)
    return out


CHECKS: tuple[Callable[[_Ctx], list[Check]], ...] = (
    check_backend, check_python, check_torch, check_cann_env, check_cann_version, check_driver,
    check_visible_devices, check_hccl, check_nccl_leftovers, check_target_libraries, check_vllm, check_flash_attn,
    check_sim_toolchain, check_sim_cache,
)


# -- running -------------------------------------------------------------------------------------------------
def _context(e: Environment, backend: str | None, patch_modules: str | None) -> tuple[_Ctx, list[Check]]:
    from .config import Config
    from .errors import ConfigError
    from .registry import all_patch_sets
    from .scan.coverage import CoverageIndex
    from .selection import selected_patches, set_selection

    problems: list[Check] = []
    config = None
    try:
        config = Config.from_env(e.env, patch_modules=patch_modules)
    except ConfigError as exc:
        problems.append(Check("settings", "FAIL", f"ascend_shim settings: {exc}", "fix the variable named above"))
    chosen = "sim" if e.simulate else (backend or (config.backend if config else "auto"))
    if config is None:
        from .config import Config as _C

        config = _C()
    sets, errors = e.patch_sets, []
    if sets is None:
        try:
            sets, ep_errors = all_patch_sets(config.patch_modules)
            errors = [f"{name}: {err}" for name, err in ep_errors]
        except ConfigError as exc:
            problems.append(Check("patch-sets", "FAIL", f"patch sets: {exc}", "fix ASCEND_SHIM_PATCH_MODULES"))
            sets = []
    selected = [s for s in sets if set_selection(s, config, chosen)[0] == "active"]
    index = CoverageIndex(selected_patches(selected, config, chosen))
    return _Ctx(e, chosen, config, selected, errors, index), problems


def run_checks(e: Environment, backend: str | None = None, patch_modules: str | None = None) -> tuple[str, list[Check]]:
    """(backend, checks) for an environment; the checks never raise (a crashing check is reported as FAIL)."""
    ctx, checks = _context(e, backend, patch_modules)
    for fn in CHECKS:
        try:
            checks.extend(fn(ctx))
        except Exception as exc:  # a doctor must report, not crash
            checks.append(Check(fn.__name__.replace("check_", ""), "FAIL", f"check crashed: {type(exc).__name__}: "
                                f"{exc}", "report this as an ascend_shim bug"))
    return ctx.backend, checks


def exit_code(checks: list[Check]) -> int:
    return 1 if any(c.verdict == "FAIL" for c in checks) else 0


def counts(checks: list[Check]) -> dict[str, int]:
    return {v: sum(c.verdict == v for c in checks) for v in VERDICTS}


def render_text(backend: str, checks: list[Check]) -> str:
    label = {"ok": " ok ", "warn": "warn", "FAIL": "FAIL", "info": "info"}
    where = "the emulated NPU (sim)" if backend == "sim" else f"backend {backend}"
    lines = [f"ascend-shim doctor: checking for {where}"]
    width = max((len(c.name) for c in checks), default=8)
    for c in checks:
        lines.append(f"[{label[c.verdict]}] {c.name:<{width}}  {c.message}")
        if c.fix and c.verdict in ("warn", "FAIL"):
            lines.append(f"       {'':<{width}}  fix: {c.fix}")
        elif c.fix:
            lines.append(f"       {'':<{width}}  note: {c.fix}")
    n = counts(checks)
    state = "blocked: fix the FAIL lines before booking NPU time" if n["FAIL"] else "nothing blocks a run"
    lines.append(f"{n['ok']} ok, {n['warn']} warn, {n['FAIL']} FAIL, {n['info']} info: {state}")
    return "\n".join(lines) + "\n"


def render_json(backend: str, checks: list[Check]) -> str:
    return json.dumps({"backend": backend, "simulated": backend == "sim", "checks": [c.as_dict() for c in checks],
                       "summary": counts(checks), "exit_code": exit_code(checks)}, indent=1)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ascend-shim doctor", description=__doc__.split("\n\n")[0],
                                epilog="exit code: 1 when a check FAILs (something blocks a run), 0 otherwise, 2 on "
                                       "usage errors")
    p.add_argument("--json", action="store_true", help="JSON output")
    p.add_argument("--simulate", action="store_true", help="check for the emulated NPU (ASCEND_SHIM_BACKEND=sim)")
    from .config import add_options

    add_options(p, "backend", "patch_modules")
    return p


def main(argv=None, environment: Environment | None = None) -> int:
    try:
        ns = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return int(exc.code or 0)
    if ns.simulate and ns.backend and ns.backend != "sim":
        print(f"ascend-shim doctor: error: --simulate contradicts --backend {ns.backend}", file=sys.stderr)
        return 2
    e = environment or Environment.current()
    if ns.simulate:
        e = dataclasses.replace(e, simulate=True)
    backend, checks = run_checks(e, backend=ns.backend, patch_modules=ns.patch_modules)
    sys.stdout.write(render_json(backend, checks) + "\n" if ns.json else render_text(backend, checks))
    return exit_code(checks)
