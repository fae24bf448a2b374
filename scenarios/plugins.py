"""Import every feature module so its scenarios, runners, tasks and commands register.

Imported at the end of ``server_app``, ``client_app`` and ``cli``.
"""

from scenarios import attacks, dp, dpsgd, grid_cli, ifca, zonal  # noqa: F401
