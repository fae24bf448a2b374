"""Issue 26 must-show 7: the ``privacy`` key and mode names live in the mode registry only.

An AST scan of ``fedpriv/``, ``strategies/``, ``clients/`` and ``scenarios/``: outside the
registry and the mode modules (``fedpriv/modes/``) and the Flower-side declaration
(``scenarios/privacy_modes.py``) no code reads ``X["privacy"]`` or ``X.get("privacy")``, and
no comparison branches on a mode-name literal (``mode == "zonal"``, ``privacy in (...)``):
code asks :func:`fedpriv.modes.mode_of` for the mode object and reads its attributes.
Mode names still appear as plain data (a scenario's defaults, a table's row order), which is
config, not a branch.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fedpriv.modes import names

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("fedpriv", "strategies", "clients", "scenarios")
OWNERS = ("fedpriv/modes/", "scenarios/privacy_modes.py")  # the registry and the modes
KEY = "privacy"
MODE_NAMES = frozenset(names(selectable=False))
# words that mark an operand as a privacy mode (its name or its object)
MODE_WORDS = ("privacy", "mode")


def _sources() -> list[Path]:
    files = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    return [p for p in files if not str(p.relative_to(ROOT)).startswith(OWNERS)]


def _literals(node: ast.AST) -> set[str]:
    """The string constants of a literal or a tuple/list/set of literals."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return {e.value for e in node.elts if isinstance(e, ast.Constant)}
    return set()


def _is_key(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value == KEY


def violations(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for every raw read of the key or branch on a mode-name literal."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_key(node.slice):
            out.append((node.lineno, f"[{KEY!r}]"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and _is_key(node.args[0])
        ):
            out.append((node.lineno, f".get({KEY!r})"))
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            named = set().union(*(_literals(o) for o in operands)) & MODE_NAMES
            text = " ".join(ast.unparse(o) for o in operands if not _literals(o)).lower()
            if named and any(word in text for word in MODE_WORDS):
                out.append((node.lineno, f"branch on mode name(s) {sorted(named)}"))
    return out


def test_the_scan_catches_what_it_forbids():
    """The scan flags each forbidden form and passes the registry's forms (it can fail)."""
    bad = (
        'a = cfg["privacy"]\nb = cfg.get("privacy", "none")\n'
        'if mode == "zonal": pass\nif cfg_mode in ("global-dp", "dp-sgd"): pass\n'
    )
    assert [line for line, _ in violations(ast.parse(bad))] == [1, 2, 3, 4]
    good = (
        "a = mode_of(cfg)\nif a is zonal.MODE: pass\nif a.audit == 'example': pass\n"
        'if level == "none": pass\nd = {"privacy": "zonal"}\n'
    )
    assert violations(ast.parse(good)) == []


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_privacy_key_or_mode_branch_outside_the_registry(path):
    found = violations(ast.parse(path.read_text(), filename=str(path)))
    assert not found, f"{path.relative_to(ROOT)}: " + "; ".join(f"line {n}: {w}" for n, w in found)
