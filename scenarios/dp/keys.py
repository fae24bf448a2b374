"""Run-config keys of the DP wrappers, declared in the feature.

Privacy modes: ``global-dp`` (server-side fixed clipping, ``σ = z·C/m``, SPEC §3.1) and
``metric-dp`` (``σ = z·C/(m·d)``, SPEC §3.2). C = 5 (MP's). z: global DP 1 (DP-FedAvg's
scale; MP's 0.01 protects nothing: docs/privacy.md, "What an ε protects"), adaptive clipping
1 and DP-FTRL 2 (each near ε = 10 in a cross-device federation: their modules), metric DP
MP's 0.01; the MP scenarios set MP's z = 0.01 themselves.

``distance-on`` defaults to ``clipped`` (d <= 2C/sqrt(L), so no client can push sigma
below z*sqrt(L)/(2m)); the MP scenarios choose the authors' ``raw`` explicitly.
``client-sampling``, ``dp-weighting`` and ``unaccounted-metrics``: see docs/privacy.md.

``min-distance`` (the floor of metric DP's d) defaults to 1e-6: far below any distance two
trained models have (d is a mean over layers of Frobenius norms; measured on the default
digits run, seed 0: d = 0.41–0.93 per round), so the floor only acts when d is undefined
(one client) or the models coincide — and then it adds the large noise ``z·C/(m·1e-6)``
(σ = 5e4 with MP's z = 0.01, C = 5, m = 1: the model is destroyed, not leaked), the
conservative reading of ``σ → ∞`` as ``d → 0``, instead of dividing by zero.

The default ``digits`` scenario runs ``metric-dp`` around FedAvg with these MP values
(z = 0.01, C = 5, m = 4: σ = 0.0125/d ≈ 0.013–0.03 per round) and reaches 0.989 final
test accuracy (seed 0, 8 rounds).
"""

from fedpriv.scenarios.config.schema import AUTO, boolean, choice, integer, key, real, text
from fedpriv.scenarios.distributed_dp.keys import KEYS as DISTRIBUTED_KEYS

KEYS = (
    key(
        "noise-multiplier",
        AUTO,
        real(0),
        "a float >= 0 (auto = the mode's)",
        "z of the mode's Gaussian: global DP sigma = z*C/m, metric DP z*C/(m*d), DP-SGD z*C "
        "on a batch's summed gradients, zonal sigma_i = z*C/(q*W_i); auto: global DP 1 "
        "(DP-FedAvg), adaptive clipping 1 (as global DP), DP-FTRL 2 (epsilon 9.0 with 100 "
        "clients, 20 a round, 20 rounds), metric DP 0.01 (MP), DP-SGD 1.1 (Abadi et al.), "
        "zonal 0.5 (HDP)",
        auto=0.01,
    ),
    key(
        "clipping-norm",
        AUTO,
        real(0, lo_open=True),
        "a float > 0 (auto = the mode's)",
        "C: flat L2 bound of a client's update (global/metric DP, zonal) or of one example's "
        "gradient (DP-SGD); auto: global/metric DP 5 (MP), DP-SGD 1, zonal 0.5 (HDP)",
        auto=5.0,
    ),
    key(
        "num-sampled-clients",
        0,
        integer(0),
        "an integer >= 0 (0 = clients sampled per round)",
        "m of sigma = z*C/m",
    ),
    key(
        "distance-on",
        "clipped",
        choice(("raw", "clipped")),
        "raw | clipped",
        "metric DP: d on clipped models (paper text; sigma >= z*sqrt(L)/(2m)) or raw ones "
        "(authors' code, no floor)",
    ),
    key(
        "min-distance",
        1e-6,
        real(0, lo_open=True),
        "a float > 0",
        "metric DP: floor of d (used when < 2 clients report or d is below it)",
    ),
    key(
        "dp-delta",
        1e-5,
        real(0, 1, lo_open=True, hi_open=True),
        "a float in (0, 1)",
        "delta at which epsilon is reported (every mode: global DP, DP-SGD, zonal)",
    ),
    key(
        "client-sampling",
        "fixed",
        choice(("fixed", "poisson")),
        "fixed | poisson",
        "clients-per-round of num-clients without replacement (replace-one accounting) or "
        "each client independently with q = clients-per-round/num-clients (add/remove)",
    ),
    key(
        "dp-weighting",
        "uniform",
        choice(("uniform", "examples")),
        "uniform | examples",
        "DP modes: aggregate the clipped updates uniformly, or by num-examples (accounted by "
        "the largest weight, z/(m*w_max), with per-client epsilon)",
    ),
    key(
        "unaccounted-metrics",
        False,
        boolean,
        "true | false",
        "opt-in: clients also send metrics no accountant covers (train-loss, norms, "
        "evaluation metrics, IFCA final evaluation); listed in summary privacy.unaccounted",
    ),
    key(
        "max-epsilon",
        0.0,
        real(0),
        "a float >= 0 (0 = no budget)",
        "global DP: stop before a round whose charge would push epsilon past this budget "
        "(summary.json stopped says why); DP-SGD: each client's own lifetime budget over all "
        "its runs (it refuses a participation past it); a zone node (zone-nodes runtime): its "
        "own lifetime budget over all its releases",
    ),
    key(
        "server-max-epsilon",
        0.0,
        real(0),
        "a float >= 0 (0 = no budget)",
        "global-dp, adaptive-clip, dp-ftrl (its trees), client-budgets (the largest client's): "
        "the server's lifetime budget over every run of its ledger (server-state-dir): a "
        "release that would push the composition of the stored events past it is not made "
        "and the run ends (summary.json stopped says why)",
    ),
    key(
        "server-state-dir",
        "",
        text,
        "a directory path ('' = a simulation's own: <federation-dir>/server, else "
        "<output-dir>/server-state; a deployment: none)",
        "the server's state folder (its own user's, 0700): its release ledger across runs",
    ),
    # distributed DP's keys (fedpriv.scenarios.distributed_dp.keys): a node knows the keys of
    # this module (fedpriv.scenarios.config.node_spec.KEY_MODULES)
    *DISTRIBUTED_KEYS,
)
