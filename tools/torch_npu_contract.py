"""Extract the real torch_npu contract from Huawei's wheels into ``tests/contract/torch_npu_manifest.json``.

Run by hand (network needed; never at test time)::

    python tools/torch_npu_contract.py [--keep DIR] [--versions 2.13.0 2.14.0 ...]

For each release line of the shim's declared torch range (2.4 ... 2.14) it downloads the newest x86_64 cp311
wheel of that line (``pip download --no-deps``; the highest version of the line, post-releases included), reads
without importing (it needs CANN):

* ``torch_npu/npu/__init__.py``: ``__all__`` (AST), and every top-level name the module binds;
* ``torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml``: the schemas of the fused ops, parsed with
  ``torch._C.parse_schema`` (argument names, order, types, defaults, keyword-only, return count);
* ``torch_npu/optim/npu_fused_adamw.py``: ``NpuFusedAdamW.__init__``'s signature (AST);
* the Python signatures of ``torch_npu.npu``'s public functions and classes, and of the ``torch_npu.npu.memory``
  functions the patches map onto (AST, imports followed to the defining module);

and writes the small manifest (the wheels are deleted afterwards). It also writes the schemas of the ops the
emulator implements, per release line, into ``ascend_shim/sim/ops/npu_schemas.json``: the builtin layer defines
``torch.ops.npu`` from them (schema strings only, data about the API).
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

LINES = ("2.4", "2.5", "2.6", "2.7", "2.8", "2.9", "2.10", "2.11", "2.12", "2.13", "2.14")
OPS = ("npu_fusion_attention", "npu_fusion_attention_grad", "npu_prompt_flash_attention",
       "npu_incre_flash_attention", "npu_fused_infer_attention_score", "npu_rotary_mul", "npu_rms_norm",
       "npu_swiglu")
SCHEMA_FILE = "torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml"
NPU_INIT = "torch_npu/npu/__init__.py"
ADAMW_FILE = "torch_npu/optim/npu_fused_adamw.py"
MEMORY_FILE = "torch_npu/npu/memory.py"
MEMORY_NAMES = ("_record_memory_history", "_snapshot", "_dump_snapshot")
ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "tests" / "contract" / "torch_npu_manifest.json"
SCHEMAS = ROOT / "ascend_shim" / "sim" / "ops" / "npu_schemas.json"


def version_key(version: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", version))


def available_versions() -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "torch-npu"], check=True,
                         capture_output=True, text=True).stdout
    match = re.search(r"Available versions:\s*(.+)", out)
    if not match:
        raise SystemExit(f"pip index versions torch-npu gave no versions:\n{out}")
    return [v.strip() for v in match.group(1).split(",")]


def newest_per_line(versions: list[str]) -> list[str]:
    chosen = []
    for line in LINES:
        of_line = [v for v in versions if v == line or v.startswith(line + ".")]
        if of_line:
            chosen.append(max(of_line, key=version_key))
    return chosen


def download(version: str, dest: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux2014_x86_64",
                    "--python-version", "3.11", "-d", str(dest), f"torch-npu=={version}"], check=True)
    (wheel,) = dest.glob(f"torch_npu-{version}-*.whl")
    return wheel


def _assigned_all(tree: ast.Module) -> list[str]:
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if (isinstance(target, ast.Name) and target.id == "__all__"
                    and isinstance(node.value, (ast.List, ast.Tuple))):
                names += [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
    return names


def module_names(zf: zipfile.ZipFile) -> tuple[list[str], list[str]]:
    """(``__all__``, every name of the module: ``__all__`` (the typed tensor classes are bound by the C++
    extension) plus every top-level name torch_npu/npu/__init__.py binds, star imports resolved)."""
    tree = ast.parse(zf.read(NPU_INIT).decode())
    bound: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            bound.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for t in ast.walk(target):
                    if isinstance(t, ast.Name):
                        bound.add(t.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            bound.add(node.target.id)
        elif isinstance(node, ast.ImportFrom) and node.level == 1:
            for alias in node.names:
                if alias.name == "*":
                    sub = f"torch_npu/npu/{node.module}.py"
                    if sub in zf.namelist():
                        bound.update(_assigned_all(ast.parse(zf.read(sub).decode())))
                else:
                    bound.add(alias.asname or alias.name)
            if node.module:
                bound.add(node.module.split(".")[0])
    npu_all = _assigned_all(tree)
    return npu_all, sorted(bound | set(npu_all))


def _schema_entry(func: str) -> dict:
    import torch

    schema = torch._C.parse_schema("npu::" + func)
    # [name, type, default (Python repr) or null, keyword-only]
    args = [[a.name, str(a.type), repr(a.default_value) if a.has_default_value() else None, bool(a.kwarg_only)]
            for a in schema.arguments]
    return {"args": args, "returns": len(schema.returns)}


def op_schemas(zf: zipfile.ZipFile, names) -> dict[str, str]:
    """The schema strings of ``names`` (``op`` or ``op.overload``) as torch_npu's build registers them: the
    ``custom:`` entry, replaced by the ``symint:`` entry of the same name where there is one."""
    import yaml

    data = yaml.safe_load(zf.read(SCHEMA_FILE).decode())
    symint = {}
    for entry in data.get("symint") or []:
        func = entry if isinstance(entry, str) else entry.get("func", "")
        if "(" in func:
            symint[func.split("(")[0]] = func
    found = {}
    for entry in data.get("custom") or []:
        func = entry.get("func", "") if isinstance(entry, dict) else ""
        name = func.split("(")[0]
        if name in names and name not in found:
            found[name] = symint.get(name, func)
    return found


def op_signatures(zf: zipfile.ZipFile) -> dict:
    return {name: _schema_entry(func) for name, func in op_schemas(zf, OPS).items()}


def _parameters(fn: ast.FunctionDef, drop_first: bool = False) -> list:
    """[name, kind, default (source text) or null] per parameter; kind: posonly, pos, varargs, kw, varkw."""
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    params = [[arg.arg, "posonly" if i < len(a.posonlyargs) else "pos", None if d is None else ast.unparse(d)]
              for i, (arg, d) in enumerate(zip(positional, defaults, strict=True))]
    if a.vararg:
        params.append([a.vararg.arg, "varargs", None])
    params += [[arg.arg, "kw", None if d is None else ast.unparse(d)]
               for arg, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
    if a.kwarg:
        params.append([a.kwarg.arg, "varkw", None])
    return params[1:] if drop_first else params


def _callable_entry(node) -> dict | None:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return {"kind": "function", "params": _parameters(node)}
    if isinstance(node, ast.ClassDef):
        for method in ("__new__", "__init__"):  # what a call of the class binds its arguments to
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == method:
                    return {"kind": "class", "method": method, "params": _parameters(item, drop_first=True)}
        return {"kind": "class", "method": None, "params": None}
    return None


def _resolve(zf: zipfile.ZipFile, path: str, name: str, depth: int = 0) -> dict | None:
    """The function or class ``name`` is bound to at the end of module ``path`` (its last top-level binding:
    a def, ``name = other``, or a relative import followed to its module), or None when it is not Python."""
    if depth > 8 or path not in zf.namelist():
        return None
    binding = None
    for node in ast.parse(zf.read(path).decode()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            binding = ("node", node)
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
              and node.targets[0].id == name):
            binding = ("alias", node.value.id) if isinstance(node.value, ast.Name) else None
        elif isinstance(node, ast.ImportFrom) and node.level >= 1:
            base = path.rsplit("/", 1)[0]
            for _ in range(node.level - 1):
                base = base.rsplit("/", 1)[0]
            module = "/".join([base, *node.module.split(".")]) if node.module else base
            for alias in node.names:
                if alias.name == "*" or (alias.asname or alias.name) == name:
                    source = name if alias.name == "*" else alias.name
                    for candidate in (module + ".py", module + "/__init__.py"):
                        found = _resolve(zf, candidate, source, depth + 1)
                        if found is not None:
                            binding = ("found", found)
                            break
                    else:
                        if alias.name != "*":
                            binding = None
    if binding is None:
        return None
    kind, value = binding
    if kind == "alias":
        return _resolve(zf, path, value, depth + 1)
    return value if kind == "found" else _callable_entry(value)


def npu_signatures(zf: zipfile.ZipFile, npu_all: list[str]) -> dict:
    """Python signatures of ``torch_npu.npu``'s public names and of the memory-history functions."""
    found = {}
    for name in npu_all:
        entry = _resolve(zf, NPU_INIT, name)
        if entry is not None:
            found[name] = entry
    for name in MEMORY_NAMES:
        entry = _resolve(zf, MEMORY_FILE, name)
        if entry is not None:
            found[f"memory.{name}"] = entry
    return found


