"""Privacy modes as objects (issue 26): one module per mode, one registry.

See :mod:`fedpriv.modes.base` (the declaration) and :mod:`fedpriv.modes.registry`.
"""

from fedpriv.modes.base import Mode, ModeError
from fedpriv.modes.registry import get, mode_of, name_of, names, register

__all__ = ["Mode", "ModeError", "get", "mode_of", "name_of", "names", "register"]
