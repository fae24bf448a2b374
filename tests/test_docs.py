"""The documentation: the generated pages match the catalog, and the README stays short with
links that resolve.

The site itself is built with warnings as errors by ``make docs`` (CI, ``.ci/run``). These
tests check what the build generates from the code (``docs/_ext/fedpriv_catalog.py``)
against what the code prints (``fedpriv keys``), and the README's links, without building.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest
from fedpriv.scenarios.cli.main import main as fedpriv
from fedpriv.scenarios.config.features import CATALOG

from tests.test_ci_tiers import ci_targets

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"


def _extension():
    """The Sphinx extension module the build loads (``docs/_ext/fedpriv_catalog.py``)."""
    path = DOCS / "_ext" / "fedpriv_catalog.py"
    spec = importlib.util.spec_from_file_location("fedpriv_catalog", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXT = _extension()


def _built_page(docname: str) -> str:
    """The Markdown Sphinx parses for ``docname``: the committed page after the extension's
    ``source-read`` hook (the same call the build makes)."""
    source = [(DOCS / f"{docname}.md").read_text(encoding="utf-8")]
    EXT._source_read(None, docname, source)
    return source[0]


def _cli_keys(capsys) -> dict[str, str]:
    """``fedpriv keys`` as printed: key -> its 'allowed' text."""
    assert fedpriv(["keys"]) == 0
    keys = {}
    for line in capsys.readouterr().out.splitlines():
        match = re.match(r"([a-z][a-z0-9-]*)\s+default .*?allowed: (.*)$", line)
        if match:
            keys[match.group(1)] = match.group(2)
    return keys


def _unescape(cell: str) -> str:
    """A generated Markdown cell back to plain text (code spans to backticks, no escapes)."""
    cell = re.sub(r"`` (.*?) ``", r"`\1`", cell)
    return re.sub(r"\\(.)", r"\1", cell)


def _page_rows(page: str) -> dict[str, list[str]]:
    """The key tables of the generated page: key -> its cells after the key."""
    rows: dict[str, list[str]] = {}
    current = None
    for line in page.splitlines():
        match = re.match(r"\* - `([a-z][a-z0-9-]*)`$", line)
        if match:
            current = rows.setdefault(match.group(1), [])
            continue
        if current is not None and line.startswith("  - "):
            current.append(line[4:])
        else:
            current = None
    return rows


def test_conf_loads_the_generating_extension():
    """conf.py enables the extension, and the key page still has its marker (without it the
    extension raises rather than leave a stale page)."""
    tree = ast.parse((DOCS / "conf.py").read_text(encoding="utf-8"))
    names = [
        elt.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and any(getattr(t, "id", "") == "extensions" for t in node.targets)
        for elt in node.value.elts
    ]
    assert "fedpriv_catalog" in names
    assert EXT.KEYS_MARKER in (DOCS / "reference" / "keys.md").read_text(encoding="utf-8")
    with pytest.raises(ValueError, match="no line"):
        EXT.render_page(EXT.KEYS_PAGE, "# Run-config keys\n\n| a static table |\n", CATALOG)


def test_key_reference_lists_every_key_fedpriv_keys_lists(capsys):
    """The key reference page lists every key of ``fedpriv keys``, no other,
    with the same 'allowed' text."""
    cli = _cli_keys(capsys)
    assert len(cli) == len(CATALOG.keys) >= 50
    rows = _page_rows(_built_page("reference/keys"))
    assert set(rows) == set(cli)
    for key, allowed in cli.items():
        default, allowed_cell, _help = rows[key]
        assert _unescape(allowed_cell) == allowed, key
        assert default.startswith("`` ") and default.endswith(" ``"), (key, default)


def test_key_reference_follows_a_changed_catalog():
    """The page is generated: a key added to (or dropped from) a feature shows up (or goes)."""
    from dataclasses import replace

    from fedpriv.scenarios.config.feature import Catalog
    from fedpriv.scenarios.config.schema import KeySpec

    extra = KeySpec("docs-test-key", 3, int, "an integer", "a key only this test declares")
    first = CATALOG.features[0]
    features = (replace(first, keys=(*first.keys[1:], extra)), *CATALOG.features[1:])
    rows = _page_rows(EXT.keys_markdown(Catalog(features)))
    assert "docs-test-key" in rows and first.keys[0].name not in rows
    assert rows["docs-test-key"] == ["`` 3 ``", "an integer", "a key only this test declares"]


def test_threat_models_are_generated_for_every_mode():
    """The privacy page's threat-model section names every mode with each party's sentence
    and the keys its clients own, from the modes' declarations."""
    page = _built_page("privacy")
    assert EXT.THREAT_MARKER not in page
    for name, mode in CATALOG.modes.items():
        start = page.index(f"### `{name}`")
        block = page[start : page.find("\n### ", start + 1)]
        for party, text in mode.threat_model.items():
            assert _unescape(EXT.escape(party)) == party
            assert EXT.escape(text) in block, (name, party)
        for key in mode.owned_keys:
            assert f"`{key}`" in block, (name, key)


