"""Privacy modes as objects: one module per mode, one registry.

See :mod:`fedpriv.privacy.modes.base` (the declaration) and :mod:`fedpriv.privacy.modes.registry`.
"""

from fedpriv.privacy.modes.base import Mode, ModeError
from fedpriv.privacy.modes.registry import get, mode_of, name_of, names, register

__all__ = ["Mode", "ModeError", "get", "mode_of", "name_of", "names", "register"]
