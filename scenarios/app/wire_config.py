"""What a message carries of the run config: only what differs from the run's ``run_config``.

Server and clients see the same ``context.run_config`` (pyproject defaults + the
``--run-config`` overrides). Instead of the whole resolved config (~70 keys, serialised into
every message), the server sends the keys whose resolved value differs from that raw run
config (scenario defaults filled in for ``"auto"``, the round, the client task, a sweep or
comparison variant's keys) and a digest of the run config. The client checks the digest
against its own ``context.run_config`` (once per digest) and merges the keys into it, so a
worker resolves nothing and imports no server code.

- server: :func:`set_base` once per run with ``context.run_config`` (``ServerApp`` main),
  then :func:`wire_config` per config record. An opt-in the run config leaves at ``"auto"``
  (``reproducible-noise``, ``unaccounted-metrics``: a scenario's paper setting) is not sent:
  each node resolves it itself, to false (:mod:`fedpriv.scenarios.config.node_spec`); nor is a
  per-node key left at ``"auto"`` (client-budgets' ``client-epsilon``: the node's own budget,
  :data:`fedpriv.privacy.ownership.NODE_HELD_BACK`). Without a
  base (library use, tests) the whole config is sent, as before.
- client: :func:`client_config` (a digest that does not match raises: the two sides would
  train different things). The ClientApp refuses a message whose privacy keys differ from
  the node's own spec and runs with the spec's values (:mod:`fedpriv.scenarios.config.node_spec`,
  ``fedpriv.scenarios.app.client_app.resolved``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from fedpriv.privacy.ownership import AUTO, NODE_HELD_BACK

DIGEST_KEY = "config-digest"
_BASE: dict[str, Any] = {}
_BASE_DIGEST: list[str] = []
_SEEN: dict[str, dict[str, Any]] = {}


def digest(cfg: Mapping[str, Any]) -> str:
    """A short stable digest of a config (sorted JSON with types, SHA-256, 16 hex digits)."""
    items = sorted((k, type(v).__name__, v) for k, v in cfg.items())
    return hashlib.sha256(json.dumps(items, default=str).encode()).hexdigest()[:16]


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def set_base(run_config: Mapping[str, Any]) -> None:
    """The run's raw ``context.run_config`` (what every client's context holds too)."""
    _BASE.clear()
    _BASE.update(run_config)
    _BASE_DIGEST[:] = [digest(run_config)]


def wire_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of ``cfg`` whose values differ from the base, plus the base's digest."""
    if not _BASE or any(k not in cfg for k in _BASE):
        return dict(cfg)
    delta = {
        k: v
        for k, v in cfg.items()
        if (k not in _BASE or not _same(_BASE[k], v))
        and not (k in NODE_HELD_BACK and _BASE.get(k) == AUTO)
    }
    delta[DIGEST_KEY] = _BASE_DIGEST[0]
    return delta


def client_config(record: Mapping[str, Any], run_config: Mapping[str, Any]) -> dict[str, Any]:
    """The full config of a message: this node's ``run_config`` + the keys the server sent.

    Strategies may add keys to the record after :func:`wire_config` (client task, zone,
    participations): they are merged like the others.
    """
    received = dict(record)
    sent = received.pop(DIGEST_KEY, None)
    if sent is None:
        return received  # the whole config was sent
    if sent not in _SEEN:
        if digest(run_config) != sent:
            raise RuntimeError(
                f"config-digest {sent} from the server, {digest(run_config)} here: the "
                "client's run_config differs from the server's"
            )
        if len(_SEEN) > 8:
            _SEEN.clear()
        _SEEN[sent] = dict(run_config)
    return {**_SEEN[sent], **received}
