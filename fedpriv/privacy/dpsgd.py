"""Client-side DP-SGD (MP §4, untrusted server): Poisson batches and their ε. No Flower.

DP-SGD (Abadi et al. 2016, §3.1 and the moments accountant of §3.2) as fedpriv runs it:

* **Batching = Poisson sampling.** At every step each of the client's n examples joins the
  batch independently with probability q = min(1, B/n) (B = ``batch-size``, the EXPECTED
  batch size); a local epoch has round(1/q) = round(n/B) steps (1 when n <= B, where q is
  clamped to 1: every step uses every example). A step's batch has a random size (possibly
  0); the schedule pads every step to one static width (the largest batch drawn in the
  call, rounded up to a power of two >= 8, never truncated) with mask 0 on the padding.
* **Step** (``fedpriv.clients.dp_grads.private_grads``): g̃ = (Σ_i m_i·clip(∇ℓ_i, C) + N(0,
  (zC)² I)) / D with D = q·n = min(B, n), the expected batch size, fixed (never the realised
  size, which is private). An empty batch is a step of pure noise.
* **Adjacency: replace-one example**. Every reply carries ``num-examples`` = n
  (and its ε, a function of n), so a data set with one example more or less is told apart by
  n itself: add/remove adjacency describes nothing the server cannot see. With n public, the
  neighbouring data sets have the same n and differ in one example; replacing it moves the
  masked clipped sum by at most 2C (C out, C in) when its slot is sampled.
* **Accounting.** Each step is then the Poisson-subsampled Gaussian with sensitivity 2C and
  noise zC: ``PoissonSampledDpEvent(q, GaussianDpEvent(z/2))`` composed under add/remove,
  whose PLD takes both directions of the pair (q·P + (1−q)·Q, Q) with (P, Q) the Gaussian
  pair at multiplier z/2 — the dominating pair of the replace-one subsampled step (the
  slot is sampled with probability q in both data sets; Zhu, Dong & Wang 2022, §5;
  dp_accounting has no Poisson REPLACE_ONE event). A client that trained in R rounds of E
  local epochs ran T = round(1/q)·E·R such steps on its data: ε is that event self-composed
  T times, composed by :class:`fedpriv.privacy.accounting.PrivacyAccountant` with PLD (pessimistic
  discretisation) and RDP; the headline is the smaller, both upper bounds. With q = 1 the
  event is the plain Gaussian, composed exactly (μ = 2√T/z).
* **What ε covers:** one example of one client replaced by another (n published), for the
  run's published models and replies (n and ε included); it holds while the noise seed and
  the batch schedule are secret from every other party (drawn from the client's OS entropy
  unless the run opts in to reproducibility). It also bounds add/remove for a reader who
  does not learn n (the replace-one multiplier z/2 is the smaller one).

One example per clip is the only mode: tensorflow-privacy's microbatches (clip means of
several examples, sensitivity 2C under add/remove) went with it; ``microbatches`` must be 0.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fedpriv.validation import check_int, check_real

ACCOUNTANT = "PLD"
ACCOUNTANT_TEXT = (
    "example-level DP of each client's DP-SGD: Poisson-sampled Gaussian "
    "(q = min(1, batch-size/n), z) self-composed round(1/q) x local-epochs x rounds-participated "
    "steps (participations counted by the client), replace-one example adjacency (n is "
    "released: sensitivity 2C, multiplier z/2); "
    "fedpriv.privacy.accounting.PrivacyAccountant: dp_accounting PLD and RDP, headline the smaller "
    "(both upper bounds)"
)
SAMPLING_TEXT = "Poisson sampling, q = min(1, batch-size/n), padded and masked batches"
ADJACENCY_TEXT = "replace-one example of one client, n released (example level; sensitivity 2C)"
# the multiplier of the accounted step: z/2, the Gaussian of sensitivity 2C with noise zC
REPLACE_ONE_FACTOR = 0.5
MIN_WIDTH = 8
STREAM_TAG = 0xD95  # the reproducible opt-in's stream: SeedSequence([call seed, tag])


def sampling_rate(*, num_examples: int, batch_size: int) -> float:
    """q = min(1, B/n): each example's inclusion probability at every step."""
    check_int("num_examples", num_examples, lo=1)
    check_int("batch_size", batch_size, lo=1)
    return min(1.0, batch_size / num_examples)


