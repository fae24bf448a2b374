"""DP-FTRL: tree-aggregated noise on the sum of clipped updates, no sampling assumed.

Kairouz, McMahan, Song, Thakkar, Thakurta, Xu (2021), "Practical and Private (Deep)
Learning without Sampling or Shuffling" (ICML), Algorithm 1 and §4 (momentum, restarts).
Flower-free, numpy only.

Who takes part (:class:`ShuffledEpochs`, the paper's FL setting): each epoch is a fresh
secret permutation of the clients, cut into blocks of m; round t of the epoch asks block t,
so every round asks m clients, nobody twice in an epoch, and each epoch is one tree
("DP-FTRL-TreeRestart"). Round t of a tree (t = 1, 2, ... since its last restart), k_t the
clients whose clipped update was aggregated (m when nobody fails):

1. each participant's update is clipped to C (FlatClip): ``s_t = Σ_i clip(Δ_i, C)``;
2. the online binary tree releases the noisy prefix sum ``S̃_t = Σ_{τ<=t} s_τ + N_t``, where
   ``N_t`` is the sum of the node noises ``n(ℓ, k) ~ N(0, (z·C)² I)`` of the dyadic blocks
   ``[k·2^ℓ + 1, (k+1)·2^ℓ]`` that tile ``[1, t]`` (:func:`tree_nodes`, one per set bit of t);
3. the FTRL step with heavy-ball momentum as post-processing of those releases:
   ``g̃_t = (S̃_t − S̃_{t−1})/k_t``, ``v_t = μ·v_{t−1} + g̃_t``, ``θ_t = θ_{t−1} + η·v_t``
   (k_t = m when nobody replied: the step is noise only; μ = 0 and no failures:
   ``θ_t = θ_start + η·S̃_t/m``, FTRL with the quadratic regulariser around θ_start).

With ``estimator = "honaker"`` (the default; ``tree`` is Algorithm 1's sum of the dyadic
nodes) the prefix sum uses Honaker's variance-reduced estimate of each
node (Kairouz et al. appendix; Honaker 2015): a complete node's own noisy value and the sum of
its children's estimates, weighted by inverse variance, bottom-up (variance σ², 2σ²/3,
4σ²/7, ... of a node of level 0, 1, 2, ...). It is post-processing of the same node releases:
ε does not change.

With ``estimator = "mf"`` the prefix noise is a matrix factorization's instead of a tree's
(:mod:`fedpriv.privacy.ftrl_mf`; Choquette-Choo et al. 2023): ``N_t = Σ_{k<=t} B_tk Z_k``
with ``A = B C`` optimised for the run's rounds and epochs, one factorization for the whole
run (no restart per epoch: its sensitivity counts one contribution per epoch), charged one
``GaussianDpEvent(z)``. Against the trees at the same ε it has a third of the summed
variance of every round's model on digits' 20 rounds in epochs of 5.

Every ``restart_rounds`` rounds (an epoch) the tree restarts (new tree, prefix sums from 0;
θ and the momentum carry on); so does a tree restored from a checkpoint, which never holds
the seed.
Node noise is a pure function of (tree seed, tree, level, index):
``numpy.random.default_rng([seed, tree, level, index])``, so each round's noise can be
recomputed from the seed (the seed is secret: OS entropy unless ``reproducible-noise``).

Privacy (Kairouz et al. Thm 4.1, appendix D; dp_accounting's
``SingleEpochTreeAggregationDpEvent``): one client's contribution of norm <= C to one leaf
enters ``⌈log2(T+1)⌉`` nodes of a tree of T leaves, each noised with std z·C, under the
replace-with-zero ("replace-special") relation. With at most one contribution per client per
tree, the trees compose: ``ComposedDpEvent`` of one event per tree (:func:`ftrl_event`),
accounted by dp_accounting's RDP accountant (:func:`tree_epsilon`). No amplification by
sampling or shuffling is assumed, so the bound holds for ANY participation pattern in which
a client contributes at most once per restart (the shuffled epochs give exactly that). The
divisor k_t is not private under this relation: a neighbour replaces a client's update by
zero, it does not remove the reply.
"""

from __future__ import annotations

import functools
import math
import secrets
from collections.abc import Sequence
from typing import Any, ClassVar, Optional

import numpy as np

