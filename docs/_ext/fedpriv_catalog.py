"""Sphinx extension: the pages generated from the app's feature list at build time.

Two marker lines are replaced when Sphinx reads a page, from
:data:`fedpriv.scenarios.config.features.CATALOG`, the catalog ``fedpriv keys`` prints and the app
runs on,
so these pages cannot drift from the code:

- :data:`KEYS_MARKER` (``reference/keys.md``, required there): one section per feature with a
  table of its run-config keys (name, default, what is allowed, what it does);
- :data:`THREAT_MARKER` (``privacy.md``): per privacy mode, who is trusted for what
  (``PrivacyMode.threat_model``), the keys its clients own (``owned_keys``) and what its
  clients may send besides the model (``disclosure``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

KEYS_MARKER = (
    "<!-- fedpriv-keys: generated at build time from fedpriv.scenarios.config.features.CATALOG -->"
)
THREAT_MARKER = "<!-- fedpriv-threat-models: generated at build time from the privacy modes -->"
KEYS_PAGE = "reference/keys"
_PUNCT = re.compile(r"([\\`*_{}\[\]<>()#+\-.!|~&])")


def escape(text: str) -> str:
    """``text`` as Markdown text: every ASCII punctuation sign that Markdown could read as
    markup is backslash-escaped; spans in backticks stay code spans."""
    parts = str(text).split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: no code spans
        return _PUNCT.sub(r"\\\1", str(text))
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(f"`` {part} ``" if part else "")
        else:
            out.append(_PUNCT.sub(r"\\\1", part))
    return "".join(out)


def code(value: Any) -> str:
    """A value as an inline code span (TOML spelling: strings quoted, booleans lower case)."""
    if isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, str):
        text = "'" + value + "'"
    else:
        text = repr(value)
    return f"`` {text} ``"


def list_table(header: Iterable[str], rows: Iterable[Iterable[str]], widths: str) -> list[str]:
    """A MyST ``list-table`` (cells are Markdown, so no ``|`` escaping is needed)."""
    lines = ["```{list-table}", ":header-rows: 1", f":widths: {widths}", ""]
    for row in [list(header), *map(list, rows)]:
        lines += [f"{'* -' if i == 0 else '  -'} {cell}" for i, cell in enumerate(row)]
    return lines + ["```", ""]


def key_rows(specs: Iterable[Any]) -> list[str]:
    """The key table of ``specs``: key, default, allowed, what it does."""
    rows = [
        (f"`{s.name}`", code(s.default), escape(s.allowed), escape(s.help) if s.help else "")
        for s in specs
    ]
    return list_table(("key", "default", "allowed", "what it does"), rows, "22 14 34 30")


def keys_markdown(catalog: Any) -> str:
    """Per feature (in catalog order) its description and the table of its keys, each as the
    catalog resolves it (``catalog.keys[name]``: ``privacy`` lists the declared modes)."""
    lines = [f"{len(catalog.keys)} keys, by feature.", ""]
    for feature in catalog.features:
        if not feature.keys:
            continue
        lines += [f"## `{feature.name}`", "", escape(feature.description), ""]
        lines += key_rows(catalog.keys[spec.name] for spec in feature.keys)
    return "\n".join(lines)


def _sends(disclosure: Mapping[str, Iterable[str]] | None) -> str:
    if disclosure is None:
        return "no restriction (the server is trusted with everything)"
    parts = []
    for task, allowed in sorted(disclosure.items()):
        keys = ", ".join(f"`{k}`" for k in sorted(allowed)) or "nothing"
        parts.append(f"{task}: {keys}")
    return "; ".join(parts)


def threat_models_markdown(catalog: Any) -> str:
    """Per privacy mode: a table of the parties and what each is trusted with, then the ε it
    reports against each party, the keys its clients own and the metrics its clients may send
    (besides the model)."""
    lines: list[str] = []
    for name, mode in catalog.modes.items():
        lines += [f"### `{name}`", ""]
        rows = [(escape(party), escape(text)) for party, text in mode.threat_model.items()]
        lines += list_table(("party", "trusted with / sees"), rows, "20 80")
        owned = ", ".join(f"`{k}`" for k in mode.owned_keys)
        against = "; ".join(f"{p}: {escape(e)}" for p, e in mode.mode.epsilon_against.items())
        lines += [
            f"- ε reported against each party: {against}.",
            f"- Keys its clients own: {owned or 'none (the clients take the server values)'}.",
            f"- Metrics a client may send besides the model: {_sends(mode.disclosure)}.",
            "",
        ]
    return "\n".join(lines)


GENERATORS: dict[str, Callable[[Any], str]] = {
    KEYS_MARKER: keys_markdown,
    THREAT_MARKER: threat_models_markdown,
}


def render_page(docname: str, source: str, catalog: Any) -> str:
    """``source`` with every marker replaced by its generated Markdown. The key reference
    page without its marker is an error: it would silently stop being generated."""
    if docname == KEYS_PAGE and KEYS_MARKER not in source:
        raise ValueError(f"{KEYS_PAGE}.md: no line {KEYS_MARKER!r}; expected one")
    for marker, generate in GENERATORS.items():
        if marker in source:
            source = source.replace(marker, generate(catalog))
    return source


def _source_read(app: Any, docname: str, source: list[str]) -> None:
    """Sphinx ``source-read`` hook."""
    del app
    if docname == KEYS_PAGE or any(marker in source[0] for marker in GENERATORS):
        from fedpriv.scenarios.config.features import CATALOG

        source[0] = render_page(docname, source[0], CATALOG)


def setup(app: Any) -> dict[str, Any]:
    """Register the hook with Sphinx."""
    app.connect("source-read", _source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
