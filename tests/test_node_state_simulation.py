"""A simulation is a fresh federation per experiment unless asked (issue "node state").

Real ``fedpriv run`` simulations (Flower's simulation engine, on its in-process backend:
:data:`tests.simulate.IN_PROCESS`; the nodes' state is the subject, not the engine) with the
launcher's own state default (no ``FEDPRIV_STATE_ROOT``): the simulated nodes keep their
ledgers in ``<output-dir>/node-state``, so the same experiment run twice reports the same ε and
(with ``reproducible-noise``) the same records; ``federation-dir`` keeps a persistent
federation whose second run says in its first lines that it starts on earlier releases, and
reports a lifetime figure; the scenario's node-owned opt-ins reach every simulated node through
its own node config (gp-synthetic's final evaluation is answered, not declined).
"""

from __future__ import annotations

import numpy as np
import pytest

from fedpriv.privacy.ledger.store import count_releases
from tests.simulate import IN_PROCESS, run_fedpriv

pytestmark = pytest.mark.simulation

DPSGD = {"privacy": "dp-sgd", "num-server-rounds": 2, "local-epochs": 1, "num-clients": 4}
TINY = {"scenario": "digits", "num-clients": 4, "num-server-rounds": 2, "local-epochs": 1}
# every mode of the registry (tests/test_modes_end_to_end.py lists them all), IFCA on GP's
# rotated digits and the zonal placements on zone nodes (the default zonal runtime), each a
# tiny run of its own: the same experiment twice must give the same ε and the same records
EXPERIMENTS = {
    "dp-sgd": DPSGD,
    "none": {**TINY, "privacy": "none"},
    "global-dp": {**TINY, "privacy": "global-dp", "noise-multiplier": 0.5},
    "metric-dp": {**TINY, "privacy": "metric-dp"},
    "adaptive-clip": {**TINY, "privacy": "adaptive-clip", "clipping-norm": 1.0},
    "dp-ftrl": {**TINY, "privacy": "dp-ftrl", "strategy": "fedavg"},
    "client-budgets": {**TINY, "privacy": "client-budgets", "strategy": "fedavg",
                       "clients-per-round": 0, "noise-multiplier": 1.0, "clipping-norm": 1.0,
                       "client-epsilon-groups": "2,5,10"},
    "distributed-dp": {**TINY, "privacy": "distributed-dp", "noise-multiplier": 0.5,
                       "clipping-norm": 1.0},
    "ifca": {**TINY, "scenario": "digits-rotated", "users-per-round": 4,
             "validation-clients": 0, "num-hypotheses": 2},
    **{f"zonal-{placement}": {**TINY, "privacy": "zonal", "noise-placement": placement,
                              "num-zones": 2, "zonal-runtime": "zone-nodes",
                              "noise-multiplier": 0.5, "clipping-norm": 5.0}
       for placement in ("ldp", "hdp", "cdp")},
}  # fmt: skip
FAST: tuple[str, ...] = ()  # no pair in the fast tier (two runs each: ~120 s of its wall)
# the guard tier's pairs (CI: IFCA and a zonal placement, which the issue names); every other
# mode's pair is `slow` only (`make test-all`: 2 runs each, CI's 30 min cannot hold them all)
GUARD = ("dp-sgd", "ifca", "zonal-hdp")
MODEL = "final_weights.npz"
# modes whose nodes release nothing of their own (the server noises, or nobody does)
NO_NODE_LEDGER = ("none", "global-dp", "metric-dp", "adaptive-clip", "dp-ftrl")
SERVER_LEDGER = ("global-dp", "adaptive-clip", "dp-ftrl", "client-budgets")  # server ledgers
NO_FINAL_WEIGHTS = ("ifca",)  # IFCA writes no final_weights.npz: its records are compared


def _run(config: dict, out, *, default_state: bool = True):
    """:func:`tests.simulate.run_fedpriv` on the in-process backend, by default with the
    launcher's own state folders (no ``FEDPRIV_STATE_ROOT``)."""
    return run_fedpriv(config, out, default_state=default_state, extra_args=IN_PROCESS)


def _without_wall_time(rounds: list[dict]) -> list[dict]:
    drop = ("wall", "seconds", "time")
    return [{k: v for k, v in r.items() if not any(d in k for d in drop)} for r in rounds]


def _experiment(name: str):
    if name in FAST:
        return pytest.param(name, id=name)
    marks = (pytest.mark.slow, pytest.mark.guard) if name in GUARD else (pytest.mark.slow,)
    return pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", [_experiment(n) for n in EXPERIMENTS])
