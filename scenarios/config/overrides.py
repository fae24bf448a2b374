"""Flower's ``--run-config`` syntax without importing Flower: ``"a=1 b='x'"`` or one TOML file.

An item is ``key=value`` pairs separated by spaces, each value TOML (a number, ``true`` /
``false``, or a quoted string), as ``flwr.common.config.parse_config_args`` (flwr 1.42) reads
it. A pair that is not TOML raises :class:`OverrideError`, one line naming that pair alone,
and saying, for a bare word (``privacy=global-dp``), that a string value needs quotes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedpriv.scenarios.config.schema import ConfigError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

# Flower's --run-config item: key=value, the value quoted or up to the next space
# (flwr.common.config.parse_config_args).
_ITEM = re.compile(r"(\S+?)=(\'[^\']*\'|\"[^\"]*\"|\S+)")
# a value TOML reads as a bare word: what a forgotten pair of quotes leaves
_BARE_WORD = re.compile(r"[A-Za-z_][\w.\-/]*")
ALLOWED = "space-separated key=value pairs with TOML values"


class OverrideError(ConfigError):
    """A ``--run-config`` pair (or text) that is not ``key=value`` with a TOML value."""

    def __init__(self, pair: str, problem: str) -> None:
        ValueError.__init__(self, f"config error: --run-config {pair!r} {problem}")
        self.key, self.value, self.allowed = "--run-config", pair, ALLOWED


class DuplicateKeyError(ConfigError):
    """A --run-config key given twice (Flower would fail on it or keep the last silently)."""

    def __init__(self, key: str, first: str, second: str) -> None:
        ValueError.__init__(
            self,
            f"config error: --run-config gives {key} twice ({key}={first}, {key}={second}); "
            "expected each key once",
        )
        self.key, self.value, self.allowed = key, second, "each key once"


def check_unique_keys(items: Sequence[str]) -> None:
    """Refuse a key that appears twice across the ``--run-config`` items."""
    seen: dict[str, str] = {}
    for item in items:
        for key, value in _ITEM.findall(item):
            if key in seen:
                raise DuplicateKeyError(key, seen[key], value)
            seen[key] = value


def _flatten(table: Mapping[str, Any], parent: str = "") -> dict[str, Any]:
    """Nested TOML tables to dotted keys (Flower's ``flatten_dict``)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{parent}.{key}" if parent else key
        if isinstance(value, Mapping):
            out.update(_flatten(value, name))
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
        else:
            raise ValueError(f"{name}: a bool, int, float or string, not {value!r}")
    return out


def pair_hint(key: str, value: str) -> str:
    """What to write instead of ``key=value``: quotes around a bare word, else the rule."""
    if _BARE_WORD.fullmatch(value) and value not in ("true", "false", "inf", "nan"):
        return f"is not TOML: a string value needs quotes, -c \"{key}='{value}'\""
    return "is not TOML; expected key=value with a number, true / false or a quoted string"


def _check_item(item: str) -> None:
    """:class:`OverrideError` for the first pair of ``item`` that is not TOML, or for text
    outside any ``key=value`` pair."""
    for key, value in _ITEM.findall(item):
        try:
            tomllib.loads(f"{key} = {value}")
        except ValueError:  # tomllib.TOMLDecodeError is a ValueError
            raise OverrideError(f"{key}={value}", pair_hint(key, value)) from None
    left = _ITEM.sub(" ", item).split()
    if left:
        raise OverrideError(left[0], "is not key=value; expected key=value pairs with spaces "
                            "between them and TOML values")  # fmt: skip


class MissingFileError(ConfigError):
    """A ``-c`` / ``--run-config`` item that names a file which is not there (or is no TOML
    file): one line naming the path, not a complaint about key=value pairs."""

    def __init__(self, path: str, problem: str) -> None:
        ValueError.__init__(self, f"config error: --run-config file {path!r} {problem}")
        self.key, self.value, self.allowed = "--run-config", path, problem


def _looks_like_a_file(item: str) -> bool:
    """An item with no ``=`` that names a path: a ``.toml`` name, a folder part or a file."""
    text = item.strip()
    if not text or "=" in text or " " in text:
        return False
    return text.endswith(".toml") or "/" in text or Path(text).expanduser().exists()


def _check_file(item: str) -> None:
    """:class:`MissingFileError` for an item that names a path but no TOML file there."""
    path = Path(item.strip()).expanduser()
    if not path.exists():
        raise MissingFileError(item, "does not exist; expected a TOML file or key=value pairs")
    if not path.is_file():
        raise MissingFileError(item, "is not a file; expected a TOML file or key=value pairs")
    if not item.strip().endswith(".toml"):  # Flower reads a file only by its .toml name
        raise MissingFileError(item, "is not named *.toml; expected a TOML file named *.toml")


def _parse_items(items: Sequence[str]) -> dict[str, Any]:
    """Flower's ``parse_config_args`` (flwr 1.42, ``flwr.common.config``) without importing
    Flower: one ``.toml`` file, or ``key=value`` items whose values are TOML."""
    for item in items:
        if _looks_like_a_file(item):
            _check_file(item)
    if len(items) == 1 and items[0].endswith(".toml"):
        with Path(items[0]).expanduser().open("rb") as fh:
            return _flatten(tomllib.load(fh))
    merged: dict[str, Any] = {}
    for item in items:
        if item.endswith(".toml"):
            raise ValueError("a TOML file cannot be passed alongside key=value pairs")
        _check_item(item)
        merged.update(tomllib.loads("\n".join(f"{k} = {v}" for k, v in _ITEM.findall(item))))
    return _flatten(merged)


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """Flower's ``--run-config`` syntax (``"a=1 b='x'"``, TOML values) to a dict; a key given
    twice or a pair that is not TOML raises :class:`ConfigError` (one line, that pair)."""
    if not items:
        return {}
    check_unique_keys(items)
    try:
        return _parse_items(items)
    except ConfigError:
        raise
    except (OSError, ValueError) as err:  # tomllib.TOMLDecodeError is a ValueError
        raise ConfigError("--run-config", " ".join(items), ALLOWED) from err
