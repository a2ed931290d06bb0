"""Activation: select patch sets, register their import hooks, apply, report, and undo it all.

``activate()`` is idempotent; ``deactivate()`` restores every patched attribute (identity-equal), the
environment and ``sys.meta_path``. The emulated device itself stays registered after deactivation (torch
cannot un-rename its PrivateUse1 backend); only the patches go.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import sys
import threading
from collections import defaultdict
from pathlib import Path

from . import backend as backend_mod
from . import exit_signals, hooks, patching, versions
from .selection import patch_disabled, set_status, validate_ids
from .config import Config
from .context import PatchContext
from .errors import NotNeeded, StrictModeError, TargetMissing
from .registry import Patch, all_patch_sets, describe_exception
from .report import REPORT, format_summary, is_root_process, process_rank, report_path_for_process

log = logging.getLogger("ascend_shim")
BOOTSTRAP_DIR = str(Path(__file__).parent / "bootstrap")


class _State:
    def __init__(self):
        self.active = False
        self.generation = 0
        self.config: Config | None = None
        self.backend = ""  # what the patch sets see: "npu" on hardware and on the emulator's real layer
        self.device_backend = ""  # what brings the device up: "npu" or "sim"
        self.layer = ""  # on "sim": the torch_npu Python over the emulated device, "real" or "builtin"
        self.selected: dict[str, list[Patch]] = {}  # module -> patches to apply on its import
        self.projects: dict[str, versions.Project] = {}  # set id -> its project gate
        self.undos: list[tuple[str, object]] = []  # (patch id, undo) in application order
        self.unswept: list[patching.Change] = []  # changes whose `from x import y` copies are not rebound yet
        self.env_backup: dict[str, str | None] = {}
        self.print_summary = True
        self.bring_up_failed = ""  # why the device did not come up when torch was imported ("" while it is up)


_state = _State()
_lock = threading.RLock()
_atexit_registered = False


def _fail(config: Config, message: str) -> None:
    """A skip: an error under strict mode, otherwise logged (the exit summary lists every skip)."""
    if config.strict:
        raise StrictModeError(message + " (ASCEND_SHIM_STRICT=1 turns this skip into an error)")
    log.info("%s", message)


# -- applying -----------------------------------------------------------------------------------------------
def _apply_patch(patch: Patch, config: Config, backend: str) -> list[patching.Change]:
    """Apply one patch; record applied / skipped / failed / not-needed. Returns the attribute changes."""
    ctx = PatchContext(patch, config, backend)
    main_change = None
    try:
        ok, reason, _ = versions.check_requirements(patch.requires)
        if not ok:
            REPORT.record_patch(patch, "skipped", reason)
            _fail(config, f"patch {patch.id} skipped: {reason}")
            return []
        project = _state.projects.get(patch.set_id)
        if project is not None:
            state, where = versions.check_project(project)
            if state == "absent":
                raise NotNeeded(where)
            if state == "outside":
                raise TargetMissing(where)
        if patch.kind in ("replace", "wrap", "add"):
            found = patching.locate(patch.target)
            if found.missing and (patch.kind != "add" or found.owner is None):
                reason = f"target missing ({found.missing}); upstream may have changed"
                REPORT.record_patch(patch, "skipped", reason)
                _fail(config, f"patch {patch.id} skipped: {reason}")
                return []
            ctx.owner, ctx.attr, ctx.original = found.owner, found.attr, found.original
            value = patch.build(ctx)
            main_change = ctx.replace(ctx.owner, ctx.attr, value, wrapper=patch.kind == "wrap",
                                      allow_missing=patch.kind == "add")
        else:
            undo = patch.build(ctx)
            if callable(undo):
                ctx.on_undo(undo)
    except NotNeeded as exc:
        _run_undos(patch.id, ctx.undos)
        REPORT.record_patch(patch, "not-needed", str(exc))
        return []
    except TargetMissing as exc:
        _run_undos(patch.id, ctx.undos)
        REPORT.record_patch(patch, "skipped", str(exc))
        _fail(config, f"patch {patch.id} skipped: {exc}")
        return []
    except (StrictModeError, KeyboardInterrupt):
        raise
    except BaseException as exc:  # whatever a factory raises, sys.exit() included, is a failed patch
        _run_undos(patch.id, ctx.undos)
        reason = describe_exception(exc)
        REPORT.record_patch(patch, "failed", reason)
        if config.strict:
            raise StrictModeError(f"patch {patch.id} failed while applying: {reason}") from exc
        log.warning("patch %s failed while applying (skipped; the program goes on): %s", patch.id, reason)
        return []
    _state.undos.extend((patch.id, u) for u in ctx.undos)
    REPORT.record_patch(patch, "applied")
    log.debug("applied %s", patch.id)
    return [main_change] if main_change is not None and patch.sweep else []


def _run_undos(patch_id: str, undos) -> None:
    for undo in reversed(list(undos)):
        try:
            undo()
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # keep undoing the rest
            log.warning("undo of %s failed: %s", patch_id, exc)


def _apply_all(patches: list[Patch], config: Config, backend: str, sweep: bool = True) -> None:
    for patch in patches:
        _state.unswept.extend(_apply_patch(patch, config, backend))
    if sweep:
        _sweep()


def _sweep() -> None:
    """One alias sweep for every change applied since the last one (a sweep walks every module)."""
    with _lock:
        changes, _state.unswept = _state.unswept, []
    if not changes:
        return
    patching.sweep_aliases(changes)
    for change in changes:
        if change.aliases:
            REPORT.record_aliases(change.patch_id, change.aliases)


def _on_import(module_name: str, generation: int, module) -> None:
    # read the state under the lock, apply outside it: a factory may import modules other threads import
    with _lock:
        if not _state.active or _state.config is None or _state.generation != generation:
            return
        patches, config, backend = list(_state.selected.get(module_name, [])), _state.config, _state.backend
        failed = _state.bring_up_failed
    if failed:  # the patches map onto a device that is not there: the bring-up error says it, once
        for patch in patches:
            REPORT.record_patch(patch, "skipped", f"backend {backend} did not come up ({failed})")
        return
    _apply_all(patches, config, backend, sweep=False)  # swept once the whole group of hooks has run


def _on_torch_import(generation: int, module) -> None:
    with _lock:
        if not _state.active or _state.generation != generation:
            return
        backend, device_backend, layer = _state.backend, _state.device_backend, _state.layer
    # Bringing the backend up imports (torch_npu, the emulator): never while holding _lock, which a thread that is
    # itself inside an import may be waiting for (a hang the import system cannot detect). Both bring-ups are
    # idempotent and thread-safe on their own.
    try:
        from .devices import bind_torch

        bind_torch()
        backend_mod.bring_up(device_backend, layer)
    except Exception as exc:
        REPORT.note(f"backend {backend} failed to come up: {type(exc).__name__}: {exc}")
        with _lock:
            if _state.generation == generation:
                _state.bring_up_failed = describe_exception(exc)
        raise
    REPORT.note(f"backend {backend} is up")


# -- child processes ----------------------------------------------------------------------------------------
def _activation_env(config: Config, backend: str, layer: str) -> dict[str, str]:
    """The variables that activate a child Python the way this process is: its settings, the device backend
    (``sim`` or ``npu``) and, on the emulated NPU, the layer resolved here."""
    wanted = dict(config.to_env())
    wanted["ASCEND_SHIM"] = "1"
    wanted["ASCEND_SHIM_BACKEND"] = backend
    if layer:
        wanted["ASCEND_SHIM_SIM_LAYER"] = layer
    return wanted


def child_env() -> dict[str, str]:
    """What activates a worker started elsewhere (a Ray node) as this process is activated; ``{}`` if inactive."""
    with _lock:
        if not _state.active or _state.config is None:
            return {}
        return _activation_env(_state.config, _state.device_backend, _state.layer)


def _export_env(config: Config, backend: str, layer: str, root: bool) -> None:
    """Children (torchrun workers, spawn, subprocess pythons) come up activated with the same settings."""
    wanted = _activation_env(config, backend, layer)
    if root and "ASCEND_SHIM_ROOT_PID" not in os.environ:
        wanted["ASCEND_SHIM_ROOT_PID"] = str(os.getpid())
    wanted["PYTHONPATH"] = pythonpath_with_bootstrap(os.environ.get("PYTHONPATH", ""))
    for key, value in wanted.items():
        if os.environ.get(key) != value:
            _state.env_backup.setdefault(key, os.environ.get(key))
            os.environ[key] = value


def pythonpath_with_bootstrap(pythonpath: str) -> str:
    """``pythonpath`` with the bootstrap directory in front (as it is, when it holds it already): what makes every
    Python started with it run the bootstrap ``sitecustomize``."""
    paths = [p for p in pythonpath.split(os.pathsep) if p]
    return pythonpath if BOOTSTRAP_DIR in paths else os.pathsep.join([BOOTSTRAP_DIR] + paths)


def _restore_env() -> None:
    for key, value in _state.env_backup.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    _state.env_backup.clear()


# -- public API ---------------------------------------------------------------------------------------------
def activate(backend: str | None = None, *, inherit: bool = True, root: bool = True, **settings: object) -> None:
    """Activate the shim (idempotent). The keywords are the settings (every ``ASCEND_SHIM_*`` variable but the
    switch, named as the fields of :class:`~ascend_shim.config.Config`: ``sim_layer="builtin"``, ``log_level``,
    ``disable`` ...) and override the environment's; ``None`` keeps it.

    ``backend``: ``"npu"``, ``"sim"`` or ``"auto"``. ``inherit``: export the settings so that child Python
    processes come up activated too. ``root=False`` (used by sitecustomize files): this process is not the
    one the user started on purpose; it prints an exit summary only if it patched something.
    """
    global _atexit_registered
    for name, value in (("inherit", inherit), ("root", root)):
        if not isinstance(value, bool):
            raise TypeError(f"activate(): {name} must be True or False, not {type(value).__name__}")
    settings["backend"] = backend
    with _lock:
        if _state.active:
            _warn_if_other_settings(settings)
            return
        config = _config(None, settings)
        _configure_logging(config.log_level)
        device_backend = backend_mod.resolve(config.backend)
        layer, prepared = backend_mod.choose_layer(device_backend, config.sim_layer)
        chosen = backend_mod.patch_backend(device_backend, layer)
        sets, ep_errors = all_patch_sets(config.patch_modules)
        validate_ids(config, sets)

        REPORT.reset(backend=chosen, sim_layer=layer)
        if prepared is not None and prepared[1] == "stale":  # auto passed over a layer another version prepared
            REPORT.note(f"{prepared[2]}: the builtin layer ran instead; `ascend-shim fetch-torch-npu` prepares it "
                        "again")
        for name, error in ep_errors:
            REPORT.note(f"entry point {name} could not be loaded: {error}")
            if config.strict:
                _fail(config, f"patch-set entry point {name} could not be loaded: {error}")
            log.warning("patch-set entry point %s could not be loaded (skipped; the program goes on): %s", name,
                        error)
        _state.config, _state.backend = config, chosen
        _state.device_backend, _state.layer = device_backend, layer
        _state.generation += 1
        _state.selected = defaultdict(list)
        _state.projects = {s.id: s.project for s in sets if s.project is not None}
        _state.undos = []
        _state.bring_up_failed = ""
        _state.active = True
        generation = _state.generation
        try:
            if inherit:
                _export_env(config, device_backend, layer, root)
            # before torch's hook: torch may be imported already
            backend_mod.prepare(device_backend, layer, prepared[0] if layer == "real" and prepared else None)
            hooks.on_batch_end(_sweep)
            hooks.when_imported("torch", lambda m: _on_torch_import(generation, m))
            at_once = []
            for s in sets:
                status, reason, found = set_status(s, config, chosen)
                REPORT.record_set(s.id, status, reason, versions=found, source=s.source)
                if status == "skipped":
                    _fail(config, f"patch set {s.id} skipped: {reason}")
                if status != "active":
                    for p in s.patches:
                        REPORT.record_patch(p, "disabled" if status == "disabled" else "inactive", reason)
                    continue
                for p in s.patches:
                    why_not = patch_disabled(p, s, config)
                    if why_not:
                        REPORT.record_patch(p, "disabled", why_not)
                    elif p.module is None:
                        at_once.append(p)
                    else:
                        REPORT.record_patch(p, "pending", f"applies when {p.module} is imported")
                        _state.selected[p.module].append(p)
            with hooks.one_group():  # patches for modules already imported: one alias sweep for all of them
                _apply_all(at_once, config, chosen, sweep=False)
                for module_name in sorted(_state.selected, key=lambda m: m.count(".")):
                    hooks.when_imported(module_name, functools.partial(_on_import, module_name, generation))
            _sweep()
        except BaseException:
            _deactivate_locked()
            raise
        if not _atexit_registered:
            atexit.register(_at_exit)
            _atexit_registered = True
        exit_signals.install(_at_exit)  # a process ended by SIGTERM / SIGINT runs no atexit
        log.info("ascend_shim active (backend %s, %d patch sets)", chosen, len(sets))


def _config(environ: dict[str, str] | None, settings: dict[str, object]) -> Config:
    """The settings in force: the environment's (``os.environ`` when None), then the keywords of ``activate()``,
    each parsed by its row (a keyword that is no setting, or a value of the wrong type: ``TypeError``)."""
    try:
        return Config.from_env(environ, **settings)
    except TypeError as exc:
        raise TypeError(f"activate(): {exc}") from None


def _warn_if_other_settings(settings: dict[str, object]) -> None:
    """A second ``activate()`` keeps the settings in force (patches are applied once); asking for others then is
    a mistake worth a warning, as gevent's ``monkey`` warns on conflicting re-patching."""
    asked = [name for name, value in settings.items() if value is not None]
    wanted, active = _config({}, settings), _state.config
    differ = [f"{name}={getattr(wanted, name)!r} (in force: {getattr(active, name)!r})" for name in asked
              if getattr(wanted, name) != getattr(active, name)
              and not (name == "backend" and getattr(wanted, name) == _state.device_backend)]
    if differ:
        import warnings

        warnings.warn(f"ascend_shim is already active; activate() left its settings as they are, not "
                      f"{', '.join(differ)}: call ascend_shim.deactivate() first to change them",
                      RuntimeWarning, stacklevel=3)


