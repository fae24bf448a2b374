"""THE privacy-mode registry: the one place that reads the ``privacy`` key and names modes.

Every built-in mode is one module of :mod:`fedpriv.privacy.modes` with a ``MODE`` declaration
(:class:`fedpriv.privacy.modes.base.Mode`); :data:`BUILTIN` lists them and they are registered when
this module is imported, so an incomplete declaration fails the import (fail closed). A new
mode is one module that declares a ``MODE`` and calls :func:`register` (plus, for the
server, a Flower wrapper builder: ``fedpriv.scenarios.app.privacy_modes.declare``).

Everything else asks the registry: :func:`mode_of` (a config's mode object),
:func:`name_of` (its name, as written in records), :func:`get` (a mode by name). An
unknown mode raises :class:`ModeError` (one line naming the value and the known modes).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from fedpriv.privacy.modes.base import Mode, ModeError

__all__ = ["BUILTIN", "KEY", "get", "mode_of", "name_of", "names", "register", "unregister"]

KEY = "privacy"  # the run-config key that selects a mode
NO_MODE = "none"  # the mode of a config that selects none
IFCA_KIND = "ifca"  # IFCA runs: the mode is chosen by the scenario kind / client task
BUILTIN = (
    "none", "global_dp", "metric_dp", "dp_sgd", "zonal", "ifca",
    "adaptive_clip", "dp_ftrl", "client_budgets", "distributed_dp",
)  # fmt: skip
_MODES: dict[str, Mode] = {}


def register(mode: Mode) -> Mode:
    """Add a complete ``mode``; :class:`ModeError` if incomplete or its name is taken."""
    mode.check()
    if mode.name in _MODES and _MODES[mode.name] is not mode:
        raise ModeError(f"privacy mode {mode.name!r} is declared twice")
    _MODES[mode.name] = mode
    return mode


def unregister(name: str) -> None:
    """Remove a mode a test registered (built-in modes stay)."""
    if name in {m.MODE.name for m in _builtin_modules()}:
        raise ModeError(f"privacy mode {name!r} is built in; it cannot be removed")
    _MODES.pop(name, None)


def names(*, selectable: bool = True) -> tuple[str, ...]:
    """The registered modes' names (``selectable``: only those the ``privacy`` key picks)."""
    return tuple(n for n, m in _MODES.items() if m.selectable or not selectable)


def get(name: Any) -> Mode:
    """The mode called ``name``; :class:`ModeError` naming the known modes otherwise."""
    if not isinstance(name, str) or name not in _MODES:
        known = " | ".join(names(selectable=False))
        raise ModeError(f"privacy = {name!r} is not a privacy mode; expected one of {known}")
    return _MODES[name]


def name_of(cfg: Mapping[str, Any]) -> str:
    """The mode name of a config or record: ``privacy`` (IFCA runs: ``ifca``)."""
    task_or_kind = {str(cfg.get("client-task", "")), str(cfg.get("scenario-kind", ""))}
    if IFCA_KIND in task_or_kind:
        return IFCA_KIND
    return str(cfg.get(KEY, NO_MODE))


def selected(cfg: Mapping[str, Any]) -> Any:
    """The raw ``privacy`` value of a config or record (None if absent): for records."""
    return cfg.get(KEY)


def mode_of(cfg: Mapping[str, Any]) -> Mode:
    """The mode object of a config (see :func:`name_of`); :class:`ModeError` if unknown."""
    return get(name_of(cfg))


def _builtin_modules() -> list[Any]:
    return [importlib.import_module(f"fedpriv.privacy.modes.{module}") for module in BUILTIN]


for _module in _builtin_modules():
    register(_module.MODE)
