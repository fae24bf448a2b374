"""The Flower side of the privacy modes: a mode's declaration plus its server wrapper.

A mode's whole declaration (parameters, threat model, ε against each party, owned keys,
disclosure, planning, report fields) is its module in :mod:`fedpriv.privacy.modes`; a feature
attaches the server-side wrapper builder with :func:`declare` (``Feature.privacy_modes``).
:class:`fedpriv.scenarios.config.feature.Catalog` refuses a mode that is not the registered
declaration.
"""

from __future__ import annotations

from fedpriv.scenarios.config.feature import PrivacyMode, WrapperBuilder

from fedpriv.privacy.modes import Mode, get


def declare(mode: Mode | str, wrapper: WrapperBuilder) -> PrivacyMode:
    """The :class:`PrivacyMode` of ``mode`` (a registered declaration or its name)."""
    declared = get(mode) if isinstance(mode, str) else mode
    return PrivacyMode(name=declared.name, wrapper=wrapper, mode=declared)