def steps_per_epoch(*, num_examples: int, batch_size: int) -> int:
    """round(1/q) = round(n/B) steps per local epoch (1 when n <= B)."""
    q = sampling_rate(num_examples=num_examples, batch_size=batch_size)
    return max(1, int(math.floor(1.0 / q + 0.5)))


def expected_batch_size(*, num_examples: int, batch_size: int) -> float:
    """D = q·n = min(B, n): the fixed denominator of every step's gradient."""
    return float(min(batch_size, num_examples))


def padded_width(largest: int) -> int:
    """The static batch width for a call: max(8, the power of two >= ``largest``)."""
    check_int("largest", largest, lo=0)
    return max(MIN_WIDTH, 1 << max(0, int(largest) - 1).bit_length())


def check_microbatches(microbatches: int) -> None:
    """``microbatches`` must be 0: one example per clip is the only DP-SGD mode."""
    if microbatches != 0:
        raise ValueError(
            f"microbatches = {microbatches!r}: expected 0 (DP-SGD clips each example; "
            "microbatches went with tensorflow-privacy)"
        )


def secret_seed() -> np.ndarray:
    """A fresh noise seed from OS entropy: int32 array of shape (2,), never derived from config."""
    return np.frombuffer(secrets.token_bytes(8), dtype=np.int32).copy()


def call_randomness(
    call_seed: int, *, reproducible: bool
) -> tuple[np.random.Generator, np.ndarray]:
    """(schedule generator, noise seed (2,) int32) of one DP-SGD call.

    Default: both from the client's OS entropy (``default_rng()``, ``secrets``), so no
    other party can rebuild the batches or the noise. ``reproducible`` (the run's opt-in):
    both from ``SeedSequence([call_seed, STREAM_TAG])``, bit-identical for the same call
    seed; the ε is then valid only while that seed is secret from every party.
    """
    if not reproducible:
        return np.random.default_rng(), secret_seed()
    rng = np.random.default_rng([int(call_seed), STREAM_TAG])
    noise_seed = rng.integers(np.iinfo(np.int32).min, np.iinfo(np.int32).max, 2, np.int32)
    return rng, noise_seed


@dataclass(frozen=True)
class PoissonSchedule:
    """The batches of one client call: ``idx[s]``, ``mask[s]`` of a static width.

    Field names as ``fedpriv.clients.compiled.Schedule`` (the trainer runs either).
    """

    idx: np.ndarray  # (steps, width) int32; padding rows point at example 0
    mask: np.ndarray  # (steps, width) float32; 1 real example, 0 padding
    steps_per_epoch: int
    sizes: np.ndarray  # (steps,) realised batch sizes
    sampling_rate: float
    denominator: float


def poisson_schedule(
    *, num_examples: int, batch_size: int, epochs: int, rng: np.random.Generator
) -> PoissonSchedule:
    """Poisson-sampled batches of ``epochs`` local epochs (module doc), drawn from ``rng``.

    ``rng`` must be secret (``np.random.default_rng()`` from OS entropy) unless the run
    opted in to reproducibility: a party that knows the schedule voids the amplification.
    """
    check_int("epochs", epochs, lo=0)
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng = {rng!r}: expected a numpy Generator")
    n = num_examples
    q = sampling_rate(num_examples=n, batch_size=batch_size)
    per_epoch = steps_per_epoch(num_examples=n, batch_size=batch_size)
    steps = per_epoch * epochs
    batches = [np.flatnonzero(rng.random(n) < q) if q < 1 else np.arange(n) for _ in range(steps)]
    sizes = np.array([len(b) for b in batches], np.int64)
    width = padded_width(int(sizes.max(initial=0)))
    idx = np.zeros((steps, width), np.int32)
    mask = np.zeros((steps, width), np.float32)
    for s, members in enumerate(batches):
        idx[s, : len(members)] = members
        mask[s, : len(members)] = 1.0
    return PoissonSchedule(
        idx=idx,
        mask=mask,
        steps_per_epoch=per_epoch,
        sizes=sizes,
        sampling_rate=q,
        denominator=expected_batch_size(num_examples=n, batch_size=batch_size),
    )


