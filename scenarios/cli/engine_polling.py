"""How often Flower's simulation engine hands new messages to the backend, in the runner.

Flower 1.42's in-process engine moves a message through two polling loops, each sleeping
0.1 s between looks: the engine thread that hands the LinkState's new messages to the
backend (``vce_api.add_messages_to_queue``) and the ServerApp's grid that waits for the
replies (``InMemoryGrid.send_and_receive``, ``pull_interval``). The grid's interval is set
where the grid is built (:func:`fedpriv.scenarios.nodes.virtual_grid.discover_federation` and
:func:`fedpriv.scenarios.nodes.virtual_grid.federation_grid`, for worker and zone SuperNodes, also
under ``flwr run``); the engine's loop can only be changed in the process that runs it.

:func:`use_fast_polling` makes that loop look every :func:`poll_seconds` (5 ms for a few
SuperNodes, growing with their number: one look costs one LinkState query per SuperNode, so
10,000 SuperNodes keep Flower's 0.1 s). Nothing else changes: the same queries, the same
queue, the same stop event. A round of one message per worker waited ~0.05 s (up to 0.1 s)
for it; on the cross-device run, where a worker's cohort trains in ~0.1 s, that was a
quarter of a round. Only ``fedpriv run`` / ``fedpriv grid`` (this package's runner) do it;
``flwr run`` keeps Flower's default. ``FEDPRIV_ENGINE_POLL`` (seconds) sets the interval by
hand; the kill-and-resume tests set Flower's 0.1 s, so that a kill right after round k's
checkpoint lands before round k+1 reaches the clients (a kill inside a round is resumed
too, but the clients charged for that round refuse its identical request: never fresh
noise, and so not the uninterrupted run's round). Uses Flower internals of the pinned stack
(flwr 1.42.0), like :mod:`fedpriv.scenarios.cli.simulation_runner`.
"""

from __future__ import annotations

import os
import threading
from queue import Queue
from typing import Any

FLOWER_POLL = 0.1  # Flower's own interval
MIN_POLL = 0.005
POLL_PER_NODE = 1e-5  # seconds of interval per SuperNode: 10,000 nodes -> Flower's 0.1 s

_APPLIED: list[float] = []
POLL_ENV = "FEDPRIV_ENGINE_POLL"  # seconds: overrides the interval (0.1 = Flower's own)


def poll_seconds(num_supernodes: int) -> float:
    """The engine loop's interval for ``num_supernodes`` SuperNodes (module docstring), or
    :data:`POLL_ENV`'s value when set (a float > 0)."""
    given = os.environ.get(POLL_ENV, "").strip()
    if given:
        value = float(given)
        if not value > 0:
            raise ValueError(f"{POLL_ENV} = {given!r} is not allowed; expected seconds > 0")
        return value
    return min(FLOWER_POLL, max(MIN_POLL, POLL_PER_NODE * int(num_supernodes)))


def use_fast_polling(num_supernodes: int) -> float:
    """The engine loop of this process looks every :func:`poll_seconds`; the interval."""
    from flwr.server.superlink.fleet.vce import vce_api

    seconds = poll_seconds(num_supernodes)
    _APPLIED[:] = [seconds]
    vce_api.add_messages_to_queue = add_messages_to_queue
    return seconds


def add_messages_to_queue(
    state: Any, queue: Queue, nodes_mapping: Any, f_stop: threading.Event
) -> None:
    """Flower's ``vce_api.add_messages_to_queue`` looking every :func:`poll_seconds`: every
    SuperNode's next message from the LinkState into the backend's queue until ``f_stop``."""
    while not f_stop.is_set():
        for node_id in nodes_mapping.keys():
            for msg in state.get_message_ins(node_id=node_id, limit=1):
                queue.put(msg)
        f_stop.wait(_APPLIED[0] if _APPLIED else FLOWER_POLL)
