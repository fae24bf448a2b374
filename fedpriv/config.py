"""Run-config keys, their checks, and resolution against scenario defaults.

A run config is a flat mapping of Flower hyphen-style keys (``num-server-rounds``) to
scalars, exactly what ``context.run_config`` holds. Resolution is layered:

    KEYS defaults  <-  scenario defaults  <-  user values (any value but ``"auto"``)

and every resolved value is checked before any training starts (SPEC §7). A failed check
raises :class:`ConfigError`, whose message is one line naming the key, the value and
what is allowed.

Feature modules add their keys with :func:`register` so that this module stays free of
knowledge about DP, IFCA or zones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

AUTO = "auto"
Scalar = int | float | str | bool


class ConfigError(ValueError):
    """A config value is not allowed. ``str(err)`` is one line for the user."""

    def __init__(self, key: str, value: Any, allowed: str) -> None:
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"config error: {key} = {value!r} is not allowed; expected {allowed}")


@dataclass(frozen=True)
class KeySpec:
    """One run-config key: its default, a check and the text of what is allowed."""

    name: str
    default: Scalar
    check: Callable[[Any], Any]
    allowed: str
    help: str = ""

    def coerce(self, value: Any) -> Any:
        """Return the checked (and normalised) value or raise :class:`ConfigError`."""
        try:
            return self.check(value)
        except (TypeError, ValueError) as err:
            raise ConfigError(self.name, value, self.allowed) from err


KEYS: dict[str, KeySpec] = {}


def register(spec: KeySpec) -> KeySpec:
    """Add a key to the registry (idempotent for the same spec)."""
    KEYS[spec.name] = spec
    return spec


# --- checks -------------------------------------------------------------------------------


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def integer(lo: int | None = None, hi: int | None = None) -> Callable[[Any], int]:
    """A check for an int in [lo, hi] (bools and non-integral floats are refused)."""

    def check(value: Any) -> int:
        if _is_bool(value) or not isinstance(value, (int, float)) or int(value) != value:
            raise ValueError("not an integer")
        value = int(value)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise ValueError("out of range")
        return value

    return check


def real(
    lo: float | None = None,
    hi: float | None = None,
    *,
    lo_open: bool = False,
    hi_open: bool = False,
) -> Callable[[Any], float]:
    """A check for a finite float in the interval given (open ends by flag)."""

    def check(value: Any) -> float:
        if _is_bool(value) or not isinstance(value, (int, float)):
            raise ValueError("not a number")
        value = float(value)
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("not finite")
        if lo is not None and (value < lo or (lo_open and value == lo)):
            raise ValueError("too small")
        if hi is not None and (value > hi or (hi_open and value == hi)):
            raise ValueError("too large")
        return value

    return check


def choice(options: Iterable[str]) -> Callable[[Any], str]:
    """A check for one string out of ``options``."""
    allowed = tuple(options)

    def check(value: Any) -> str:
        if not isinstance(value, str) or value not in allowed:
            raise ValueError("not a choice")
        return value

    return check


def boolean(value: Any) -> bool:
    """A check for a bool (TOML ``true``/``false``)."""
    if not _is_bool(value):
        raise ValueError("not a bool")
    return value


def text(value: Any) -> str:
    """A check for any string."""
    if not isinstance(value, str):
        raise ValueError("not a string")
    return value


def _key(name: str, default: Scalar, check: Callable[[Any], Any], allowed: str, help: str = ""):
    return register(KeySpec(name, default, check, allowed, help))


STRATEGIES = ("fedavg", "fedavgm", "fedmedian", "fedprox", "fedopt", "fedyogi")
PRIVACY_MODES = ["none"]
MODELS = ("mp-cnn", "digits-cnn", "digits-mlp", "linear")
DATASETS = ("digits", "synthetic-mri", "alzheimer", "gp-synthetic")
PARTITIONS = ("iid", "dirichlet", "rotation", "homogeneous", "non-iid", "cia", "gp-clusters")

# --- core keys (foundation) -----------------------------------------------------------------
_key("scenario", "digits", text, "a registered scenario name (see `fedpriv scenarios`)")
_key("strategy", "fedavg", choice(STRATEGIES), "one of " + " | ".join(STRATEGIES))
_key("privacy", "none", lambda v: choice(PRIVACY_MODES)(v), "a privacy mode (see docs)")
_key("seed", 0, integer(0, 2**31 - 1), "an integer in [0, 2^31-1]")
_key("num-server-rounds", 5, integer(1, 10_000), "an integer in [1, 10000]")
_key("num-clients", 4, integer(1, 100_000), "an integer >= 1 (= num-supernodes)")
_key("clients-per-round", 0, integer(0), "an integer >= 0 (0 = all clients)")
_key("local-epochs", 1, integer(1, 10_000), "an integer in [1, 10000]")
_key("batch-size", 32, integer(1), "an integer >= 1")
_key("learning-rate", 1e-3, real(0, lo_open=True), "a float > 0")
_key("optimizer", "adam", choice(("adam", "sgd")), "adam | sgd")
_key("model", "digits-cnn", choice(MODELS), "one of " + " | ".join(MODELS))
_key("dataset", "digits", choice(DATASETS), "one of " + " | ".join(DATASETS))
_key("partition", "iid", choice(PARTITIONS), "one of " + " | ".join(PARTITIONS))
_key("dirichlet-alpha", 0.5, real(0, lo_open=True), "a float > 0")
_key("data-path", "", text, "a path to a local dataset ('' for embedded data)")
_key(
    "data-format",
    "auto",
    choice(("auto", "imagefolder", "parquet")),
    "auto | imagefolder | parquet",
)
_key("output-dir", "", text, "a directory path ('' = runs/<scenario>-<strategy>-<privacy>-s<seed>)")
_key("proximal-mu", 0.1, real(0), "a float >= 0")
_key("server-learning-rate", 1.0, real(0, lo_open=True), "a float > 0")
_key("server-momentum", 0.5, real(0, 1, hi_open=True), "a float in [0, 1)")
_key("eta", 1e-2, real(0, lo_open=True), "a float > 0")
_key("eta-l", 0.0316, real(0, lo_open=True), "a float > 0")
_key("beta-1", 0.9, real(0, 1, hi_open=True), "a float in [0, 1)")
_key("beta-2", 0.99, real(0, 1, hi_open=True), "a float in [0, 1)")
_key("tau", 1e-3, real(0, lo_open=True), "a float > 0")
_key("pretrain-epochs", 1, integer(0, 1000), "an integer in [0, 1000]")
_key("accept-failures", False, boolean, "true | false")
_key("invalid-update", "drop", choice(("drop", "fail")), "drop | fail")
_key("verbose", False, boolean, "true | false")


def add_privacy_mode(name: str) -> None:
    """Let a feature module declare a value of ``privacy`` (e.g. ``global-dp``)."""
    if name not in PRIVACY_MODES:
        PRIVACY_MODES.append(name)


def resolve(
    run_config: Mapping[str, Any],
    scenario_defaults: Mapping[str, Scalar],
) -> dict[str, Any]:
    """Layer defaults, scenario defaults and user values; check every key.

    Raises :class:`ConfigError` for an unknown key or a value that fails its check.
    """
    for key in run_config:
        if key not in KEYS:
            raise ConfigError(key, run_config[key], "a known key (see `fedpriv keys`)")
    resolved: dict[str, Any] = {name: spec.default for name, spec in KEYS.items()}
    resolved.update(scenario_defaults)
    resolved.update({k: v for k, v in run_config.items() if v != AUTO})
    return {name: KEYS[name].coerce(value) for name, value in resolved.items()}


# Feature keys register themselves on import (kept last: they use the helpers above).
from fedpriv import keys_attacks, keys_dp, keys_dpsgd, keys_ifca, keys_zonal  # noqa: E402,F401
