"""The migration report: what was patched, skipped or failed, and every CUDA call the shim acted on.

Calls are deduplicated by call site: the first frame outside ascend_shim, torch and a few stdlib wrappers,
i.e. the line of the user's (or a library's) code that made the CUDA call. Recording is cheap enough for hot
paths: the first call at a site walks the frames and formats the detail once; every later call there is a
dictionary hit in a per-thread table keyed on the calling code object and instruction offset (:meth:`seen`).

Each process keeps its own report; at exit rank 0 (or the root process) prints a one-screen summary, and with
``ASCEND_SHIM_REPORT=path`` every process writes JSON (``path`` for the root process, ``stem.rank<R>.json``
for distributed workers, ``stem.pid<P>.json`` for other children), readable by its owner only: it holds the
command line, tokens included. ``merge`` combines those files; :func:`load` reads one, trusting nothing in it.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

from .digits import parse_digits
from .regular_file import FileTooLarge, NotRegularFile, read_regular_file
from .terminal import printable

CATEGORIES = ("translated", "unsupported", "fallback", "rewritten", "env")
SCHEMA = "ascend_shim.report/1"
#: detail of the ``translated`` event counted each time an NPU value decided a rewritten comparison
REWRITE_HIT_DETAIL = "npu value compared as its CUDA counterpart (rewritten comparison)"
#: the largest report :func:`load` reads (a merged report of many ranks is a few MiB)
MAX_REPORT_BYTES = 64 << 20
#: the deepest nesting :func:`load` accepts (a report is 5 levels deep; reading and printing stay far from
#: Python's recursion limit)
MAX_REPORT_DEPTH = 32


def _event_order(e: dict) -> tuple:
    """Known categories in their order, then any other category (a newer writer's) by name."""
    c = e["category"]
    rank = (CATEGORIES.index(c), "") if c in CATEGORIES else (len(CATEGORIES), c)
    return rank + (e["file"], e["line"], e["api"])
_HERE = os.path.dirname(os.path.abspath(__file__))


def _internal_prefixes() -> tuple[str, ...]:
    prefixes = [_HERE + os.sep, contextlib.__file__, functools.__file__, threading.__file__, warnings.__file__,
                "<frozen "]
    extensions = importlib.util.find_spec("typing_extensions")  # its @deprecated wraps torch.cuda.amp classes
    if extensions is not None and extensions.origin:
        prefixes.append(extensions.origin)
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.submodule_search_locations:
        prefixes.extend(os.path.join(p, "") for p in spec.submodule_search_locations)
    return tuple(prefixes)


class Report:
    def __init__(self):
        self._lock = threading.Lock()
        self._internal: dict = {}  # code object -> is it internal?
        self._prefixes: tuple[str, ...] | None = None
        #: ``.seen``: this thread's {fast key: [count, event key, code]} (see :meth:`seen`; hot paths inline it)
        self.per_thread = threading.local()
        self._seen_tables: list[dict] = []  # every thread's .seen, merged when the report is read
        self.reset()

    def reset(self, backend: str = "", sim_layer: str = ""):
        """An empty report, for an activation on ``backend`` (and, on the emulated NPU, its ``sim_layer``)."""
        with self._lock:
            self.started = time.time()
            self.backend = backend
            self.sim_layer = sim_layer  # the torch_npu Python over the emulated NPU: "real", "builtin" ("" on hardware)
            self.sets: dict[str, dict] = {}
            self.patches: dict[str, dict] = {}
            self._events: dict[tuple, list] = {}  # (category, api, detail, code, line) -> [count]
            for table in self._seen_tables:
                table.clear()
            self.notes: list[str] = []

    # -- what the registry records ---------------------------------------------------------------------------
    def record_set(self, set_id: str, status: str, reason: str = "", **extra):
        with self._lock:
            self.sets[set_id] = {"status": status, "reason": reason, **extra}

    def record_patch(self, patch, status: str, reason: str = "", aliases=()):
        with self._lock:
            self.patches[patch.id] = {
                "set": patch.set_id, "target": patch.target, "kind": patch.kind, "fidelity": patch.fidelity,
                "status": status, "reason": reason, "aliases": [f"{m}.{n}" for m, n in aliases],
            }

    def record_aliases(self, patch_id: str, aliases) -> None:
        """The ``from x import y`` copies an applied patch rebound, as (module name, attribute) pairs."""
        with self._lock:
            info = self.patches.get(patch_id)
            if info is not None:
                info["aliases"] = [f"{m}.{n}" for m, n in aliases]

    def record_reverted(self) -> None:
        """Deactivation: every applied patch is reverted."""
        with self._lock:
            for info in self.patches.values():
                if info["status"] == "applied":
                    info["status"] = "reverted"

    def applied_targets(self) -> list[str]:
        """The targets of the patches applied now."""
        with self._lock:
            return [info["target"] for info in self.patches.values() if info["status"] == "applied"]

    # -- what patches record while the program runs ----------------------------------------------------------
    def event(self, category: str, api: str, detail: str = "", *, site: tuple | None = None, frame=None,
              seen_as=None, code=None):
        """Count one call of ``api`` at the caller's user-code site; ``detail`` says what it became.

        ``frame``: where to start looking for the user's frame (hot-path wrappers pass their caller's).
        The hot path stores (code object, instruction offset); line numbers are worked out when reading.
        ``seen_as``: a fast key under which later calls at this site are counted by :meth:`seen`; ``code``:
        the calling code object when the key holds only its ``id`` (kept alive, so the id is never reused).
        """
        key = (category, api, detail) + (site if site is not None else
                                         self._call_site(frame or sys._getframe(1)))
        slot = self._events.get(key)
        if slot is None:
            with self._lock:
                slot = self._events.setdefault(key, [0])
        with self._lock:
            slot[0] += 1
        if seen_as is not None:
            self._seen_table()[seen_as] = [0, key, code]

    def seen(self, key) -> bool:
        """Count one more call under ``key`` if an :meth:`event` registered it (``seen_as``) in this thread.

        ``key`` is built by the caller without formatting, e.g. (id of the calling code, instruction offset,
        api, value);
        an unhashable key raises ``TypeError`` (the caller then records through :meth:`event`).
        """
        try:
            slot = self.per_thread.seen[key]
        except (KeyError, AttributeError):
            return False
        slot[0] += 1
        return True

    def _seen_table(self) -> dict:
        try:
            return self.per_thread.seen
        except AttributeError:
            table = self.per_thread.seen = {}
            with self._lock:
                self._seen_tables.append(table)
            return table

    def translated(self, api: str, became: str):
        self.event("translated", api, became)

    def unsupported(self, api: str, detail: str):
        self.event("unsupported", api, detail)

    def fallback(self, api: str, detail: str):
        self.event("fallback", api, detail)

    def env(self, variable: str, detail: str):
        self.event("env", variable, detail, site=("<environment>", 0))

    def rewritten(self, filename: str, line: int, api: str, detail: str):
        self.event("rewritten", api, detail, site=(filename, line))

    def note(self, text: str):
        with self._lock:
            if text not in self.notes:
                self.notes.append(text)

    def set_note(self, key: str, text: str) -> None:
        """The one note beginning with ``key`` (a note kept up to date as the run goes): replaced by ``text``,
        which begins with ``key`` too, or added."""
        with self._lock:
            mine = [i for i, n in enumerate(self.notes) if n.startswith(key)]
            if mine:
                self.notes[mine[0]] = text
            else:
                self.notes.append(text)

    def _call_site(self, frame) -> tuple[str, int]:
        """The first frame from ``frame`` up that is not ascend_shim, a patch module, torch, torch_npu (Huawei's
        wrappers of torch's functions, such as its ``torch.load``) or a stdlib wrapper."""
        if self._prefixes is None:
            self._prefixes = _internal_prefixes()
        internal = self._internal
        while frame is not None:
            code = frame.f_code
            hit = internal.get(code)
            if hit is None:
                g = frame.f_globals
                hit = internal[code] = (code.co_filename.startswith(self._prefixes)
                                        or g.get("__name__", "").startswith(("ascend_shim.", "torch_npu."))
                                        or bool(g.get("__ascend_shim_internal__")))
            if not hit:
                return code, frame.f_lasti
            frame = frame.f_back
        return "<unknown>", 0

    # -- output ----------------------------------------------------------------------------------------------
    def events(self) -> list[dict]:
        """Events merged per (category, api, detail, file, line), sorted."""
        with self._lock:
            counts = {key: n[0] for key, n in self._events.items()}
            for table in self._seen_tables:
                for n, key, _ in list(table.values()):
                    counts[key] = counts.get(key, 0) + n
        merged: dict[tuple, int] = {}
        for (c, a, d, where, pos), n in counts.items():
            file, line = (where, pos) if isinstance(where, str) else (where.co_filename, _line_of(where, pos))
            k = (c, a, d, file, line)
            merged[k] = merged.get(k, 0) + n
        out = [{"category": c, "api": a, "detail": d, "file": f, "line": ln, "count": n}
               for (c, a, d, f, ln), n in merged.items()]
        return sorted(out, key=_event_order)

    def to_dict(self) -> dict:
        with self._lock:
            sets, patches, notes = dict(self.sets), dict(self.patches), list(self.notes)
        return {
            "schema": SCHEMA,
            "process": {"pid": os.getpid(), "rank": process_rank(), "argv": list(sys.argv), "backend": self.backend,
                        "sim_layer": self.sim_layer, "started": self.started, "ended": time.time()},
            "patch_sets": sets, "patches": patches, "events": self.events(), "notes": notes,
        }

    def write_json(self, path: str) -> Path:
        target = Path(report_path_for_process(path))
        target.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomically(target, json.dumps(self.to_dict(), indent=1, default=str))
        return target


def write_file_atomically(target: Path, text: str) -> None:
    """Write ``text`` to ``target`` through a new temporary file in its directory, then rename it over.

    The temporary file is created exclusively under a random name (never through a name another user could
    plant a symlink at), with mode 0o600 (reports hold the command line); readers see the old file or the whole
    new one, and a file that was there before is replaced, its mode with it.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, 0o600)  # what mkstemp creates; said here, since reports depend on it
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fd = -1
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        if fd != -1:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _line_of(code, offset: int) -> int:
    for start, end, line in code.co_lines():
        if start <= offset < end and line is not None:
            return line
    return code.co_firstlineno


def process_rank() -> int | None:
    return parse_digits(os.environ.get("RANK"))


def is_root_process() -> bool:
    return os.environ.get("ASCEND_SHIM_ROOT_PID") == str(os.getpid())


def report_path_for_process(path: str) -> str:
    p = Path(path)
    rank = process_rank()
    if rank is not None:
        return str(p.with_name(f"{p.stem}.rank{rank}{p.suffix or '.json'}"))
    if is_root_process() or "ASCEND_SHIM_ROOT_PID" not in os.environ:
        return str(p)
    return str(p.with_name(f"{p.stem}.pid{os.getpid()}{p.suffix or '.json'}"))


# -- reading and merging reports -----------------------------------------------------------------------------
class ReportFormatError(ValueError):
    """A file that is not a readable ascend_shim JSON report; the message is one line naming the file."""


def load(path: str) -> dict:
    """Read and check one JSON report (a process's, or a merged one); raise :class:`ReportFormatError`.

    Only a regular file of at most :data:`MAX_REPORT_BYTES` is read (a FIFO or a device could block for ever or
    never end), and only JSON nested at most :data:`MAX_REPORT_DEPTH` deep is accepted.
    """
    try:
        raw = read_regular_file(path, MAX_REPORT_BYTES)
    except (NotRegularFile, FileTooLarge) as exc:
        raise ReportFormatError(f"cannot read {path}: {exc}") from exc
    except OSError as exc:
        raise ReportFormatError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ReportFormatError(f"{path} is not UTF-8 text (byte {exc.start}), so not a JSON report") from exc
    except json.JSONDecodeError as exc:
        raise ReportFormatError(f"{path} is not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from exc
    except RecursionError as exc:
        raise ReportFormatError(f"{path} is not a report: nested deeper than {MAX_REPORT_DEPTH} levels") from exc
    except ValueError as exc:  # an integer of more digits than Python converts
        raise ReportFormatError(f"{path} is not JSON: a number too long to read") from exc
    if _depth_over(data, MAX_REPORT_DEPTH):
        raise ReportFormatError(f"{path} is not a report: nested deeper than {MAX_REPORT_DEPTH} levels")
    problem = schema_problem(data)
    if problem:
        raise ReportFormatError(f"{path} is not an ascend_shim report: {problem}")
    return data


def _depth_over(value, limit: int) -> bool:
    """Does ``value`` (parsed JSON) nest lists and objects more than ``limit`` deep? Walked without recursion."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


def schema_problem(rep) -> str:
    """What makes ``rep`` not a report of schema ``ascend_shim.report/1`` ("" when it is one)."""
    if not isinstance(rep, dict):
        return f"the top level is {_json_type(rep)}, not an object"
    if "schema" not in rep:
        return "missing key 'schema'"
    if rep["schema"] != SCHEMA:
        return f"schema is {rep['schema']!r}, expected {SCHEMA!r}"
    for key in ("patch_sets", "patches", "events"):
        if key not in rep:
            return f"missing key {key!r}"
    if "process" not in rep and "processes" not in rep:
        return "missing key 'process' (or 'processes' in a merged report)"
    if "process" in rep:
        problem = _process_problem(rep["process"], "process")
        if problem:
            return problem
    if "processes" in rep:
        if not isinstance(rep["processes"], list):
            return f"processes is {_json_type(rep['processes'])}, not a list"
        for i, proc in enumerate(rep["processes"]):
            problem = _process_problem(proc, f"processes[{i}]")
            if problem:
                return problem
    for key in ("patch_sets", "patches"):
        entries = rep[key]
        if not isinstance(entries, dict):
            return f"{key} is {_json_type(entries)}, not an object"
        for ident, info in entries.items():
            if not isinstance(info, dict):
                return f"{key}[{ident!r}] is {_json_type(info)}, not an object"
            for field in ("status", "reason"):
                if field == "status" and field not in info:
                    return f"{key}[{ident!r}] has no 'status'"
                if field in info and not isinstance(info[field], str):
                    return f"{key}[{ident!r}].{field} is {_json_type(info[field])}, not a string"
            if not isinstance(info.get("aliases", []), list):
                return f"{key}[{ident!r}].aliases is {_json_type(info['aliases'])}, not a list"
    if not isinstance(rep["events"], list):
        return f"events is {_json_type(rep['events'])}, not a list"
    for i, ev in enumerate(rep["events"]):
        if not isinstance(ev, dict):
            return f"events[{i}] is {_json_type(ev)}, not an object"
        for field, kind in _EVENT_FIELDS.items():
            if field not in ev:
                return f"events[{i}] has no {field!r}"
            if not isinstance(ev[field], kind) or isinstance(ev[field], bool):
                return f"events[{i}].{field} is {_json_type(ev[field])}, not {_KIND_NAMES[kind]}"
    notes = rep.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        return "notes is not a list of strings"
    return ""


_EVENT_FIELDS = {"category": str, "api": str, "detail": str, "file": str, "line": int, "count": int}
_KIND_NAMES = {str: "a string", int: "an integer"}


def _process_problem(proc, where: str) -> str:
    if not isinstance(proc, dict):
        return f"{where} is {_json_type(proc)}, not an object"
    rank = proc.get("rank")
    if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool)):
        return f"{where}.rank is {_json_type(rank)}, not an integer or null"
    return ""


