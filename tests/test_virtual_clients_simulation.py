"""Virtual clients on 2 worker SuperNodes give the run of one SuperNode per client.

Each privacy mode runs twice as cells of a real Flower simulation (``fedpriv``'s
``run-plan``, seeded noise and sampling): once with ``num-workers = 2`` (the 4 digits
clients as virtual clients of 2 SuperNodes, packed messages) and once with ``num-workers =
4`` (one SuperNode per client, the reference). The round records (metrics, sampled and
replied clients, σ, clipping, ε and counts) and the final model agree within float
tolerance. Covered: none, global-dp, metric-dp, dp-sgd, and zonal in the server with the
ldp, hdp and cdp placements; IFCA (its own message types, client-side noise and ledgers) on
2 workers against 120 SuperNodes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.simulate import (
    assert_close,
    final_weights,
    ledgers_in,
    nodes_of,
    run_fedpriv,
    run_fedpriv_cells,
)

pytestmark = pytest.mark.simulation

ROUNDS = 2
MODES = {
    "none": {"privacy": "none"},
    "global-dp": {"privacy": "global-dp"},
    "metric-dp": {"privacy": "metric-dp"},
    "dp-sgd": {"privacy": "dp-sgd", "local-epochs": 1},
    **{
        f"zonal-{placement}": {
            "privacy": "zonal",
            "zonal-runtime": "in-server",
            "noise-placement": placement,
            "num-zones": 2,
        }
        for placement in ("ldp", "hdp", "cdp")
    },
}
# keys of a round record that time the run rather than compute it
TIMING = {"seconds", "wall_seconds", "time", "duration", "supernodes"}


def _runs(workers: int, base: Path) -> dict:
    return {
        mode: (
            {
                "scenario": "digits",
                "seed": 3,
                "num-server-rounds": ROUNDS,
                "num-workers": workers,
                **overrides,
            },
            base / f"w{workers}" / mode,
        )  # fmt: skip
        for mode, overrides in MODES.items()
    }


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("virtual")
    out = {}
    for workers in (2, 4):
        runs = _runs(workers, base)
        results = run_fedpriv_cells(runs, base / f"plan{workers}")
        for mode, result in results.items():
            out.setdefault(mode, {})[workers] = (*result, runs[mode][1])
    return out


def _close(a, b, path: str) -> None:
    """``a`` equals ``b`` with floats within tolerance (recursively), timings aside."""
    assert_close(a, b, path, rel=1e-5, abs_tol=1e-6, ignore=TIMING)


@pytest.mark.parametrize("mode", list(MODES))
# guard tier: its fixture is two simulations of seven cells (~150 s of the fast tier's wall)
@pytest.mark.slow
@pytest.mark.guard
def test_two_workers_give_the_run_of_one_supernode_per_client(pairs, mode):
    virtual, reference = pairs[mode][2], pairs[mode][4]
    for rc, _, _, log, _ in (virtual, reference):
        assert rc == 0, log[-3000:]
    assert (virtual[1]["supernodes"], reference[1]["supernodes"]) == (2, 4)
    rounds_v, rounds_r = virtual[2], reference[2]
    assert len(rounds_v) == len(rounds_r) == ROUNDS + 1
    for a, b in zip(rounds_v, rounds_r):
        _close(a, b, f"round {a.get('round')}")
    for a, b in zip(final_weights(virtual[4]), final_weights(reference[4])):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    _close(virtual[1].get("privacy", {}), reference[1].get("privacy", {}), "summary.privacy")
    _close(virtual[1]["final"], reference[1]["final"], "summary.final")


GP = {  # IFCA (GP Algorithm 1) with client-side d-privacy noise, 3 rounds
    "scenario": "gp-synthetic",
    "unaccounted-metrics": True,
    "ifca-noise-multiplier": 5,
    "seed": 0,
    "num-server-rounds": 3,
    "patience": 50,
}


@pytest.mark.slow
@pytest.mark.guard
def test_ifca_on_two_workers_is_the_run_of_one_supernode_per_client(tmp_path):
    """The same rounds (cluster choices, released clients, leakage), the same final
    evaluation and the same per-client leakage ledgers on 2 workers as on 120 SuperNodes."""
    out = {}
    for workers in (2, 120):
        rc, summary, rounds, log = run_fedpriv(
            {**GP, "num-workers": workers}, tmp_path / f"w{workers}", timeout=1200
        )
        assert rc == 0, log[-3000:]
        out[workers] = (summary, rounds, tmp_path / f"w{workers}")
    assert out[2][0]["supernodes"] == 2 and out[120][0]["supernodes"] == 120
    for a, b in zip(out[2][1], out[120][1]):
        _close(a, b, f"round {a.get('round')}")
    _close(out[2][0]["final"], out[120][0]["final"], "final")
    _close(out[2][0]["leakage"], out[120][0]["leakage"], "leakage")
    ledgers = [  # each node's own lifetime ledger, in its folder of its simulation's root
        {name: ledger.spent for name, ledger in ledgers_in(nodes_of(d), "ifca").items()}
        for _, _, d in out.values()
    ]
    assert ledgers[0] == ledgers[1] and ledgers[0]