def adamw_signature(zf: zipfile.ZipFile) -> dict:
    tree = ast.parse(zf.read(ADAMW_FILE).decode())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "NpuFusedAdamW":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    a = item.args
                    defaults = [None] * (len(a.args) - len(a.defaults)) + list(a.defaults)
                    # [name, default (source text) or null]
                    return {"args": [[arg.arg, ast.unparse(d) if d is not None else None]
                                     for arg, d in zip(a.args[1:], defaults[1:], strict=True)]}
    raise SystemExit("NpuFusedAdamW.__init__ not found")


def extract(wheel: Path) -> dict:
    with zipfile.ZipFile(wheel) as zf:
        npu_all, bound = module_names(zf)
        return {"npu_all": npu_all, "npu_names": bound, "ops": op_signatures(zf),
                "NpuFusedAdamW": adamw_signature(zf), "npu_signatures": npu_signatures(zf, npu_all)}


def emulated_schemas(wheel: Path) -> dict[str, str]:
    from ascend_shim.sim.ops.library import OPS as EMULATED

    with zipfile.ZipFile(wheel) as zf:
        return op_schemas(zf, EMULATED)


def dump(manifest: dict) -> str:
    """JSON with one line per name list and per op argument list: small, and readable in a diff."""
    def inline(value):
        return json.dumps(value, separators=(", ", ": "))

    lines = ["{", f' "source": {inline(manifest["source"])},', ' "releases": {']
    releases = list(manifest["releases"].items())
    for i, (version, rel) in enumerate(releases):
        lines.append(f'  "{version}": {{')
        lines.append(f'   "npu_all": {inline(rel["npu_all"])},')
        lines.append(f'   "npu_names": {inline(rel["npu_names"])},')
        lines.append('   "ops": {')
        ops = list(rel["ops"].items())
        for j, (op, sig) in enumerate(ops):
            lines.append(f'    "{op}": {{"returns": {sig["returns"]}, "args": [')
            lines += [f"     {inline(arg)}," for arg in sig["args"][:-1]] + [f"     {inline(sig['args'][-1])}]}}"
                                                                          + ("," if j < len(ops) - 1 else "")]
        lines.append("   },")
        lines.append(f'   "NpuFusedAdamW": {inline(rel["NpuFusedAdamW"])},')
        lines.append('   "npu_signatures": {')
        sigs = list(rel["npu_signatures"].items())
        lines += [f'    "{name}": {inline(sig)}' + ("," if k < len(sigs) - 1 else "")
                  for k, (name, sig) in enumerate(sigs)]
        lines.append("   }")
        lines.append("  }" + ("," if i < len(releases) - 1 else ""))
    lines += [" }", "}"]
    text = "\n".join(lines) + "\n"
    assert json.loads(text) == json.loads(json.dumps(manifest))
    return text


