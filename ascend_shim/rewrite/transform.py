"""The AST rewrite: CUDA/NCCL comparisons in CUDA code -> calls of the value-comparing runtime helpers.

Triggers (a comparison is rewritten only when one of these literals is *syntactically* in it):

* device literal: the string constant ``"cuda"`` or ``"cuda:N"`` (ASCII digits), or a call
  ``torch.device("cuda"...)`` / ``device("cuda:N")`` / ``torch.device(type="cuda", ...)`` of anything
  named ``device`` whose first argument (or ``type=``) is such a literal;
* backend literal: the string constant ``"nccl"``.

Rewrites (``__ascend_shim_*__`` are the helpers of :mod:`ascend_shim.rewrite.runtime`)::

    A == B                  -> __ascend_shim_eq__(A, B)          one of A, B a trigger
    A != B                  -> __ascend_shim_ne__(A, B)
    A in B                  -> __ascend_shim_in__(A, B)          A a trigger, or B a tuple/list/set display
    A not in B              -> not __ascend_shim_in__(A, B)        holding a trigger
    S.startswith(P, ...)    -> __ascend_shim_startswith__(S, P, ...)   P "cuda", "cuda:", "cuda:N", "nccl"
                                                                       or a tuple display holding one
    case "cuda":            -> case "cuda" | "npu":              (also "cuda:N" | "npu:N", "nccl" | "hccl")

Only single comparisons (no chains such as ``a == "cuda" == b``), never ``is`` / ``is not``, never a name
bound to a literal (``CUDA = "cuda"; x == CUDA``). Operands keep their evaluation order.

NPU-aware code is left alone: when the *unit* around a site (the innermost enclosing function or lambda;
outside functions, the statement itself -- a compound statement's header only, an ``if``/``elif`` chain's
tests together, a ``match``'s subject, patterns and guards together) already compares against the NPU counterpart
(``"npu"``, ``"npu:N"``, ``torch.device("npu")`` for device sites; ``"hccl"`` for backend sites), e.g.
``if d == "cuda": ... elif d == "npu": ...``, its sites are recorded as skipped and not rewritten, so the
user's explicit NPU branch keeps running.

Line numbers and columns of every new node are those of the node it replaces; the helper import is placed
after the docstring and ``from __future__`` imports, on the line of the first real statement, so tracebacks
and reports point at the user's own lines.
"""
from __future__ import annotations

import ast
import dataclasses
import importlib.util
import re
from types import CodeType
from typing import TypeGuard, cast

RUNTIME_MODULE = "ascend_shim.rewrite.runtime"
#: runtime function -> the dunder name it is bound to in the rewritten module (dunder: no class-body mangling)
HELPERS = {"eq": "__ascend_shim_eq__", "ne": "__ascend_shim_ne__", "contains": "__ascend_shim_in__",
           "startswith": "__ascend_shim_startswith__"}
DETAILS = {"device": "compares as CUDA for npu", "backend": "compares as NCCL for hccl"}

_DEVICE_LIT = re.compile(r"cuda(?::[0-9]+)?\Z")
_DEVICE_PREFIX = re.compile(r"cuda(?::[0-9]*)?\Z")
_NPU_LIT = re.compile(r"npu(?::[0-9]+)?\Z")
_NPU_PREFIX = re.compile(r"npu(?::[0-9]*)?\Z")
_FUNC_UNITS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_SNIPPET_MAX = 100
#: how a site left alone because its code already handles the NPU is explained (``scan`` calls it covered)
NPU_AWARE_REASON = "left as is: the enclosing code already compares against"


@dataclasses.dataclass(frozen=True)
class Site:
    """One comparison the rewrite looked at."""
    filename: str
    line: int
    col: int
    end_line: int
    end_col: int
    snippet: str  # the original source text, whitespace collapsed
    pattern: str  # "==", "!=", "in", "not in", "startswith", "case"
    kind: str  # "device" or "backend" ("device+backend" for a display holding both)
    rewritten: bool
    reason: str = ""  # why not rewritten

    @property
    def detail(self) -> str:
        return DETAILS.get(self.kind, DETAILS["device"])


# -- classifying literals -----------------------------------------------------------------------------------
def _str_const(node) -> str | None:
    if isinstance(node, ast.Constant) and type(node.value) is str:
        return node.value
    return None


def _classify_str(s: str | None, *, prefix: bool = False, npu: bool = False) -> frozenset:
    if s is None:
        return frozenset()
    if npu:
        if s == "hccl":
            return frozenset({"backend"})
        return frozenset({"device"}) if (_NPU_PREFIX if prefix else _NPU_LIT).match(s) else frozenset()
    if s == "nccl":
        return frozenset({"backend"})
    return frozenset({"device"}) if (_DEVICE_PREFIX if prefix else _DEVICE_LIT).match(s) else frozenset()


