"""The house rules: modules import each other without circles, layers keep their direction, imports sit at
the top of their module unless they load an optional dependency, modules stay within a line budget, the
layer folders are packages under the import root, and every place that names devices reads them from the
one registry."""

from __future__ import annotations

import ast
import os
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

import vtakit
from vtakit.cli import build_parser
from vtakit.compiler.backends.vta import ops
from vtakit.devices import ACCELERATOR, HOST, device_names, open_device, register_device
from vtakit.errors import DeviceError
from vtakit.isa import HwConfig
from vtakit.sim import SimDevice

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def _package_dirs() -> dict[str, Path]:
    """Every package under the import root (through its links to the top-level folders) -> its folder."""
    return {".".join(init.parent.relative_to(ROOT).parts): init.parent
            for init in _walk(ROOT / "vtakit") if init.name == "__init__.py"}


def _walk(folder: Path):
    """Every file under `folder`, following the links `vtakit/isa -> ../isa` (Path.rglob does not)."""
    for parent, dirs, files in os.walk(folder, followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        yield from (Path(parent) / f for f in files)


def _layer(module: str) -> str:
    """The layer a module belongs to: vtakit.<first part> (vtakit.compiler.backends.cpu -> vtakit.compiler)."""
    return ".".join(module.split(".")[:2])


def _module_files() -> dict[str, Path]:
    """Every module under the import root, by import name (a package by its __init__.py)."""
    out = {}
    for path in _walk(ROOT / "vtakit"):
        if path.suffix == ".py":
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:` (annotations only: never run)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for part in node.body for n in ast.walk(part)}
    return skip


def _runtime_imports(module: str, path: Path, modules: dict[str, Path]):
    """(name, import node, inside a function) for every import `module` runs: a vtakit name resolved to
    the module it loads (relative imports included), any other name as written."""
    tree = ast.parse(path.read_text())
    skip = _type_checking_only(tree)
    in_function = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                   for n in ast.walk(f)}

    def resolve(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            yield resolve(name) if name.split(".")[0] == "vtakit" else name, node, id(node) in in_function


def _imports(module: str, path: Path, modules: dict[str, Path]):
    """(imported vtakit module, line, inside a function) for every import `module` runs."""
    for name, node, in_function in _runtime_imports(module, path, modules):
        if name.split(".")[0] == "vtakit" and name != module:
            yield name, node.lineno, in_function


def module_graph() -> dict[str, dict[str, int]]:
    """Module -> {module it imports: line}, module-level and function-level imports alike.  Importing
    a.b.c also runs the __init__ of a.b (and of a) unless the importer is inside it already: those
    packages are edges too (a package __init__ that re-exports is where hidden circles start)."""
    modules = _module_files()
    graph: dict[str, dict[str, int]] = {m: {} for m in modules}
    for module, path in modules.items():
        own = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 2)}
        for target, line, _ in _imports(module, path, modules):
            parts = target.split(".")
            for i in range(2, len(parts) + 1):
                package = ".".join(parts[:i])
                if package in modules and package not in own and package != module:
                    graph[module].setdefault(package, line)
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(graph[target])))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_module_imports_itself_through_others():
    """No circle among modules, function-level imports included (a circle hidden inside a function still
    ties the modules together); `if TYPE_CHECKING:` imports are annotations and do not count."""
    graph = module_graph()
    described = []
    for component in _cycles(graph):
        members = set(component)
        edges = [f"{a} -> {b} (line {graph[a][b]})" for a in component for b in graph[a] if b in members]
        described.append(f"{len(component)} modules: " + "; ".join(edges))
    assert not described, "import circles:\n" + "\n".join(described)


def test_layers_keep_their_direction():
    """The simulators never need the RTL, and the compiler never needs the board."""
    layers: dict[str, set[str]] = defaultdict(set)
    for module, targets in module_graph().items():
        layers[_layer(module)] |= {_layer(t) for t in targets}
    assert "vtakit.hw" not in layers["vtakit.sim"] and "vtakit.fpga" not in layers["vtakit.compiler"]
    library = {layer: t for layer, t in layers.items() if layer not in ("vtakit.cli", "vtakit.__main__")}
    assert not [layer for layer, t in library.items() if "vtakit.cli" in t], "the library imports its CLI"


def test_no_module_imports_the_import_root():
    """vtakit/__init__.py imports the compiler at its top (for `vtakit.compile`), and every module's import
    runs that __init__ first, so a module that imported `vtakit` itself (`vtakit.compile`, a re-export) would
    be a circle through the root that the graph above cannot show: modules import what they use directly."""
    modules = _module_files()
    found = [f"{path.relative_to(ROOT)}:{line}" for module, path in modules.items() if module != "vtakit"
             for target, line, _ in _imports(module, path, modules) if target == "vtakit"]
    assert not found, f"modules importing the import root: {found}"


# The optional dependencies by the top-level name they are imported as -> their distribution, which must be
# one of pyproject's extras and none of its dependencies (the next test checks), so that a required package
# cannot pass for optional.
OPTIONAL_IMPORTS = {"pynq": "pynq", "pynqmetadata": "pynq", "cuda": "cuda-bindings", "torch": "torch",
                    "onnxruntime": "onnxruntime", "sklearn": "scikit-learn"}
# Part of Python, yet a package of its own on some systems (Debian's python3-tk): optional too.
OPTIONAL_STDLIB = {"tkinter": "python3-tk"}
LAZY = re.compile(r"#\s*lazy:\s*([A-Za-z_][\w-]*)")


def _distribution(requirement: str) -> str:
    """`dask[distributed]>=2024.1` -> `dask`."""
    return re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0].lower()


def _optional(name: str) -> str | None:
    """The optional distribution a top-level import name belongs to (None: a required one, or the stdlib)."""
    return OPTIONAL_IMPORTS.get(name) or OPTIONAL_STDLIB.get(name)


def test_the_optional_dependencies_are_pyprojects_extras():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    required = {_distribution(r) for r in project["dependencies"]}
    extras = {_distribution(r) for reqs in project["optional-dependencies"].values() for r in reqs}
    wrong = {name: dist for name, dist in OPTIONAL_IMPORTS.items() if dist not in extras or dist in required}
    assert not wrong, f"listed as optional but not an extra only: {wrong}"


def test_function_level_imports_load_optional_dependencies_and_say_which():
    """An import inside a function hides a dependency from the reader and from static tools, and turns a
    missing package into a failure in the middle of a run, so imports sit at the top of their module (the
    CLI and `vtakit/__init__.py` too).  The one exception is an optional dependency (one of pyproject's
    extras, OPTIONAL_IMPORTS), imported where it is used with `# lazy: <its import name>` on the import; a
    vtakit module that imports one at its top may be imported lazily the same way, naming it."""
    modules = _module_files()
    runtime = {m: list(_runtime_imports(m, p, modules)) for m, p in modules.items()}
    top_level = {m: {name.split(".")[0] for name, _, lazy in found if not lazy} for m, found in runtime.items()}
    bad = []
    for module, path in modules.items():
        lines = path.read_text().splitlines()
        for name, node, in_function in runtime[module]:
            if not in_function:
                continue
            said = LAZY.search(" ".join(lines[node.lineno - 1:node.end_lineno]))
            named = _optional(said.group(1)) if said else None
            root = name.split(".")[0]
            loads = {_optional(t) for t in top_level.get(name, ())} if root == "vtakit" else {_optional(root)}
            if named is None or named not in loads:
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert not bad, ("function-level imports that are not an optional dependency named by `# lazy: <name>` "
                     "(move them to the top of the module):\n" + "\n".join(sorted(set(bad))))


MAX_MODULE_LINES = 550
MAX_TOTAL_LINES = 37_000   # the library (tests and benchmarks aside); raise it on purpose, not by drift


def test_line_budget():
    """Modules stay readable (tinygrad keeps a line budget in CI; so do we)."""
    sizes = {m: p.read_text().count("\n") for m, p in _module_files().items()}
    too_long = {m: n for m, n in sizes.items() if n > MAX_MODULE_LINES}
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines: {too_long}"
    assert sum(sizes.values()) <= MAX_TOTAL_LINES, f"{sum(sizes.values()):,} lines in all"


def test_the_registry_knows_every_device_and_the_cli_offers_them():
    assert {"fsim", "sim", "rtl", "pynq-sim", "pynq"} <= set(device_names(ACCELERATOR))
    assert set(device_names(HOST)) == {"cpu", "cuda"}
    assert "fsim" not in device_names(ACCELERATOR, counts_cycles=True)
    run = build_parser().parse_args(["run", "m.vtamod", "--input", "x.npy", "--device", "pynq-sim"])
    assert run.device == "pynq-sim"


def test_a_registered_device_runs_operators_and_modules():
    opened = []

    def factory(config, **options):
        opened.append(config.label)
        return SimDevice(config, model="functional", **options)

    register_device("test-functional", factory, description="a test device", counts_cycles=False)
    cfg = HwConfig.preset("pynq")
    assert open_device("test-functional", cfg).model == "functional" and opened == ["pynq"]
    x = np.arange(-64, 64, dtype=np.int32).reshape(1, 128, 1, 1) * 4
    y, _ = ops.requantize(x, shift=2, config=cfg, device="test-functional")
    np.testing.assert_array_equal(y, (x // 4).astype(np.int8))
    with pytest.raises(DeviceError, match="unknown device 'nope'"):
        open_device("nope", cfg)
    with pytest.raises(DeviceError, match="not an accelerator Device"):
        open_device("cpu", cfg)


def test_compile_defaults_to_the_default_preset():
    assert vtakit.compile.__defaults__[0] == vtakit.isa.DEFAULT_PRESET


def test_every_layer_folder_is_a_package_under_the_import_root():
    """The top-level folders reach `vtakit.*` through relative links, so a wheel and static tools see them;
    packages are found, never listed, so none can be forgotten."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "package-dir" not in config and config["packages"] == {"find": {"include": ["vtakit*"]}}
    for layer in ("isa", "sim", "hw", "compiler", "scheduling", "fpga"):
        link = ROOT / "vtakit" / layer
        assert link.is_symlink() and str(link.readlink()) == f"../{layer}", layer
        assert (ROOT / layer / "__init__.py").is_file()
    folders = {f for f in _walk(ROOT / "vtakit") if f.suffix == ".py"}
    orphans = sorted(str(f.parent.relative_to(ROOT)) for f in folders if not (f.parent / "__init__.py").is_file())
    assert not orphans, f"python files in folders without __init__.py (a wheel would lose them): {orphans}"