def dpsgd_event(*, num_examples: int, batch_size: int, epochs: int, noise_multiplier: float):
    """The ``DpEvent`` of ``epochs`` local epochs of DP-SGD on one client's n examples,
    replace-one example (module doc), to be composed under add/remove.

    ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z/2)), round(1/q)·epochs)``;
    the plain Gaussian (multiplier z/2) when q = 1.
    """
    import dp_accounting

    check_int("epochs", epochs, lo=0)
    check_real("noise_multiplier", noise_multiplier, lo=0.0, lo_open=False)
    q = sampling_rate(num_examples=num_examples, batch_size=batch_size)
    steps = steps_per_epoch(num_examples=num_examples, batch_size=batch_size) * epochs
    step: Any = dp_accounting.GaussianDpEvent(float(noise_multiplier) * REPLACE_ONE_FACTOR)
    if q < 1:
        step = dp_accounting.PoissonSampledDpEvent(q, step)
    return dp_accounting.SelfComposedDpEvent(step, steps)


@dataclass(frozen=True)
class ClientEpsilon:
    """One client's example-level DP-SGD ε after ``epochs`` local epochs in total."""

    epsilon: float
    epsilon_pld: float | None
    epsilon_rdp: float
    headline_from: str
    delta: float
    epochs: int
    steps: int
    sampling_rate: float
    num_examples: int
    batch_size: int
    noise_multiplier: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def client_epsilon(
    *,
    num_examples: int,
    batch_size: int,
    local_epochs: int,
    participations: int,
    noise_multiplier: float,
    delta: float,
) -> ClientEpsilon:
    """ε of a client that ran ``local_epochs`` Poisson epochs in each of ``participations``
    rounds (module doc). 0 rounds gives 0; z = 0 gives inf."""
    from fedpriv.privacy.accounting import NeighborRel, PrivacyAccountant

    check_int("local_epochs", local_epochs, lo=1)
    check_int("participations", participations, lo=0)
    check_real("delta", delta, lo=0.0, lo_open=True, hi=1.0, hi_open=True)
    epochs = local_epochs * participations
    event = dpsgd_event(
        num_examples=num_examples,
        batch_size=batch_size,
        epochs=epochs,
        noise_multiplier=noise_multiplier,
    )
    common = dict(
        delta=float(delta),
        epochs=epochs,
        steps=int(event.count),
        sampling_rate=sampling_rate(num_examples=num_examples, batch_size=batch_size),
        num_examples=int(num_examples),
        batch_size=int(batch_size),
        noise_multiplier=float(noise_multiplier),
    )
    if epochs == 0:
        return ClientEpsilon(0.0, 0.0, 0.0, "no steps", **common)
    if noise_multiplier == 0:
        return ClientEpsilon(math.inf, math.inf, math.inf, "z = 0", **common)
    accountant = PrivacyAccountant(delta=delta, relation=NeighborRel.ADD_OR_REMOVE_ONE)
    report = accountant.compose(event).report()
    return ClientEpsilon(
        float(report.epsilon),
        None if report.epsilon_pld is None else float(report.epsilon_pld),
        float(report.epsilon_rdp),
        report.headline_from,
        **common,
    )


def per_example_loss(model_name: str):
    """The model's Keras 3 loss with ``reduction=None`` (one value per example)."""
    import keras

    from fedpriv.models import CLASSIFIERS

    if model_name in CLASSIFIERS:
        return keras.losses.SparseCategoricalCrossentropy(reduction=None)
    return keras.losses.MeanSquaredError(reduction=None)


def max_participations(
    max_epsilon: float,
    *,
    num_examples: int,
    batch_size: int,
    local_epochs: int,
    noise_multiplier: float,
    delta: float,
    limit: int = 1 << 20,
) -> int:
    """The most participations k whose :func:`client_epsilon` is ≤ ``max_epsilon`` (ε grows
    with k: doubling, then bisection; at most ``limit``). A node's lifetime budget in
    participations: each release costs 1 of it."""
    check_real("max_epsilon", max_epsilon, lo=0.0, lo_open=True)

    def fits(k: int) -> bool:
        eps = client_epsilon(num_examples=num_examples, batch_size=batch_size,
                             local_epochs=local_epochs, participations=k,
                             noise_multiplier=noise_multiplier, delta=delta).epsilon  # fmt: skip
        return eps <= max_epsilon

    if not fits(1):
        return 0
    low, high = 1, 2
    while high < limit and fits(high):
        low, high = high, 2 * high
    high = min(high, limit + 1)
    while high - low > 1:  # fits(low), not fits(high) (or high = limit + 1)
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low
