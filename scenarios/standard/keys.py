"""Run-config keys of the ``standard`` feature: the core keys every run has (SPEC §7).

Declarations only (``fedpriv.scenarios.config.schema`` checks), so that a ClientApp node can
resolve its own
config with the same key table as the server (:mod:`fedpriv.scenarios.config.node_spec`) without
importing
the server-side feature module :mod:`fedpriv.scenarios.standard.feature`.
"""

from __future__ import annotations

from fedpriv.scenarios.config.schema import boolean, choice, integer, key, real, text

from fedpriv.data import DATASETS
from fedpriv.names import MODELS, STRATEGIES

PARTITIONS = (
    "iid",
    "dirichlet",
    "rotation",
    "homogeneous",
    "non-iid",
    "cia",
    "gp-clusters",
    "bootstrap",
    "writer",
)


def _one_of(options: tuple[str, ...]) -> str:
    return "one of " + " | ".join(options)


KEYS = (
    key("scenario", "digits", text, "a registered scenario name (see `fedpriv scenarios`)"),
    key("strategy", "fedavg", choice(STRATEGIES), _one_of(STRATEGIES)),
    key("privacy", "none", text, "a privacy mode (see `fedpriv keys`)"),
    key("seed", 0, integer(0, 2**31 - 1), "an integer in [0, 2^31-1]"),
    key(
        "reproducible-noise",
        False,
        boolean,
        "true | false",
        "derive DP noise and client sampling from seed (tests, papers; labelled); "
        "default false: OS entropy",
    ),
    key("num-server-rounds", 5, integer(1, 10_000), "an integer in [1, 10000]"),
    key("num-clients", 4, integer(1, 100_000), "an integer >= 1 (= num-supernodes)"),
    key("clients-per-round", 0, integer(0), "an integer >= 0 (0 = all clients)"),
    key("local-epochs", 1, integer(1, 10_000), "an integer in [1, 10000]"),
    key("batch-size", 32, integer(1), "an integer >= 1"),
    key("learning-rate", 1e-3, real(0, lo_open=True), "a float > 0"),
    key("optimizer", "adam", choice(("adam", "sgd")), "adam | sgd"),
    key("model", "digits-cnn", choice(MODELS), _one_of(MODELS)),
    key("dataset", "digits", choice(DATASETS), _one_of(DATASETS)),
    key("partition", "iid", choice(PARTITIONS), _one_of(PARTITIONS)),
    key("dirichlet-alpha", 0.5, real(0, lo_open=True), "a float > 0"),
    key("data-path", "", text, "a path to a local dataset ('' for embedded data)"),
    key(
        "data-format",
        "auto",
        choice(("auto", "imagefolder", "parquet")),
        "auto | imagefolder | parquet",
    ),
    key(
        "output-dir",
        "",
        text,
        "a directory path ('' = runs/<scenario>-<strategy>-<privacy>-s<seed>)",
    ),
    key(
        "federation-dir",
        "",
        text,
        "a directory path ('' = a fresh federation per run: the simulated nodes' ledgers in "
        "<output-dir>/node-state, the server's in <output-dir>/server-state)",
    ),
    key("proximal-mu", 0.1, real(0), "a float >= 0"),
    key("server-learning-rate", 1.0, real(0, lo_open=True), "a float > 0"),
    key("server-momentum", 0.5, real(0, 1, hi_open=True), "a float in [0, 1)"),
    key("eta", 1e-2, real(0, lo_open=True), "a float > 0"),
    key("eta-l", 0.0316, real(0, lo_open=True), "a float > 0"),
    key("beta-1", 0.9, real(0, 1, hi_open=True), "a float in [0, 1)"),
    key("beta-2", 0.99, real(0, 1, hi_open=True), "a float in [0, 1)"),
    key("tau", 1e-3, real(0, lo_open=True), "a float > 0"),
    key("pretrain-epochs", 1, integer(0, 1000), "an integer in [0, 1000]"),
    key("accept-failures", False, boolean, "true | false"),
    key("invalid-update", "drop", choice(("drop", "fail")), "drop | fail"),
    key("verbose", False, boolean, "true | false"),
)