def test_the_same_experiment_twice_reports_the_same_epsilon_and_records(name, tmp_path):
    a = _run(EXPERIMENTS[name], tmp_path / "a")
    b = _run(EXPERIMENTS[name], tmp_path / "b")
    assert a[0] == 0 and b[0] == 0, a[3][-2000:] + b[3][-2000:]
    figures_a, figures_b = (run[1].get("privacy_figures") for run in (a, b))
    assert figures_a == figures_b  # ε (and δ, σ) of the run, or none for both
    epsilon = (figures_a or {}).get("epsilon")  # zonal: per level, in its records
    assert epsilon is None or epsilon > 0
    first, second = _without_wall_time(a[2]), _without_wall_time(b[2])
    differ = [
        (r.get("round"), k, r.get(k), q.get(k))
        for r, q in zip(first, second)
        for k in sorted(set(r) | set(q))
        if r.get(k) != q.get(k)
    ]
    assert len(first) == len(second) > 0 and not differ, differ[:5]  # reproducible-noise: bits
    if name not in NO_FINAL_WEIGHTS:
        model_a, model_b = (np.load(tmp_path / run / MODEL) for run in ("a", "b"))
        assert sorted(model_a.files) == sorted(model_b.files) and model_a.files
        for key in model_a.files:  # the final model, bit for bit (the zip's own dates aside)
            assert model_a[key].tobytes() == model_b[key].tobytes(), key
    ledgers = [run[1].get("server_ledger") for run in (a, b)]  # the server's own, if it keeps one
    if name in SERVER_LEDGER:
        assert ledgers[0]["earlier_releases"] == ledgers[1]["earlier_releases"] == 0
        assert ledgers[0]["this_run_epsilon"] == ledgers[1]["this_run_epsilon"] > 0
        assert ledgers[0]["lifetime_epsilon"] == ledgers[0]["this_run_epsilon"]
    for run, out in ((a, tmp_path / "a"), (b, tmp_path / "b")):
        block = run[1]["federation"]
        assert block["state-root"] == str(out / "node-state") and not block["persistent"]
        assert block["earlier_releases"] == 0 and block["figures"] == "this run's"
        assert block["this_run_releases"] == count_releases(out / "node-state")
    assert a[1]["federation"]["this_run_releases"] == b[1]["federation"]["this_run_releases"]
    assert name in NO_NODE_LEDGER or a[1]["federation"]["this_run_releases"] > 0


# guard tier: two runs on one federation (~100 s of the fast tier's 2-worker wall)
@pytest.mark.slow
@pytest.mark.guard
def test_a_federation_dir_keeps_its_ledgers_and_says_so(tmp_path):
    fed = tmp_path / "federation"
    config = {**DPSGD, "federation-dir": str(fed)}
    first = _run(config, tmp_path / "first")
    second = _run(config, tmp_path / "second")
    assert first[0] == 0 and second[0] == 0, first[3][-2000:] + second[3][-2000:]
    released = first[1]["federation"]["this_run_releases"]
    assert released > 0 and not (tmp_path / "first" / "node-state").exists()
    assert f"holds {released} earlier releases" in second[3]
    block = second[1]["federation"]
    assert block["persistent"] and block["earlier_releases"] == released
    assert block["figures"].startswith("lifetime")
    # the nodes' ε is composed over every release their ledgers hold: larger the second time
    assert second[1]["privacy_figures"]["epsilon"] > first[1]["privacy_figures"]["epsilon"]
    # and each node's this-run ε beside its lifetime ε (its rows split at the run's start)
    nodes = {k: v for k, v in block["parties"].items() if "/dp-sgd/" in k}
    assert sum(p["earlier_releases"] for p in nodes.values()) == released
    assert sum(p["this_run_releases"] for p in nodes.values()) == block["this_run_releases"]
    for party in nodes.values():
        if party["earlier_releases"] and party["this_run_releases"]:
            assert party["lifetime_epsilon"] > party["this_run_epsilon"] > 0
    assert "lifetime ε up to" in second[3]


def test_gp_synthetic_with_its_defaults_reports_its_final_metrics(tmp_path):
    rc, summary, _, log = _run({"scenario": "gp-synthetic"}, tmp_path / "gp", default_state=False)
    assert rc == 0, log[-3000:]
    final = summary["final"]
    assert final["declined"] == 0 and final["clients"] == 100 and final["rmse"] > 0


