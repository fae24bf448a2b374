"""Run-config key of the ``grid`` feature: ``run-plan`` (declaration only, for the node spec:
a ClientApp node reads the plan it is configured with,
:mod:`fedpriv.scenarios.config.node_spec`)."""

from __future__ import annotations

from fedpriv.scenarios.config.schema import key, text

KEYS = (
    key(
        "run-plan",
        "",
        text,
        "'' or the path of a plan file written by fedpriv grid / fedpriv attack cia",
        "run every cell of the plan in this one simulation (fedpriv.scenarios.app.multirun)",
    ),
)