def _is_device_call(node) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Name) and f.id == "device") or (isinstance(f, ast.Attribute) and f.attr == "device")


def _device_call_kind(node, *, npu: bool = False) -> frozenset:
    if not _is_device_call(node):
        return frozenset()
    arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "type"), None)
    if isinstance(arg, ast.Starred):
        return frozenset()
    kind = _classify_str(_str_const(arg), npu=npu)
    return kind if kind == {"device"} else frozenset()


def _operand_kind(node, *, npu: bool = False) -> frozenset:
    return _classify_str(_str_const(node), npu=npu) | _device_call_kind(node, npu=npu)


def _display_kind(node, *, npu: bool = False) -> frozenset:
    if not isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return frozenset()
    out: frozenset[str] = frozenset()
    for elt in node.elts:
        out |= _operand_kind(elt, npu=npu)
    return out


def _prefix_kind(node, *, npu: bool = False) -> frozenset:
    if isinstance(node, ast.Tuple):
        out: frozenset[str] = frozenset()
        for elt in node.elts:
            out |= _classify_str(_str_const(elt), prefix=True, npu=npu)
        return out
    return _classify_str(_str_const(node), prefix=True, npu=npu)


def _compare_kind(node: ast.Compare, *, npu: bool = False) -> frozenset:
    """Trigger kinds of a single comparison (empty: not ours)."""
    if len(node.ops) != 1:
        return frozenset()
    op, left, right = node.ops[0], node.left, node.comparators[0]
    if isinstance(op, (ast.Eq, ast.NotEq)):
        return _operand_kind(left, npu=npu) | _operand_kind(right, npu=npu)
    if isinstance(op, (ast.In, ast.NotIn)):
        return _operand_kind(left, npu=npu) | _display_kind(right, npu=npu)
    return frozenset()


def _chain_kind(node: ast.Compare) -> frozenset:
    out: frozenset[str] = frozenset()
    for i, op in enumerate(node.ops):
        if isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
            pair = ast.Compare(left=([node.left] + node.comparators)[i], ops=[op], comparators=[node.comparators[i]])
            out |= _compare_kind(pair)
    return out


def _startswith_call(node: ast.AST) -> TypeGuard[ast.Call]:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "startswith"
            and 1 <= len(node.args) <= 3 and not node.keywords
            and not any(isinstance(a, ast.Starred) for a in node.args))


def _npu_kinds_in_unit(unit, *, as_unit: bool = True) -> frozenset:
    """Kinds of NPU-counterpart comparisons in ``unit``: a function's / lambda's body (``as_unit``), else the
    node itself; never inside nested functions, lambdas or classes."""
    found: set[str] = set()
    todo: list[ast.AST]
    if as_unit and isinstance(unit, _FUNC_UNITS):
        todo = list(unit.body) if isinstance(unit.body, list) else [unit.body]
    elif isinstance(unit, _FUNC_UNITS + (ast.ClassDef,)):
        return frozenset()
    else:
        todo = [unit]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Compare):
            # an NPU literal anywhere in a comparison counts, chains included
            ops = [node.left, *node.comparators]
            for i, operand in enumerate(ops):
                found |= _operand_kind(operand, npu=True)
                if i > 0 and isinstance(node.ops[i - 1], (ast.In, ast.NotIn)):
                    found |= _display_kind(operand, npu=True)
        elif _startswith_call(node):
            found |= _prefix_kind(node.args[0], npu=True)
        elif isinstance(node, ast.MatchValue):
            found |= _classify_str(_str_const(node.value), npu=True)
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, _FUNC_UNITS) and not isinstance(child, ast.ClassDef):
                todo.append(child)
    return frozenset(found)


def _own_expressions(stmt):
    """The parts of a statement evaluated by the statement itself (not its nested statement bodies)."""
    for _, value in ast.iter_fields(stmt):
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, ast.match_case):
                yield item.pattern
                if item.guard is not None:
                    yield item.guard
            elif isinstance(item, ast.ExceptHandler):
                if item.type is not None:
                    yield item.type
            elif isinstance(item, ast.AST) and not isinstance(item, ast.stmt):
                yield item


def _counterpart_literal(s: str) -> str:
    if s == "nccl":
        return "hccl"
    return "npu" + s[len("cuda"):]


