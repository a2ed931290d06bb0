"""Load-time application of the rewrite to CUDA code: the user's modules, the main script, and every
library that is not NPU-native.

``install(roots, packages)`` puts a meta-path finder in front of Python's own (its slot:
:mod:`ascend_shim.import_system`). For each import it asks the finders behind it for the spec (so editable
installs and other custom finders keep working) and, when the module is CUDA code, swaps its
``SourceFileLoader`` for :class:`RewritingLoader` (a subclass: resources, ``get_source``, ``runpy`` and
``pkgutil`` behave the same). The rule is the one of
:mod:`ascend_shim.callers` (who is told CUDA is available sees CUDA devices as CUDA). A module is rewritten when

* its name is not NPU-native (torch, torch_npu, the packages the patch sets declare, ``ASCEND_SHIM_NATIVE_PACKAGES``;
  ``ASCEND_SHIM_USER_PACKAGES`` takes a package back) and not the shim's, and its source file (symlinks
  resolved) is not the standard library's, the shim's or torch's; and
* it is a **library**: its file lies in a site directory or any ``site-packages`` / ``dist-packages``
  directory (Lightning, megatron-core, torchmetrics ...); or
* it is the **user's**: outside the environment -- with no ``roots`` (the default) not under the interpreter's
  prefixes (``sys.prefix``, ``base_prefix``, ``exec_prefix``), so the run target's tree, sibling packages on
  ``sys.path`` and editable installs of the user's own project all count; with ``roots``, under one of them
  (narrower, or wider: a root may lie inside a prefix); or
* its name is one of ``packages`` or inside one (``pkg`` and ``pkg.sub.mod``), wherever the package is
  installed -- but standard library, ``ascend_shim``, ``torch`` and ``torch_npu`` names are refused with
  :class:`ConfigError`.

The report carries one note naming the rule for the user's code and the import roots user modules were
actually loaded from, and one naming the libraries whose comparisons were rewritten (with the NPU-native ones).

Only plain ``.py`` sources loaded by the stock ``SourceFileLoader`` are rewritten (no zip imports, no
``.pyc``-only modules, no custom loaders). Modules whose bytecode (or source) mentions neither ``cuda`` nor
``nccl`` load through the normal path untouched. Rewritten code is never written to ``__pycache__`` (a later
run without the shim can never pick it up); it is kept in the shim's own cache (:mod:`.cache`), so a library
is rewritten once, not on every start.

``install`` also replaces ``runpy.run_path`` (through :func:`ascend_shim.patching.replace`, so ``is_patched`` knows
it; undone by ``uninstall``) so that a script run that way follows the rule of a module imported from the same
place (:func:`script_is_cuda_code`) -- notably ``multiprocessing``'s spawn/forkserver children re-running the main
script as ``__mp_main__``, rewritten like the parent's ``__main__``, and a recipe an installed launcher runs by
path.
"""
from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import io
import logging
import os
import runpy
import site
import sys
import sysconfig
import threading
from types import CodeType, ModuleType

from .. import callers, import_system, patching
from ..errors import ConfigError
from ..report import REPORT
from . import cache, runtime
from .transform import Site, rewrite_source

log = logging.getLogger("ascend_shim")

_ORIGINAL_RUN_PATH = runpy.run_path
_BYTECODE_SUFFIXES = tuple(importlib.machinery.BYTECODE_SUFFIXES)
_REFUSED_TOP = {"ascend_shim", "torch", "torch_npu"}
_lock = threading.RLock()
_run_path_change: patching.Change | None = None  # runpy.run_path replaced while the rewrite is installed


def _real(path: str) -> str:
    return os.path.realpath(os.path.abspath(path))