def deactivate() -> None:
    """Undo every patch (identity-equal originals), restore the environment, drop pending hooks."""
    with _lock:
        if _state.active:
            _deactivate_locked()


def _deactivate_locked() -> None:
    _state.active = False
    _state.generation += 1
    hooks.clear()
    _run_undos("deactivate", [u for _, u in _state.undos])  # each change's one undo, the newest first
    _state.undos = []
    backend_mod.unprepare()  # after the patches: the emulator's own changes lie beneath theirs
    exit_signals.uninstall()
    _restore_env()
    REPORT.record_reverted()


def settle_start_up() -> None:
    """Called once the shim is up and before the program's first line, in the processes the shim starts
    (``run``, the bootstrap): every object alive now (the interpreter's start-up, the shim's modules and patch
    declarations, all kept for the life of the process) moves to the collector's permanent generation, so
    that the program's full collections do not walk them -- without this, the shim's objects add one full
    collection to ``import torch``. ``ASCEND_SHIM_GC_FREEZE=0`` keeps the collector untouched."""
    config = _state.config
    if _state.active and config is not None and config.gc_freeze:
        import gc

        gc.freeze()


def is_active() -> bool:
    return _state.active


def current_config() -> Config | None:
    return _state.config if _state.active else None


def current_backend() -> str:
    """The backend the patches serve: ``npu`` (hardware, or the emulator's real layer) or ``sim``."""
    return _state.backend if _state.active else ""


