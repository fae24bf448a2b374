"""The run config a run directory belongs to: ``run-config.json`` and the config fingerprint.

A checkpoint (:mod:`fedpriv.checkpoint`) holds the state of a run; which run config it
belongs to is a question about the run-config mapping itself (every key, hashed and
compared), so it is answered here, in the Flower app, not below it (nothing below
``scenarios/`` takes a run config).

- :func:`write_manifest` writes ``run-config.json`` when a run starts: the config's
  result-relevant keys (:func:`fingerprint_config`) and their hash (:func:`fingerprint`),
  which every checkpoint of the run carries too (``fedpriv.scenarios.app.resume``);
- :func:`recorded_config` and :func:`config_differences` let the launcher decide
  (``fedpriv.scenarios.cli.preflight.run_state``): new, resume, finished, or refused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

__all__ = [
    "MANIFEST",
    "NEUTRAL_KEYS",
    "config_differences",
    "fingerprint",
    "fingerprint_config",
    "recorded_config",
    "write_manifest",
]

MANIFEST = "run-config.json"
SUMMARY = "summary.json"
# keys that name where or how loudly a run writes, or how many processes serve its clients,
# not what it computes
NEUTRAL_KEYS = frozenset({"output-dir", "verbose", "num-workers"})


def fingerprint_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The config values that determine the results (JSON-safe)."""
    return {k: _jsonable(v) for k, v in sorted(cfg.items()) if k not in NEUTRAL_KEYS}


def fingerprint(cfg: Mapping[str, Any]) -> str:
    """A short hash of :func:`fingerprint_config` (the first 16 hex digits of its SHA-256)."""
    text = json.dumps(fingerprint_config(cfg), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _jsonable(value: Any) -> Any:
    return value if isinstance(value, (str, int, bool)) or value is None else repr(value)


def write_manifest(output_dir: str | Path, cfg: Mapping[str, Any]) -> None:
    """``run-config.json``: the config this directory holds a run of."""
    path = Path(output_dir)
    path.mkdir(parents=True, exist_ok=True)
    content = {"fingerprint": fingerprint(cfg), "config": fingerprint_config(cfg)}
    (path / MANIFEST).write_text(json.dumps(content, indent=1, sort_keys=True))


def recorded_config(output_dir: str | Path) -> Optional[dict[str, Any]]:
    """The config a directory says it holds (manifest, else summary.json's), or None."""
    path = Path(output_dir)
    if (path / MANIFEST).exists():
        return json.loads((path / MANIFEST).read_text())["config"]
    if (path / SUMMARY).exists():
        config = json.loads((path / SUMMARY).read_text()).get("config")
        return fingerprint_config(config) if isinstance(config, dict) else None
    return None


def config_differences(recorded: Mapping[str, Any], cfg: Mapping[str, Any]) -> list[str]:
    """``"key old -> new"`` for every result-relevant key where ``cfg`` differs."""
    wanted = fingerprint_config(cfg)
    keys = sorted(k for k in set(wanted) | set(recorded) if wanted.get(k) != recorded.get(k))
    return [f"{k} {recorded.get(k)!r} -> {wanted.get(k)!r}" for k in keys]