def _dir_sets() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(standard library dirs, site dirs, ascend_shim + torch package dirs, interpreter prefixes), symlinks
    resolved."""
    paths = sysconfig.get_paths()
    stdlib = {paths.get("stdlib"), paths.get("platstdlib")}
    sites = {paths.get("purelib"), paths.get("platlib")}
    with contextlib.suppress(AttributeError):  # some virtualenv flavours
        sites.update(site.getsitepackages())
    with contextlib.suppress(AttributeError):
        sites.add(site.getusersitepackages())
    ours = {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}  # ascend_shim
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.submodule_search_locations:
        ours.update(spec.submodule_search_locations)
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    norm = lambda ds: tuple(sorted({_real(d) for d in ds if d}))  # noqa: E731
    return norm(stdlib), norm(sites), norm(ours), norm(prefixes)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def report_sites(sites: list[Site]) -> int:
    """Record every rewritten site in the report (once per site); return how many were rewritten."""
    n = 0
    for s in sites:
        if s.rewritten:
            REPORT.rewritten(s.filename, s.line, s.snippet, s.detail)
            n += 1
        else:
            log.debug("ascend_shim rewrite: %s:%d %s %s", s.filename, s.line, s.snippet, s.reason)
    runtime.register_sites(sites)
    return n


def rewritten_code(source: bytes, path: str):
    """``(code, sites)`` for the file ``path`` holding ``source``; ``code`` is None when nothing was rewritten.
    Each site is reported (once). From the cache when the same source was rewritten before."""
    hit = cache.load(path, source)
    code: CodeType | None
    if hit is None:
        code, sites = rewrite_source(source, path)
        if not any(s.rewritten for s in sites):
            code = None
        cache.store(path, source, code, sites)
    else:
        code, sites = hit
    report_sites(sites)
    return code, sites


_IMPORTLIB_FILE = importlib.machinery.SourceFileLoader.get_code.__code__.co_filename


def _frames_hidden_like_importlib(func):
    """Give ``func``'s frames the file name of importlib's own (``<frozen importlib._bootstrap_external>``).

    When an import fails, the interpreter cuts from the traceback every unbroken run of importlib frames that
    holds a call of ``_call_with_frames_removed`` (the one that compiles or executes the module's code), or
    every run when the error is an ``ImportError`` (``remove_importlib_frames``, Python/import.c). A frame of
    ours between ``exec_module`` and the compile would break that run: a SyntaxError in the user's module
    would show the import machinery's frames, which plain Python hides. Only a thin method that calls
    importlib's own code carries the name; the rewrite's modules keep their real files."""
    func.__code__ = func.__code__.replace(co_filename=_IMPORTLIB_FILE)
    return func


class RewritingLoader(importlib.machinery.SourceFileLoader):
    """A ``SourceFileLoader`` whose code has the CUDA comparisons rewritten (and is never put in
    ``__pycache__``). ``library``: the top-level package when the module is an installed library's.

    The plain code is loaded first, as Python loads it (from ``__pycache__`` when it is current). Every site
    the rewrite changes holds a string constant naming cuda or nccl, which the marshalled bytecode holds as
    such: when the bytecode read does not, the module is left as loaded and its source is never read (most
    modules of a library; the answer is kept between runs, :func:`.cache.bytecode_clean`)."""

    library: str | None = None
    _bytecode_clean = False  # the bytecode just read holds no "cuda"/"nccl"

    def get_data(self, path):
        data = super().get_data(path)
        if path.endswith(_BYTECODE_SUFFIXES):
            self._bytecode_clean = cache.bytecode_clean(self.name.partition(".")[0], path, data)
        else:  # the source: the bytecode read before it (if any) was stale, the code comes from here
            self._bytecode_clean = False
        return data

    @_frames_hidden_like_importlib
    def get_code(self, fullname):
        self._bytecode_clean = False
        code = super().get_code(fullname)  # a SyntaxError in the user's file is raised here, as without the shim
        if self._bytecode_clean:
            return code
        return self._rewritten(fullname, code)

    def _rewritten(self, fullname, code):
        path = self.get_filename(fullname)
        data = self.get_data(path)
        if not cache.mentions_cuda(data):
            return code
        rewritten, sites = rewritten_code(data, path)
        if rewritten is None:
            return code
        if self.library is not None:
            _library_rewritten(self.library, sum(s.rewritten for s in sites))
        return rewritten


#: where a module's file lies, for the rule: the user's tree, an installed library, or neither
USER, LIBRARY, NEITHER = "user", "library", ""


class _Config:
    def __init__(self, roots, packages):
        self.roots = tuple(sorted({_real(r) for r in roots}))
        self.packages = tuple(packages)
        self.stdlib_dirs, self.site_dirs, self.own_dirs, self.prefixes = _dir_sets()
        self._dir_cache: dict[str, str] = {}
        self._below_cache: dict[str, bool] = {}  # directory -> a root lies below it
        self.seen_roots: dict[str, None] = {}  # import roots user modules came from (for the report)
        self.libraries: dict[str, list[int]] = {}  # library -> [modules, sites] rewritten (for the report)
        self._installed_cache: dict[str, bool] = {}

    def named_package(self, fullname: str) -> bool:
        return any(fullname == p or fullname.startswith(p + ".") for p in self.packages)

    def _in(self, real: str, dirs) -> bool:
        return any(_under(real, d) for d in dirs)

    def _is_library(self, real: str) -> bool:
        parts = real.split(os.sep)
        return self._in(real, self.site_dirs) or "site-packages" in parts or "dist-packages" in parts

    def dir_kind(self, directory: str) -> str:
        """:data:`USER`, :data:`LIBRARY` or :data:`NEITHER` (standard library, the shim, torch, files of the
        interpreter's prefixes outside its site directories, and, with roots, files outside them)."""
        kind = self._dir_cache.get(directory)
        if kind is None:
            real = _real(directory)
            if self._in(real, self.own_dirs):
                kind = NEITHER
            elif self._is_library(real):
                kind = LIBRARY
            elif self._in(real, self.stdlib_dirs):
                kind = NEITHER
            elif self.roots:
                kind = USER if self._in(real, self.roots) else NEITHER
            else:
                kind = NEITHER if self._in(real, self.prefixes) else USER
            self._dir_cache[directory] = kind
        return kind

    def dir_is_users(self, directory: str) -> bool:
        """Is ``directory`` the user's own (not an installed library's)?"""
        return self.dir_kind(directory) == USER

    def kind(self, fullname: str | None, origin: str | None) -> str:
        """What the module ``fullname`` loaded from ``origin`` is for the rule (:data:`NEITHER`: left alone)."""
        if not origin or not origin.endswith(".py"):
            return NEITHER
        return self.file_kind(fullname, origin)

    def file_kind(self, fullname: str | None, origin: str) -> str:
        """:meth:`kind` for a source file whatever its suffix (a script run by path need not end in .py)."""
        kind = self.dir_kind(os.path.dirname(origin))
        if fullname:
            if fullname.partition(".")[0] in _REFUSED_TOP or callers.is_native_code(fullname, origin):
                return NEITHER
            if not kind and self.named_package(fullname):
                real = _real(origin)
                in_stdlib = self._in(real, self.stdlib_dirs) and not self._is_library(real)
                return NEITHER if in_stdlib or self._in(real, self.own_dirs) else USER
        return kind

    def wants(self, fullname: str | None, origin: str | None) -> bool:
        """Is the module ``fullname`` loaded from ``origin`` CUDA code to rewrite?"""
        return bool(self.kind(fullname, origin))

    def may_hold_users(self, fullname: str, path) -> bool:
        """Can the submodule ``fullname``, searched for in its package's ``path``, be rewritten? Not when every
        directory of the package is left alone (no root lies below one) and the name is not a user package:
        then its files are not either, and the finder need not look for them."""
        if self.named_package(fullname):
            return True
        for directory in path:
            if not isinstance(directory, str) or self.dir_kind(directory):
                return True
            if self.roots and self._root_below(directory):
                return True
        return False

    def _root_below(self, directory: str) -> bool:
        hit = self._below_cache.get(directory)
        if hit is None:
            real = _real(directory)
            hit = self._below_cache[directory] = any(_under(root, real) for root in self.roots)
        return hit

    def describe(self) -> str:
        """The report's note on the user's code: the rule, and the roots user modules were loaded from so far."""
        if self.roots:
            rule = f"{USER_CODE_NOTE}files under " + ", ".join(self.roots)
        else:
            rule = (f"{USER_CODE_NOTE}every file outside the environment (" + ", ".join(self.prefixes)
                    + ", site-packages, ascend_shim, torch)")
        if self.packages:
            rule += "; packages " + ", ".join(self.packages)
        seen = list(self.seen_roots)
        return rule + ("; loaded from " + ", ".join(seen) if seen else "")

    def describe_libraries(self) -> str:
        """The report's note on installed libraries: which were treated as CUDA code, which as NPU-native."""
        treated = ", ".join(f"{name} ({sites} sites in {modules} modules)"
                            for name, (modules, sites) in sorted(self.libraries.items()))
        native = ", ".join(n for n in callers.native_packages() if self._installed(n))
        return (f"{LIBRARIES_NOTE}: {treated or 'none so far'}; NPU-native (real device, not rewritten): {native}"
                " (ASCEND_SHIM_USER_PACKAGES / ASCEND_SHIM_NATIVE_PACKAGES override)")

    def _installed(self, name: str) -> bool:
        hit = self._installed_cache.get(name)
        if hit is None:
            try:
                hit = name in sys.modules or importlib.util.find_spec(name) is not None
            except (ImportError, ValueError):
                hit = False
            self._installed_cache[name] = hit
        return hit

    def saw(self, origin: str, fullname: str | None) -> None:
        """Remember the import root of a user module (its directory minus the package path)."""
        root = os.path.dirname(os.path.abspath(origin))
        depth = (fullname or "").count(".") + (os.path.basename(origin) == "__init__.py")
        for _ in range(depth):
            root = os.path.dirname(root)
        if root not in self.seen_roots:
            self.seen_roots[root] = None
            REPORT.set_note(USER_CODE_NOTE, self.describe())


#: how the report's notes on the user's code and on libraries begin
USER_CODE_NOTE = "user code: "
LIBRARIES_NOTE = "libraries treated as CUDA code (not NPU-native: told CUDA is available, comparisons rewritten)"


def _library_rewritten(name: str, sites: int) -> None:
    f = _finder
    if f is None:
        return
    config = f.config
    with _lock:
        counts = config.libraries.setdefault(name, [0, 0])
        counts[0] += 1
        counts[1] += sites
        text = config.describe_libraries()
    REPORT.set_note(LIBRARIES_NOTE, text)


class RewriteFinder(importlib.abc.MetaPathFinder):
    """Asks the finders behind it; hands user modules a :class:`RewritingLoader`."""

    def __init__(self, config: _Config):
        self.config = config

    def find_spec(self, fullname, path=None, target=None):
        # no shortcut on standard-library *names*: a user's test.py / profile.py / code.py shadows them; nor on a
        # native library's top-level name (a user's transformers.py is the user's): its submodules, where the
        # package is not in the user's tree
        if fullname.partition(".")[0] in _REFUSED_TOP:
            return None
        if path is not None and callers.is_native_module(fullname) and \
                not any(isinstance(d, str) and self.config.dir_is_users(d) for d in path):
            return None
        if path is not None and not self.config.may_hold_users(fullname, path):
            return None  # a submodule of a package outside the user's code: the other finders alone
        spec = import_system.spec_from_others(self, fullname, path, target)
        if spec is not None:
            self._maybe_wrap(fullname, spec)
        return spec

    def _maybe_wrap(self, fullname, spec) -> None:
        """Swap the stock loader of CUDA code for :class:`RewritingLoader`. The post-import finder stands in
        front of this one (their slots) and wraps the result: a loader found here is never its wrapper."""
        loader = spec.loader
        if type(loader) is not importlib.machinery.SourceFileLoader:
            return
        kind = self.config.kind(fullname, spec.origin)
        if not kind:
            return
        new = RewritingLoader(loader.name, loader.path)
        if kind == LIBRARY:
            new.library = fullname.partition(".")[0]
        else:
            self.config.saw(spec.origin, fullname)
        spec.loader = new


_finder: RewriteFinder | None = None
_default_config: _Config | None = None  # the rule with default settings, while the rewrite is not installed


def dir_is_users(directory: str) -> bool:
    """Is ``directory`` the user's own code (not an installed library's, the interpreter's or the shim's)? The
    rule of the installed rewrite's settings, else of the default ones."""
    global _default_config
    finder = _finder
    if finder is not None:
        return finder.config.dir_is_users(directory)
    if _default_config is None:
        _default_config = _Config((), ())
    return _default_config.dir_is_users(directory)


_last_config: _Config | None = None  # the rule installed last (a new one keeps its count of rewritten libraries)


def install(roots, packages=()) -> None:
    """Rewrite the CUDA comparisons of CUDA code (the user's modules, libraries that are not NPU-native)
    imported from now on.

    ``roots``: directories whose tree is the user's code (env ``ASCEND_SHIM_USER_ROOTS``); empty: every file
    outside the environment. ``packages``: extra top-level or dotted package names whose modules are the
    user's wherever installed (env ``ASCEND_SHIM_USER_PACKAGES``). Calling again replaces both lists.
    Modules imported before ``install`` stay as they are.
    """
    global _finder, _last_config, _run_path_change
    if isinstance(roots, (str, os.PathLike)):
        roots = [roots]
    if isinstance(packages, str):
        packages = [packages]
    packages = [p.strip() for p in packages if p and p.strip()]
    stdlib = set(sys.stdlib_module_names)
    for p in packages:
        if not all(part.isidentifier() for part in p.split(".")):
            raise ConfigError(f"ASCEND_SHIM_USER_PACKAGES: {p!r} is not a package name")
        top = p.partition(".")[0]
        if top in _REFUSED_TOP or top in stdlib:
            raise ConfigError(f"ASCEND_SHIM_USER_PACKAGES: {p!r} is not user code (standard library, torch, "
                              "torch_npu and ascend_shim are never rewritten)")
    config = _Config([os.fspath(r) for r in roots], packages)
    with _lock:
        if _last_config is not None:
            config.libraries = _last_config.libraries  # rewritten in this process already: still reported
        if _finder is None:
            _finder = RewriteFinder(config)
        else:
            _finder.config = config
        import_system.install("rewrite", _finder)
        if _run_path_change is None:
            _run_path_change = patching.replace("ascend_shim.rewrite", runpy, "run_path", _run_path_hook)
        REPORT.set_note(USER_CODE_NOTE, config.describe())
        _last_config = config
    _note_running_main(config)


#: how the report's note on a main script that activated the shim itself begins
SELF_ACTIVATED_NOTE = "main script not rewritten: "


def _note_running_main(config: _Config) -> None:
    """A user's script that activates the shim itself was compiled, whole, before its first line ran: its own
    comparisons stay as written, silently, unless the report says so (``ascend-shim run`` and activation at
    start-up install the rewrite before the main script is compiled, while ``__main__`` has no file yet)."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if isinstance(path, str) and path.endswith(".py") and config.dir_is_users(os.path.dirname(os.path.abspath(path))):
        REPORT.note(f"{SELF_ACTIVATED_NOTE}{path} activated the shim itself, after Python had compiled it, so its "
                    "own device comparisons run as written (the modules it imports afterwards are rewritten); run "
                    "it with `ascend-shim run` instead")


def uninstall() -> None:
    """Stop rewriting newly imported modules (already imported ones stay rewritten); restore ``runpy.run_path``."""
    global _finder, _run_path_change
    with _lock:
        import_system.uninstall("rewrite")
        _finder = None
        if _run_path_change is not None:
            patching.revert([_run_path_change], keep_later=True)  # a function the program put there since stays
            _run_path_change = None


def is_installed() -> bool:
    return _finder is not None and import_system.is_installed(_finder)


def is_user_module(fullname: str | None, origin: str | None) -> bool:
    """Would an import of ``fullname`` from ``origin`` be rewritten now?"""
    f = _finder
    return f is not None and f.config.wants(fullname, origin)


# -- the main script ----------------------------------------------------------------------------------------
class _TempModule:
    """As ``runpy._TempModule``: ``sys.modules[name]`` is a fresh module while the code runs."""

    def __init__(self, name):
        self.name, self.module, self._saved = name, ModuleType(name), []

    def __enter__(self):
        if self.name in sys.modules:
            self._saved.append(sys.modules[self.name])
        sys.modules[self.name] = self.module
        return self

    def __exit__(self, *exc):
        if self._saved:
            sys.modules[self.name] = self._saved[0]
        else:
            sys.modules.pop(self.name, None)
        self._saved = []


class _Argv0:
    def __init__(self, value):
        self.value = value

    def __enter__(self):
        self.saved = sys.argv[0]
        sys.argv[0] = self.value

    def __exit__(self, *exc):
        sys.argv[0] = self.saved


def run_path_rewritten(path, run_name: str = "__main__", init_globals: dict | None = None) -> dict:
    """``runpy.run_path(path, init_globals, run_name)`` with the script's CUDA comparisons rewritten.

    Same semantics as runpy for a script file: while it runs, ``sys.modules[run_name]`` is a fresh module,
    ``sys.argv[0]`` is ``path``; the globals have ``__name__ = run_name``, ``__file__ = path`` (as given),
    ``__spec__ = __loader__ = __cached__ = None``, ``__package__`` from ``run_name``; afterwards the previous
    ``sys.modules[run_name]`` is back and a copy of the globals is returned. The script is rewritten whether or
    not it lies under the roots (it is what the user asked to run). A directory or zip file (run through its
    ``__main__``) and a compiled ``.pyc`` go to ``runpy.run_path`` unchanged (the import hook, if installed,
    covers the directory's ``__main__``).
    """
    from pkgutil import get_importer, read_code

    if get_importer(os.fspath(path)) is not None:
        return _ORIGINAL_RUN_PATH(path, init_globals, run_name)
    fname = path
    decoded = os.path.abspath(os.fsdecode(path))
    with io.open_code(decoded) as fh:
        code = read_code(fh)
    if code is None:
        with io.open_code(decoded) as fh:
            data = fh.read()
        code, _ = rewritten_code(data, os.fsdecode(fname))
        if code is None:
            code = compile(data, os.fsdecode(fname), "exec", dont_inherit=True)
    pkg_name = run_name.rpartition(".")[0]
    with _TempModule(run_name) as temp, _Argv0(fname):
        g = temp.module.__dict__
        if init_globals is not None:
            g.update(init_globals)
        g.update(__name__=run_name, __file__=fname, __cached__=None, __doc__=None, __loader__=None,
                 __package__=pkg_name, __spec__=None)
        exec(code, g)
    return g.copy()


def script_is_cuda_code(path: str) -> bool:
    """Is the script file ``path``, run by path (the main script, ``runpy.run_path``), CUDA code to rewrite?
    The rule of a module imported from the same place, under the name it would be imported as: a user's
    script is, an installed library's is unless the library is NPU-native (``tune run`` runs a recipe that
    ships inside site-packages)."""
    f = _finder
    if f is None:
        return False
    real = os.path.abspath(path)
    return bool(f.config.file_kind(_importable_name(real), real))


def _importable_name(path: str) -> str | None:
    """The dotted name ``path`` would be imported as from the ``sys.path`` entry it lies deepest under."""
    if not path.endswith(".py"):
        return None
    best = None
    for entry in sys.path:
        if isinstance(entry, str):
            base = os.path.abspath(entry or os.curdir)
            if _under(path, base) and (best is None or len(base) > len(best)):
                best = base
    if best is None:
        return None
    parts = os.path.relpath(path[:-3], best).split(os.sep)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts) if parts and all(p.isidentifier() for p in parts) else None


def _run_path_hook(path_name, init_globals=None, run_name=None):
    """``runpy.run_path`` while installed: scripts that are CUDA code (:func:`script_is_cuda_code`) are rewritten."""
    try:
        is_file = os.path.isfile(path_name)
    except (TypeError, ValueError):
        is_file = False
    if is_file and script_is_cuda_code(os.fsdecode(path_name)):
        return run_path_rewritten(path_name, "<run_path>" if run_name is None else run_name, init_globals)
    return _ORIGINAL_RUN_PATH(path_name, init_globals, run_name)
