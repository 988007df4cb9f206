"""The package's layers point one way: ``hdl`` <- ``sim`` (golden models, performance model) <- ``host`` (driver,
API, transports, CLI) <- ``fpga`` (bitstreams, reports) <- ``tb`` (testbenches) <- tests and examples. A module
imports only from its own layer and those below it, wherever the import stands (a function-level import is
still a dependency), and the module-level imports form no cycle. Read from the source, no import executed."""

import ast
import pathlib
from collections import defaultdict

ROOT = pathlib.Path(__file__).resolve().parent.parent
LAYERS = ("hdl", "sim", "host", "fpga", "tb")

#: The formats the RTL is generated from and the golden models follow, defined once (element types and
#: status codes, the instruction word, the link packet's CRC, topologies): ``hdl`` may import these from
#: ``sim.golden``, and they import nothing of ``hdl`` but its layouts.
FORMATS = {"sim.golden.types", "sim.golden.program", "sim.golden.link", "sim.golden.topology"}


def _modules():
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join(parts), path


def _imports(name, path):
    """(imported module, line, at module level) for every import of a module of this package in ``path``."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    tree = ast.parse(path.read_text(), str(path))
    top = {id(n) for n in tree.body}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                target = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "syncfabric":
                target = node.module.split(".")[1:]
            else:
                continue
            # ``from m import x`` depends on m.x when x is a module, else on m (resolved by _graph)
            out += [(".".join(target + [a.name]), node.lineno, id(node) in top) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name[len("syncfabric."):], node.lineno, id(node) in top)
                    for a in node.names if a.name.startswith("syncfabric.")]
    return out


def _layer(module):
    return LAYERS.index(module.split(".")[0]) if module.split(".")[0] in LAYERS else None


def _graph():
    modules = dict(_modules())
    edges = defaultdict(list)
    for name, path in modules.items():
        for target, line, top in _imports(name, path):
            while target not in modules and "." in target:      # ``from pkg import name`` of a non-module
                target = target.rsplit(".", 1)[0]
            if target in modules and target != name:
                edges[name].append((target, line, top))
    return modules, edges


def test_no_module_imports_from_a_layer_above_it():
    modules, edges = _graph()
    wrong = []
    for name, targets in edges.items():
        for target, line, _ in targets:
            if _layer(target) <= _layer(name):
                continue
            if name.startswith("hdl.") and target in FORMATS:
                continue
            wrong.append(f"{modules[name].relative_to(ROOT)}:{line} imports {target}")
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def test_the_formats_hdl_uses_import_only_layouts_from_hdl():
    modules, edges = _graph()
    for name in FORMATS:
        for target, line, _ in edges.get(name, []):
            assert not target.startswith("hdl.") or target == "hdl.common.layouts", \
                f"{modules[name].relative_to(ROOT)}:{line} imports {target}"


def test_module_level_imports_have_no_cycle():
    _, edges = _graph()
    top = {n: [t for t, _, at_top in ts if at_top] for n, ts in edges.items()}
    state, stack = {}, []

    def visit(n):
        state[n] = "open"
        stack.append(n)
        for t in top.get(n, []):
            if state.get(t) == "open":
                cycle = stack[stack.index(t):] + [t]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if t not in state:
                visit(t)
        stack.pop()
        state[n] = "done"

    for n in sorted(top):
        if n not in state:
            visit(n)


def test_the_checker_sees_relative_and_absolute_imports(tmp_path):
    """The parser behind these tests, on a made-up module: relative imports resolve against the package,
    absolute ones of this package are kept, others ignored."""
    f = tmp_path / "mod.py"
    f.write_text("import os\nfrom . import x\nfrom ...hdl.ace import regs\nimport syncfabric.tb.smoke\n"
                 "def f():\n    from ...sim.golden.types import DType\n")
    got = _imports("host.coarse.mod", f)
    assert got == [("host.coarse.x", 2, True), ("hdl.ace.regs", 3, True), ("tb.smoke", 4, True),
                   ("sim.golden.types.DType", 6, False)]
