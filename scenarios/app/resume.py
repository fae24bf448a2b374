"""Resume: checkpoint after every round, continue a killed run (the engine's hooks).

:func:`checkpoint_hook` is the ``after_round`` hook of
:func:`fedpriv.scenarios.app.engine.train_run`
(``resumable=True``): after each completed round (aggregated, evaluated, recorded) it writes
the checkpoint (:mod:`fedpriv.checkpoint`: global arrays + the state of every object of the
strategy chain). :func:`load_resumable` reads a checkpoint of the same config,
:func:`restore` puts the chain's state back, and the engine runs rounds ``k+1..N`` from the
checkpoint's arrays:
the engine's loop starts at round ``k+1``, so the strategies, the clients (``server-round``
in their config, hence their seeds) and the round records see the true round numbers, and
the round-0 evaluation is not repeated.

Run kinds: the standard run and every run built on ``engine.train_run`` (each
zonal-comparison variant, both CIA phases) resume through ``train_run(resumable=True)``; the
IFCA run's own loop (``fedpriv.strategies.ifca.LaplaceIFCA.start``: early stopping, round-0
validation) takes the same hook (``after_round``) and start round, with
:func:`keyed_arrays` giving back its keyed hypotheses record. Client-held state (IFCA
ledgers, DP-SGD participations, zone nodes' releases) is not here: each node keeps its own
ledger in its own state directory (:mod:`fedpriv.privacy.releases`).

Charge and checkpoint before the release: a resumable run writes a checkpoint of
stage :data:`CHARGED` right after ``aggregate_train`` (the DP wrapper's accountant has charged
the round; the new global model has not left the server), and one of stage :data:`RECORDED`
after the round's record. A run killed after ``configure_evaluate`` sent the new model but
before the round was recorded resumes from the charged checkpoint: it finishes that round
with the same arrays (no new noise, no second charge) and goes on with the next, so every
model that left the server is charged exactly once and ``max-epsilon`` holds for all of them.
With ``evaluate-in-train`` (:mod:`fedpriv.scenarios.app.fused`) round t-1 is recorded from round
t's train
replies; its ``recorded`` checkpoint holds the chain's state from before round t's sampling
(``RoundState.states``), the state the same checkpoint holds without the option.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from logging import INFO
from pathlib import Path
from typing import Any, Optional

from fedpriv.clients.records import arrays_of
from fedpriv.scenarios.app.recorder import wrapper_chain
from fedpriv.scenarios.config.manifest import fingerprint
from fedpriv.scenarios.config.specs import ServerRun
from fedpriv.strategies.array_records import named_record
from flwr.app import ArrayRecord
from flwr.common import log
from flwr.serverapp.strategy.strategy import Strategy

from fedpriv.checkpoint import CheckpointWriter, capture_state, load_checkpoint, restore_state

# a checkpoint's stage: the round is recorded (complete), or charged and about to be released
RECORDED, CHARGED = "recorded", "charged"


def load_resumable(run: ServerRun) -> Optional[dict[str, Any]]:
    """The checkpoint of this run in its ``output-dir``, or None (a fresh start): one whose
    fingerprint is that of the run's record
    (:func:`fedpriv.scenarios.config.manifest.fingerprint`)."""
    checkpoint = load_checkpoint(run.spec.output_dir)
    if checkpoint is None or checkpoint.get("fingerprint") != fingerprint(run.record):
        return None
    log(INFO, "resuming %s from round %d", run.spec.output_dir, int(checkpoint["round"]))
    return checkpoint


def keyed_arrays(checkpoint: Mapping[str, Any], like: ArrayRecord) -> ArrayRecord:
    """The checkpoint's global arrays as a record with the keys of ``like`` (same layout:
    e.g. IFCA's ``"<j>/<layer>"`` hypotheses record)."""
    arrays = list(checkpoint["arrays"])
    if len(arrays) != len(like):
        raise ValueError(f"checkpoint holds {len(arrays)} arrays, the model has {len(like)}")
    return named_record(like.keys(), arrays)


def restore(strategy: Strategy, checkpoint: Mapping[str, Any]) -> None:
    """Put the checkpoint's state back into every object of the strategy chain."""
    restore_state(wrapper_chain(strategy), checkpoint["states"])


def checkpoint_hook(
    run: ServerRun, stage: str = RECORDED, writer: Optional[CheckpointWriter] = None
) -> Callable[[Any], None]:
    """The engine's ``after_round`` hook (``stage`` :data:`RECORDED`): checkpoint the global
    arrays and the state of every object of the strategy chain after each completed round;
    its ``before_release`` hook (``stage`` :data:`CHARGED`): the same right after
    ``aggregate_train`` charged the round, before its model leaves the server. Both hooks of
    a run share one ``writer``, so the model both checkpoints hold is written once."""
    num_rounds = int(run.spec.rounds)
    writer = writer or CheckpointWriter(run.spec.output_dir)
    if stage not in (RECORDED, CHARGED):
        raise ValueError(f"stage = {stage!r} is not allowed; expected {RECORDED!r} or {CHARGED!r}")

    def after_round(state: Any) -> None:
        chain = wrapper_chain(state.strategy)
        writer.write(
            {
                "round": state.round,
                "arrays": arrays_of(state.arrays),
                "num_rounds": num_rounds,
                "states": state.states if getattr(state, "states", None) else capture_state(chain),
                "fingerprint": fingerprint(run.record),
                "stage": stage,
            },
            model=state.arrays,
        )
        if stage == RECORDED:
            hold_after(state.round)

    return after_round


HOLD_ENV = "FEDPRIV_HOLD_AFTER_ROUND"  # "k:path": fault injection for kill-and-resume tests


def hold_after(round_: int) -> None:
    """Fault injection: with :data:`HOLD_ENV` = ``"k:path"``, once round k's checkpoint is
    written the ServerApp writes ``path`` and waits forever, before round k + 1 is sent, so a
    test's kill lands exactly between rounds (``tests/simulate.py``). Unset: nothing."""
    given = os.environ.get(HOLD_ENV, "")
    if not given:
        return
    k, _, path = given.partition(":")
    if int(k) != int(round_) or not path:
        return
    Path(path).write_text(str(int(round_)))
    threading.Event().wait()
