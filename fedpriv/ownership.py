"""Clients own their privacy settings (issue 20, must-show 3): the server may not weaken them.

In the modes whose threat model distrusts the server (``scenarios.privacy_modes``
THREAT_MODELS: ``dp-sgd``; ``zonal`` for a client in an LDP zone; IFCA, GP's Laplace
sanitizing on the client), the keys that decide what a client releases are the client's own:
their values come from the node's own config — ``context.run_config`` overlaid with
``context.node_config`` (node config wins; a deployment SuperNode sets them with
``--node-config "privacy='dp-sgd' dp-sgd-noise-multiplier=1.1 ..."``) — never from the
message. A message carrying such a key with another value is refused (:func:`refusal`): the
ClientApp replies with an error naming the key and sends nothing else. Equal values are
fine (the server sends the values it resolved).

Which keys (:data:`OWNED_KEYS`):

* ``dp-sgd``: the mode, z, C, δ (DP-SGD's example-level (ε, δ), Abadi et al. 2016), and the
  batch size B and local epochs E, which enter ε through q = B/n and the number of steps
  E/q; the client's participation count is its own (``context.state``): a message carrying
  ``dp-sgd-participations`` is refused (:data:`CLIENT_COUNTED`);
* ``zonal`` (LDP): the mode, the placement keys that decide the client's zone level, z and C
  of its noise N(0, (z·C)²) (HDP Algorithm 1 line 14 at the client), δ;
* ``zone-node`` (issue 21, ``zonal-runtime = zone-nodes``): a zone SuperNode of an LDP or
  HDP zone owns the zonal keys and the runtime; its level comes from its own plan by its zone
  id (its ``partition-id``), so a message cannot turn its noise off;
* ``ifca``: ν of GP Algorithm 2 (ε = n/(ν‖δ‖)), the leakage budget (GP Thm 3.1), and the
  keys that make a user a held-out validation user (``num-clients``, ``validation-clients``);
* every mode: the opt-ins ``unaccounted-metrics`` and ``reproducible-noise``.

Derived keys (:func:`expected_values`): the client task (a DP-SGD client trains with DP-SGD,
whatever ``client-task`` says), a zonal client's ``zonal-level`` (its own plan) and IFCA's
``ifca-eval-split`` (``all`` only for a validation user).

A key the client leaves at ``"auto"`` (or does not set) is delegated: it takes the value the
server resolves from the run's scenario, as before. ``reproducible-noise`` not set means
``false``. To own a key, a client sets it. The client's mode is its own ``privacy`` (or an
own ν > 0, or an IFCA message); the modes that trust the server (``none``, ``global-dp``,
``metric-dp``, zonal HDP/CDP zones) keep taking the server's values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "CLIENT_COUNTED",
    "OWNED_KEYS",
    "REFUSED_CODE",
    "apply_owned",
    "client_mode",
    "expected_values",
    "own_settings",
    "owned_keys",
    "refusal",
]

AUTO = "auto"
OPT_INS = ("unaccounted-metrics", "reproducible-noise")
# the keys that decide a zonal client's zone, level, z, C and δ (owned by clients and zone nodes)
ZONE_DECIDING = (
    "privacy",
    "noise-placement",
    "ldp-fraction",
    "hdp-fraction",
    "num-zones",
    "zone-assignment",
    "zone-map",
    "num-clients",
    "zonal-noise-multiplier",
    "zonal-clipping-norm",
    "zonal-delta",
)
SECURE_DEFAULTS: dict[str, Any] = {"reproducible-noise": False}  # own value when unset
REFUSED_CODE = 20  # the error code of a refused message (issue 20); Flower's own are 0-8

# server-distrusting mode -> the run-config keys that decide a client's privacy
OWNED_KEYS: dict[str, tuple[str, ...]] = {
    "dp-sgd": (
        "privacy",
        "dp-sgd-noise-multiplier",
        "l2-norm-clip",
        "dp-sgd-delta",
        "batch-size",
        "local-epochs",
        *OPT_INS,
    ),
    "zonal": (*ZONE_DECIDING, *OPT_INS),
    "zone-node": (*ZONE_DECIDING, "zonal-runtime", *OPT_INS),
    "ifca": (
        "ifca-noise-multiplier",
        "leakage-budget",
        "num-clients",
        "validation-clients",
        *OPT_INS,
    ),
}

# values the client counts itself: no message may carry them
CLIENT_COUNTED = ("dp-sgd-participations",)
# mode -> its client task
TASKS = {"dp-sgd": "dp-sgd", "zonal": "zonal", "zone-node": "zone-node", "ifca": "ifca"}
ALL_OWNED = frozenset(k for keys in OWNED_KEYS.values() for k in keys)


def owned_keys(mode: str) -> tuple[str, ...]:
    """The keys a ``mode`` client owns (empty for a mode that trusts the server)."""
    return OWNED_KEYS.get(mode, ())


def own_settings(run_config: Mapping[str, Any], node_config: Mapping[str, Any]) -> dict:
    """The node's own config: ``run_config`` with the privacy keys of ``node_config`` on top."""
    return {**run_config, **{k: v for k, v in node_config.items() if k in ALL_OWNED}}


