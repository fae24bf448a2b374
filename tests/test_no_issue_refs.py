"""No tracker references in the code and docs: a reader has the paper and SPEC sections, not
the project's issue tracker.

Docstrings, comments and pages cite the papers (MP / GP / HDP §) and ``SPEC §`` sections; an
"issue" followed by a number (any case, ``issue-N``, ``issues N, M``, ``issue_N`` in a test
name, ``issue #N``) names a thread the reader cannot open. A reference to another project's
tracker keeps its ``owner/name`` in front of it (``flwrlabs/flower #605``) and is allowed.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = (
    "fedpriv",
    "strategies",
    "clients",
    "scenarios",
    "tests",
    "bench",
    "scripts",
    "examples",
    "docs",
    "README.md",
    "CONTRIBUTING.md",
    "pyproject.toml",
    "Makefile",
)
SKIPPED_DIRS = {".venv", "__pycache__", "_build", ".pytest_cache", ".ruff_cache", "node_modules"}
TEXT_SUFFIXES = {
    ".py",
    ".md",
    ".toml",
    ".txt",
    ".rst",
    ".cfg",
    ".ini",
    ".yml",
    ".yaml",
    ".sh",
    ".json",
    ".ipynb",
    "",
}
# "issue" or "issues" (also inside a name: test_issueN), then a space, hyphen or underscore (or
# nothing), an optional "#", and a number
REFERENCE = re.compile(r"(?<![a-z])issues?[ _-]?#?\d+", re.IGNORECASE)
# another project's tracker, named by its repository: owner/name [issue] #N
EXTERNAL = re.compile(r"[\w.-]+/[\w.-]+\s+(?:issues?\s+)?#?\d+", re.IGNORECASE)


def references(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every issue-number reference in ``text``, external ones left out."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        allowed = [m.span() for m in EXTERNAL.finditer(line)]
        for match in REFERENCE.finditer(line):
            if not any(start <= match.start() < end for start, end in allowed):
                found.append((number, line.strip()))
                break
    return found


def scanned_files() -> list[Path]:
    """The text files of the scanned paths, build and cache folders left out."""
    files = []
    for name in SCANNED:
        path = ROOT / name
        candidates = [path] if path.is_file() else sorted(path.rglob("*")) if path.is_dir() else []
        for file in candidates:
            parts = set(file.relative_to(ROOT).parts)
            if file.is_file() and not parts & SKIPPED_DIRS and file.suffix in TEXT_SUFFIXES:
                files.append(file)
    return files


def test_the_detector_finds_each_form_and_spares_external_trackers():
    word, n = "issue", "26"  # built here so this module does not match itself
    for text in (
        f"({word} {n})",
        f"{word.title()} {n}: x",
        f"{word}s {n}, 11",
        f"{word}-{n}",
        f"test_{word}{n}_x",
        f"{word}_{n}",
        f"{word} #{n}",
        f"{word.upper()} {n}",
    ):
        assert references(text) == [(1, text)], text
    for text in (
        "flwrlabs/flower #605",
        f"flwrlabs/flower {word} #605",
        "the issue's bound",
        f"an {word}, {n} clients",
        f"t{word} 3",
        "SPEC §3.5, HDP Alg. 1",
    ):
        assert references(text) == [], text
    assert references(f"a\nb ({word} {n})\n") == [(2, f"b ({word} {n})")]


def test_the_scan_covers_code_tests_and_docs():
    names = {file.relative_to(ROOT).as_posix() for file in scanned_files()}
    assert {
        "README.md",
        "CONTRIBUTING.md",
        "pyproject.toml",
        "Makefile",
        "docs/ARCHITECTURE.md",
        "tests/test_no_issue_refs.py",
    } <= names
    for folder in ("fedpriv/", "strategies/", "clients/", "scenarios/", "bench/", "docs/"):
        assert any(name.startswith(folder) and name.endswith((".py", ".md")) for name in names)


def test_no_issue_numbers_in_code_or_docs():
    offenders = []
    for file in scanned_files():
        rel = file.relative_to(ROOT).as_posix()
        if REFERENCE.search(rel):
            offenders.append(f"{rel}: the file name cites an issue number")
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        offenders += [f"{rel}:{number}: {line}" for number, line in references(text)]
    assert not offenders, (
        "issue-number references (cite the paper or SPEC section, or say what the issue "
        "decided, instead):\n" + "\n".join(offenders)
    )