from fedpriv.privacy.mechanisms import clip_update, flat_norm
from fedpriv.privacy.protocol import Metrics, noise_norm
from fedpriv.validation import check_int, check_real

__all__ = [
    "ESTIMATORS",
    "PARTICIPATION_CONDITION",
    "ShuffledEpochs",
    "TreeAggregatedFTRL",
    "ftrl_event",
    "tree_charge",
    "tree_epsilon",
    "tree_nodes",
]

NDArrays = list[np.ndarray]
PARTICIPATION_CONDITION = (
    "no amplification by sampling assumed: holds for any participation pattern in which a "
    "client contributes at most once per tree restart (the server asks a secret shuffled "
    "block of each epoch's permutation, one tree per epoch)"
)
# the prefix sum: the dyadic nodes, Honaker's estimate of them, or the matrix factorization
# optimised for the run's rounds and epochs (fedpriv.privacy.ftrl_mf)
ESTIMATORS = ("tree", "honaker", "mf")
MF = "mf"
MF_CONDITION = (
    "no amplification by sampling assumed: holds for any participation pattern in which a "
    "client contributes at most once per epoch (the server asks a secret shuffled block of "
    "each epoch's permutation; one factorization for the run's rounds)"
)
ADJACENCY = "replace-special (one client's contributions replaced by zero)"
ACCOUNTANT = "dp_accounting RdpAccountant, SingleEpochTreeAggregationDpEvent per tree (composed)"
MF_ACCOUNTANT = (
    "dp_accounting GaussianDpEvent(z) per factorization (composed), PLD and RDP: the smaller"
)


def tree_nodes(t: int) -> list[tuple[int, int]]:
    """The (level, index) nodes whose blocks ``[k·2^ℓ + 1, (k+1)·2^ℓ]`` tile ``[1, t]``:
    one per set bit of t, highest level first (the online tree's prefix sum)."""
    t = check_int("t", t, lo=1)
    out, start = [], 0
    for level in range(t.bit_length() - 1, -1, -1):
        if t & (1 << level):
            out.append((level, start >> level))
            start += 1 << level
    return out


def ftrl_event(noise_multiplier: float, steps_per_tree: Sequence[int], estimator: str = "tree"):
    """``ComposedDpEvent`` of one ``SingleEpochTreeAggregationDpEvent(z, steps)`` per tree
    (a client at most once per tree; trees compose); with ``estimator = mf`` one
    ``GaussianDpEvent(z)`` per factorization (:mod:`fedpriv.privacy.ftrl_mf`: sensitivity 1
    for any participation with a client at most once per epoch)."""
    import dp_accounting

    trees = [int(s) for s in steps_per_tree if int(s) > 0]
    if estimator == MF:
        return dp_accounting.ComposedDpEvent(
            [dp_accounting.GaussianDpEvent(noise_multiplier) for _ in trees]
        )
    return dp_accounting.ComposedDpEvent(
        [dp_accounting.SingleEpochTreeAggregationDpEvent(noise_multiplier, s) for s in trees]
    )


def replace_special_epsilon(events: Sequence[Any], delta: float) -> float:
    """ε at δ of ``events`` composed under replace-special: dp_accounting's RDP accountant
    (PLD has no tree events) and, when every event is a ``GaussianDpEvent`` (the ``mf``
    factorizations), its PLD accountant too: the smaller (both are upper bounds). No noise
    (z = 0): inf; no events: 0."""
    import dp_accounting

    events = list(events)
    if not events:
        return 0.0
    if any(getattr(e, "noise_multiplier", 1.0) == 0 for e in events):
        return math.inf
    relation = dp_accounting.NeighboringRelation.REPLACE_SPECIAL
    composed = dp_accounting.ComposedDpEvent(events)
    rdp = dp_accounting.rdp.RdpAccountant(neighboring_relation=relation)
    epsilon = float(rdp.compose(composed).get_epsilon(delta))
    if all(isinstance(e, dp_accounting.GaussianDpEvent) for e in events):
        pld = dp_accounting.pld.PLDAccountant(neighboring_relation=relation)
        epsilon = min(epsilon, float(pld.compose(composed).get_epsilon(delta)))
    return epsilon


