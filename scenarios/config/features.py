"""THE feature list: every feature of the app, in order. The only place that names them all.

Order matters only for output: ``fedpriv keys`` / ``fedpriv keys --toml`` list keys in this
order, summary blocks are merged in this order, sub-commands appear in this order. To add a
feature, write its module with a ``FEATURE = Feature(...)`` declaration
(:class:`fedpriv.scenarios.config.feature.Feature`), add it here, add its keys to ``pyproject.toml``
(``fedpriv keys --toml``) and, for a client task, its implementation to
:mod:`fedpriv.scenarios.app.client_tasks`. ``tests/test_features.py`` checks the declarations are
complete and consistent.
"""

from __future__ import annotations

from fedpriv.scenarios.adaptive_clip import feature as adaptive_clip
from fedpriv.scenarios.attacks import feature as attacks
from fedpriv.scenarios.audit import feature as audit
from fedpriv.scenarios.baseline import feature as baseline_cli
from fedpriv.scenarios.client_budgets import feature as client_budgets
from fedpriv.scenarios.config.feature import Catalog, Feature
from fedpriv.scenarios.distributed_dp import feature as distributed_dp
from fedpriv.scenarios.dp import feature as dp
from fedpriv.scenarios.dp_ftrl import feature as dp_ftrl
from fedpriv.scenarios.dp_sgd import feature as dpsgd
from fedpriv.scenarios.faults import feature as faults
from fedpriv.scenarios.grid import feature as grid_cli
from fedpriv.scenarios.ifca import feature as ifca
from fedpriv.scenarios.speed import feature as speed
from fedpriv.scenarios.standard import feature as standard
from fedpriv.scenarios.tracking import feature as tracking
from fedpriv.scenarios.zonal import feature as zonal

FEATURES: tuple[Feature, ...] = (
    standard.FEATURE,
    dp.FEATURE,
    adaptive_clip.FEATURE,
    dp_ftrl.FEATURE,
    client_budgets.FEATURE,
    dpsgd.FEATURE,
    distributed_dp.FEATURE,
    ifca.FEATURE,
    zonal.FEATURE,
    attacks.FEATURE,
    faults.FEATURE,
    audit.FEATURE,
    grid_cli.FEATURE,
    baseline_cli.FEATURE,
    speed.FEATURE,
    tracking.FEATURE,
)

CATALOG = Catalog(FEATURES)
