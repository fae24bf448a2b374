"""Clients own their privacy settings: the server may not weaken them.

In the modes whose threat model distrusts the server (each mode's ``threat_model`` and
``owned_keys`` in :mod:`fedpriv.privacy.modes`: ``dp-sgd``; ``zonal`` for a client in an LDP
zone; IFCA, GP's Laplace sanitizing on the client), the keys that decide what a client
releases are the client's own:
their values come from the node's own config — ``context.run_config`` overlaid with
``context.node_config`` (node config wins; a deployment SuperNode sets them with
``--node-config "privacy='dp-sgd' noise-multiplier=1.1 ..."``) — never from the
message. A message carrying such a key with another value is refused (:func:`refusal`): the
ClientApp replies with an error naming the key and sends nothing else. Equal values are
fine (the server sends the values it resolved).

Which keys (:data:`OWNED_KEYS`, gathered from each mode's ``owned_keys``):

* ``dp-sgd``: the mode, z, C, δ (DP-SGD's example-level (ε, δ), Abadi et al. 2016), and the
  batch size B and local epochs E, which enter ε through q = B/n and the number of steps
  E/q; the client's participation count is its own (``context.state``): a message carrying
  ``dp-sgd-participations`` is refused (:data:`CLIENT_COUNTED`);
* ``zonal`` (LDP): the mode, the placement keys that decide the client's zone level, z and C
  of its noise N(0, (z·C)²) (HDP Algorithm 1 line 14 at the client), δ;
* ``zone-node`` (``zonal-runtime = zone-nodes``): a zone SuperNode of an LDP or
  HDP zone owns the zonal keys and the runtime; its level comes from its own plan by its zone
  id (its ``partition-id``), so a message cannot turn its noise off;
* ``ifca``: ν of GP Algorithm 2 (ε = n/(ν‖δ‖)), the leakage budget (GP Thm 3.1), and the
  keys that make a user a held-out validation user (``num-clients``, ``validation-clients``);
* every mode: the opt-ins ``unaccounted-metrics`` and ``reproducible-noise``.

What the run config leaves at ``"auto"`` of those opt-ins and of the per-node keys
(:data:`PER_NODE_KEYS`: client-budgets' own ``client-epsilon``) is held back from every
message (:data:`NODE_HELD_BACK`): the node resolves it itself, from its own node config.

Every node, in every mode, resolves its own spec (``fedpriv.scenarios.config.node_spec``):
``"auto"`` is resolved ON THE NODE — the scenario's z, C, δ, zones and placement, and the
node's secure defaults for the opt-ins (:data:`NODE_SECURE_DEFAULTS`: false) and its state
folder — never delegated to the server. The allow-list is declared here, once:
:data:`PRIVACY_KEYS` (+ the mode's ``release_keys``, ``seed`` for a node that opted in to
seeded noise) and :data:`DERIVED_KEYS` (client task, zone level, state folder, IFCA's
evaluation split) must equal the node's own values; only :data:`MESSAGE_KEYS` (round, a
zone's sampled clients, super-node, zone id, IFCA ledger tag) and the mode's
:func:`server_keys` (the :data:`TRAINING_KEYS` that change no privacy figure of that mode)
may come from the message: any other key must equal the node's own value (the allow-list:
data, partition, seed, canaries, placements, caps, rounds, budgets); :data:`CLIENT_COUNTED`
never. :data:`OWNED_KEYS` (what each
server-distrusting mode declares, ``PrivacyMode.owned_keys``) is a subset of that list.
Which role a node plays (``client_mode``) and its zone's level are read from the node's own
config, so they live with the node's resolution, in :mod:`fedpriv.scenarios.config.node_roles`.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CLIENT_COUNTED",
    "MESSAGE_KEYS",
    "NODE_HELD_BACK",
    "NODE_SECURE_DEFAULTS",
    "OWNED_KEYS",
    "PRIVACY_KEYS",
    "ZONE_NODE",
    "REFUSED_CODE",
    "TRAINING_KEYS",
    "owned_keys",
    "privacy_keys",
    "server_keys",
    "reason",
    "same",
]

from fedpriv.privacy.modes import ModeError, base, get, names
from fedpriv.privacy.modes import client_budgets as budgets_mode
from fedpriv.privacy.modes import zonal as zonal_mode

AUTO = "auto"
OPT_INS = base.OPT_INS
ZONE_DECIDING = zonal_mode.ZONE_DECIDING
ZONE_NODE = "zone-node"  # the zonal party (and client task) of a zone SuperNode
# a node resolves these opt-ins itself: "auto" (or unset) is the secure value, never the
# scenario's; the server does not send them unless the run config sets them (wire_config)
NODE_SECURE_DEFAULTS: dict[str, Any] = {"reproducible-noise": False, "unaccounted-metrics": False}
# a node's own value, one per node (never a federation-wide one): client-budgets' own
# ``client-epsilon`` ("auto": its group's budget). The server's resolution of "auto" is the
# server's guess, not the node's: it is not sent either (a deployed node sets its own in its
# node_config; a simulated node gets the scenario's there, scenarios/cli/simulated_nodes.py)
PER_NODE_KEYS: tuple[str, ...] = (budgets_mode.OWN_BUDGET_KEY,)
# what the server holds back from its messages while the run config leaves it at "auto"
NODE_HELD_BACK: tuple[str, ...] = (*NODE_SECURE_DEFAULTS, *PER_NODE_KEYS)
REFUSED_CODE = 20  # the error code of a refused message; Flower's own are 0-8


def _owned() -> dict[str, tuple[str, ...]]:
    """Role -> owned keys, from every mode's declaration (``Mode.owned_keys``): a mode's
    ``client`` party is keyed by the mode's name, any other party by the party's name."""
    out: dict[str, tuple[str, ...]] = {}
    for mode in (get(n) for n in names(selectable=False)):
        for party, keys in mode.owned_keys.items():
            out[mode.name if party == "client" else party] = tuple(keys)
    return out


# server-distrusting role -> the run-config keys that decide a client's privacy
OWNED_KEYS: dict[str, tuple[str, ...]] = _owned()

# THE allow-list, one place. What decides a release in any mode: a message whose
# value differs from the node's own spec is refused, whatever the node's mode.
PRIVACY_KEYS: tuple[str, ...] = (
    *ZONE_DECIDING,
    "zonal-runtime",
    "clients-per-round",  # q of a zone node's sigma_i = z*C/(q*W_i)
    "zone-weighting",
    "zonal-example-cap",
    "zonal-secagg",  # who adds an HDP zone's noise (the clients' shares) and what it sees
    "zonal-secagg-dropouts",  # the threshold t, which sizes each noise share
    "noise-multiplier",
    "clipping-norm",
    "dp-delta",
    "noise-multiplier",
    "clipping-norm",
    "dp-delta",
    "microbatches",
    "ifca-noise-multiplier",
    "leakage-budget",
    "validation-clients",
    *OPT_INS,
)
SEEDED_KEYS = ("seed",)  # decide the noise only when the node's own reproducible-noise is true
# what a message may carry that the node does not decide itself (any value): the round, a
# zone node's sampled client ids, the elected super-node, the zone id, IFCA's sweep label,
# and a train message's "evaluate the received model first" (its metrics are
# filtered as an evaluate reply's).
# What else a message may set is :data:`TRAINING_KEYS` (:func:`server_keys`); any other key
# must equal the node's own value.
MESSAGE_KEYS: tuple[str, ...] = (
    "server-round",
    "zonal-clients",
    "zonal-supernode",
    "zonal-zone",
    "ifca-ledger-tag",
    "evaluate-received",
)  # a mode adds its own (``Mode.message_keys``: client budgets' announced sampling rate)
# derived from the node's spec (fedpriv.scenarios.config.node_spec): a message may only repeat the
# value
DERIVED_KEYS: tuple[str, ...] = (
    "client-task",
    "zonal-level",
    "client-state-dir",
    "ifca-eval-split",
)

# values the client counts itself: no message may carry them
CLIENT_COUNTED = ("dp-sgd-participations",)

# THE allow-list of what a server may SET (any value) in a message, besides MESSAGE_KEYS: the
# training hyper-parameters that change no privacy figure of the node's mode (a mode's
# ``release_keys`` and ``owned_keys`` are taken out: DP-SGD's B and E enter its ε). Every
# other key a message carries must equal the node's own value, else the message is refused
# and nothing is sent: data, partition, seed, canaries, placements, caps, rounds, budgets.
TRAINING_KEYS: tuple[str, ...] = (
    "learning-rate",
    "optimizer",
    "proximal-mu",
    "local-epochs",
    "batch-size",
    "strategy",
    "server-learning-rate",
    "server-momentum",
    "eta",
    "eta-l",
    "beta-1",
    "beta-2",
    "tau",
    "jit-compile",
    "mixed-precision",
    "op-determinism",
)


def server_keys(mode: str | None) -> frozenset[str]:
    """The keys a message may set for a node of ``mode`` (its role, None: a node that trusts
    the server): :data:`MESSAGE_KEYS` and the :data:`TRAINING_KEYS` that are not the mode's
    ``release_keys`` or ``owned_keys``, and the mode's own ``message_keys``."""
    declared = _mode_or_none(mode)
    taken = set(declared.release_keys) if declared else set()
    taken |= set(owned_keys(mode)) if mode else set()
    own = frozenset(declared.message_keys) if declared else frozenset()
    return frozenset(MESSAGE_KEYS) | own | (frozenset(TRAINING_KEYS) - taken)


def owned_keys(mode: str) -> tuple[str, ...]:
    """The keys a ``mode`` client owns (empty for a mode that trusts the server)."""
    return _owned().get(mode, ())


def _mode_or_none(name: str | None) -> base.Mode | None:
    try:
        return get(name)
    except ModeError:
        return None


def privacy_keys(mode: str | None, reproducible: bool) -> tuple[str, ...]:
    """The keys whose message value must equal the node's own (``mode``: its role or None):
    :data:`PRIVACY_KEYS` and the mode's own ``release_keys`` (DP-SGD: q = B/n, steps E/q)."""
    declared = _mode_or_none(mode)
    extra = declared.release_keys if declared else ()
    return (*PRIVACY_KEYS, *extra, *(SEEDED_KEYS if reproducible else ()))


def same(a: Any, b: Any) -> bool:
    """Equal config values: numbers by value (1 == 1.0), bools and strings exactly."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return type(a) is type(b) and a == b


def reason(mode: str | None, key: str, value: Any, why: str) -> str:
    """The one-line refusal of a message: the node's mode, the key, the value, why."""
    who = f"the {mode} node" if mode else "the node"
    return (
        f"refused: {who} owns its privacy settings: key={key} value={value!r} ({why}); "
        "nothing was sent"
    )