def _json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__)


def merge(reports: list[dict]) -> dict:
    """Combine per-process reports: counts summed per call site, statuses listed per process."""
    processes: list[dict] = []
    statuses: dict[str, dict[str, dict]] = {"patch_sets": {}, "patches": {}}
    notes: list[str] = []
    events: dict[tuple, dict] = {}
    for rep in reports:
        if "processes" in rep:  # an already merged report
            processes.extend(rep["processes"])
        else:
            processes.append(rep.get("process", {}))
        for key, merged_infos in statuses.items():
            for ident, info in rep.get(key, {}).items():
                slot = merged_infos.setdefault(ident, dict(info))
                if info.get("status") != slot.get("status"):
                    slot["status"] = "mixed"
                    slot.setdefault("per_process", []).append(info.get("status"))
        for ev in rep.get("events", []):
            k = (ev["category"], ev["api"], ev["detail"], ev["file"], ev["line"])
            if k in events:
                events[k]["count"] += ev["count"]
            else:
                events[k] = dict(ev)
        notes.extend(n for n in rep.get("notes", []) if n not in notes)
    return {"schema": SCHEMA, "processes": processes, **statuses, "events": sorted(events.values(), key=_event_order),
            "notes": notes}


def _short(path: str) -> str:
    try:
        rel = os.path.relpath(path)
        return rel if not rel.startswith("..") else path
    except ValueError:
        return path