def tree_charge(
    noise_multiplier: float,
    restart_rounds: int,
    blocks_done: int,
    rounds_left: Optional[int],
    estimator: str = "tree",
):
    """The event a server's lifetime ledger charges when a tree opens, before its first
    release: ``SingleEpochTreeAggregationDpEvent(z, T)`` with the leaves the tree will have,
    ``T = min(R − blocks_done, rounds_left)`` (R the rounds of an epoch; ``blocks_done`` the
    epoch's rounds before the tree, > 0 only for a tree restarted by a resume;
    ``rounds_left`` the run's rounds from this one, None: unknown). A run that stops before
    the tree is complete (a crash, a budget) is charged the whole tree: dp_accounting's ε of
    a tree is non-decreasing in its leaves, so it is an upper bound of the leaves released.
    ``estimator = mf``: the factorization's ``GaussianDpEvent(z)``, whatever its rounds."""
    import dp_accounting

    if estimator == MF:
        return dp_accounting.GaussianDpEvent(float(noise_multiplier))
    leaves = int(restart_rounds) - int(blocks_done)
    if rounds_left is not None:
        leaves = min(leaves, int(rounds_left))
    leaves = check_int("tree leaves", leaves, lo=1)
    return dp_accounting.SingleEpochTreeAggregationDpEvent(float(noise_multiplier), leaves)


class ShuffledEpochs:
    """Kairouz et al.'s shuffled epochs: who is asked in each round.

    Each epoch draws a permutation of the population from the ``rng`` handed to
    :meth:`next_block` (the server's secret sampling Generator, kept by the caller: a
    checkpoint leaves a secret Generator out) and cuts it into blocks of ``per_round``; an epoch is
    ``rounds_per_epoch`` blocks (at most ``N // per_round``: the last ``N − rounds·per_round``
    clients of the permutation sit that epoch out). Every round asks ``per_round`` clients,
    none twice in an epoch; the caller restarts its tree when :meth:`next_block` says an
    epoch starts. ``epoch`` counts from 0, ``block`` is the block within it (1-based).
    """

    def __init__(self, *, per_round: int, rounds_per_epoch: int) -> None:
        self.per_round = check_int("per_round", per_round, lo=1)
        self.rounds_per_epoch = check_int("rounds_per_epoch", rounds_per_epoch, lo=1)
        self.order: list[int] = []
        self.epoch, self.block = -1, 0

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(per_round={self.per_round}, "
            f"rounds_per_epoch={self.rounds_per_epoch})"
        )

    def next_block(
        self, population: Sequence[int], rng: np.random.Generator
    ) -> tuple[list[int], bool]:
        """The next round's clients (sorted) and whether they open a new epoch."""
        population = sorted({int(p) for p in population})
        need = self.per_round * self.rounds_per_epoch
        if need > len(population):
            raise ValueError(
                f"clients-per-round × rounds per epoch = {need} is not allowed; expected at "
                f"most the {len(population)} clients (each client once per epoch)"
            )
        new_epoch = self.epoch < 0 or self.block >= self.rounds_per_epoch
        if new_epoch:
            self.order = [population[int(i)] for i in rng.permutation(len(population))]
            self.epoch, self.block = self.epoch + 1, 0
        start = self.block * self.per_round
        self.block += 1
        return sorted(self.order[start : start + self.per_round]), new_epoch


@functools.lru_cache(maxsize=64)
def _factorizations_epsilon(noise_multiplier: float, count: int, delta: float) -> float:
    """ε of ``count`` ``mf`` factorizations at z (:func:`replace_special_epsilon`)."""
    return replace_special_epsilon(ftrl_event(noise_multiplier, [1] * count, MF).events, delta)


def tree_epsilon(
    noise_multiplier: float, steps_per_tree: Sequence[int], delta: float, estimator: str = "tree"
) -> dict:
    """ε at δ of the trees (``mf``: factorizations) released so far (:func:`ftrl_event`),
    under the replace-special relation (:func:`replace_special_epsilon`); with its labels
    and condition."""
    z = check_real("noise_multiplier", noise_multiplier, lo=0.0)
    steps = [int(s) for s in steps_per_tree if int(s) > 0]
    if estimator == MF:  # depends on the number of factorizations only: once per run
        epsilon = _factorizations_epsilon(float(z), len(steps), float(delta))
    else:
        epsilon = replace_special_epsilon(ftrl_event(z, steps).events if steps else [], delta)
    return {
        "epsilon": epsilon, "delta": delta,
        "rounds": sum(steps), "trees": len(steps),
        "accountant": MF_ACCOUNTANT if estimator == MF else ACCOUNTANT,
        "adjacency": ADJACENCY,
        "sampling": MF_CONDITION if estimator == MF else PARTICIPATION_CONDITION,
    }  # fmt: skip


