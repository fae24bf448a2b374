"""``privacy = none``: no mechanism; the server is trusted with everything, ε = inf."""

from __future__ import annotations

from dataclasses import dataclass

from fedpriv.privacy.modes.base import Mode
from fedpriv.spec import RunSpec


@dataclass(frozen=True)
class NoParams:
    """No parameters."""


def plan(spec: RunSpec, examples_per_client: int | None = None) -> dict:
    """ε = inf: nothing is protected."""
    del spec, examples_per_client
    return {"mode": MODE.name, "epsilon": "inf", "notes": ["no privacy mechanism"]}


MODE = Mode(
    name="none",
    params=NoParams,
    threat_model={
        "server": "trusted with everything: sees every client's model and metrics.",
        "observers": "see the released models; nothing is protected.",
    },
    epsilon_against={"server": "none", "observers": "none"},
    plan=plan,
    disclosure=None,
    filters=False,  # accounts nothing, filters nothing (declared, not defaulted)
    report_label="Vanilla FL",
    poisson=True,
    audit="plain",
)