def _set(own: Mapping[str, Any], key: str) -> bool:
    return key in own and own[key] != AUTO


def _own_value(own: Mapping[str, Any], key: str) -> tuple[bool, Any]:
    """(owned?, value): a set key, or a secure default; unset/``auto`` keys are delegated."""
    if _set(own, key):
        return True, own[key]
    if key in SECURE_DEFAULTS and key not in own:
        return True, SECURE_DEFAULTS[key]
    return False, None


def zonal_level(own: Mapping[str, Any], partition: int) -> str | None:
    """The noise level of this client's zone from its own config (None: not decided by it)."""
    placement = own.get("noise-placement")
    if placement in ("none", "ldp", "hdp", "cdp"):
        return str(placement)
    if placement != "mixed" or not all(_set(own, k) for k in ("num-clients", "num-zones")):
        return None
    from fedpriv.zonal import assign_zones, zone_levels

    zones = int(own["num-zones"])
    try:
        zone_of = assign_zones(
            int(own["num-clients"]),
            zones,
            method=str(own.get("zone-assignment", "blocks")),
            zone_map=str(own.get("zone-map", "")) or None,
        )
        levels = zone_levels(
            zones,
            "mixed",
            hdp_fraction=float(own.get("hdp-fraction", 0.0)),
            ldp_fraction=float(own.get("ldp-fraction", 0.0)),
        )
        return levels[zone_of[partition]]
    except (ValueError, IndexError):
        return None


def zone_node_level(own: Mapping[str, Any], zone: int) -> str | None:
    """The level of zone ``zone`` from a zone node's own config (None: not decided by it)."""
    placement = own.get("noise-placement")
    if placement in ("none", "ldp", "hdp", "cdp"):
        return str(placement)
    if placement != "mixed" or not _set(own, "num-zones"):
        return None
    from fedpriv.zonal import zone_levels

    try:
        levels = zone_levels(
            int(own["num-zones"]),
            "mixed",
            hdp_fraction=float(own.get("hdp-fraction", 0.0)),
            ldp_fraction=float(own.get("ldp-fraction", 0.0)),
        )
        return levels[int(zone)]
    except (ValueError, IndexError):
        return None


