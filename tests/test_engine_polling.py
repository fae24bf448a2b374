"""Flower's engine loops look for messages every few ms in fedpriv's runner
(scenarios/cli/engine_polling.py), with Flower's own LinkState and grid."""

from __future__ import annotations

import threading
import time
from queue import Queue

import pytest
from fedpriv.scenarios.cli import engine_polling
from flwr.server.superlink.fleet.vce import vce_api
from flwr.superlink.grid.inmemory_grid import InMemoryGrid


def test_the_interval_is_short_for_few_supernodes_and_flowers_for_many():
    assert engine_polling.poll_seconds(2) == engine_polling.MIN_POLL
    assert engine_polling.poll_seconds(100) == pytest.approx(engine_polling.MIN_POLL)
    assert engine_polling.poll_seconds(10_000) == engine_polling.FLOWER_POLL
    assert engine_polling.poll_seconds(10**6) == engine_polling.FLOWER_POLL
    mid = engine_polling.poll_seconds(2_000)
    assert engine_polling.MIN_POLL < mid < engine_polling.FLOWER_POLL


class _State:
    """A LinkState stand-in that answers ``get_message_ins`` from per-node lists."""

    def __init__(self, pending: dict[int, list[str]]) -> None:
        self.pending, self.looks = pending, 0

    def get_message_ins(self, node_id: int, limit: int) -> list[str]:
        self.looks += 1
        out, self.pending[node_id] = self.pending[node_id][:limit], self.pending[node_id][limit:]
        return out


def test_the_engine_loop_moves_every_nodes_messages_at_the_short_interval_and_stops():
    engine_polling.use_fast_polling(2)
    assert vce_api.add_messages_to_queue is engine_polling.add_messages_to_queue
    state, queue, stop = _State({1: ["a", "b"], 2: ["c"]}), Queue(), threading.Event()
    loop = threading.Thread(target=vce_api.add_messages_to_queue,
                            args=(state, queue, {1: 0, 2: 1}, stop))  # fmt: skip
    loop.start()
    time.sleep(0.3)
    stop.set()
    loop.join(2)
    assert not loop.is_alive()
    assert sorted(queue.get() for _ in range(3)) == ["a", "b", "c"]
    assert state.looks >= 2 * 20  # every 5 ms, not Flower's 0.1 s (6 looks of 2 nodes)


class _Factory:
    def state(self) -> _State:
        return _State({})


def test_the_grid_keeps_flowers_default_its_interval_is_set_where_the_grid_is_built():
    """One place for the grid's reply polling (scenarios/nodes/virtual_grid.py sets it for
    worker and zone SuperNodes): the runner changes the engine's loop only."""
    from fedpriv.scenarios.nodes import virtual_grid

    engine_polling.use_fast_polling(2)
    assert InMemoryGrid(state_factory=_Factory()).pull_interval == engine_polling.FLOWER_POLL
    assert virtual_grid.WORKER_PULL_INTERVAL_S == engine_polling.MIN_POLL


def test_the_interval_can_be_set_by_hand(monkeypatch):
    monkeypatch.setenv(engine_polling.POLL_ENV, "0.1")
    assert engine_polling.poll_seconds(2) == 0.1
    monkeypatch.setenv(engine_polling.POLL_ENV, "-1")
    with pytest.raises(ValueError, match="FEDPRIV_ENGINE_POLL = '-1' is not allowed"):
        engine_polling.poll_seconds(2)


def test_the_hold_after_a_round_writes_its_marker_and_waits_only_at_that_round(
    monkeypatch, tmp_path
):
    """scenarios/app/resume.hold_after (fault injection for the kill-and-resume tests)."""
    from fedpriv.scenarios.app import resume

    marker = tmp_path / "held"
    resume.hold_after(1)  # unset: returns at once
    monkeypatch.setenv(resume.HOLD_ENV, f"2:{marker}")
    resume.hold_after(1)  # another round: returns at once
    assert not marker.exists()
    held = threading.Thread(target=resume.hold_after, args=(2,), daemon=True)
    held.start()
    held.join(0.5)
    assert held.is_alive() and marker.read_text() == "2"
