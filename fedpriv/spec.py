"""The typed run spec: what the layers below ``scenarios/`` read of a run config.

A run config is a flat mapping of Flower keys (``num-server-rounds``), checked and resolved
by ``fedpriv.scenarios.config.schema``. Nothing below ``scenarios/`` reads that mapping: each party
builds
one frozen :class:`RunSpec` from its own resolved config (the server from its config, each
client and zone node from its own ``run_config`` + ``node_config``) with the same code,
``fedpriv.scenarios.config.specs.run_spec``, and hands typed pieces down (:class:`DataSpec` to the
data
loader, :class:`TrainSpec` to local training, :class:`StrategySpec` to the stock strategy,
the mode's own parameters to its mechanism).

Each field names its config key once, in its metadata (:func:`key`); the builder reads the
keys from there, so a key's name lives in one place below ``scenarios/``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from fedpriv.privacy.participation import Participation

__all__ = [
    "KEY",
    "DataSpec",
    "RunSpec",
    "StrategySpec",
    "TrainSpec",
    "ZoneSpec",
    "config_key",
    "key",
    "keyed_fields",
    "mode_defaults",
]

KEY = "config-key"  # the metadata entry that names a field's run-config key
MODE_DEFAULT = "mode-default"  # a mode's value for a shared key left at "auto"


def key(name: str, *, mode_default: Any = None) -> Any:
    """A dataclass field read from the run-config key ``name`` (no default: a spec is built
    from a resolved config, which holds every key).

    ``mode_default``: on a mode's params field, the value a shared key (``noise-multiplier``,
    ``clipping-norm``) takes for this mode when the config leaves it at ``"auto"``
    (``fedpriv.scenarios.config.schema.resolve``): one key name per idea, one default per mode.
    """
    meta = {KEY: name} if mode_default is None else {KEY: name, MODE_DEFAULT: mode_default}
    return field(metadata=meta)


def mode_defaults(params: type) -> dict[str, Any]:
    """``{config key: value}`` a mode's params class declares for keys left at ``"auto"``."""
    return {
        str(f.metadata[KEY]): f.metadata[MODE_DEFAULT]
        for f in dataclasses.fields(params)
        if MODE_DEFAULT in f.metadata
    }


def keyed_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of spec class ``cls`` that are read from one config key each."""
    return [f for f in dataclasses.fields(cls) if KEY in f.metadata]


def config_key(cls: type, name: str) -> str:
    """The run-config key of field ``name`` of spec class ``cls``."""
    for f in dataclasses.fields(cls):
        if f.name == name and KEY in f.metadata:
            return str(f.metadata[KEY])
    raise KeyError(f"{cls.__name__}.{name} is not read from a config key")


@dataclass(frozen=True)
class DataSpec:
    """The federated data: what :func:`fedpriv.data.load_federated` is called with.

    Hashable: the data loader caches one :class:`fedpriv.data.FederatedData` per spec.
    """

    dataset: str = key("dataset")
    partition: str = key("partition")
    num_clients: int = key("num-clients")
    seed: int = key("seed")
    data_path: str = key("data-path")
    data_format: str = key("data-format")
    dirichlet_alpha: float = key("dirichlet-alpha")
    image_size: int = key("image-size")


@dataclass(frozen=True)
class TrainSpec:
    """Local Keras training of one client (``clients/``)."""

    model: str = key("model")
    optimizer: str = key("optimizer")
    learning_rate: float = key("learning-rate")
    batch_size: int = key("batch-size")
    local_epochs: int = key("local-epochs")
    strategy: str = key("strategy")
    proximal_mu: float = key("proximal-mu")
    seed: int = key("seed")
    jit_compile: bool = key("jit-compile")
    mixed_precision: bool = key("mixed-precision")
    op_determinism: bool = key("op-determinism")

    @property
    def fedprox_mu(self) -> float:
        """μ of FedProx's proximal term ``μ/2·‖w − w_t‖²``; 0 for every other strategy."""
        return float(self.proximal_mu) if self.strategy == "fedprox" else 0.0


@dataclass(frozen=True)
class StrategySpec:
    """The stock Flower strategy and its server-side hyper-parameters."""

    strategy: str = key("strategy")
    server_learning_rate: float = key("server-learning-rate")
    server_momentum: float = key("server-momentum")
    eta: float = key("eta")
    eta_l: float = key("eta-l")
    beta_1: float = key("beta-1")
    beta_2: float = key("beta-2")
    tau: float = key("tau")
    proximal_mu: float = key("proximal-mu")
    accept_failures: bool = key("accept-failures")


@dataclass(frozen=True)
class ZoneSpec:
    """Where the zones are and which level each zone's noise is at (HDP paper §III)."""

    num_zones: int = key("num-zones")
    assignment: str = key("zone-assignment")
    zone_map: str = key("zone-map")
    placement: str = key("noise-placement")
    hdp_fraction: float = key("hdp-fraction")
    ldp_fraction: float = key("ldp-fraction")
    runtime: str = key("zonal-runtime")


@dataclass(frozen=True)
class RunSpec:
    """One party's resolved run, typed and frozen.

    ``mode`` is the registered :class:`fedpriv.privacy.modes.base.Mode` object and ``params`` its
    typed parameters (``mode.params``); ``kind`` the scenario kind (``standard``, ``ifca``,
    ``zonal``, ...). Derive a variant with :func:`dataclasses.replace`.
    """

    mode: Any
    params: Any
    kind: str
    participation: Participation
    data: DataSpec
    train: TrainSpec
    strategy: StrategySpec
    zones: ZoneSpec
    scenario: str = key("scenario")
    seed: int = key("seed")
    rounds: int = key("num-server-rounds")
    output_dir: str = key("output-dir")
    reproducible_noise: bool = key("reproducible-noise")
    unaccounted_metrics: bool = key("unaccounted-metrics")
    dp_weighting: str = key("dp-weighting")
    invalid_update: str = key("invalid-update")
    attack: str = key("attack")
    attack_factor: float = key("attack-factor")
    malicious_clients: str = key("malicious-clients")
    audit_canaries: int = key("audit-canaries")
    audit_canary_probability: float = key("audit-canary-probability")
    pretrain_epochs: int = key("pretrain-epochs")
    evaluate_in_train: Any = key("evaluate-in-train")  # "auto" | True | False
    evaluate_sampled_only: bool = key("evaluate-sampled-only")
    microbatches: int = key("microbatches")
    run_plan: str = key("run-plan")  # a plan of many runs in one simulation ('' for one run)

    @property
    def mode_name(self) -> str:
        """The registered name of this run's privacy mode."""
        return str(self.mode.name)
