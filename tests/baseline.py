"""Behaviour baseline: the rounds.jsonl metrics of seeded runs, committed from the old code.

The redesign keeps every run's round metrics. The simulation tests that
already run each scenario kind (default digits run, DP grid, DP-SGD grid, IFCA sweeps, zonal
comparison and failures, CIA) call :func:`assert_matches_baseline` on their output directory,
so the check costs no extra simulation time. ``FEDPRIV_RECORD_BASELINE=1`` rewrites the records
instead of comparing (do that only for an intended, documented change).

Compared: every number (bools as 0/1, list items by index) of every round line of every
``rounds.jsonl`` below the output directory, except wall-clock times, by the package's one
comparer (:func:`fedpriv.baseline.compare`, which ``fedpriv baseline check`` uses too) with
this record's band rule :data:`fedpriv.baseline.RECORD_RULE`.

Records (old engine = main before redesign stage 2, same numerics otherwise):

- ``cia``: from main@7e03fea; ``dpsgd-grid``, ``zonal-failures``, ``zonal-compare``,
  ``ifca-digits-sweep``: from main@1caa077, the last commit before redesign stage 2 (after the
  privacy audit's DP-SGD ε and zonal accounting changes, which change those figures on
  purpose). All five matched the stage-2 engine when committed.
- ``dp-grid-{fedavg,fedyogi}-{none,global-dp,metric-dp}`` (six separate ``fedpriv run``) and
  ``ifca-gp-sweep``: from main@1caa077 too (after stage 1's DP noise stream move), with the
  test fixtures' configs unchanged (the old code takes the same keys). All seven matched the
  stage-2 engine (main@4f79cd1 and main@85d30db) when committed.
- ``digits-default`` (metric DP): regenerated deliberately from the redesigned code, because
  redesign stage 1 moved the DP noise from ``default_rng([seed, 1])`` (the partitioner's
  stream) to its own stream (``fedpriv.seeds``; intended). With the old stream put back, the
  new code reproduced the old digits-default record exactly (checked by hand at stage 1).
  main@1caa077 (already after that move) writes this record byte for byte (checked).
- A missing record makes its comparison skip. To record from an old commit, run the test's
  config with that commit's code (a worktree of it on ``PYTHONPATH``) and write
  ``round_metrics(output_dir)`` as :func:`assert_matches_baseline` does.

Intended differences:

- Keras 3 / TF 2.21: figures that depend on float training are compared within
  bands (see ``fedpriv.baseline.EXACT_KEYS`` and ``RECORD_RULE``), the rest exactly.
  Measured at the switch: the default digits run's final accuracy is 0.989 on both stacks.
- DP-SGD without tensorflow-privacy: the ``fedavg/dp-sgd/seed0`` run of
  ``dpsgd-grid`` was re-recorded from the new engine: batches are Poisson-sampled (each
  example with q = B/n per step) and ε is the PLD of that Poisson-subsampled Gaussian (a bound
  for the batching that runs), replacing fixed shuffled batches and tensorflow-privacy's
  "assuming Poisson" figure; the once-per-epoch figures are gone. The ``none`` run of that
  record is still the old engine's.
- DP with stateful server optimizers: ``dp-grid-fedyogi-global-dp`` and
  ``dp-grid-fedyogi-metric-dp`` were re-recorded from the new engine: the noise is now added
  to the mean of the clipped updates BEFORE FedYogi's moment update (so its state sees only
  noised means), not after it. Only training-dependent figures moved (server accuracy,
  losses, F1...); sampling, σ of global DP and every ε are the old engine's. The FedAvg
  records are unchanged (the FedAvg release is the same computation as before).

- Secret randomness: every baseline run opts in to ``reproducible-noise = true``
  (``tests.simulate`` adds it to every run; the paper scenarios no longer set it,
  the tests opt in explicitly), so the seeded noise
  and sampling streams are the old ones and no record changed. The round lines' new
  ``noise-randomness`` label is a string: not compared (only numbers are).

- Zones as SuperNodes (``zonal-runtime = zone-nodes``, the new default):
  ``zonal-failures`` was re-recorded from the zone-node runtime: a failed super-node now takes
  its zone's message out of the round (HDP §V; before, only that one client was offline), so
  ``replied`` and the accuracies moved, one round with both zones down is not aggregated, and
  the per-client ``zonal-update-norm`` / ``zonal-clipped`` / ``zonal-noise-norm`` train
  metrics are gone (a zone node reports its zone aggregate only). ``zonal-compare`` matched
  the zone-node runtime unchanged (same noise streams, figures within the bands).
- DP-SGD under replace-one example (the replies publish n): the ``dp-sgd-epsilon.*``
  and ``dp-sgd-epsilon-max`` figures of ``dpsgd-grid`` were recomputed offline with the new
  accountant (multiplier z/2) from the recorded participations and the clients' n (288, 287,
  287, 287: the n for which the old accountant gives the recorded figures exactly); nothing
  else of the record changed (same runs, same participations, same z).
- redesign stage 2: ``fedpriv grid`` runs its cells in one simulation; the DP-SGD cell's
  accuracies are compared only where they do not depend on worker history (``worker_noise``;
  measured: rounds 1-2 equal, round 3 server accuracy 0.750 vs 0.744).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fedpriv.baseline import compare, record_bands, round_metrics

BASELINE_DIR = Path(__file__).resolve().parent / "data" / "baseline"
RECORD_ENV = "FEDPRIV_RECORD_BASELINE"
# The comparer, its figure classes (exact / score / value / choice) and this record's band
# rule (``fedpriv.baseline.RECORD_RULE``: scores ± 0.08, values ± 35 % with a 0.05 floor,
# the rest exact) live in ``fedpriv.baseline``; ``fedpriv baseline check`` uses the same one.
__all__ = ["assert_matches_baseline", "round_metrics"]

DRAWN_IN_WORKERS = ("server.", "distributed.", "train.")


def assert_matches_baseline(
    name: str, output_dir: str | Path, *, worker_noise: tuple[str, ...] = ()
) -> None:
    """The round metrics below ``output_dir`` match the committed record ``name``: equal where
    they do not depend on float training, within the bands of
    :data:`fedpriv.baseline.RECORD_RULE` where they do.

    Runs named in ``worker_noise`` draw their noise inside the ClientApp workers: for them
    only what does not depend on those draws is compared (sampling, replies, ε,
    participations).
    """
    actual = round_metrics(output_dir)
    path = BASELINE_DIR / f"{name}.json"
    if os.environ.get(RECORD_ENV):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(actual, indent=0, sort_keys=True) + "\n")
        return
    if not path.exists():  # a record not (yet) made from the old code: nothing to compare
        pytest.skip(f"no baseline record {path.name}")
    expected = json.loads(path.read_text())
    assert sorted(actual) == sorted(expected), f"{name}: runs {sorted(actual)}"
    for run, rounds in expected.items():
        got = actual[run]
        assert len(got) == len(rounds), f"{name}/{run}: {len(got)} rounds, expected {len(rounds)}"
        for i, (want_line, got_line) in enumerate(zip(rounds, got)):
            if run in worker_noise:
                want_line = {
                    k: v for k, v in want_line.items() if not k.startswith(DRAWN_IN_WORKERS)
                }
            verdicts = compare(record_bands(want_line), got_line)
            missing = sorted(v.name for v in verdicts if v.value is None)
            assert not missing, f"{name}/{run} round line {i}: missing {missing[:8]}"
            wrong = {v.name: (v.value, want_line[v.name]) for v in verdicts if not v.ok}
            assert not wrong, f"{name}/{run} round line {i}: (got, expected) {wrong}"
