"""``fedpriv epsilon``'s core: privacy figures from a config alone, TF-free."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from fedpriv.scenarios.config.specs import run_spec

from fedpriv.privacy.accounting import dp_epsilon
from fedpriv.privacy.accounting.planning import PlanError, headline_epsilon, privacy_plan


def test_global_dp_plan_matches_the_accountant_and_names_what_it_bounds() -> None:
    cfg = {
        "privacy": "global-dp", "noise-multiplier": 1.0, "num-clients": 100,
        "clients-per-round": 10, "num-server-rounds": 30, "dp-delta": 1e-5,
    }  # fmt: skip
    plan = privacy_plan(run_spec(cfg))
    want = dp_epsilon(1.0, rounds=30, sampled=10, population=100, delta=1e-5)
    assert plan["epsilon"] == pytest.approx(want.epsilon)
    assert plan["delta"] == 1e-5 and "replace-one" in plan["adjacency"]
    assert "without replacement" in plan["sampling"] and plan["accountant"]
    series = plan["per_round"]
    assert series["round"] == list(range(1, 31))
    assert series["epsilon"][-1] == pytest.approx(plan["epsilon"])
    assert all(a < b for a, b in zip(series["epsilon"], series["epsilon"][1:]))
    json.dumps(plan)  # one JSON object
    poisson = privacy_plan(run_spec({**cfg, "client-sampling": "poisson"}))
    assert "add/remove" in poisson["adjacency"] and poisson["epsilon"] < plan["epsilon"]


def test_headline_for_audits_and_modes_without_a_guarantee() -> None:
    cfg = {"privacy": "global-dp", "noise-multiplier": 2.0, "num-clients": 20,
           "num-server-rounds": 20}  # fmt: skip
    assert headline_epsilon(run_spec(cfg)) == pytest.approx(28.373, abs=1e-3)
    with pytest.raises(PlanError, match="metric-dp"):
        headline_epsilon(run_spec({"privacy": "metric-dp"}))
    assert headline_epsilon(run_spec({"privacy": "none"})) == math.inf
    dpsgd = {"privacy": "dp-sgd", "num-server-rounds": 3, "local-epochs": 1, "batch-size": 10,
             "noise-multiplier": 1.0}  # fmt: skip
    plan = privacy_plan(run_spec(dpsgd), examples_per_client=200)
    from fedpriv.privacy.dpsgd import client_epsilon

    want = client_epsilon(num_examples=200, batch_size=10, local_epochs=1, participations=3,
                          noise_multiplier=1.0, delta=1e-5)  # fmt: skip
    assert plan["epsilon"] == pytest.approx(want.epsilon)  # the client's Poisson ε
    assert privacy_plan(run_spec(dpsgd))["epsilon"] is None


def test_plan_imports_no_tensorflow_ray_or_matplotlib() -> None:
    code = (
        "import sys; from fedpriv.privacy.accounting.planning import privacy_plan; "
        "from fedpriv.scenarios.config.specs import run_spec; "
        "privacy_plan(run_spec({'privacy': 'global-dp', 'noise-multiplier': 1.0, "
        "'num-clients': 5, 'num-server-rounds': 2})); "
        "print([m for m in ('tensorflow', 'ray', 'matplotlib', 'flwr') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("cfg", "examples"),
    [
        ({"privacy": "global-dp", "num-clients": 20, "clients-per-round": 5,
          "num-sampled-clients": 4, "num-server-rounds": 6}, None),
        ({"privacy": "global-dp", "num-clients": 6, "clients-per-round": 3,
          "dp-weighting": "examples", "num-server-rounds": 4}, None),
        ({"privacy": "dp-sgd", "num-server-rounds": 3, "batch-size": 10}, 200),
        ({"scenario": "hdp-digits", "num-server-rounds": 4}, None),
    ],
)  # fmt: skip
def test_epsilon_of_z_is_the_plan_of_the_spec_at_z(cfg, examples) -> None:
    """The target search's ε(z) equals the plan of the spec whose params' noise field is z
    (``Mode.with_noise``), for every mode with an ε to target."""
    spec = run_spec(cfg)
    epsilon_of = spec.mode.epsilon_of_z(spec, examples)
    field = spec.mode.noise_field
    for z in (0.7, 1.3, 4.0):
        at_z = spec.mode.with_noise(spec, z)
        assert getattr(at_z.params, field) == z and at_z.participation == spec.participation
        plan = privacy_plan(at_z, examples_per_client=examples)
        assert epsilon_of(z) == pytest.approx(float(plan["epsilon"]), rel=1e-12)
    assert epsilon_of(1.3) > epsilon_of(4.0)  # more noise, smaller ε
