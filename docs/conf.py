"""Sphinx configuration of the fedpriv documentation site (Sphinx + MyST, Flower's toolchain).

Build: ``make docs`` (``sphinx-build -q -W --keep-going -b html docs docs/_build/html``: quiet,
only warnings and errors print). The
run-config key reference is generated from the feature list at build time
(``_ext/fedpriv_catalog.py``) and the API reference from the docstrings (autodoc/autosummary).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(DOCS / "_ext"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

# autodoc imports modules that import TensorFlow: once here, without its C++ notices
from fedpriv.scenarios.app.quiet import import_tensorflow_quietly  # noqa: E402

import_tensorflow_quietly()

project = "fedpriv"
author = "fedpriv contributors"
copyright = "2026, fedpriv contributors"  # noqa: A001 -- Sphinx's name

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "fedpriv_catalog",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 3
smartquotes = False  # keys and values keep their straight quotes

autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {"members": True, "show-inheritance": True, "ignore-module-all": True}
autodoc_typehints = "description"
autodoc_member_order = "bysource"

html_theme = "furo"
html_title = "fedpriv"
