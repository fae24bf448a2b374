"""Run-config keys of the ``tracking`` feature: where a run's metrics go besides its own files
(declarations only, so a ClientApp node resolves the same key table,
:mod:`fedpriv.scenarios.config.node_spec`; the server alone tracks)."""

from __future__ import annotations

from fedpriv.scenarios.config.schema import choice, key, text

TRACKERS = ("none", "mlflow", "tensorboard")

KEYS = (
    key(
        "tracking",
        "none",
        choice(TRACKERS),
        " | ".join(TRACKERS),
        "log the config, each round's metrics (σ and ε included) and the plots to MLflow or "
        "TensorBoard (offline; the `tracking` extra)",
    ),
    key(
        "tracking-uri",
        "",
        text,
        "'' (under output-dir), an MLflow tracking URI or a .db path, or a TensorBoard log "
        "directory",
        "where the tracker writes: '' = <output-dir>/mlflow.db or <output-dir>/tensorboard",
    ),
)
