"""``fedpriv`` command line: one sub-command per ``Command`` of the feature list.

Core commands (``run``, ``keys``, ``scenarios``) are in :mod:`scenarios.launch`; features add
theirs in their declaration (``Feature.commands``): ``grid``, ``report``, ``attack``.

The feature list imports without the ``simulation`` extra (Keras, TensorFlow, JAX, Ray,
matplotlib, scikit-learn): each command imports what it needs when it runs, so the commands
that only compute (``keys``, ``scenarios``, ``epsilon``) work in the base install, and the
others say which extra they need instead of a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from scenarios.features import CATALOG
from scenarios.launch import (  # noqa: F401  (the launch helpers, also reachable from here)
    app_config,
    parse_overrides,
    preflight,
    pyproject,
    simulation_command,
)

# Top-level packages of the ``simulation`` extra (pyproject.toml): Keras 3 and its backends
# (TensorFlow, JAX with jax-privacy), Ray, and the report / data packages.
SIMULATION_EXTRA = frozenset(
    {
        "tensorflow",
        "keras",
        "jax",
        "jaxlib",
        "jax_privacy",
        "ray",
        "matplotlib",
        "sklearn",
        "cv2",
        "PIL",
    }
)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fedpriv`` console script."""
    parser = argparse.ArgumentParser(prog="fedpriv", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, command in CATALOG.commands.items():
        command.add_arguments(sub.add_parser(name, help=command.help))
    args = parser.parse_args(argv)
    try:
        return CATALOG.commands[args.command].run(args, CATALOG)
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] not in SIMULATION_EXTRA:
            raise
        print(
            f"fedpriv {args.command}: needs the simulation extra ({err.name} is not installed): "
            "pip install 'fedpriv[simulation]'",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
