"""The ``privacy`` key and mode names live in the mode registry only.

An AST scan of ``fedpriv/``, ``strategies/``, ``clients/`` and ``scenarios/``: outside the
registry and the mode modules (``fedpriv/privacy/modes/``) and the Flower-side declaration
(``scenarios/app/privacy_modes.py``) no code reads ``X["privacy"]`` or ``X.get("privacy")``, and
no comparison branches on a mode-name literal (``mode == "zonal"``, ``privacy in (...)``):
code asks :func:`fedpriv.privacy.modes.mode_of` for the mode object and reads its attributes.
Mode names still appear as plain data (a scenario's defaults, a table's row order), which is
config, not a branch.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fedpriv.privacy.modes import names

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("fedpriv", "strategies", "clients", "scenarios")
OWNERS = ("fedpriv/privacy/modes/", "scenarios/app/privacy_modes.py")  # the registry and the modes
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


# Mode names as DATA: outside the owners a constant equal to a mode's
# name is taken from the mode (``global_dp.MODE.name``, ``mode.client_task``,
# ``mode.report_label``). ``none`` is exempt (it is also a value of attack, zonal-level,
# noise-placement). The exceptions below are other namespaces that share a word with a mode:
# each (file, literal) with why it is not a mode name.
OTHER_NAMESPACES = {
    (
        "fedpriv/reporting/console.py",
        "zonal",
    ): "the summary.json / round record block of the zonal feature",
    ("fedpriv/reporting/records.py", "zonal"): "the round record block of the zonal feature",
    ("strategies/zonal.py", "zonal"): "the round record block the zonal wrapper writes",
    ("scenarios/zonal/feature.py", "zonal"): "the feature's name and its summary/record block",
    ("scenarios/zonal/report.py", "zonal"): "the summary.json block it reads",
    ("scenarios/attacks/commands.py", "zonal"): "the attack report's zonal section",
    (
        "scenarios/dp_sgd/feature.py",
        "dp-sgd",
    ): "the feature's name (fedpriv.scenarios.config.feature.Feature)",
    ("scenarios/ifca/feature.py", "ifca"): "the scenario kind and the feature's name",
    ("scenarios/config/node_spec.py", "ifca"): "the scenario kind (node_catalog.json)",
    ("scenarios/speed/feature.py", "ifca"): "the scenario kind",
    ("scenarios/speed/keys.py", "ifca"): "the scenario kind (kinds with worker SuperNodes)",
    ("fedpriv/ifca.py", "ifca"): "the action name of a leakage-ledger entry",
    ("clients/ifca_client.py", "ifca"): "the party name of the client's ledger file",
}
DATA_NAMES = MODE_NAMES - {"none"}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants of a module, class or function."""
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                out.add(id(value))
    return out


def mode_name_constants(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of every string constant equal to a mode name (docstrings excluded)."""
    docs = _docstrings(tree)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in DATA_NAMES
        and id(node) not in docs
    ]


def test_the_data_scan_catches_a_mode_name_in_a_table():
    """A table of mode names is flagged; the registry's attributes and docstrings are not."""
    bad = 'ORDER = ("none", "global-dp", "metric-dp")\ndefaults = {"privacy": "zonal"}\n'
    assert mode_name_constants(ast.parse(bad)) == [(1, "global-dp"), (1, "metric-dp"), (2, "zonal")]
    good = '"""A docstring naming "dp-sgd"."""\nORDER = (none.MODE.name, global_dp.MODE.name)\n'
    assert mode_name_constants(ast.parse(good)) == []


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_mode_names_are_taken_from_the_modes(path):
    rel = str(path.relative_to(ROOT))
    found = [
        (n, name)
        for n, name in mode_name_constants(ast.parse(path.read_text(), filename=str(path)))
        if (rel, name) not in OTHER_NAMESPACES
    ]
    assert not found, f"{rel}: " + "; ".join(f"line {n}: {name!r}" for n, name in found)


def test_every_namespace_exception_is_still_needed():
    """An exception that no longer matches anything is removed (the list cannot go stale)."""
    used = set()
    for path in _sources():
        rel = str(path.relative_to(ROOT))
        tree = ast.parse(path.read_text(), filename=str(path))
        used |= {(rel, name) for _, name in mode_name_constants(tree)}
    assert set(OTHER_NAMESPACES) <= used, sorted(set(OTHER_NAMESPACES) - used)