class _Lines:
    """``ast.get_source_segment`` for many nodes of one text. That function splits the whole text again on each
    call, which made the rewrite quadratic in the number of sites of a module; here the text is split once
    (lazily), as the parser splits it (at ``\\n``, ``\\r\\n`` and ``\\r`` only, not at form feeds), and a
    line is encoded once however many sites it holds (columns are UTF-8 byte offsets)."""

    _LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")

    def __init__(self, text: str):
        self.text = text
        self._lines: list[str] | None = None
        self._encoded: dict[int, bytes] = {}

    def _bytes(self, i: int) -> bytes:
        b = self._encoded.get(i)
        if b is None:
            b = self._encoded[i] = self.lines()[i].encode()
        return b

    def lines(self) -> list[str]:
        if self._lines is None:
            self._lines = self._LINE.findall(self.text)
        return self._lines

    def segment(self, node) -> str | None:
        """The source text of ``node``, None without end positions."""
        end_line, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
        if end_line is None or end_col is None:
            return None
        first, last = node.lineno - 1, end_line - 1
        if first == last:
            return self._bytes(first)[node.col_offset:end_col].decode()
        return "".join([self._bytes(first)[node.col_offset:].decode(), *self.lines()[first + 1:last],
                        self._bytes(last)[:end_col].decode()])


# -- the transformer ----------------------------------------------------------------------------------------
class CudaComparisonRewriter(ast.NodeTransformer):
    def __init__(self, text: str, filename: str):
        self.source = _Lines(text)
        self.filename = filename
        self.sites: list[Site] = []
        self.used: set[str] = set()  # runtime function names needed
        self._aware: list[frozenset] = [frozenset()]
        self._depth = 0  # functions / lambdas entered
        self._chain_aware: dict[int, frozenset] = {}  # elif If node -> awareness of its whole chain

    # units: a function / lambda body; outside functions, one statement's own expressions (an if/elif
    # chain's tests together, a match statement's subject, patterns and guards together)
    def visit(self, node):
        if isinstance(node, _FUNC_UNITS):
            self._aware.append(_npu_kinds_in_unit(node))
            self._depth += 1
            try:
                return super().visit(node)
            finally:
                self._depth -= 1
                self._aware.pop()
        if self._depth == 0 and isinstance(node, ast.stmt):
            aware = self._chain_aware.pop(id(node), None)
            if aware is None:
                aware = self._statement_awareness(node)
            self._aware.append(aware)
            try:
                return super().visit(node)
            finally:
                self._aware.pop()
        return super().visit(node)

    def _statement_awareness(self, node) -> frozenset:
        if isinstance(node, ast.If):
            chain = [node]
            while len(chain[-1].orelse) == 1 and isinstance(chain[-1].orelse[0], ast.If):
                chain.append(chain[-1].orelse[0])
            aware = frozenset().union(*(_npu_kinds_in_unit(n.test, as_unit=False) for n in chain))
            for n in chain[1:]:
                self._chain_aware[id(n)] = aware
            return aware
        aware = frozenset()
        for parts in _own_expressions(node):
            aware |= _npu_kinds_in_unit(parts, as_unit=False)
        return aware

    # sites
    def _snippet(self, node) -> str:
        try:
            seg = self.source.segment(node)
        except Exception:  # noqa: BLE001 - odd positions (f-strings): fall back to unparse
            seg = None
        if not seg:
            seg = ast.unparse(node)
        seg = " ".join(seg.split())
        return seg if len(seg) <= _SNIPPET_MAX else seg[:_SNIPPET_MAX - 3] + "..."

    def _site(self, node, pattern: str, kinds: frozenset, prefix: str = "") -> bool:
        """Record the site; True if it may be rewritten."""
        aware = kinds & self._aware[-1]
        kind = "+".join(sorted(kinds))
        reason = ""
        if aware:
            counterpart = " / ".join({"device": '"npu"', "backend": '"hccl"'}[k] for k in sorted(aware))
            reason = f"{NPU_AWARE_REASON} {counterpart}"
        self.sites.append(Site(self.filename, node.lineno, node.col_offset, node.end_lineno or node.lineno,
                               node.end_col_offset or 0, prefix + self._snippet(node), pattern, kind, not aware,
                               reason))
        return not aware

    def _helper_call(self, name: str, args: list, like) -> ast.Call:
        self.used.add(name)
        func = ast.copy_location(ast.Name(id=HELPERS[name], ctx=ast.Load()), like)
        return ast.copy_location(ast.Call(func=func, args=args, keywords=[]), like)

    def visit_Compare(self, node):
        self.generic_visit(node)
        kinds = _compare_kind(node)
        if not kinds:
            if len(node.ops) > 1 and _chain_kind(node):
                self.sites.append(Site(self.filename, node.lineno, node.col_offset, node.end_lineno or node.lineno,
                                       node.end_col_offset or 0, self._snippet(node), "chain",
                                       "+".join(sorted(_chain_kind(node))), False,
                                       "left as is: chained comparisons are not rewritten"))
            return node
        op = node.ops[0]
        pattern = {ast.Eq: "==", ast.NotEq: "!=", ast.In: "in", ast.NotIn: "not in"}[type(op)]
        if not self._site(node, pattern, kinds):
            return node
        args = [node.left, node.comparators[0]]
        if isinstance(op, ast.Eq):
            return self._helper_call("eq", args, node)
        if isinstance(op, ast.NotEq):
            return self._helper_call("ne", args, node)
        call = self._helper_call("contains", args, node)
        if isinstance(op, ast.NotIn):
            return ast.copy_location(ast.UnaryOp(op=ast.Not(), operand=call), node)
        return call

    def visit_Call(self, node):
        self.generic_visit(node)
        if not _startswith_call(node) or not isinstance(node.func, ast.Attribute):  # (the first implies the second)
            return node
        kinds = _prefix_kind(node.args[0])
        if not kinds or not self._site(node, "startswith", kinds):
            return node
        return self._helper_call("startswith", [node.func.value, *node.args], node)

    def visit_MatchValue(self, node):
        self.generic_visit(node)
        s = _str_const(node.value)
        kinds = _classify_str(s)
        if s is None or not kinds or not self._site(node, "case", kinds, prefix="case "):
            return node
        alt = ast.copy_location(ast.MatchValue(value=ast.copy_location(ast.Constant(_counterpart_literal(s)),
                                                                         node.value)), node)
        return ast.copy_location(ast.MatchOr(patterns=[node, alt]), node)

    # skip annotations: they are not run (or are stringified under PEP 563) and never hold device comparisons
    def visit_arg(self, node):
        return node