def client_mode(own: Mapping[str, Any], partition: int, message_task: str = "") -> str | None:
    """The client's server-distrusting mode from its OWN config (None: it trusts the server).

    ``dp-sgd``: own ``privacy = dp-sgd``; ``zonal``: own ``privacy = zonal`` in an LDP zone;
    ``ifca``: an own ν > 0 or an IFCA message (``message_task``: GP's untrusted server).
    """
    privacy = own.get("privacy")
    if privacy == "dp-sgd":
        return "dp-sgd"
    zone_node = message_task == TASKS["zone-node"] or own.get("zonal-runtime") == "zone-nodes"
    if privacy == "zonal" and zone_node:
        return "zone-node" if zone_node_level(own, partition) in ("ldp", "hdp") else None
    if privacy == "zonal" and zonal_level(own, partition) == "ldp":
        return "zonal"
    nu = own.get("ifca-noise-multiplier", AUTO)
    if (nu != AUTO and float(nu) > 0) or message_task == TASKS["ifca"]:
        return "ifca"
    return None


def expected_values(mode: str, own: Mapping[str, Any], partition: int) -> dict[str, Any]:
    """The owned values of a ``mode`` client: its set keys, secure defaults and derived keys."""
    out = {}
    for key in OWNED_KEYS[mode]:
        owned, value = _own_value(own, key)
        if owned:
            out[key] = value
    out["client-task"] = TASKS[mode]
    if mode == "zonal":
        out["zonal-level"] = zonal_level(own, partition)
    if mode == "zone-node":
        out["zonal-level"] = zone_node_level(own, partition)
    if mode == "ifca" and all(_set(own, k) for k in ("num-clients", "validation-clients")):
        first_validation = int(own["num-clients"]) - int(own["validation-clients"])
        out["ifca-eval-split"] = "all" if partition >= first_validation else "test"
    return out


def same(a: Any, b: Any) -> bool:
    """Equal config values: numbers by value (1 == 1.0), bools and strings exactly."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return type(a) is type(b) and a == b


def refusal(
    own: Mapping[str, Any],
    received: Mapping[str, Any],
    partition: int,
    *,
    kind: str,
    message_task: str = "",
) -> str | None:
    """Why the client refuses a message (one line naming the key), or None to accept it.

    ``received``: what the message's config carries (the keys sent, or the whole config of
    a digest-less message); ``kind``: ``train`` | ``evaluate``; ``message_task``: the task a
    custom message type names (IFCA). A plain ``train`` without ``client-task`` asks for the
    standard task, refused in a mode with a task of its own (an IFCA client: any plain message).
    """
    mode = client_mode(own, partition, message_task or str(received.get("client-task", "")))
    if mode is None:
        return None
    sent = dict(received)
    if not message_task and (kind == "train" or mode == "ifca"):  # IFCA has its own types
        sent.setdefault("client-task", "standard")
    for key in CLIENT_COUNTED:
        if key in sent:
            return _reason(mode, key, sent[key], "counted by the client itself")
    for key, value in expected_values(mode, own, partition).items():
        if key in sent and not same(sent[key], value):
            return _reason(mode, key, sent[key], f"the client's own value is {value!r}")
    return None


def _reason(mode: str, key: str, value: Any, why: str) -> str:
    return (
        f"refused: the {mode} client owns its privacy settings: key={key} value={value!r} "
        f"({why}); nothing was sent"
    )


def apply_owned(
    cfg: Mapping[str, Any], own: Mapping[str, Any], partition: int, message_task: str = ""
) -> dict[str, Any]:
    """``cfg`` with the client's owned values on top (after :func:`refusal` accepted it).

    The keys the client sets, its mode's client task and a zonal client's own ``zonal-level``
    (a message that leaves them out must not fall back to the standard task or an un-noised
    zone); secure defaults are the tasks' own, ``ifca-eval-split`` defaults to ``test``.
    """
    mode = client_mode(own, partition, message_task or str(cfg.get("client-task", "")))
    if mode is None:
        return dict(cfg)
    derived = expected_values(mode, own, partition)
    forced = {k: derived[k] for k in ("client-task", "zonal-level") if k in derived}
    return {**cfg, **{k: own[k] for k in OWNED_KEYS[mode] if _set(own, k)}, **forced}
