"""DP-FTRL around a Message-API FedAvg (Kairouz et al. 2021; :mod:`fedpriv.privacy.ftrl`).

The wrapper replaces the inner strategy's aggregation: every reply's update ``w_i − w_g`` is
clipped to C, the clipped sum goes into the online tree (noise std z·C per node) and the new
global model is the FTRL step with momentum from the noisy prefix sums, divided by the
number of updates aggregated. The inner strategy builds the messages, evaluates and
aggregates metrics.

Who is asked: shuffled epochs (:class:`fedpriv.privacy.ftrl.ShuffledEpochs`). Each epoch is
a permutation of the clients drawn from the server's secret sampling Generator, cut into
blocks of m; each round asks the next block (every client of it, nobody dropped) and each
epoch is one tree. The engine's recorder asks :meth:`DPFTRL.sample_round` for the round's
partitions (and records them as ``sampled``); used alone, the wrapper draws the block from
the grid's node ids itself. A client asked twice in one tree is a bug, not a case: it
raises. A failed reply leaves the block smaller; the step divides by the updates that
arrived (m when none did). ``round_metrics()``: ``dp-sigma`` (a node's std on the mean,
z·C/k), ``dp-tree``, ``dp-tree-step``, ``dp-epoch``, ``dp-noise-norm`` (this round's noise
on the mean), ``dp-num-clipped`` and ``dp-epsilon`` with its accountant, adjacency and
participation condition.

The server's lifetime ledger (``server_ledger``, a
:class:`fedpriv.privacy.ledger.server.ServerLedger` under replace-special, set by the run's
builder): a tree's privacy is not the composition of its rounds, so the ledger holds one row
per **tree**, charged when the tree opens, before its first release, with the tree's whole
event (:func:`fedpriv.privacy.ftrl.tree_charge`: its planned leaves). Lifetime ε is then the
RDP composition of every stored tree, the event the run's own ε composes; a run that stops
mid-tree is charged the whole tree (an upper bound). ``server-max-epsilon``:
:meth:`DPFTRL.budget_stop` before a round that opens a tree, and the charge itself at
release (a declined tree: nothing released, the run ends).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable
from typing import Any, Optional

import numpy as np
from fedpriv.strategies.array_records import named_record
from fedpriv.strategies.base import StrategyWrapper
from flwr.common import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.server import Grid
from flwr.serverapp.strategy import FedAvg, FedProx
from flwr.serverapp.strategy.strategy_utils import aggregate_metricrecords

from fedpriv import seeds
from fedpriv.privacy.ftrl import MF, ShuffledEpochs, TreeAggregatedFTRL, tree_charge, tree_epsilon
from fedpriv.privacy.modes import dp_ftrl
from fedpriv.validation import not_allowed

__all__ = ["DPFTRL"]

_log = logging.getLogger("flwr")


class _Nodes:
    """A grid whose ``get_node_ids`` lists only ``nodes`` (everything else delegated)."""

    def __init__(self, grid: Grid, nodes: list[int]) -> None:
        self._grid, self._nodes = grid, list(nodes)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)

    def get_node_ids(self) -> list[int]:
        return list(self._nodes)


class DPFTRL(StrategyWrapper):
    """DP-FTRL around ``strategy`` (a FedAvg or FedProx: its aggregation is replaced).

    Keyword-only: ``noise_multiplier`` z, ``clipping_norm`` C, ``num_sampled_clients`` m (the
    clients asked per round), ``learning_rate`` η, ``momentum`` μ, ``restart_rounds`` R (the
    rounds of an epoch and of a tree; R·m <= the clients), ``delta`` (of the reported ε),
    ``seed`` (the tree seed; None: 63 bits of OS entropy, secret), ``rng`` (the sampling
    Generator of the permutations; None: OS entropy, secret), ``estimator`` (``honaker``
    | ``tree``: the prefix sum's estimate, :mod:`fedpriv.privacy.ftrl`), ``num_rounds`` (the
    run's rounds: the last tree's leaves; None: every tree is charged R leaves).
    """

    # node ids: process-local; a resume restarts the tree (the epoch's permutation goes on)
    CHECKPOINT_SKIP = ("in_tree", "sent", "block")
    # the server's lifetime ledger (ServerLedger, replace-special; None: this run only)
    server_ledger: Any = None

    def __init__(
        self,
        strategy: Any,
        *,
        noise_multiplier: float,
        clipping_norm: float,
        num_sampled_clients: int,
        learning_rate: float = 1.0,
        momentum: float = 0.0,
        restart_rounds: int = 1,
        delta: float = 1e-5,
        seed: Optional[int] = None,
        rng: Optional[np.random.Generator] = None,
        estimator: str = "honaker",
        num_rounds: Optional[int] = None,
    ) -> None:
        if type(strategy) not in (FedAvg, FedProx):
            raise not_allowed("strategy", strategy, "a FedAvg or FedProx (DP-FTRL replaces "
                              "the server's aggregation and optimizer)")  # fmt: skip
        if estimator == MF and num_rounds is None:
            raise not_allowed("num_rounds", num_rounds, "the run's rounds with estimator = 'mf' "
                              "(its factorization is optimised for them)")  # fmt: skip
        super().__init__(strategy)
        self.ftrl = TreeAggregatedFTRL(
            noise_multiplier=noise_multiplier, clipping_norm=clipping_norm,
            num_sampled_clients=num_sampled_clients, learning_rate=learning_rate,
            momentum=momentum, restart_rounds=restart_rounds,
            seed=secrets.randbits(63) if seed is None else int(seed), estimator=estimator,
        )  # fmt: skip
        self.delta = float(delta)
        # secret unless the run opts in: a checkpoint leaves a SecretGenerator out
        self.rng = seeds.privacy_rng(0, reproducible=False) if rng is None else rng
        self.schedule = ShuffledEpochs(
            per_round=num_sampled_clients, rounds_per_epoch=restart_rounds
        )
        self.in_tree: set[int] = set()
        self.sent: list[int] = []
        self.block: Optional[list[int]] = None  # chosen by sample_round for the next round
        self.current_arrays = ArrayRecord()
        self.last_round: dict[str, Any] = {}
        self.history: list[dict[str, Any]] = []
        self.num_rounds = None if num_rounds is None else int(num_rounds)
        self.budget_stopped: Optional[str] = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.ftrl!r}, strategy={self.strategy!r})"

    def round_metrics(self) -> dict[str, Any]:
        """What the wrapper did in the last round."""
        return dict(self.last_round)

    def sample_round(self, population: Iterable[int]) -> list[int]:
        """The next round's clients: the next block of the epoch's secret permutation of
        ``population`` (partitions for the engine's recorder, node ids when the wrapper
        samples itself); a new epoch opens a new tree."""
        block, new_epoch = self.schedule.next_block(list(population), self.rng)
        if new_epoch:
            self.ftrl.request_restart()
            self.in_tree.clear()  # once per epoch (mf: one factorization spans the epochs)
        self.block = block
        return list(block)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Ask every client of the round's block (drawn here unless the recorder did)."""
        self.current_arrays, self.last_round = arrays, {}
        self.ftrl.start(arrays.to_numpy_ndarrays())
        if self.block is None:  # no recorder chose the block: it is of the grid's node ids
            grid = _Nodes(grid, self.sample_round(grid.get_node_ids()))
        self.block = None
        if self.ftrl.starts_new_tree() or not self.ftrl.steps_per_tree:
            self.in_tree.clear()
        offered = sorted(grid.get_node_ids())
        least = max(int(getattr(self.strategy, n, 0)) for n in ("min_available_nodes",
                                                                 "min_train_nodes"))  # fmt: skip
        if least > len(offered):  # the inner strategy would wait for nodes forever
            raise ValueError(
                f"the inner strategy waits for {least} nodes; the round's block has "
                f"{len(offered)} (min-available and min-train nodes <= clients-per-round)"
            )
        messages = list(self.strategy.configure_train(server_round, arrays, config, grid))
        self.sent = [m.metadata.dst_node_id for m in messages]
        if sorted(self.sent) != offered:
            raise ValueError(
                f"the inner strategy asked {len(self.sent)} of the {len(offered)} clients of "
                "the round's block; DP-FTRL asks every one (fraction-train 1, no minimum above "
                "clients-per-round)"
            )
        again = sorted(self.in_tree.intersection(self.sent))
        if again:
            raise RuntimeError(f"DP-FTRL: nodes {again} asked twice in epoch {self.schedule.epoch}")
        self.in_tree.update(self.sent)
        return messages

    def note_global_arrays(self, arrays: ArrayRecord) -> None:
        """The round's global arrays when nobody was sampled (no ``configure_train``)."""
        self.current_arrays, self.last_round, self.sent = arrays, {}, []
        self.ftrl.start(arrays.to_numpy_ndarrays())

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """Clip, sum, one tree step and the FTRL update (module docstring)."""
        replies = list(replies)
        if self.ftrl.estimator == MF and self._opens():
            self.ftrl.plan_factorization(*self._factorization_plan(server_round))
        if self._tree_declined(server_round):
            return None, None  # server-max-epsilon: nothing released, nothing charged
        sent = set(self.sent)
        ok = [m for m in replies if not m.has_error() and m.metadata.src_node_id in sent]
        reference = self.current_arrays.to_numpy_ndarrays()
        total = [np.zeros(np.shape(a), np.float64) for a in reference]
        clipped_nodes = []
        for reply in ok:
            record = next(iter(reply.content.array_records.values()))
            clipped, info = self.ftrl.constrain(record.to_numpy_ndarrays(), reference)
            for acc, layer in zip(total, clipped):
                acc += layer
            if info["clipped"]:
                clipped_nodes.append(reply.metadata.src_node_id)
        theta, step = self.ftrl.step(total, count=len(ok))
        dtypes = [np.asarray(a).dtype for a in reference]
        out = named_record(self.current_arrays.keys(), [t.astype(d) for t, d in zip(theta, dtypes)])
        self._record(step, len(ok), len(replies) - len(ok), clipped_nodes)
        return out, self._metrics(ok)

    def budget_stop(self, server_round: int) -> Optional[str]:
        """Before round ``server_round``: why it must not run (the tree it opens would pass
        ``server-max-epsilon``), or None; a round inside a charged tree costs nothing more."""
        ledger = self.server_ledger
        if self.budget_stopped or ledger is None or ledger.max_epsilon is None:
            return self.budget_stopped
        schedule = self.schedule
        new_epoch = schedule.epoch < 0 or schedule.block >= schedule.rounds_per_epoch
        if not self._opens() and (self.ftrl.estimator == MF or not new_epoch):
            return None  # a round inside a charged tree or factorization
        done = 0 if new_epoch else schedule.block  # mid-epoch: restarted by a resume
        self.budget_stopped = ledger.plan(self._tree_event(server_round, done), server_round)
        return self.budget_stopped

    def _opens(self) -> bool:
        """Whether the next release opens a tree (``mf``: a factorization)."""
        return self.ftrl.starts_new_tree() or not self.ftrl.steps_per_tree

    def _factorization_plan(self, server_round: int) -> tuple[int, int]:
        """``mf`` at the first release of a factorization in round ``server_round``: (its
        rounds, the epoch's rounds before it): the run's rounds from this one, and the
        rounds of the current epoch already asked (> 0 only after a resume)."""
        left = int(self.num_rounds) - int(server_round) + 1
        return max(1, left), max(0, self.schedule.block - 1)

    def _tree_event(self, server_round: int, blocks_done: int) -> Any:
        left = None if self.num_rounds is None else self.num_rounds - int(server_round) + 1
        ftrl = self.ftrl
        return tree_charge(ftrl.noise_multiplier, ftrl.restart_rounds, blocks_done, left,
                           ftrl.estimator)  # fmt: skip

    def _tree_declined(self, server_round: int) -> bool:
        """At the first release of a tree: charge the whole tree on the server's ledger
        (committed before the release leaves); True when the budget declines it (the round
        is recorded as skipped and the run stops)."""
        if self.server_ledger is None or not self._opens():
            return False
        event = self._tree_event(server_round, max(0, self.schedule.block - 1))
        reason = self.server_ledger.charge(event, server_round)
        if reason is None:
            return False
        self.budget_stopped = reason
        _log.warning("aggregate_train: %s; nothing released", reason)
        self.last_round = {"dp-mode": dp_ftrl.MODE.name, "dp-noised": False, "dp-skipped": reason}
        self.history.append(self.last_round)
        return True

    def _metrics(self, ok: list[Message]) -> Optional[MetricRecord]:
        contents = [m.content for m in ok]
        if not contents or not all(len(c.metric_records) > 0 for c in contents):
            return None
        key = str(getattr(self.strategy, "weighted_by_key", "num-examples"))
        return getattr(self.strategy, "train_metrics_aggr_fn", aggregate_metricrecords)(
            contents, key
        )

    def _record(self, step: dict, num_ok: int, num_failed: int, clipped: list[int]) -> None:
        """The round's report, with ε of the trees so far."""
        ftrl = self.ftrl
        report = tree_epsilon(
            ftrl.noise_multiplier, ftrl.steps_per_tree, self.delta, ftrl.estimator
        )
        record = {
            "dp-mode": dp_ftrl.MODE.name, "dp-noised": True,
            "dp-sigma": self.ftrl.node_std / step["divisor"],
            "dp-num-reports": num_ok, "dp-num-failures": num_failed,
            "dp-num-clipped": len(clipped), "dp-clipped-nodes": clipped,
            "dp-epoch": self.schedule.epoch, "dp-tree": step["tree"],
            "dp-tree-step": step["tree_step"], "dp-noise-norm": step["noise_norm"],
            "dp-round-noise-multiplier": self.ftrl.noise_multiplier,
            "dp-epsilon": report["epsilon"], "dp-delta": self.delta,
            "dp-accountant": report["accountant"], "dp-adjacency": report["adjacency"],
            "dp-sampling": report["sampling"],
        }  # fmt: skip
        self.last_round = record
        self.history.append(record)