def test_escape_renders_as_the_text():
    """Generated cells are Markdown: markup characters in a key's text stay text (an HTML-like
    ``<scenario>`` would vanish, ``|`` or ``*`` would become markup), code spans stay code."""
    from markdown_it import MarkdownIt

    text = "runs/<scenario>-<seed> | *all* [x](y) `fedpriv keys` a_b"
    html = MarkdownIt("commonmark").renderInline(EXT.escape(text))
    assert "&lt;scenario&gt;" in html and "<em>" not in html and "<a " not in html
    assert "<code>fedpriv keys</code>" in html and "a_b" in html and "|" in html


# --- README ------------------------------------------------------------------------------


def _slug(heading: str) -> str:
    """GitHub's (and MyST's) anchor of a Markdown heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


def _links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", text)


def test_readme_is_short():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 200


def test_readme_links_resolve():
    """Every relative link of the README names a file that exists, and an anchor a heading
    of that file; web links are left alone."""
    links = [link for link in _links(README) if not re.match(r"[a-z]+:", link)]
    assert len(links) >= 10  # the README links into every docs page
    for link in links:
        target, _, anchor = link.partition("#")
        path = (README.parent / target) if target else README
        assert path.exists(), f"README links to {link}: {path} does not exist"
        if anchor:
            assert anchor in _anchors(path), f"README links to {link}: no heading #{anchor}"


def test_readme_links_into_every_docs_page():
    """Each page of the site's table of contents is linked from the README."""
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    pages = {
        line.strip()
        for block in re.findall(r"```\{toctree\}(.*?)```", index, flags=re.S)
        for line in block.splitlines()
        if line.strip() and not line.strip().startswith(":")
    }
    linked = {link.partition("#")[0] for link in _links(README)}
    assert pages and {f"docs/{page}.md" for page in pages} - linked <= {"docs/reference/api.md"}


def test_slug_matches_the_heading_rule():
    """The anchor rule the link test relies on (GitHub's: lower case, punctuation dropped,
    spaces to hyphens)."""
    assert (
        _slug("Zonal super-node aggregation (HDP paper)")
        == "zonal-super-node-aggregation-hdp-paper"
    )
    assert _slug("Clients own their privacy settings") == "clients-own-their-privacy-settings"
    assert _slug("`fedpriv` keys & more") == "fedpriv-keys--more"


def test_ci_builds_the_docs():
    """``make docs`` builds with warnings as errors, quietly (``-q``: no framework or progress
    lines, only warnings and errors), and CI runs it."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = re.search(r"^docs:.*\n\t(.*)$", makefile, flags=re.M)
    assert recipe, makefile
    command = recipe.group(1).split()
    assert command[-2:] == ["docs", "docs/_build/html"], command
    assert {"-W", "--keep-going", "-q"} <= set(command) and "html" in command
    assert re.search(r"^ci:.*\n\t.*\bbash \.ci/run\b", makefile, flags=re.M)  # make ci = .ci/run
    assert "docs" in ci_targets()


def test_the_notebook_leaves_no_runs_in_the_checkout(monkeypatch, tmp_path):
    """``make docs`` runs examples/notebooks/privacy-vs-utility.ipynb: its runs go to a
    temporary folder (outside the checkout) that its last cell removes; a folder named by
    ``FEDPRIV_NOTEBOOK_OUT`` is kept. The cells run here with the simulation replaced."""
    import json
    import subprocess

    cells = json.loads((ROOT / "examples/notebooks/privacy-vs-utility.ipynb").read_text())
    code = ["".join(c["source"]) for c in cells["cells"] if c["cell_type"] == "code"]
    commands = []

    def fake_run(command, **kwargs):
        commands.append(command)
        return subprocess.CompletedProcess(command, 0, "done", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("FEDPRIV_NOTEBOOK_OUT", raising=False)
    scope: dict = {}
    exec(code[0], scope)  # the cell that runs `fedpriv grid`
    out = Path(commands[0][commands[0].index("--output-dir") + 1])
    assert out == scope["OUT"] and out.is_dir() and ROOT not in out.parents
    exec(code[-1], scope)  # the last cell
    assert not out.exists()
    monkeypatch.setenv("FEDPRIV_NOTEBOOK_OUT", str(tmp_path / "keep"))
    scope = {}
    exec(code[0], scope)
    (tmp_path / "keep").mkdir()
    exec(code[-1], scope)
    assert scope["OUT"] == tmp_path / "keep" and (tmp_path / "keep").is_dir()


def test_docs_stand_alone_and_the_start_up_lines_are_what_a_2_core_run_prints(monkeypatch):
    """No page cites a SPEC the repository does not hold; getting-started's example output
    (a 2-core machine) names the SuperNodes ``fedpriv run`` starts there."""

    from fedpriv.scenarios.app.startup import engine_line
    from fedpriv.scenarios.cli.launch import app_config, simulation_supernodes

    pages = [p for p in DOCS.rglob("*.md") if "_build" not in p.parts]
    assert not [p.name for p in pages if re.search(r"\bSPEC\b", p.read_text())]
    monkeypatch.setenv("FEDPRIV_CPUS", "2")
    cfg = CATALOG.resolve_run_config(app_config({}))
    nodes = simulation_supernodes(cfg, [], "local-simulation")
    text = (DOCS / "getting-started.md").read_text()
    assert engine_line(nodes, 0.1).removeprefix("fedpriv: ") in text
    assert f"workers ready: {nodes} SuperNodes answered, serving {cfg['num-clients']} clients" in (
        text
    )
