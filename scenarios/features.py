"""THE feature list: every feature of the app, in order. The only place that names them all.

Order matters only for output: ``fedpriv keys`` / ``fedpriv keys --toml`` list keys in this
order, summary blocks are merged in this order, sub-commands appear in this order. To add a
feature, write its module with a ``FEATURE = Feature(...)`` declaration
(:class:`scenarios.feature.Feature`), add it here, add its keys to ``pyproject.toml``
(``fedpriv keys --toml``) and, for a client task, its implementation to
:mod:`scenarios.client_tasks`. ``tests/test_features.py`` checks the declarations are
complete and consistent.
"""

from __future__ import annotations

from scenarios import (
    attacks,
    audit,
    baseline_cli,
    dp,
    dpsgd,
    faults,
    grid_cli,
    ifca,
    speed,
    standard,
    zonal,
)
from scenarios.feature import Catalog, Feature

FEATURES: tuple[Feature, ...] = (
    standard.FEATURE,
    dp.FEATURE,
    dpsgd.FEATURE,
    ifca.FEATURE,
    zonal.FEATURE,
    attacks.FEATURE,
    faults.FEATURE,
    audit.FEATURE,
    grid_cli.FEATURE,
    baseline_cli.FEATURE,
    speed.FEATURE,
)

CATALOG = Catalog(FEATURES)
