"""Command line: ``python -m ascend_shim`` / ``ascend-shim``.

``run``     run a script, a module (``-m``) or a launcher (torchrun, accelerate, deepspeed) under the shim; every
            child Python process comes up activated through the bootstrap ``sitecustomize``.
``list``    every patch set and patch with its metadata and status in this environment.
``report``  pretty-print and merge per-process JSON reports.
``env``     the shell ``export`` lines that activate a process started by hand (a Ray node's ``ray start``).
``doctor``  environment checks; ``scan``: static CUDA-ism finder (see their own modules).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import shlex
import shutil
import sys
import zipfile
from typing import Any

from .config import ENV_VARS, Config, add_options, options_given, value_options
from .errors import ConfigError, ShimError

#: modules that only launch workers: their own process prints no summary (rank 0 of the workers does)
LAUNCHERS = ("torch.distributed.run", "torch.distributed.launch", "accelerate", "accelerate.commands.launch",
             "accelerate.commands.accelerate_cli", "deepspeed", "deepspeed.launcher.runner", "torchrun")


def _add_toggle_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--simulate", action="store_true", help="use the emulated NPU (same as --backend sim)")
    add_options(p)  # every setting that has an option


def settings_from_args(ns) -> dict[str, Any]:
    """The settings the options of `run` / `list` / `env` give, by field (the keywords of ``activate()``)."""
    settings = options_given(ns)
    if ns.simulate:
        if settings.get("backend", "sim") != "sim":
            raise ConfigError(f"--simulate contradicts --backend {settings['backend']}")
        settings["backend"] = "sim"
    return settings


def config_from_args(ns) -> Config:
    """The configuration the options give (over the environment)."""
    return Config.from_env(**settings_from_args(ns))


def build_parser() -> argparse.ArgumentParser:
    env_help = "\n".join(f"  {v.name:<26} {v.values}" for v in ENV_VARS)
    parser = argparse.ArgumentParser(
        prog="ascend-shim", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run unmodified CUDA PyTorch code on Ascend NPUs (or the simulated NPU).",
        epilog="environment toggles:\n" + env_help)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a script / -m module / launcher under the shim",
                         usage="ascend-shim run [options] (script.py | -m module | - | program) [args ...]")
    _add_toggle_options(run)
    run.add_argument("-m", dest="module", help="run a module as __main__ (like python -m); the rest is its argv")
    run.add_argument("target", nargs="*", help="script.py, - (the script on standard input) or program, then its "
                                               "arguments")

    lst = sub.add_parser("list", help="patch sets and patches with metadata and status here")
    _add_toggle_options(lst)
    lst.add_argument("--format", choices=("text", "json", "markdown", "env-markdown"), default="text",
                     help="markdown: the coverage table of docs/coverage.md; env-markdown: the settings table "
                          "of docs/configuration.md")
    lst.add_argument("--removable", action="store_true",
                     help="only the patches whose removal condition holds here (an upstream version the installed "
                          "packages satisfy)")

    env = sub.add_parser(
        "env", help="print the shell lines that activate a process started by hand (e.g. `ray start`)",
        description="Print the `export` lines that make a Python process started by hand (a Ray node started with "
                    "`ray start`, a server) come up with the shim active, with the settings given here: "
                    'eval "$(ascend-shim env --simulate)" in the shell that starts it.')
    _add_toggle_options(env)

    rep = sub.add_parser("report", help="pretty-print and merge JSON reports")
    rep.add_argument("files", nargs="+")
    rep.add_argument("--json", action="store_true", help="print the merged report as JSON")
    rep.add_argument("--limit", type=int, default=12, help="call sites shown per category")

    sub.add_parser("doctor", help="environment checks before booking NPU time (see `doctor --help`)",
                   add_help=False)
    sub.add_parser("scan", help="static finder of CUDA-specific code (see `scan --help`)", add_help=False)
    sub.add_parser("fetch-torch-npu", help="prepare Huawei's torch_npu Python to run over the emulated NPU (see "
                                           "`fetch-torch-npu --help`)", add_help=False)
    return parser


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own_parsers = {"doctor": "ascend_shim.doctor", "scan": "ascend_shim.scan",
                   "fetch-torch-npu": "ascend_shim.sim.real_layer.prepare"}
    if argv and argv[0] in own_parsers:  # their own parsers take every option
        module = importlib.import_module(own_parsers[argv[0]])
        try:
            return module.main(argv[1:])
        except ConfigError as exc:
            print(f"ascend-shim: error: {exc}", file=sys.stderr)
            return 2
    parser = build_parser()
    target: list[str] = []
    if argv and argv[0] == "run":
        argv, target = _split_run_argv(argv)
    ns = parser.parse_args(argv)
    if ns.command == "run":
        ns.target = target
    try:
        if ns.command == "run":
            return _cmd_run(ns, parser)  # errors of the user's program are theirs: a traceback
        try:
            commands = {"list": _cmd_list, "env": _cmd_env, "report": _cmd_report}
            return commands[ns.command](ns)
        except ConfigError:
            raise
        except ShimError as exc:
            print(f"ascend-shim: error: {exc}", file=sys.stderr)
            return 1
    except ConfigError as exc:
        print(f"ascend-shim: error: {exc}", file=sys.stderr)
        return 2


# -- run ----------------------------------------------------------------------------------------------------
_VALUE_OPTIONS = value_options()


def _split_run_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split ``run [shim options] (-m mod | target) [its args]``: nothing after the target is ours."""
    ours, i = [argv[0]], 1
    while i < len(argv):
        tok = argv[i]
        if tok == "-m":
            ours += argv[i:i + 2]
            return ours, argv[i + 2:]
        if tok == "--":
            return ours, argv[i + 1:]
        if not tok.startswith("-") or tok == "-":
            return ours, argv[i:]
        ours.append(tok)
        if tok in _VALUE_OPTIONS:
            ours.append(argv[i + 1] if i + 1 < len(argv) else "")
            i += 1
        i += 1
    return ours, []


