"""The AST walk: CUDA-isms of one Python source, named by the scheme of :mod:`ascend_shim.scan.symbols`."""
from __future__ import annotations

import ast
import dataclasses
import re
from typing import cast

from . import symbols as S


@dataclasses.dataclass
class RawFinding:
    line: int
    col: int            # 1-based, like flake8
    category: str
    symbol: str
    keys: tuple[str, ...]
    text: str           # what the source says (the literal, the dotted name, the import)
    rewrite: str | None = None  # device comparisons: "rewritten", or why the user-code rewrite leaves it


_FSTRING_HEAD_RE = re.compile(r"^cuda(:\d*)?$")


def _docstring_nodes(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                out.add(id(body[0].value))
    return out


def _str_const(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _fstring_head(node) -> str | None:
    """The leading literal part of an f-string (``f"cuda:{rank}"`` -> ``"cuda:"``)."""
    if isinstance(node, ast.JoinedStr) and node.values:
        return _str_const(node.values[0])
    return None


def _is_cuda_literal(node) -> bool:
    s = _str_const(node)
    if s is not None:
        return S.is_cuda_device_string(s)
    head = _fstring_head(node)
    return head is not None and _FSTRING_HEAD_RE.match(head) is not None


class Visitor(ast.NodeVisitor):
    """Collects :class:`RawFinding` records; ``aliases`` maps local names to what they were imported as."""

    def __init__(self, tree: ast.AST):
        self.findings: list[RawFinding] = []
        self.aliases: dict[str, str | None] = {}
        self.imported: set[str] = set()  # top-level names of the absolute imports
        self._skip: set[int] = _docstring_nodes(tree)   # ids of nodes already reported (or docstrings)
        self._seen: set[tuple[int, int, str]] = set()
        self._collect_imports(tree)
        self._env_names: set[int] = self._collect_env_names(tree)

    # -- bookkeeping ------------------------------------------------------------------------------------------
    def _add(self, node, category: str, symbol: str, keys, text: str) -> None:
        line, col = getattr(node, "lineno", 0), getattr(node, "col_offset", -1) + 1
        if (line, col, symbol) in self._seen:
            return
        self._seen.add((line, col, symbol))
        self.findings.append(RawFinding(line, col, category, symbol, tuple(keys), text))

    def _collect_imports(self, tree) -> None:
        """A first pass: module-level and local imports alike bind names (a scanner does not track scopes)."""
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.imported.add(a.name.partition(".")[0])
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        top = a.name.split(".")[0]
                        self.aliases[top] = top
            elif isinstance(node, ast.ImportFrom):
                if not node.level and node.module:
                    self.imported.add(node.module.partition(".")[0])
                for a in node.names:
                    if a.name == "*":
                        continue
                    local = a.asname or a.name
                    self.aliases[local] = None if node.level else f"{node.module}.{a.name}"

    def _collect_env_names(self, tree) -> set[int]:
        """Ids of the string constants that name an environment variable where the program reads or sets it:
        ``os.environ[...]``, ``os.environ.get/setdefault/pop(...)``, ``os.getenv/putenv/unsetenv(...)``,
        ``"X" in os.environ``, and the keys of a dict literal given to ``os.environ.update`` or as ``env=``."""
        found: set[int] = set()

        def environ(node) -> bool:
            return self.qualname(node) == "os.environ"

        def keys_of(node):
            if isinstance(node, ast.Dict):
                found.update(id(k) for k in node.keys if k is not None)

        for node in ast.walk(tree):
            if isinstance(node, ast.Subscript) and environ(node.value):
                found.add(id(node.slice))
            elif isinstance(node, ast.Call):
                q = self.qualname(node.func)
                if q in _ENV_CALLS and node.args:
                    found.add(id(node.args[0]))
                elif q == "os.environ.update" and node.args:
                    keys_of(node.args[0])
                for k in node.keywords:
                    if k.arg == "env":
                        keys_of(k.value)
            elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) \
                    and any(environ(c) for c in node.comparators):
                found.add(id(node.left))
        return found

    def qualname(self, node) -> str | None:
        """``torch.cuda.synchronize`` for an attribute chain rooted at an imported name, else None."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        base = self.aliases.get(node.id)
        if base is None:
            return None
        return ".".join([base] + parts[::-1])

    # -- imports ----------------------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            hit = S.classify_api(a.name)
            if hit:
                self._add(a, *hit, text=f"import {a.name}" + (f" as {a.asname}" if a.asname else ""))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module:
            return  # relative imports are the repository's own modules
        for a in node.names:
            # the imported name when it is a CUDA-ism itself, else the module (``from triton.language import x``)
            hit = (S.classify_api(f"{node.module}.{a.name}") if a.name != "*" else None) \
                or S.classify_api(node.module)
            if hit:
                self._add(a, *hit, text=f"from {node.module} import {a.name}")

    # -- names ------------------------------------------------------------------------------------------------
    def visit_Attribute(self, node: ast.Attribute) -> None:
        q = self.qualname(node)
        if q is not None:
            hit = S.classify_api(q)
            if hit:
                self._add(node, *hit, text=q)
                return  # the prefix (torch.cuda of torch.cuda.synchronize) is not a finding of its own
        if node.attr == "is_cuda":
            self._add(node, S.DEVICE_COMPARE, S.DEVICE_COMPARE_IS_CUDA, S.IS_CUDA_KEYS, ".is_cuda")
        self.generic_visit(node)

    # -- calls ------------------------------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and self.qualname(func) is None:
            if func.attr == "cuda":
                self._add(func, S.DEVICE_STRING, S.METHOD_CUDA, S.METHOD_CUDA_KEYS, ".cuda()")
            elif func.attr in ("startswith", "endswith") and node.args:
                self._compare_args(node, node.args[0], f".{func.attr}(...)")
        q = self.qualname(func)
        if q in ("torch.amp.GradScaler", "torch.amp.grad_scaler.GradScaler") and not node.args and not any(
                k.arg == "device" for k in node.keywords):
            self._add(node, S.DEVICE_STRING, S.GRAD_SCALER_DEFAULT, (S.GRAD_SCALER_DEFAULT, S.DEVICE_STRING_CUDA),
                      "torch.amp.GradScaler() (device defaults to 'cuda')")
        self.generic_visit(node)

    def _compare_args(self, node, arg, text) -> None:
        values = arg.elts if isinstance(arg, (ast.Tuple, ast.List, ast.Set)) else [arg]
        for v in values:
            s = _str_const(v)
            if s is None:
                continue
            if s.startswith("cuda"):
                self._skip.add(id(v))
                self._add(node, S.DEVICE_COMPARE, S.DEVICE_COMPARE_CUDA, (S.DEVICE_COMPARE_CUDA,), f'{text} "{s}"')
            elif s.startswith("nccl"):
                self._skip.add(id(v))
                self._add(node, S.DEVICE_COMPARE, S.DEVICE_COMPARE_NCCL, (S.DEVICE_COMPARE_NCCL,), f'{text} "{s}"')

    # -- comparisons ------------------------------------------------------------------------------------------
    def visit_Compare(self, node: ast.Compare) -> None:
        operands = [node.left, *node.comparators]
        for operand in operands:
            for v in (operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]):
                if _is_cuda_literal(v):
                    self._skip.add(id(v))
                    self._add(node, S.DEVICE_COMPARE, S.DEVICE_COMPARE_CUDA, (S.DEVICE_COMPARE_CUDA,),
                              "comparison with " + _literal_text(v))
                elif _str_const(v) == "nccl":
                    self._skip.add(id(v))
                    self._add(node, S.DEVICE_COMPARE, S.DEVICE_COMPARE_NCCL, (S.DEVICE_COMPARE_NCCL,),
                              'comparison with "nccl"')
                elif S.CUDA_TENSOR_TYPE_RE.match(_str_const(v) or ""):
                    self._skip.add(id(v))
                    self._add(node, S.DEVICE_COMPARE, S.DEVICE_COMPARE_TENSOR_TYPE, (S.DEVICE_COMPARE_TENSOR_TYPE,),
                              "comparison with " + _literal_text(v))
                elif isinstance(v, ast.Call) and self.qualname(v.func) == "torch.device" and v.args \
                        and _is_cuda_literal(v.args[0]):
                    self._skip.add(id(v.args[0]))
                    self._add(node, S.DEVICE_COMPARE, S.DEVICE_COMPARE_CUDA, (S.DEVICE_COMPARE_CUDA,),
                              "comparison with torch.device(" + _literal_text(v.args[0]) + ")")
        self.generic_visit(node)

    # -- literals ---------------------------------------------------------------------------------------------
    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        if id(node) in self._skip:
            return
        if _is_cuda_literal(node):
            self._add(node, S.DEVICE_STRING, S.DEVICE_STRING_CUDA, (S.DEVICE_STRING_CUDA,), _literal_text(node))
            return
        for v in node.values:   # "CUDA_VISIBLE_DEVICES={ids} python ..." -> env names in the literal parts
            s = _str_const(v)
            if s is None:
                self.visit(v)
                continue
            for cat, sym, keys in S.classify_string(s):
                if cat not in (S.DEVICE_STRING, S.ENV):
                    self._add(node, cat, sym, keys, _short(_literal_text(node)))

    def visit_Constant(self, node: ast.Constant) -> None:
        if not isinstance(node.value, str) or id(node) in self._skip:
            return
        for cat, sym, keys in S.classify_string(node.value):
            if cat != S.ENV or id(node) in self._env_names:  # a name in a message is no environment read
                self._add(node, cat, sym, keys, _short(repr(node.value)))


_ENV_CALLS = ("os.environ.get", "os.environ.setdefault", "os.environ.pop", "os.getenv", "os.putenv", "os.unsetenv")


def _literal_text(node) -> str:
    s = _str_const(node)
    if s is not None:
        return repr(s)
    try:
        return ast.unparse(node)
    except Exception:  # pragma: no cover - unparse handles every expression the parser produced
        return "f-string"


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


_NOT_A_REWRITE_FORM = ("left as is: the user-code rewrite handles ==, !=, in, not in, .startswith() and "
                       "match/case against a \"cuda\" / \"cuda:N\" / \"nccl\" literal or torch.device(\"cuda\")")


def _apply_rewrite_rules(findings: list[RawFinding], source, filename: str) -> list[RawFinding]:
    """Device comparisons get the verdict of the runtime's own rules: the user-code rewrite is run on the same
    source (:func:`ascend_shim.rewrite.rewrite_tree`) and each comparison says whether it is rewritten."""
    from ..rewrite.transform import _text, rewrite_tree

    try:
        tree = cast(ast.Module, compile(source, filename, "exec", ast.PyCF_ONLY_AST, dont_inherit=True))
        _, sites = rewrite_tree(tree, _text(source), filename)
    except (SyntaxError, ValueError):
        return findings
    by_pos = {(s.line, s.col + 1): s for s in sites}
    used, out = set(), []
    for f in findings:
        site = by_pos.get((f.line, f.col))
        if site is not None and site.pattern == "case" and f.category == S.DEVICE_STRING:
            f = RawFinding(f.line, f.col, S.DEVICE_COMPARE, S.DEVICE_COMPARE_CUDA, (S.DEVICE_COMPARE_CUDA,),
                           "case " + f.text)  # the literal of a case pattern is a comparison, not a device
        if f.symbol in (S.DEVICE_COMPARE_CUDA, S.DEVICE_COMPARE_NCCL):
            if site is None:
                f.rewrite = _NOT_A_REWRITE_FORM
            else:
                used.add((site.line, site.col + 1))
                f.rewrite = "rewritten" if site.rewritten else site.reason
        out.append(f)
    for pos, site in by_pos.items():  # forms only the rewrite names (device("cuda") == d with a bare name ...)
        if pos not in used and not any(f.line == pos[0] and f.col == pos[1] and f.category == S.DEVICE_COMPARE
                                       for f in out):
            symbol = S.DEVICE_COMPARE_NCCL if site.kind == "backend" else S.DEVICE_COMPARE_CUDA
            out.append(RawFinding(pos[0], pos[1], S.DEVICE_COMPARE, symbol, (symbol,), site.snippet,
                                  "rewritten" if site.rewritten else site.reason))
    return out


def scan_source(source: bytes | str, filename: str = "<source>", imports: set | None = None) -> list[RawFinding]:
    """Findings of one source text (raises SyntaxError / ValueError when it does not parse); the top-level
    names it imports absolutely are added to ``imports`` when given."""
    tree = ast.parse(source, filename=filename)
    v = Visitor(tree)
    if imports is not None:
        imports.update(v.imported)
    v.visit(tree)
    findings = _apply_rewrite_rules(v.findings, source, filename)
    findings.sort(key=lambda f: (f.line, f.col, f.symbol))
    return findings