def format_summary(rep: dict, *, limit: int = 12, json_path: str | None = None) -> str:
    """A one-screen text summary of a report (one process's or a merged one).

    Every string from the report is printed through :func:`~ascend_shim.terminal.printable` (it may name a
    hostile file, or come from a report someone else wrote); a rewritten comparison is one line, with the times
    an NPU value decided it (:func:`_rewrites_with_hits`).
    """
    proc = rep.get("process") or {}
    sets, patches = rep.get("patch_sets", {}), rep.get("patches", {})
    events = _rewrites_with_hits(rep.get("events", []))
    count = lambda d, s: sum(1 for v in d.values() if v.get("status") == s)  # noqa: E731
    head = "ascend_shim migration report"
    if proc:
        layer = {"real": ", emulated NPU under Huawei's torch_npu Python (real layer)",
                 "builtin": ", emulated NPU (builtin layer)"}.get(proc.get("sim_layer") or "", "")
        head += f" (backend {printable(proc.get('backend') or '?')}{layer}, pid {printable(proc.get('pid'))}"
        head += f", rank {proc['rank']})" if proc.get("rank") is not None else ")"
    elif rep.get("processes"):
        head += f" ({len(rep['processes'])} processes merged)"
    lines = [head,
             f"  patch sets: {count(sets, 'active')} active, {count(sets, 'inactive')} inactive (target not "
             f"installed), {count(sets, 'skipped')} skipped, {count(sets, 'disabled')} disabled",
             f"  patches: {count(patches, 'applied')} applied, {count(patches, 'pending')} pending (target not "
             f"imported), {count(patches, 'skipped')} skipped, {count(patches, 'failed')} failed, "
             f"{count(patches, 'not-needed')} not needed"]
    for ident, info in sorted(sets.items()):
        if info.get("status") == "skipped":
            lines.append(f"    set {printable(ident)} skipped: {printable(info.get('reason'))}")
    problems = [(i, v) for i, v in sorted(patches.items(), key=lambda kv: kv[1].get("status") != "failed")
                if v.get("status") in ("skipped", "failed")]
    for ident, info in problems[:limit]:
        lines.append(f"    patch {printable(ident)} {printable(info['status'])}: {printable(info.get('reason'))}")
    if len(problems) > limit:
        lines.append(f"    ... {len(problems) - limit} more skipped (`ascend-shim report FILE` or the JSON)")
    aliases = sum(len(v.get("aliases", [])) for v in patches.values())
    if aliases:
        lines.append(f"  late aliases rebound (`from x import y` copies): {aliases}")
    titles = {"translated": "translated CUDA calls", "unsupported": "UNSUPPORTED calls",
              "fallback": "fallbacks taken", "rewritten": "rewritten comparisons in CUDA code",
              "env": "environment translated"}
    others = sorted({e["category"] for e in events} - set(CATEGORIES))
    for category in CATEGORIES + tuple(others):
        items = [e for e in events if e["category"] == category]
        if category == "rewritten":  # a comparison no NPU value reached did nothing: the JSON lists it
            items = [e for e in items if e["count"]]
        if not items:
            continue
        total = sum(e["count"] for e in items)
        title = titles.get(category, f"{printable(category)} events (a category this version does not know)")
        counted = "decided by an NPU value" if category == "rewritten" else "calls"
        lines.append(f"  {title}: {len(items)} sites, {total} {counted}")
        for e in sorted(items, key=lambda e: -e["count"])[:limit]:
            where = "" if e["file"] == "<environment>" else f"{printable(_short(e['file']))}:{e['line']}  "
            arrow = f" -> {printable(e['detail'])}" if e["detail"] else ""
            lines.append(f"    {where}{printable(e['api'])}{arrow}  x{e['count']}")
        if len(items) > limit:
            lines.append(f"    ... {len(items) - limit} more sites (see the JSON report)")
    for note in rep.get("notes", []):
        lines.append(f"  note: {printable(note)}")
    if json_path:
        lines.append(f"  JSON report: {printable(json_path)}")
    return "\n".join(lines)


def _rewrites_with_hits(events: list[dict]) -> list[dict]:
    """``events`` with each rewritten comparison once: its ``rewritten`` event (recorded when the code was
    rewritten) counts the times an NPU value decided it, which the report holds as ``translated`` events of
    detail :data:`REWRITE_HIT_DETAIL` at the same file, line and comparison; those are not listed again."""
    def site(e):
        return e["file"], e["line"], e["api"]

    def is_hit(e):
        return e["category"] == "translated" and e["detail"] == REWRITE_HIT_DETAIL and site(e) in rewritten

    rewritten = {site(e) for e in events if e["category"] == "rewritten"}
    hits: dict[tuple, int] = {}
    for e in filter(is_hit, events):
        hits[site(e)] = hits.get(site(e), 0) + e["count"]
    return [dict(e, count=hits.get(site(e), 0)) if e["category"] == "rewritten" else e
            for e in events if not is_hit(e)]


#: the process-wide report
REPORT = Report()