def set_summary_printing(enabled: bool) -> None:
    """The CLI turns the exit summary off where a process has nothing to say (nothing ran)."""
    _state.print_summary = enabled


#: the pid of a launcher process (torchrun's, accelerate's parent) that leaves the summary to its workers
LAUNCHER_PID_VAR = "ASCEND_SHIM_LAUNCHER_PID"


def leave_summary_to_workers() -> None:
    """This process only launches workers: rank 0 prints the summary, or the one worker of a launcher that sets
    no rank (``accelerate launch --num_processes 1``)."""
    _state.print_summary = False
    os.environ[LAUNCHER_PID_VAR] = str(os.getpid())


def _talks(rank: int | None) -> bool:
    """Does this process print the summary? Rank 0; without a rank, the run's first process, a process started
    without the CLI, or a launcher's direct worker."""
    if rank is not None:
        return rank == 0
    return is_root_process() or "ASCEND_SHIM_ROOT_PID" not in os.environ or \
        os.environ.get(LAUNCHER_PID_VAR) == str(os.getppid())


class _ShimLogHandler(logging.StreamHandler):
    """The shim's stderr handler, marked so that activating again does not add a second one."""

    _ascend_shim = True


def _configure_logging(level: str) -> None:
    if not any(getattr(h, "_ascend_shim", False) for h in log.handlers):
        handler = _ShimLogHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("ascend_shim: %(levelname)s: %(message)s"))
        log.addHandler(handler)
        log.propagate = False
    log.setLevel(logging.CRITICAL + 1 if level == "off" else getattr(logging, level.upper()))


def _at_exit(summary: bool = True) -> None:
    """Write the JSON report; print the summary too when ``summary`` (not when a signal handler of the program
    is about to run next: the process may go on, and the summary comes at its exit)."""
    config = _state.config
    if config is None:
        return
    json_path = None
    try:
        if config.report:
            json_path = str(REPORT.write_json(config.report))
    except OSError as exc:
        log.warning("could not write the report to %s: %s", report_path_for_process(config.report), exc)
    talk = _talks(process_rank())
    if not is_root_process():
        # a process activated by a sitecustomize (e.g. pip in an ASCEND_SHIM=1 environment) that never
        # imported anything we patch has nothing to say
        talk = talk and any(not target.startswith(("env:", "process:")) for target in REPORT.applied_targets())
    if summary and talk and _state.print_summary and config.log_level != "off":
        with contextlib.suppress(OSError, ValueError):  # stderr closed at exit
            print(format_summary(REPORT.to_dict(), json_path=json_path), file=sys.stderr)
