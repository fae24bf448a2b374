"""The Flower run-config schema: keys, their checks, and resolution against scenario defaults.

A run config is a flat mapping of Flower hyphen-style keys (``num-server-rounds``) to
scalars, exactly what ``context.run_config`` holds. Resolution is layered:

    key defaults  <-  scenario defaults  <-  user values (any value but ``"auto"``)

and a shared key still at ``"auto"`` then takes the selected mode's value (``noise-multiplier``
and ``clipping-norm``: one key name per idea, one default per mode; the old per-mode names are
refused naming the new one, :data:`RENAMED`),

and every resolved value is checked before any training starts (SPEC §7). A failed check
raises :class:`ConfigError`, whose message is one line naming the key, the value and
what is allowed. Each feature declares its keys (``Feature.keys`` in
:mod:`fedpriv.scenarios.config.feature`); :mod:`fedpriv.scenarios.config.features` lists the
features; every key
must also be in ``pyproject.toml [tool.flwr.app.config]`` (``fedpriv keys --toml`` prints it).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fedpriv.privacy.modes import ModeError
from fedpriv.privacy.modes.registry import mode_of, selected
from fedpriv.spec import mode_defaults
from fedpriv.validation import check_choice, check_int, check_real

AUTO = "auto"
Scalar = int | float | str | bool


class ConfigError(ValueError):
    """A config value is not allowed. ``str(err)`` is one line for the user."""

    def __init__(self, key: str, value: Any, allowed: str) -> None:
        self.key, self.value, self.allowed = key, value, allowed
        near = nearest_choice(value, allowed)
        hint = f"; did you mean {near!r}?" if near else ""
        super().__init__(
            f"config error: {key} = {value!r} is not allowed; expected {allowed}{hint}"
        )


def nearest_choice(value: Any, allowed: str) -> str | None:
    """The option of a choice's ``allowed`` text (``"one of a | b"``, ``"raw | clipped"``)
    nearest to a string ``value`` by ``difflib``'s ratio (at least 0.6: ``digit`` ->
    ``digits``), else None."""
    if not isinstance(value, str) or " | " not in allowed:
        return None
    options = [o.strip() for o in allowed.removeprefix("one of ").split(" | ")]
    near = difflib.get_close_matches(value, [o for o in options if o != value], n=1, cutoff=0.6)
    return near[0] if near else None


@dataclass(frozen=True)
class KeySpec:
    """One run-config key: its default, a check and the text of what is allowed."""

    name: str
    default: Scalar
    check: Callable[[Any], Any]
    allowed: str
    help: str = ""
    auto: Scalar | None = None  # "auto" when the mode declares no value (resolve)

    def coerce(self, value: Any) -> Any:
        """Return the checked (and normalised) value or raise :class:`ConfigError`."""
        try:
            return self.check(value)
        except (TypeError, ValueError) as err:
            raise ConfigError(self.name, value, self.allowed) from err


# --- checks (thin adapters of fedpriv.validation for one key) -------------------------------


def integer(lo: int | None = None, hi: int | None = None) -> Callable[[Any], int]:
    """A check for an int in [lo, hi] (bools and non-integral floats are refused)."""

    def check(value: Any) -> int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return check_int("value", value, lo=lo, hi=hi)

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
        return check_real("value", value, lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open)

    return check


def choice(options: Iterable[str]) -> Callable[[Any], str]:
    """A check for one string out of ``options``."""
    allowed = tuple(options)
    return lambda value: check_choice("value", value, allowed)


def boolean(value: Any) -> bool:
    """A check for a bool (TOML ``true``/``false``)."""
    if not isinstance(value, bool):
        raise ValueError("not a bool")
    return value


def text(value: Any) -> str:
    """A check for any string."""
    if not isinstance(value, str):
        raise ValueError("not a string")
    return value


def key(
    name: str,
    default: Scalar,
    check: Callable[[Any], Any],
    allowed: str,
    help: str = "",
    *,
    auto: Scalar | None = None,
) -> KeySpec:
    """A :class:`KeySpec` (positional shorthand for the feature declarations)."""
    return KeySpec(name, default, check, allowed, help, auto)


# one key name per idea: the old per-mode names, refused with the new one
RENAMED = {
    "l2-norm-clip": "clipping-norm",
    "zonal-clipping-norm": "clipping-norm",
    "dp-sgd-noise-multiplier": "noise-multiplier",
    "zonal-noise-multiplier": "noise-multiplier",
    "dp-sgd-delta": "dp-delta",
    "zonal-delta": "dp-delta",
}


def refuse_renamed(values: Mapping[str, Any]) -> None:
    """:class:`ConfigError` naming the new key for the first old key name in ``values``."""
    for name, value in values.items():
        if name in RENAMED:
            raise ConfigError(
                name, value, f"the key {RENAMED[name]} instead (one key name per idea)"
            )


def mode_values(layered: Mapping[str, Any]) -> dict[str, Any]:
    """The values the selected mode declares for its shared keys (``fedpriv.spec.key``'s
    ``mode_default``: DP-SGD's z = 1.1, C = 1; zonal z = C = 0.5; global DP z = 1, C = 5);
    empty for an unknown mode (its own check reports it)."""
    try:
        return mode_defaults(mode_of(layered).params)
    except ModeError:
        return {}


def fill_auto(keys: Mapping[str, KeySpec], layered: dict[str, Any]) -> dict[str, Any]:
    """``layered`` with each shared key left at ``"auto"`` set to the mode's value, else to
    the key's ``auto`` value."""
    declared = mode_values(layered)
    for name, value in layered.items():
        spec = keys.get(name)
        if value == AUTO and spec is not None and (name in declared or spec.auto is not None):
            layered[name] = declared.get(name, spec.auto)
    return layered


def known_key_text(name: str, keys: Iterable[str]) -> str:
    """What an unknown key should be: the nearest known key by ``difflib``'s ratio (at least
    0.6: ``noise-multiplyer`` -> ``noise-multiplier``), else up to three keys that contain
    it (``rounds`` -> ``num-server-rounds``), and where the list is."""
    known = list(keys)
    near = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    near = near or [k for k in known if name and name in k][:3]
    hint = f"did you mean {' or '.join(near)}? " if near else ""
    return f"a known key ({hint}see `fedpriv keys`)"


def resolve(
    keys: Mapping[str, KeySpec],
    run_config: Mapping[str, Any],
    scenario_defaults: Mapping[str, Scalar],
) -> dict[str, Any]:
    """Layer key defaults, scenario defaults and user values; check every key.

    Raises :class:`ConfigError` for an unknown key or a value that fails its check.
    """
    refuse_renamed(run_config)
    for name in run_config:
        if name not in keys:
            raise ConfigError(name, run_config[name], known_key_text(name, keys))
    resolved: dict[str, Any] = {name: spec.default for name, spec in keys.items()}
    resolved.update(scenario_defaults)
    resolved.update({k: v for k, v in run_config.items() if v != AUTO})
    resolved = fill_auto(keys, resolved)
    return {name: keys[name].coerce(value) for name, value in resolved.items()}


def default_output_dir(cfg: Mapping[str, Any]) -> str:
    """``runs/<scenario>-<strategy>-<privacy>-s<seed>``: the output directory of a resolved
    config that leaves ``output-dir`` empty (server and node derive it the same way)."""
    return f"runs/{cfg['scenario']}-{cfg['strategy']}-{selected(cfg)}-s{cfg['seed']}"


def toml_lines(keys: Iterable[KeySpec]) -> list[str]:
    """``name = default`` lines of ``[tool.flwr.app.config]`` for ``keys``."""

    def value(v: Scalar) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return f'"{v}"'
        return repr(v)

    return [f"{spec.name} = {value(spec.default)}" for spec in keys]
