"""Preflight of the environment: what ``fedpriv run`` checks after the config, before Ray.

The config checks (every key, every cross-key rule) say whether the *values* are allowed;
this module checks that the *world* can carry the run (SPEC §7):

- the output directory can be created and written, and is not a file
  (``output-dir = '/proc/x'`` is one line and exit 2, not a traceback from inside Ray);
- the output directory's state: empty or new (start), a killed run of the same config
  (resume from its checkpoint), a finished run of the same config (nothing to do), or a
  run of another config (refused, one line);
- the data is readable and decodable — done by loading it (``federated_data``). A corrupt
  image in a class folder is **reported by file name** and the run refused, not skipped:
  the MP splits are exact class counts, so silently dropping one image would change the
  partition a user asked for (and a corrupt file usually means a broken download).

The probe never leaves anything behind: directories it had to create to test
writability are removed again, so a refused run leaves no output directory.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from fedpriv.scenarios.config.manifest import config_differences, recorded_config
from fedpriv.scenarios.config.schema import ConfigError

from fedpriv.checkpoint import load_checkpoint

OUTPUT_DIR_ALLOWED = "a writable directory path (not a file)"


def _missing_parents(path: Path) -> list[Path]:
    """``path`` and its ancestors that do not exist yet, outermost first."""
    missing = []
    while not path.exists() and not path.is_symlink():
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    return list(reversed(missing))


def check_output_dir(output_dir: str) -> None:
    """Refuse an output directory that is a file or cannot be created and written.

    Tries it for real (``mkdir`` and a probe file), because ``os.access`` says yes to root
    for read-only mounts such as ``/proc``; removes whatever it created.
    """
    path = Path(output_dir).expanduser()
    if path.exists() and not path.is_dir():
        raise ConfigError("output-dir", output_dir, OUTPUT_DIR_ALLOWED + "; it is a file")
    created = _missing_parents(path)
    try:
        for folder in created:
            folder.mkdir()
        with tempfile.NamedTemporaryFile(dir=path, prefix=".fedpriv-probe-"):
            pass
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise ConfigError("output-dir", output_dir, f"{OUTPUT_DIR_ALLOWED} ({reason})") from None
    finally:
        for folder in reversed(created):
            try:
                folder.rmdir()
            except OSError:
                pass


@dataclass(frozen=True)
class RunState:
    """What a command on an output directory does: ``new``, ``resume`` or ``finished``."""

    action: str
    round: int = 0


def run_state(
    output_dir: str,
    cfg: Mapping[str, Any],
    complete: Optional[Callable[[Mapping[str, Any]], bool]] = None,
) -> RunState:
    """New / resume (from the checkpoint's round) / finished for ``cfg`` in ``output_dir``;
    a directory holding a run of another config is refused (one line, names the keys).

    ``complete(cfg)`` is the run kind's completion check (``Catalog.completion``: a CIA run
    is finished when its cia.json exists, not its first phase's summary.json); without one,
    a run is finished when its summary.json exists."""
    path = Path(output_dir)
    recorded = recorded_config(path) if path.is_dir() else None
    if recorded is None:
        return RunState("new")
    differing = config_differences(recorded, cfg)
    if differing:
        more = f" (+{len(differing) - 3} more)" if len(differing) > 3 else ""
        raise ConfigError(
            "output-dir",
            str(output_dir),
            "a new directory, or one holding a run of this same config (it holds another: "
            + ", ".join(differing[:3])
            + more
            + ")",
        )
    finished = complete({**cfg, "output-dir": str(output_dir)}) if complete else None
    if finished or (finished is None and (path / "summary.json").exists()):
        return RunState("finished")
    checkpoint = load_checkpoint(path)
    return RunState("new") if checkpoint is None else RunState("resume", int(checkpoint["round"]))


def check_environment(
    cfg: Mapping[str, Any], complete: Optional[Callable[[Mapping[str, Any]], bool]] = None
) -> RunState:
    """``$FEDPRIV_CPUS``, the output directory (usable; new, resumable or finished:
    ``complete`` as in :func:`run_state`), then the data (loading it is the decodability
    check; errors name the file). Returns what the run will do."""
    from fedpriv.clients.partitions import federated_data
    from fedpriv.scenarios.config.specs import data_spec
    from fedpriv.scenarios.speed.workers import available_cpus

    available_cpus()  # $FEDPRIV_CPUS, if set, is a positive integer
    check_output_dir(str(cfg["output-dir"]))
    state = run_state(cfg["output-dir"], cfg, complete)
    if state.action == "finished":
        return state
    if cfg["data-path"] and not Path(cfg["data-path"]).expanduser().exists():
        raise ConfigError("data-path", cfg["data-path"], "an existing file or directory")
    federated_data(data_spec(cfg))
    return state
