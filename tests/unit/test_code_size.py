"""Size rule of the layout (issue 48): no module over 600 lines, no function over 60.

A module over ~600 lines is two modules; a function over ~60 lines is asking to be split (STYLE.md,
"Sizes"). The rule covers ``lineage_data/`` and ``connectors/``; ``lineage_data/connectors`` is a
symlink to ``../connectors``, so the walk never follows it and each file is counted once.
"""

import ast
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("lineage_data", "connectors")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60


def _python_files():
    for top in SCANNED:
        for dirpath, dirnames, filenames in os.walk(ROOT / top, followlinks=False):
            # os.walk lists a symlinked folder in dirnames but does not enter it; drop it anyway so
            # the rule does not depend on that default
            dirnames[:] = sorted(d for d in dirnames if not (Path(dirpath) / d).is_symlink())
            for name in sorted(filenames):
                path = Path(dirpath) / name
                if name.endswith(".py") and not path.is_symlink():
                    yield path


def _functions(tree: ast.AST):
    """(qualified name, lines) of every function and method, def line to last line."""
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                # decorators sit above child.lineno, so they are excluded; the docstring is inside
                found.append((name, child.end_lineno - child.lineno + 1, child.lineno))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def test_the_walk_sees_both_trees_once():
    files = [p.relative_to(ROOT).as_posix() for p in _python_files()]
    assert len(files) == len(set(files))
    assert any(f.startswith("lineage_data/_core/") for f in files)
    assert any(f.startswith("connectors/testing/") for f in files)
    assert not any(f.startswith("lineage_data/connectors/") for f in files)


def test_no_module_over_600_lines():
    over = []
    for path in _python_files():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            over.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert not over, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(over)


def test_no_function_over_60_lines():
    over = []
    for path in _python_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for name, lines, lineno in _functions(tree):
            if lines > MAX_FUNCTION_LINES:
                over.append(f"{path.relative_to(ROOT)}:{lineno} {name}: {lines} lines")
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(over)
