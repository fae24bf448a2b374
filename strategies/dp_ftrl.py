"""DP-FTRL around a Message-API FedAvg (Kairouz et al. 2021; :mod:`fedpriv.privacy.ftrl`).

The wrapper replaces the inner strategy's aggregation: every reply's update ``w_i − w_g`` is
clipped to C, the clipped sum goes into the online tree (noise std z·C per node) and the new
global model is the FTRL step with momentum from the noisy prefix sums. The inner strategy
still samples (``configure_train``), evaluates and aggregates metrics.

Participation is enforced, not assumed: a node asked once in the current tree is not asked
again before the restart (it is left out of the grid the inner strategy samples from), so
the ε of :func:`fedpriv.privacy.ftrl.tree_epsilon` holds whatever the sampling. A round with
no fresh node, or no reply, still takes its tree step (``s_t = 0``). Failed replies do not
weaken the guarantee (the noise is on the sum; each client's sensitivity stays C).
``round_metrics()``: ``dp-sigma`` (a node's std on the mean, z·C/m), ``dp-tree``,
``dp-tree-step``, ``dp-noise-norm`` (this round's noise on the mean), ``dp-num-clipped``,
``dp-repeat-excluded`` (nodes left out as already in the tree) and ``dp-epsilon`` with its
accountant, adjacency and participation condition.
"""

from __future__ import annotations

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

from fedpriv.privacy.ftrl import TreeAggregatedFTRL, tree_epsilon
from fedpriv.privacy.modes import dp_ftrl
from fedpriv.validation import not_allowed

__all__ = ["DPFTRL"]


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
    step's denominator), ``learning_rate`` η, ``momentum`` μ, ``restart_rounds`` R, ``delta``
    (of the reported ε), ``seed`` (the tree seed; None: 63 bits of OS entropy, secret).
    """

    CHECKPOINT_SKIP = ("in_tree", "sent")  # node ids: process-local; a resume restarts the tree

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
    ) -> None:
        if type(strategy) not in (FedAvg, FedProx):
            raise not_allowed("strategy", strategy, "a FedAvg or FedProx (DP-FTRL replaces "
                              "the server's aggregation and optimizer)")  # fmt: skip
        super().__init__(strategy)
        self.ftrl = TreeAggregatedFTRL(
            noise_multiplier=noise_multiplier, clipping_norm=clipping_norm,
            num_sampled_clients=num_sampled_clients, learning_rate=learning_rate,
            momentum=momentum, restart_rounds=restart_rounds,
            seed=secrets.randbits(63) if seed is None else int(seed),
        )  # fmt: skip
        self.delta = float(delta)
        self.in_tree: set[int] = set()
        self.sent: list[int] = []
        self.excluded = 0
        self.current_arrays = ArrayRecord()
        self.last_round: dict[str, Any] = {}
        self.history: list[dict[str, Any]] = []

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.ftrl!r}, strategy={self.strategy!r})"

    def round_metrics(self) -> dict[str, Any]:
        """What the wrapper did in the last round."""
        return dict(self.last_round)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Sample among the nodes not yet in the current tree (all of them after a restart)."""
        self.current_arrays, self.last_round = arrays, {}
        self.ftrl.start(arrays.to_numpy_ndarrays())
        if self.ftrl.starts_new_tree() or not self.ftrl.steps_per_tree:
            self.in_tree.clear()
        offered = list(grid.get_node_ids())
        fresh = [n for n in offered if n not in self.in_tree]
        self.excluded = len(offered) - len(fresh)
        messages = (
            list(self.strategy.configure_train(server_round, arrays, config, _Nodes(grid, fresh)))
            if fresh
            else []
        )
        self.sent = [m.metadata.dst_node_id for m in messages]
        self.in_tree.update(self.sent)
        return messages

    def note_global_arrays(self, arrays: ArrayRecord) -> None:
        """The round's global arrays when nobody was sampled (no ``configure_train``)."""
        self.current_arrays, self.last_round, self.sent = arrays, {}, []
        self.ftrl.start(arrays.to_numpy_ndarrays())
        if self.ftrl.starts_new_tree():
            self.in_tree.clear()

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """Clip, sum, one tree step and the FTRL update (module docstring)."""
        replies = list(replies)
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
        theta, step = self.ftrl.step(total)
        dtypes = [np.asarray(a).dtype for a in reference]
        out = named_record(self.current_arrays.keys(), [t.astype(d) for t, d in zip(theta, dtypes)])
        self._record(step, len(ok), len(replies) - len(ok), clipped_nodes)
        return out, self._metrics(ok)

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
        report = tree_epsilon(self.ftrl.noise_multiplier, self.ftrl.steps_per_tree, self.delta)
        m = self.ftrl.num_sampled_clients
        record = {
            "dp-mode": dp_ftrl.MODE.name, "dp-noised": True, "dp-sigma": self.ftrl.node_std / m,
            "dp-num-reports": num_ok, "dp-num-failures": num_failed,
            "dp-num-clipped": len(clipped), "dp-clipped-nodes": clipped,
            "dp-repeat-excluded": self.excluded, "dp-tree": step["tree"],
            "dp-tree-step": step["tree_step"], "dp-noise-norm": step["noise_norm"],
            "dp-round-noise-multiplier": self.ftrl.noise_multiplier,
            "dp-epsilon": report["epsilon"], "dp-delta": self.delta,
            "dp-accountant": report["accountant"], "dp-adjacency": report["adjacency"],
            "dp-sampling": report["sampling"],
        }  # fmt: skip
        self.last_round = record
        self.history.append(record)