def dump_schemas(by_line: dict) -> str:
    """One line per schema: small, and readable in a diff."""
    lines = ["{", ' "source": "the custom (and symint) entries of '
                  'torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml in each release line\'s newest wheel; '
                  'written by tools/torch_npu_contract.py",', ' "lines": {']
    for i, (line_, entry) in enumerate(by_line.items()):
        lines.append(f'  "{line_}": {{"release": "{entry["release"]}", "schemas": [')
        lines += [f"   {json.dumps(schema)}," for schema in entry["schemas"][:-1]]
        lines.append(f"   {json.dumps(entry['schemas'][-1])}]}}" + ("," if i < len(by_line) - 1 else ""))
    lines += [" }", "}"]
    text = "\n".join(lines) + "\n"
    json.loads(text)
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", nargs="*", help="explicit torch-npu versions (default: newest of each line)")
    parser.add_argument("--keep", type=Path, help="keep (and reuse) the wheels in this directory")
    parser.add_argument("--out", type=Path, default=MANIFEST)
    parser.add_argument("--schemas-out", type=Path, default=SCHEMAS)
    args = parser.parse_args(argv)
    versions = args.versions or newest_per_line(available_versions())
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="torch_npu_wheels_"))
    workdir.mkdir(parents=True, exist_ok=True)
    releases, schemas = {}, {}
    try:
        for version in versions:
            found = list(workdir.glob(f"torch_npu-{version}-*.whl"))
            wheel = found[0] if found else download(version, workdir)
            releases[version] = extract(wheel)
            schemas[version] = emulated_schemas(wheel)
            print(f"{version}: {len(releases[version]['npu_all'])} names in torch_npu.npu.__all__, "
                  f"{len(releases[version]['ops'])} ops")
    finally:
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    manifest = {"source": "pip download --no-deps torch-npu==<version> (manylinux x86_64, cp311); "
                          "written by tools/torch_npu_contract.py",
                "releases": dict(sorted(releases.items(), key=lambda kv: version_key(kv[0])))}
    args.out.write_text(dump(manifest))
    print(f"wrote {args.out}")
    by_line = {}
    for version in sorted(schemas, key=version_key):
        line_ = ".".join(re.findall(r"\d+", version)[:2])
        by_line[line_] = {"release": version, "schemas": [schemas[version][name] for name in sorted(schemas[version])]}
    args.schemas_out.write_text(dump_schemas(by_line))
    print(f"wrote {args.schemas_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
