"""The ``fedpriv`` command line: one sub-command per ``Command`` that a feature declares.

Core commands are in :mod:`fedpriv.scenarios.cli.launch` (``run``) and
:mod:`fedpriv.scenarios.cli.listing`
(``keys``, ``scenarios``, ``show``); features add
theirs in their declaration (``Feature.commands``): ``grid``, ``report``, ``attack``,
``audit``, ``epsilon``. Each has a one-sentence ``help`` in a user's words and an
``example`` shown in ``fedpriv <cmd> --help``.

The feature list imports without the ``simulation`` extra (Keras, TensorFlow, JAX, Ray,
matplotlib, scikit-learn), and without Flower, SciPy or dp-accounting: each command imports
what it needs when it runs, so ``fedpriv --help``, ``fedpriv run --help`` and a config error
answer at once, the commands that only compute (``keys``, ``scenarios``, ``epsilon``) work
in the base install, and the others say which extra they need instead of a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from fedpriv.scenarios.cli.launch import (  # noqa: F401  (the launch helpers, also reachable from here)
    app_config,
    parse_overrides,
    preflight,
    pyproject,
    simulation_command,
)
from fedpriv.scenarios.config.features import CATALOG

DESCRIPTION = """Federated learning with differential privacy on Flower: train the papers'
scenarios, see each round's accuracy and privacy figure, compare strategies and privacy modes."""
EXAMPLES = """examples:
  fedpriv run                      the default scenario (digits, 4 clients, metric privacy)
  fedpriv run -c "privacy='global-dp' num-server-rounds=5"
  fedpriv keys                     every setting -c accepts
  fedpriv <command> --help         the options of one command, with an example"""

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


def build_parser() -> argparse.ArgumentParser:
    """The ``fedpriv`` parser: a sub-command per declared command, each with its example."""
    parser = argparse.ArgumentParser(
        prog="fedpriv",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="<command>")
    for name, command in CATALOG.commands.items():
        example = "\n".join(f"  {line}" for line in command.example.splitlines())
        command.add_arguments(
            sub.add_parser(
                name,
                help=command.help,
                description=command.help,
                epilog=f"example:\n{example}" if example else None,
                formatter_class=argparse.RawDescriptionHelpFormatter,
            )
        )
    return parser


# the exit status of a command whose reader went away (``fedpriv keys | head -1``): a shell's
# 128 + SIGPIPE, what ``yes | head -1`` reports for ``yes``
CLOSED_PIPE_STATUS = 141


def _quiet_closed_pipe() -> int:
    """Point stdout at ``os.devnull`` so that the interpreter's last flush of what is still
    buffered finds no closed pipe (Python's ``signal`` docs, "Note on SIGPIPE"), and return
    :data:`CLOSED_PIPE_STATUS`: no traceback, as a Unix tool ends in a closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is no file (a test's StringIO): nothing to flush
        pass
    finally:
        os.close(devnull)
    return CLOSED_PIPE_STATUS


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fedpriv`` console script; a reader that closes the pipe early
    ends the command quietly with :data:`CLOSED_PIPE_STATUS`."""
    try:
        try:
            return _run(argv)
        finally:  # also after --help's SystemExit: a closed pipe shows here, not at exit
            sys.stdout.flush()
    except BrokenPipeError:
        return _quiet_closed_pipe()


def key_as_flag(extras: Sequence[str], argv: Sequence[str] = ()) -> str | None:
    """The one-line error for a run-config key given as an option (``--output-dir X``):
    it names the key and the ``-c`` item to write instead; None when no extra is a key.
    The value is the word after the option in ``argv`` (argparse may have taken it for a
    positional argument: ``fedpriv show --seed 3``), else in ``extras``."""
    for arg in extras:
        name, eq, value = arg.removeprefix("--").partition("=")
        if not arg.startswith("--") or name not in CATALOG.keys:
            continue
        if not eq:
            words = list(argv) if arg in argv else list(extras)
            at = words.index(arg) + 1
            following = words[at] if at < len(words) else ""
            value = "" if following.startswith("--") else following
        item = f"{name}={toml_value(value)}" if value else f"{name}=..."
        return (
            f"fedpriv: config error: {arg.split('=')[0]} is a run-config key, not an option; "
            f'expected -c "{item}" (fedpriv keys lists them)'
        )
    return None


def toml_value(text: str) -> str:
    """``text`` as a TOML value for a ``-c`` item: as typed when TOML reads it as a number or
    a bool, else quoted (``X`` -> ``'X'``)."""
    import tomllib

    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except ValueError:
        return repr(text)
    return text if isinstance(value, (bool, int, float)) else repr(text)


def _run(argv: Sequence[str] | None) -> int:
    """Parse ``argv`` and run its command; a missing simulation extra is one line, exit 2;
    a run-config key given as an option (``--seed 1``) is one line naming the ``-c`` item."""
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        text = key_as_flag(extras, sys.argv[1:] if argv is None else argv)
        if text is not None:
            print(text, file=sys.stderr)
            return 2
        parser.parse_args(argv)  # argparse's own error for an unknown option, exit 2
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