def _cmd_run(ns, parser) -> int:
    """Run the program as ``python`` would (see :mod:`ascend_shim.entry`), under the shim."""
    if ns.module is None and not ns.target:
        parser.error("run: give a script, -m module, or a program to run")
    settings = settings_from_args(ns)
    os.environ["ASCEND_SHIM_ROOT_PID"] = str(os.getpid())  # this process starts the run: its children know it

    from . import activation, entry

    try:
        activation.activate(**settings)  # which exports the settings to every child
    except ConfigError:
        raise
    except ShimError as exc:  # the shim itself could not start: one line, before any user code ran
        print(f"ascend-shim: error: {exc}", file=sys.stderr)
        return 1
    activation.settle_start_up()
    if ns.module:
        if ns.module.split(".")[0] in LAUNCHERS or ns.module in LAUNCHERS:
            activation.leave_summary_to_workers()
        return _run_program(lambda: entry.run_module(ns.module, [ns.module] + ns.target))
    target, args = ns.target[0], ns.target[1:]
    if target == "-":  # the program on standard input, as `python -`
        return _run_program(lambda: entry.run_stdin([target] + args, own_path0=entry.cli_owns_path0()))
    if os.path.isdir(target) or (os.path.isfile(target) and zipfile.is_zipfile(target)):
        return _run_program(lambda: entry.run_directory(target, [target] + args))
    if os.path.isfile(target):
        path = target
    else:
        path = shutil.which(target)
        if path is None:
            raise ConfigError(f"run: {target!r} is neither a file nor a program on PATH")
        if os.path.basename(path) in ("torchrun", "accelerate", "deepspeed"):
            activation.leave_summary_to_workers()
        if not _is_python_script(path):
            # a native program: its Python children inherit the activation through the environment
            os.execvpe(path, [path] + args, os.environ)
    return _run_program(lambda: entry.run_file(path, [path] + args, own_path0=entry.cli_owns_path0()))


def _is_python_script(path: str) -> bool:
    if path.endswith(".py"):
        return True
    try:
        with open(path, "rb") as fh:
            first = fh.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def _run_program(fn) -> int:
    """Exit status as ``python`` gives it; an uncaught exception goes up to ``sys.excepthook`` (which shows the
    user's traceback from their first frame on)."""
    from .entry import ProgramNotFound

    try:
        fn()
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except SyntaxError as exc:  # shown by sys.excepthook as Python shows it (no frame of the shim), status 1
        from .entry import reached_main

        if not reached_main(exc):  # the main program does not compile: nothing of it ran, nothing to sum up
            from .activation import set_summary_printing

            set_summary_printing(False)
        raise
    except ProgramNotFound as exc:  # python: "<python>: No module named x", status 1
        from .activation import set_summary_printing

        set_summary_printing(False)  # nothing ran: the one line is all there is to say
        print(f"ascend-shim run: {exc}", file=sys.stderr)
        return 1
    return 0


# -- list ---------------------------------------------------------------------------------------------------
def _cmd_list(ns) -> int:
    from .listing import render

    config = config_from_args(ns)
    print(render(config, ns.format, removable=ns.removable))
    return 0


# -- env ----------------------------------------------------------------------------------------------------
def _cmd_env(ns) -> int:
    """``export`` lines for a POSIX shell: the switch, the settings given (as the shim reads them: a report path
    made absolute), and the bootstrap in front of the current PYTHONPATH. The environment's other settings are
    checked too: a process started with them would fail to activate."""
    from .activation import pythonpath_with_bootstrap

    settings = settings_from_args(ns)
    config = Config.from_env(**settings)
    lines = {"ASCEND_SHIM": "1"}
    for setting in ENV_VARS:
        if setting.field in settings:
            lines[setting.name] = setting.format(getattr(config, setting.field))
    lines["PYTHONPATH"] = pythonpath_with_bootstrap(os.environ.get("PYTHONPATH", ""))
    for name, value in lines.items():
        print(f"export {name}={shlex.quote(value)}")
    return 0


# -- report -------------------------------------------------------------------------------------------------
def _cmd_report(ns) -> int:
    """Every file that is not a report is one line (its name escaped: it may come from anywhere), status 2."""
    from .report import ReportFormatError, format_summary, load, merge
    from .terminal import printable

    reports, bad = [], 0
    for path in ns.files:
        try:
            reports.append(load(path))
        except ReportFormatError as exc:
            print(f"ascend-shim: error: report: {printable(exc)}", file=sys.stderr)
            bad += 1
    if bad:
        return 2
    merged = reports[0] if len(reports) == 1 else merge(reports)
    if ns.json:
        print(json.dumps(merged, indent=1))
    else:
        print(format_summary(merged, limit=ns.limit))
    return 0