class TreeAggregatedFTRL:
    """The DP-FTRL server state and step (module docstring).

    ``noise_multiplier`` z >= 0 (node std z·C), ``clipping_norm`` C > 0,
    ``num_sampled_clients`` m >= 1 (the block size: the step's divisor when no count is given or
    nobody replied), ``learning_rate`` η > 0,
    ``momentum`` μ in [0, 1), ``restart_rounds`` R >= 1, ``seed`` the tree seed (an int;
    secret unless the run opts in to reproducible noise). The protocol's ``constrain`` is
    FlatClip; ``add_noise`` adds the current step's prefix noise; ``event`` the trees so far.
    """

    accountable: ClassVar[bool] = True

    def __init__(
        self,
        *,
        noise_multiplier: float,
        clipping_norm: float,
        num_sampled_clients: int,
        learning_rate: float = 1.0,
        momentum: float = 0.0,
        restart_rounds: int = 1,
        seed: int,
        estimator: str = "honaker",
    ) -> None:
        self.noise_multiplier = float(check_real("noise_multiplier", noise_multiplier, lo=0.0))
        self.clipping_norm = float(check_real("clipping_norm", clipping_norm, lo=0, lo_open=True))
        self.num_sampled_clients = check_int("num_sampled_clients", num_sampled_clients, lo=1)
        self.learning_rate = float(check_real("learning_rate", learning_rate, lo=0, lo_open=True))
        self.momentum = float(check_real("momentum", momentum, lo=0.0, hi=1.0, hi_open=True))
        self.restart_rounds = check_int("restart_rounds", restart_rounds, lo=1)
        if estimator not in ESTIMATORS:
            raise ValueError(
                f"estimator = {estimator!r} is not allowed; expected {' | '.join(ESTIMATORS)}"
            )
        self.estimator = estimator
        # mf: (rounds, blocks_done) of the next factorization and the current one's B = A C⁻¹
        self.mf_plan: Optional[tuple[int, int]] = None
        self._mf_weights: Optional[np.ndarray] = None
        self._honaker: dict[tuple[int, int, int], tuple[NDArrays, float]] = {}
        self.seed = int(seed)
        self.restart_pending = False
        self.tree, self.step_in_tree = 0, 0
        self.steps_per_tree: list[int] = []
        self.theta: Optional[NDArrays] = None
        self._clean_prefix: NDArrays = []
        self._noisy_prefix: NDArrays = []
        self._velocity: NDArrays = []

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(noise_multiplier={self.noise_multiplier}, clipping_norm="
            f"{self.clipping_norm}, num_sampled_clients={self.num_sampled_clients}, "
            f"learning_rate={self.learning_rate}, momentum={self.momentum}, "
            f"restart_rounds={self.restart_rounds}, estimator={self.estimator!r})"
        )

    def __getstate__(self) -> dict[str, Any]:
        """A checkpoint's copy: everything but the secret tree seed (its reader could
        regenerate the noise); the restored tree restarts (:meth:`__setstate__`)."""
        state = dict(self.__dict__)
        del state["seed"]
        state["_honaker"] = {}  # node noise estimates: as secret as the seed
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restored from a checkpoint: a fresh secret seed and a new tree at the next step
        (the old tree's nodes cannot be redrawn; the trees so far stay accounted)."""
        self.__dict__.update(state)
        self.__dict__.setdefault("estimator", "tree")  # a checkpoint from before the key
        self.__dict__.setdefault("_honaker", {})
        self.__dict__.setdefault("mf_plan", None)
        self.__dict__.setdefault("_mf_weights", None)
        self.seed = secrets.randbits(63)
        self.restart_pending = True

    def request_restart(self) -> None:
        """Open a new tree at the next step (an epoch boundary of the caller's schedule); an
        ``mf`` factorization spans the epochs (its sensitivity counts one contribution per
        epoch): no restart."""
        if self.estimator != MF:
            self.restart_pending = True

    def plan_factorization(self, rounds: int, blocks_done: int = 0) -> None:
        """``mf``: the next factorization covers ``rounds`` rounds, its first one block
        ``blocks_done + 1`` of an epoch (:func:`fedpriv.privacy.ftrl_mf.epoch_blocks`)."""
        self.mf_plan = (
            check_int("rounds", rounds, lo=1),
            check_int("blocks_done", blocks_done, lo=0),
        )

    def _factorization_weights(self) -> np.ndarray:
        """B = A C⁻¹ of the planned factorization (:func:`plan_factorization`)."""
        from fedpriv.privacy.ftrl_mf import optimal_factorization, prefix_weights

        if self.mf_plan is None:
            raise ValueError("estimator = 'mf' needs the run's rounds: plan_factorization first")
        rounds, done = self.mf_plan
        c = optimal_factorization(rounds, self.restart_rounds, done, self.momentum)
        return prefix_weights(c)

    @property
    def node_std(self) -> float:
        """z·C: the std of every tree node's noise (on the sum)."""
        return self.noise_multiplier * self.clipping_norm

    def node_noise(self, tree: int, level: int, index: int, shapes) -> NDArrays:
        """Node (level, index) of tree ``tree``: ``N(0, (z·C)²)`` per element, float64."""
        rng = np.random.default_rng([self.seed, tree, level, index])
        return [rng.normal(0.0, self.node_std, size=shape) for shape in shapes]

    def prefix_noise(
        self, tree: int, t: int, shapes, weights: Optional[np.ndarray] = None
    ) -> NDArrays:
        """``N_t``: the sum of the noises of :func:`tree_nodes` (t) in tree ``tree`` (with
        ``honaker``: of their variance-reduced estimates, :meth:`honaker_noise`; with ``mf``:
        :meth:`factorization_noise`)."""
        if self.estimator == MF:
            return self.factorization_noise(tree, t, shapes, weights)
        total = [np.zeros(shape, np.float64) for shape in shapes]
        for level, index in tree_nodes(t):
            if self.estimator == "honaker":
                noise = self.honaker_noise(tree, level, index, shapes)[0]
            else:
                noise = self.node_noise(tree, level, index, shapes)
            for acc, layer in zip(total, noise):
                acc += layer
        return total

    def factorization_noise(
        self, tree: int, t: int, shapes, weights: Optional[np.ndarray] = None
    ) -> NDArrays:
        """``mf``: ``Σ_{k<=t} B_tk Z_k`` of factorization ``tree`` (``weights`` B, default the
        current one's), Z_k its round k's ``N(0, (z·C)²)`` draw (the seed's level-0 node
        k − 1, redrawn each round: nothing secret is kept beside the seed)."""
        weights = self._mf_weights if weights is None else weights
        if weights is None:
            raise ValueError("estimator = 'mf': no factorization is open")
        total = [np.zeros(shape, np.float64) for shape in shapes]
        for k in range(t):
            for acc, layer in zip(total, self.node_noise(tree, 0, k, shapes)):
                acc += weights[t - 1, k] * layer
        return total

    def honaker_noise(self, tree: int, level: int, index: int, shapes) -> tuple[NDArrays, float]:
        """The noise of Honaker's estimate of a complete node and its variance in units of
        (z·C)²: ``(v_c·n + c)/(v_c + 1)``, variance ``v_c/(v_c + 1)``, where n is the node's
        own noise and c (variance v_c) the sum of its two children's estimates; a leaf is its
        own noise (1). The clean sums agree, so the noise alone combines. Cached per tree."""
        cached = self._honaker.get((tree, level, index))
        if cached is not None:
            return cached
        own = self.node_noise(tree, level, index, shapes)
        if level == 0:
            out: tuple[NDArrays, float] = (own, 1.0)
        else:
            left, v_left = self.honaker_noise(tree, level - 1, 2 * index, shapes)
            right, v_right = self.honaker_noise(tree, level - 1, 2 * index + 1, shapes)
            vc = v_left + v_right
            est = [(vc * n + a + b) / (vc + 1.0) for n, a, b in zip(own, left, right)]
            out = (est, vc / (vc + 1.0))
        self._honaker[(tree, level, index)] = out  # < 2 nodes a leaf; cleared each tree
        return out

    def starts_new_tree(self) -> bool:
        """True when the next step restarts the tree (the current one has R leaves, or the
        state was restored from a checkpoint)."""
        if self.estimator == MF:
            planned = 0 if self._mf_weights is None else self._mf_weights.shape[0]
            return self.restart_pending or self.step_in_tree >= planned
        return self.restart_pending or self.step_in_tree >= self.restart_rounds

    def start(self, model: Sequence[np.ndarray]) -> None:
        """θ_0 (float64 copy) and zero state, if not started yet."""
        if self.theta is None:
            self.theta = [np.asarray(a, np.float64).copy() for a in model]
            self._velocity = [np.zeros_like(a) for a in self.theta]

    def constrain(self, update, reference=None) -> tuple[NDArrays, Metrics]:
        """FlatClip ``Δ·min(1, C/‖Δ‖)`` (``reference``: Δ = update − reference)."""
        if reference is not None:
            update = [np.subtract(u, r, dtype=np.float64) for u, r in zip(update, reference)]
        norm = flat_norm(update)
        out, was = clip_update(update, self.clipping_norm)
        return [np.asarray(a, np.float64) for a in out], {"update_norm": norm, "clipped": was}

    def add_noise(self, aggregate, *, denominator: float = 1.0, rng=None, cohort=None):
        """``aggregate`` + the next step's prefix noise / ``denominator`` (no state change;
        the protocol's view of one release)."""
        del rng, cohort
        tree, t, weights = self.tree, self.step_in_tree + 1, None
        if self.starts_new_tree():
            tree, t = tree + 1, 1
            weights = self._factorization_weights() if self.estimator == MF else None
        shapes = [np.shape(a) for a in aggregate]
        noise = self.prefix_noise(tree, t, shapes, weights)
        out = [np.asarray(a, np.float64) + n / denominator for a, n in zip(aggregate, noise)]
        return out, {"sigma": self.node_std / denominator, "noise_norm": noise_norm(out, aggregate)}

    def event(self, **kwargs: Any):
        """The trees released so far (sampling arguments ignored: no amplification)."""
        del kwargs
        return ftrl_event(self.noise_multiplier, self.steps_per_tree, self.estimator)

    def step(
        self, clipped_sum: Sequence[np.ndarray], count: Optional[int] = None
    ) -> tuple[NDArrays, Metrics]:
        """One release: θ_t from the clipped sum s_t of ``count`` updates (module docstring,
        steps 2–3; the divisor k_t is ``count``, or m when it is None or 0)."""
        if self.theta is None:
            raise ValueError("TreeAggregatedFTRL.step before start(model)")
        if self.starts_new_tree() or not self.steps_per_tree:
            if self.steps_per_tree:
                self.tree += 1
            self.step_in_tree, self.restart_pending = 0, False
            self.steps_per_tree.append(0)
            self._clean_prefix = [np.zeros_like(a) for a in self.theta]
            self._noisy_prefix = [np.zeros_like(a) for a in self.theta]
            self._honaker = {}
            if self.estimator == MF:
                self._mf_weights = self._factorization_weights()
                self.mf_plan = None
        self.step_in_tree += 1
        self.steps_per_tree[-1] = self.step_in_tree
        shapes = [a.shape for a in self.theta]
        noise = self.prefix_noise(self.tree, self.step_in_tree, shapes)
        m = int(count) if count else self.num_sampled_clients
        lr, mu = self.learning_rate, self.momentum
        metrics: Metrics = {"tree": self.tree, "tree_step": self.step_in_tree, "divisor": m}
        increment_noise = 0.0
        for i, s in enumerate(clipped_sum):
            self._clean_prefix[i] += np.asarray(s, np.float64)
            noisy = self._clean_prefix[i] + noise[i]
            g = (noisy - self._noisy_prefix[i]) / m
            increment_noise += float(np.sum((g - np.asarray(s, np.float64) / m) ** 2))
            self._noisy_prefix[i] = noisy
            self._velocity[i] = mu * self._velocity[i] + g
            self.theta[i] = self.theta[i] + lr * self._velocity[i]
        metrics["noise_norm"] = math.sqrt(increment_noise)  # ‖g̃_t − s_t/m‖
        metrics["prefix_noise_norm"] = flat_norm(noise) / m
        return [a.copy() for a in self.theta], metrics
