"""The declaration every privacy mode makes, in its own module ("modes as objects").

A :class:`Mode` holds a mode's whole declaration: its typed parameters, who it trusts and
the ε it reports against each party (``epsilon_against``), the run-config keys each party
owns, what its clients may send (disclosure) and what leaves them unaccounted with the
opt-in, its planning function (``fedpriv epsilon``) and where its figures are reported.
The math side lives here (no Flower); the Flower side (the server wrapper builder) is
attached by ``fedpriv.scenarios.app.privacy_modes.declare``.

A declaration is checked when it is registered (:func:`fedpriv.privacy.modes.registry.register`):
an incomplete one raises there, i.e. at import of its module (fail closed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from fedpriv.spec import KEY, RunSpec

__all__ = [
    "EpsilonOfZ",
    "Mode",
    "ModeError",
    "OPT_INS",
    "PUBLIC",
    "Plan",
    "STANDARD_TASK",
    "frozen",
]

OPT_INS = ("unaccounted-metrics", "reproducible-noise")  # every owning party owns these
PUBLIC = frozenset({"num-examples"})  # public metadata every reply may carry (weights)
STANDARD_TASK = "standard"  # the client task of a mode whose clients train as usual
# plan(spec, examples_per_client) -> the plan dict of ``fedpriv epsilon``
Plan = Callable[[RunSpec, "int | None"], dict]
# epsilon_of_z(spec, examples_per_client) -> ε(z), the headline ε at noise multiplier z
EpsilonOfZ = Callable[[RunSpec, "int | None"], Callable[[float], float]]


class ModeError(ValueError):
    """A mode that is unknown or declared incompletely (one line naming it)."""


def frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    """A read-only copy of ``mapping``."""
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class Mode:
    """One privacy mode's whole declaration.

    * ``params``: a frozen dataclass type, the mode's parameters (each field names its
      config key, :func:`fedpriv.spec.key`; a run's values are ``RunSpec.params``);
    * ``threat_model``: party -> who is trusted for what (one sentence each);
    * ``epsilon_against``: party -> the ε (or "none") this mode reports against that party;
    * ``owned_keys``: party (``client``, ``zone-node``) -> the run-config keys that party
      owns: a message that changes one is refused (:mod:`fedpriv.privacy.ownership`);
      ``release_keys``: keys that decide its release on top of
      :data:`fedpriv.privacy.ownership.PRIVACY_KEYS` (a message may not change them either);
      ``message_keys``: keys a message of this mode may set to any value (the node checks
      them itself, e.g. the rate the server says it sampled a client at);
    * ``disclosure``: message kind (``train`` | ``evaluate``) -> the metric keys a reply may
      carry without the opt-in; ``None`` only with ``filters = False`` (a mode that protects
      nothing, e.g. ``none``);
    * ``unaccounted``: what its clients send with ``unaccounted-metrics = true``;
    * ``plan``: ``plan(spec, examples_per_client)`` -> the figures before training, read
      from the run's :class:`fedpriv.spec.RunSpec` (``spec.params``, ``spec.participation``,
      ``spec.rounds``, ...);
    * ``summary_key``: the summary.json block that reports it; ``report_label`` its name in
      tables; ``noise_field``: the field of ``params`` that holds its noise multiplier and
      ``epsilon_of_z(spec, examples)`` its headline ε as a function of it (None: no target
      ε, ``fedpriv epsilon --target-epsilon``; :meth:`with_noise` is the spec at another
      z); ``against``: whom its headline ε protects against, one phrase (the console);
    * ``client_task``: what its clients run; ``server_noise``: the server adds the noise
      (a server-side DP wrapper); ``budgeted``: a server-side accountant can stop the run at
      ``max-epsilon``; ``poisson``: Poisson client sampling is allowed; ``audit``: the canary
      audit it supports (``client`` | ``example`` | ``plain`` | None);
    * ``selectable``: chosen with the ``privacy`` key (False: chosen by the scenario kind).
    """

    name: str
    params: type
    threat_model: Mapping[str, str]
    epsilon_against: Mapping[str, str]
    plan: Plan
    disclosure: Mapping[str, frozenset[str]] | None
    unaccounted: tuple[str, ...] = ()
    owned_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    release_keys: tuple[str, ...] = ()
    message_keys: tuple[str, ...] = ()
    filters: bool = True
    summary_key: str = "privacy"
    report_label: str = ""
    noise_field: str | None = None
    epsilon_of_z: EpsilonOfZ | None = None
    against: str = ""
    client_task: str = STANDARD_TASK
    server_noise: bool = False
    budgeted: bool = False
    poisson: bool = False
    audit: str | None = None
    selectable: bool = True

    @property
    def noise_key(self) -> str | None:
        """The run-config key of the noise multiplier (``noise_field``'s key), or None."""
        if self.noise_field is None:
            return None
        return next(
            str(f.metadata[KEY])
            for f in dataclasses.fields(self.params)
            if f.name == self.noise_field
        )

    def with_noise(self, spec: RunSpec, z: float) -> RunSpec:
        """``spec`` with its noise multiplier (``params.<noise_field>``) set to ``z``."""
        if self.noise_field is None or spec.mode is not self:
            raise ModeError(f"privacy mode {self.name!r}: no noise multiplier of this spec to set")
        params = dataclasses.replace(spec.params, **{self.noise_field: z})
        return dataclasses.replace(spec, params=params)

    def party_keys(self, party: str) -> tuple[str, ...]:
        """The keys ``party`` owns in this mode (empty: it trusts the server)."""
        return tuple(self.owned_keys.get(party, ()))

    def check(self) -> Mode:
        """This declaration if complete; :class:`ModeError` (one line) otherwise."""
        missing = [n for n in ("threat_model", "epsilon_against") if not getattr(self, n)]
        if not self.name or not isinstance(self.name, str):
            raise ModeError(f"privacy mode {self.name!r}: a mode needs a name")
        if missing:
            raise ModeError(f"privacy mode {self.name!r} declares no {' and no '.join(missing)}")
        if not callable(self.plan):
            raise ModeError(f"privacy mode {self.name!r} declares no planning function")
        if not (dataclasses.is_dataclass(self.params) and self.params.__dataclass_params__.frozen):
            raise ModeError(f"privacy mode {self.name!r}: params must be a frozen dataclass type")
        unkeyed = [f.name for f in dataclasses.fields(self.params) if KEY not in f.metadata]
        if unkeyed:
            raise ModeError(
                f"privacy mode {self.name!r}: params field(s) {', '.join(unkeyed)} name no "
                "config key (declare them with fedpriv.spec.key)"
            )
        if self.disclosure is None and self.filters:
            raise ModeError(
                f"privacy mode {self.name!r} declares no disclosure policy (what its clients "
                "may send): refused, modes fail closed"
            )
        if self.disclosure is not None and set(self.disclosure) != {"train", "evaluate"}:
            raise ModeError(
                f"privacy mode {self.name!r}: disclosure must list train and evaluate replies"
            )
        if (self.noise_field is None) != (self.epsilon_of_z is None):
            raise ModeError(f"privacy mode {self.name!r}: noise_field and epsilon_of_z go together")
        fields = {f.name for f in dataclasses.fields(self.params)}
        if self.noise_field is not None and self.noise_field not in fields:
            raise ModeError(
                f"privacy mode {self.name!r}: noise_field = {self.noise_field!r} is not a "
                f"field of {self.params.__name__}"
            )
        if self.audit not in (None, "client", "example", "plain"):
            raise ModeError(f"privacy mode {self.name!r}: audit = {self.audit!r} is unknown")
        return self