def _import_position(body: list) -> int:
    i = 0
    if body and isinstance(body[0], ast.Expr) and _str_const(body[0].value) is not None:
        i = 1
    while i < len(body) and isinstance(body[i], ast.ImportFrom) and body[i].module == "__future__":
        i += 1
    return i


def rewrite_tree(tree: ast.Module, text: str, filename: str) -> tuple[ast.Module, list[Site]]:
    """Rewrite ``tree`` in place; return it and every site looked at (rewritten or skipped)."""
    rw = CudaComparisonRewriter(text, filename)
    tree = rw.visit(tree)
    if rw.used:
        pos = _import_position(tree.body)
        anchor = tree.body[pos] if pos < len(tree.body) else tree.body[-1]
        imp = ast.ImportFrom(module=RUNTIME_MODULE, level=0,
                             names=[ast.alias(name=n, asname=HELPERS[n]) for n in sorted(rw.used)])
        located: list[ast.ImportFrom | ast.alias] = [imp, *imp.names]
        for n in located:
            n.lineno = n.end_lineno = anchor.lineno
            n.col_offset = n.end_col_offset = 0
        tree.body.insert(pos, imp)
    ast.fix_missing_locations(tree)
    return tree, rw.sites


def _text(source: str | bytes) -> str:
    return importlib.util.decode_source(source) if isinstance(source, (bytes, bytearray)) else source


def rewrite_source(source: str | bytes, filename: str) -> tuple[CodeType, list[Site]]:
    """Parse, rewrite and compile ``source`` (str, or bytes honouring a PEP 263 coding cookie).

    Returns the module code object (compiled like the import system does: ``dont_inherit=True``) and the
    sites. A ``SyntaxError`` propagates exactly as the plain compile would raise it.
    """
    # compile, not ast.parse: a SyntaxError raised as the import system raises it (no frame of ast.py)
    tree = cast(ast.Module, compile(source, filename, "exec", ast.PyCF_ONLY_AST, dont_inherit=True))
    tree, sites = rewrite_tree(tree, _text(source), filename)
    return compile(tree, filename, "exec", dont_inherit=True, optimize=-1), sites


def rewrite_to_text(source: str | bytes, filename: str = "<string>") -> str:
    """The rewritten module as source text (for inspection and debugging; line numbers are not kept)."""
    tree = cast(ast.Module, compile(source, filename, "exec", ast.PyCF_ONLY_AST, dont_inherit=True))
    tree, _ = rewrite_tree(tree, _text(source), filename)
    return ast.unparse(tree)
