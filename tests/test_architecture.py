"""docs/ARCHITECTURE.md matches the tree: every repository path it names exists, no module is
named without its folder, and every package folder of the app is on its map."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
TOP = ("fedpriv/", "strategies/", "clients/", "scenarios/", "tests/", "bench/", "docs/",
       "examples/", "scripts/")  # fmt: skip
PLACEHOLDER = re.compile(r"<\w+>")


def _backticked() -> list[tuple[int, str]]:
    lines = DOC.read_text(encoding="utf-8").splitlines()
    return [(i, tok) for i, line in enumerate(lines, 1) for tok in re.findall(r"`([^`\s]+)`", line)]


def _exists(token: str) -> bool:
    """A path with ``<feature>``-style placeholders exists when some folder fills them in."""
    if not PLACEHOLDER.search(token):
        return (ROOT / token.rstrip("/")).exists()
    pattern = PLACEHOLDER.sub("*", token.rstrip("/"))
    return any(ROOT.glob(pattern))


def test_every_path_the_architecture_names_exists():
    missing = [f"line {i}: {tok}" for i, tok in _backticked()
               if tok.startswith(TOP) and not _exists(tok)]  # fmt: skip
    assert not missing, f"docs/ARCHITECTURE.md names paths that are not in the tree: {missing}"


def test_no_module_is_named_without_its_folder():
    bare = [f"line {i}: {tok}" for i, tok in _backticked()
            if tok.endswith(".py") and "/" not in tok]  # fmt: skip
    assert not bare, f"name modules by their path from the repository root: {bare}"


def test_every_package_folder_is_on_the_map():
    text = DOC.read_text(encoding="utf-8")
    packages = sorted(
        str(init.parent.relative_to(ROOT))
        for top in ("fedpriv", "scenarios")
        for init in (ROOT / top).rglob("__init__.py")
        if init.parent != ROOT / top
    )
    absent = [p for p in packages
              if f"`{p}/`" not in text and f"{p.rsplit('/', 1)[-1]}/" not in text]  # fmt: skip
    assert not absent, f"package folders missing from docs/ARCHITECTURE.md's map: {absent}"


def test_the_check_fails_on_a_stale_path(tmp_path):
    """The path check itself can fail: a moved module's old path is not in the tree."""
    assert not _exists("scenarios/keys_zonal.py") and not _exists("fedpriv/privacy_mechanism.py")
    assert _exists("scenarios/<feature>/keys.py") and _exists("fedpriv/privacy/modes/")
