"""The seed-stream table: every random stream of a run, named, with its entropy layout.

A run has one integer ``seed``. Each consumer draws from its own stream,
``numpy.random.default_rng([seed, *tags])``, so consumers never share draws and adding a
consumer never shifts another's numbers. The table below is the only place a tag is chosen;
``tests/test_seeds.py`` checks that no two streams have the same tags.

Secret by default: a stream that draws privacy noise or the client-sampling
schedule is reproducible from ``seed`` only when the run sets ``reproducible-noise = true``
(an explicit opt-in for tests and regression baselines; labelled, see :func:`noise_label`).
Otherwise it comes from OS entropy (:func:`privacy_rng`), so a party that knows the run
config (every client does) cannot rebuild the noise and subtract it. Column "secret" of the
table: yes = OS entropy unless the run opts in; no = always seeded (data, splits, elections:
not privacy noise).

Streams keyed by ``[seed, tag, ...]``:

======================  ==========  ======  ===================================================
name                    tags        secret  consumer
======================  ==========  ======  ===================================================
partition               1           no      image partitioners (``fedpriv.data.partition``)
digits-rotation         2           no      which digits clients are rotated
server-split            3           no      server val/test pool (``derive_seed``)
val-test-split          4           no      validation / test halves (``derive_seed``)
zonal-election          5, 0        no      super-node elections (``fedpriv.strategies.zonal``)
zonal-failure           5, 1        no      simulated super-node failures
zonal-zone-noise        5, 2, r, z  yes     HDP super-node noise, round r, zone z
zonal-server-noise      5, 3, r     yes     CDP server noise, round r
zonal-share-noise       5, 5, r, z  yes     HDP noise shares of zone z's clients under SecAgg
                                            (``zonal-secagg``, ``in-server``), round r
cia-shadow              6           no      the CIA attacker's shadow set (``derive_seed``)
client-split            7, i        no      client i's train/test split (``derive_seed``)
alzheimer-split         8           no      Alzheimer train/test split (``derive_seed``)
emnist-writers          9           no      which EMNIST writers are the clients
test-deal               10          no      CIFAR test images dealt to the clients
synthetic-mri           11          no      procedural MRI images
gp-data                 21          no      GP synthetic users
gp-held                 22          no      GP synthetic held-out data
ifca-init               41          no      GP N(0, 1) initial hypotheses
ifca-server             42          no      IFCA users per round (no amplification claimed)
ifca-init-model         43, j       no      Keras initialisation of hypothesis j
dp-noise                51, 1, 1    yes     DP wrappers' noise (``fedpriv.scenarios.dp.feature``)
attack                  61, r, p    no      a malicious client's random direction
audit-canary-direction  71, 1, j    no      canary j's unit direction (the auditor's secret)
audit-canary-inclusion  71, 2       no      which canaries are inserted
audit-example-canaries  71, 3       no      DP-SGD canary examples
audit-lira              71, 4       no      LiRA reference subsets
audit-mechanism         71, 5, k    no      mechanism-level audit noise (an offline test)
======================  ==========  ======  ===================================================

The client-sampling schedule (``fedpriv.scenarios.app.engine``, ``default_rng(seed)``) is secret
too.

Per-call client streams are keyed by ``[seed, round, partition]`` (Keras training seed,
``client_seed``; not secret), ``[client_seed, 5, 4]`` (zonal LDP noise; secret) and
``[client_seed, 5, 5]`` (a zone node's client's HDP noise share under ``zonal-secagg``;
secret); IFCA
clients use ``[seed, round, partition, stream, 4]`` (the Laplace noise stream is secret).
DP-SGD's batches and noise are secret the same way (``fedpriv.privacy.dpsgd.call_randomness``).

numpy's ``SeedSequence`` ignores trailing zero words (``[s, 5]`` and ``[s, 5, 0]`` are the
same stream), so "distinct" means distinct after dropping trailing zeros; the test checks that.

Changed in the redesign (intended, documented in ``tests/baseline.py``):

- the DP noise used ``[seed, 1]``, the partitioner's stream: it now has its own stream
  ``dp-noise`` = ``[seed, 51, 1, 1]``, whose last word is not zero, so it can never coincide
  with a client call seed ``[seed, round, partition]`` either;
- the Alzheimer train/test split used ``[seed, 5]``, the same stream as the zonal elections
  ``[seed, 5, 0]``: it now uses ``[seed, 8]`` (only runs on real Alzheimer data change).

Known and left alone (to keep every other run bit-identical across the redesign): the client
call seeds ``[seed, round, partition]`` have the same entropy as a named two- or three-word
stream when ``round`` equals its first tag (e.g. round 1, partition 0 and ``partition``).
They seed Keras (shuffling, dropout), not noise, so no privacy noise is shared; giving
client calls a tag of their own would change every training run's numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

STREAMS: dict[str, tuple[int, ...]] = {
    "partition": (1,),
    "digits-rotation": (2,),
    "server-split": (3,),
    "val-test-split": (4,),
    "zonal-election": (5, 0),
    "zonal-failure": (5, 1),
    "zonal-zone-noise": (5, 2),
    "zonal-server-noise": (5, 3),
    "zonal-share-noise": (5, 5),
    "cia-shadow": (6,),
    "client-split": (7,),
    "alzheimer-split": (8,),
    "emnist-writers": (9,),
    "test-deal": (10,),
    "synthetic-mri": (11,),
    "gp-data": (21,),
    "gp-held": (22,),
    "ifca-init": (41,),
    "ifca-server": (42,),
    "ifca-init-model": (43,),
    "dp-noise": (51, 1, 1),
    "distributed-dp-noise": (52, 1),
    "attack": (61,),
    "audit-canary-direction": (71, 1),
    "audit-canary-inclusion": (71, 2),
    "audit-example-canaries": (71, 3),
    "audit-lira": (71, 4),
    "audit-mechanism": (71, 5),
}
ZONAL_TAG = 5  # first tag of the zonal streams (and of the zonal LDP client stream)
ZONAL_LDP_TAGS = (ZONAL_TAG, 4)  # [client_seed, 5, 4]
ZONAL_SHARE_TAGS = (ZONAL_TAG, 5)  # [client_seed, 5, 5]: HDP noise share under zonal-secagg


def tags(name: str, *extra: int) -> list[int]:
    """The tags of stream ``name`` followed by ``extra`` (round, zone, index ...)."""
    if name not in STREAMS:
        raise ValueError(
            f"seed stream = {name!r} is not allowed; expected one of " + " | ".join(STREAMS)
        )
    return [*STREAMS[name], *(int(x) for x in extra)]


def stream(seed: int, name: str, *extra: int) -> np.random.Generator:
    """``default_rng([seed, *STREAMS[name], *extra])``: the Generator of one named stream."""
    return np.random.default_rng([int(seed), *tags(name, *extra)])


def derive_seed(seed: int, name: str, *extra: int) -> int:
    """An integer seed (for Keras / scikit-learn) drawn from stream ``name``."""
    return int(stream(seed, name, *extra).integers(0, 2**31 - 1))


def client_seed(seed: int, server_round: int, partition: int) -> int:
    """The per-(seed, round, partition) seed of one client call: reproducible and distinct."""
    state = np.random.SeedSequence([int(seed), int(server_round), int(partition)])
    return int(state.generate_state(1)[0] % (2**31 - 1))


# --- secret randomness ----------------------------------------------------------------------

REPRODUCIBLE_KEY = "reproducible-noise"
NOISE_LABEL_KEY = "noise-randomness"
SEEDED_LABEL = "seeded: valid only while the seed is secret from every party"
SECRET_LABEL = "os-entropy"


class SecretGenerator(np.random.Generator):
    """A Generator seeded from OS entropy (``SeedSequence()``): nothing of the run config
    determines it. Checkpoints leave it out (``fedpriv.checkpoint.capture_state``), so no
    reader of a checkpoint can regenerate the draws after it."""


def noise_label(reproducible: bool) -> str:
    """The label every round record and summary carries: where the noise came from
    (``reproducible``: the run's ``reproducible-noise``, ``RunSpec.reproducible_noise``)."""
    return SEEDED_LABEL if reproducible else SECRET_LABEL


def noise_labels(reproducible: bool) -> dict[str, str]:
    """``{"noise-randomness": label}``: what a run's round lines and summary carry."""
    return {NOISE_LABEL_KEY: noise_label(reproducible)}


def privacy_rng(entropy: int | Sequence[int], *, reproducible: bool) -> np.random.Generator:
    """The Generator of privacy noise or sampling: ``default_rng(entropy)`` when the run is
    ``reproducible``, else a :class:`SecretGenerator` from OS entropy (``entropy`` unused).

    Caveat: PCG64 is not a cryptographically secure generator; its state can in principle be
    recovered from enough raw outputs (the noise is only ever released added to data).
    """
    if reproducible:
        return np.random.default_rng(entropy)
    return SecretGenerator(np.random.PCG64(np.random.SeedSequence()))


def privacy_stream(seed: int, name: str, *extra: int, reproducible: bool) -> np.random.Generator:
    """Stream ``name`` (:func:`stream`) when ``reproducible``, else OS entropy."""
    return privacy_rng([int(seed), *tags(name, *extra)], reproducible=reproducible)