GLOBAL_DP = {"privacy": "global-dp", "num-server-rounds": 2, "num-clients": 4,
             "noise-multiplier": 1.0}  # fmt: skip


# guard tier: two runs on one federation (~75 s of the fast tier's wall)
@pytest.mark.slow
@pytest.mark.guard
def test_the_servers_ledger_gives_this_runs_epsilon_beside_the_lifetime_one(tmp_path):
    """global-dp, z = 1, all 4 of 4 clients (replace-one): 2 rounds are ε 15.46, 4 rounds
    24.38, 5 rounds 28.37. The second run on the same federation-dir reports this run's ε
    as the first did, a larger lifetime ε over the 2 earlier releases, and its lifetime
    server-max-epsilon = 25 stops it before its round 3."""
    fed = tmp_path / "federation"
    first = _run({**GLOBAL_DP, "federation-dir": str(fed)}, tmp_path / "first")
    second_config = {**GLOBAL_DP, "federation-dir": str(fed), "num-server-rounds": 3,
                     "server-max-epsilon": 25.0}  # fmt: skip
    second = _run(second_config, tmp_path / "second")
    assert first[0] == 0 and second[0] == 0, first[3][-2000:] + second[3][-2000:]
    a, b = (run[1]["federation"]["parties"]["server"] for run in (first, second))
    assert a["earlier_releases"] == 0 and a["this_run_releases"] == 2
    assert a["lifetime_epsilon"] == a["this_run_epsilon"]
    assert a["this_run_epsilon"] == pytest.approx(first[1]["privacy_figures"]["epsilon"], rel=1e-9)
    assert (b["earlier_releases"], b["this_run_releases"]) == (2, 2)
    assert b["this_run_epsilon"] == pytest.approx(a["this_run_epsilon"], rel=1e-12)
    assert b["lifetime_epsilon"] == pytest.approx(24.38, abs=0.01)
    assert b["lifetime_epsilon"] > a["lifetime_epsilon"]
    assert "server-max-epsilon 25 would be exceeded at round 3" in second[1]["stopped"]
    assert [r["round"] for r in second[2] if r.get("round", 0) >= 1] == [1, 2]
    assert "holds 0 earlier releases (and 2 of the server)" in second[3]
    assert "this run's ε 15.46 (2 releases), lifetime ε 24.38 (2 earlier releases)" in second[3]
    assert (fed / "server" / "ledger.sqlite3").is_file()


# each budgets client spends its own lifetime budget in the first run (it declines every later
# release): the second run's clients are other nodes (another seed: other data, fresh ledgers)
# whose partitions the server's ledger has charged already
SECOND_RUN = {"client-budgets": {"seed": 4}}


@pytest.mark.slow  # 2 simulations each; tests/test_server_ledger_modes.py covers the ledgers
@pytest.mark.parametrize("name", ["dp-ftrl", "client-budgets"])
def test_a_second_run_on_a_federation_dir_reports_the_servers_lifetime_epsilon(name, tmp_path):
    """DP-FTRL (a row per tree) and client budgets (a row per client and release): the
    second run on the same federation-dir reports its own ε beside a larger lifetime ε, in
    summary.json and on the console (the same ε this run: the same settings)."""
    config = {**EXPERIMENTS[name], "federation-dir": str(tmp_path / "federation")}
    first = _run(config, tmp_path / "first")
    again = {**config, **SECOND_RUN.get(name, {})}
    second = _run(again, tmp_path / "second")
    assert first[0] == 0 and second[0] == 0, first[3][-2000:] + second[3][-2000:]
    a, b = (run[1]["federation"]["parties"]["server"] for run in (first, second))
    assert a["earlier_releases"] == 0 and a["lifetime_epsilon"] == a["this_run_epsilon"] > 0
    assert (b["earlier_releases"], b["this_run_releases"]) == (a["this_run_releases"],) * 2
    assert b["this_run_epsilon"] == pytest.approx(a["this_run_epsilon"], rel=1e-12)
    assert b["lifetime_epsilon"] > max(b["this_run_epsilon"], a["lifetime_epsilon"])
    assert "server   this run's ε" in second[3] and "lifetime ε" in second[3]


def test_a_symlinked_server_state_dir_is_refused_before_the_run(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    config = {**GLOBAL_DP, "server-state-dir": str(tmp_path / "link")}
    rc, summary, _, output = _run(config, tmp_path / "out")
    assert rc == 2 and summary is None
    assert "is a symbolic link" in output and "server-state-dir" in output
    assert not (real / "ledger.sqlite3").exists()
