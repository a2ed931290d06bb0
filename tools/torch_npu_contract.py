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

and writes the small manifest (the wheels are deleted afterwards).
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
MANIFEST = Path(__file__).resolve().parent.parent / "tests" / "contract" / "torch_npu_manifest.json"


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


def op_signatures(zf: zipfile.ZipFile) -> dict:
    import yaml

    data = yaml.safe_load(zf.read(SCHEMA_FILE).decode())
    ops = {}
    for entry in data.get("custom") or []:
        func = entry.get("func", "") if isinstance(entry, dict) else ""
        name = func.split("(")[0]
        if name in OPS and name not in ops:
            ops[name] = _schema_entry(func)
    return ops


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
                                     for arg, d in zip(a.args[1:], defaults[1:])]}
    raise SystemExit("NpuFusedAdamW.__init__ not found")


def extract(wheel: Path) -> dict:
    with zipfile.ZipFile(wheel) as zf:
        npu_all, bound = module_names(zf)
        return {"npu_all": npu_all, "npu_names": bound, "ops": op_signatures(zf),
                "NpuFusedAdamW": adamw_signature(zf)}


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
        lines.append(f'   "NpuFusedAdamW": {inline(rel["NpuFusedAdamW"])}')
        lines.append("  }" + ("," if i < len(releases) - 1 else ""))
    lines += [" }", "}"]
    text = "\n".join(lines) + "\n"
    assert json.loads(text) == json.loads(json.dumps(manifest))
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", nargs="*", help="explicit torch-npu versions (default: newest of each line)")
    parser.add_argument("--keep", type=Path, help="keep (and reuse) the wheels in this directory")
    parser.add_argument("--out", type=Path, default=MANIFEST)
    args = parser.parse_args(argv)
    versions = args.versions or newest_per_line(available_versions())
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="torch_npu_wheels_"))
    workdir.mkdir(parents=True, exist_ok=True)
    releases = {}
    try:
        for version in versions:
            found = list(workdir.glob(f"torch_npu-{version}-*.whl"))
            wheel = found[0] if found else download(version, workdir)
            releases[version] = extract(wheel)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
