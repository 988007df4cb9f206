"""The package map in pyproject.toml covers every package folder, and golden models stay framework-free."""

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_folder_is_listed_in_pyproject():
    cfg = _pyproject()["tool"]["setuptools"]
    listed = set(cfg["packages"])
    found = set()
    for pkg, folder in cfg["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([pkg, *rel.parts]))
    assert found - listed == set(), "add these packages to pyproject.toml [tool.setuptools] packages"
    assert listed - found == set(), "these listed packages have no folder"


def test_golden_models_import_neither_amaranth_nor_cocotb():
    for path in (ROOT / "sim" / "golden").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in ("amaranth", "cocotb", "cocotb_tools"), f"{path}: imports {name}"
