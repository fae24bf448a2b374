"""Feature ``attacks``: CIA scenarios, keys, runner; ``fedpriv attack`` (in attack_commands).

Scenarios (kind ``cia``, MP §5 and §7.4):

- ``cia`` — synthetic-mri (embedded), MP CNN and training settings, partition ``cia`` (MP
  Table 8, 3 clients), attacker = partition 0, target = partition 2, 1 round of
  ``cia-local-epochs`` (20) local epochs;
- ``cia-alzheimer`` — the same on the Alzheimer MRI data from ``data-path``;
- ``cia-digits`` — a fast stand-in (digits, 3 IID clients, digits CNN) for tests and demos.

The ``cia`` runner is the standard run (``fedpriv.scenarios.app.engine.build_strategy``: stock
strategy -> the privacy mode's wrapper -> update validation -> round recorder) with
``local-epochs = cia-local-epochs``, plus the attacker's computation after every round. The
attacker's computation is simulated *in the server process* for convenience, using only what
the attacker has: the global model it receives, its shadow set (a stratified
``shadow-fraction`` of the target's training split) and the aggregated evaluation loss the
server sends back. With ``cia-absent-run = true`` the same rounds run again from the same
initial weights with the target left out of training and evaluation (its node stays idle),
the counterfactual MP does not report. Outputs: the standard run outputs in ``output-dir``
(target present) and ``output-dir/target-absent``, and ``output-dir/cia.json``.

Resume: both phases checkpoint every round; after a kill the same command skips
a finished phase and continues the other from its last completed round. The run is
finished when ``cia.json`` holds this config (``cia_complete``), not when the present
phase's summary.json exists.

``fedpriv attack cia | dlg | membership`` (:mod:`fedpriv.scenarios.attacks.commands`) writes
Markdown
tables and PNGs (see ``--help``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from fedpriv.scenarios.attacks.commands import ATTACK_COMMAND, CIA_KIND, cia_complete
from fedpriv.scenarios.attacks.keys import KEYS
from fedpriv.scenarios.config.feature import Catalog, Feature, Scenario
from fedpriv.scenarios.config.node_spec import CIA_ABSENT_DIR  # the folder the nodes expect too
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import ServerRun
from fedpriv.scenarios.standard.feature import MP_TRAINING

_CIA_COMMON = {
    "strategy": "fedavg",
    "privacy": "none",
    "num-clients": 3,
    "num-server-rounds": 1,
    "attacker-client": 0,
    "target-client": 2,
    "shadow-fraction": 0.1,
    "cia-local-epochs": 20,
    "unaccounted-metrics": True,  # MP's CIA reads the aggregated distributed loss
}

SCENARIOS = (
    Scenario(
        "cia",
        CIA_KIND,
        "Client inference attack (MP §7.4) on synthetic-mri: partition cia (MP Table 8), "
        "attacker 0, target 2, 1 round of 20 local epochs, plus a target-absent run.",
        {**MP_TRAINING, "dataset": "synthetic-mri", "partition": "cia", **_CIA_COMMON},
    ),
    Scenario(
        "cia-alzheimer",
        CIA_KIND,
        "Client inference attack (MP §7.4) on the Alzheimer MRI data from data-path.",
        {**MP_TRAINING, "dataset": "alzheimer", "partition": "cia", **_CIA_COMMON},
    ),
    Scenario(
        "cia-digits",
        CIA_KIND,
        "Fast CIA stand-in: digits, 3 IID clients, digits CNN (for tests and demos).",
        {
            "dataset": "digits",
            "partition": "iid",
            "model": "digits-cnn",
            "optimizer": "adam",
            "learning-rate": 3e-3,
            "batch-size": 16,
            **_CIA_COMMON,
            "num-server-rounds": 2,
        },
    ),
)


def check_cia_config(cfg: Mapping[str, Any], catalog: Catalog) -> None:
    """Cross-key checks of kind ``cia``: roles are distinct partition ids < num-clients."""
    if cfg.get("scenario") not in catalog.scenarios or catalog.kind(cfg) != CIA_KIND:
        return
    n = int(cfg["num-clients"])
    for key in ("target-client", "attacker-client"):
        if not 0 <= int(cfg[key]) < n:
            raise ConfigError(
                key,
                cfg[key],
                f"a partition id in [0, {n - 1}] (num-clients = {n}); "
                f"there is no client {cfg[key]}",
            )
    if int(cfg["attacker-client"]) == int(cfg["target-client"]):
        raise ConfigError(
            "attacker-client",
            cfg["attacker-client"],
            f"a client other than target-client = {cfg['target-client']}",
        )


# --- the ServerApp runner (imports Flower lazily: the CLI does not need it) ---------------


def _absent_grid(base: Any, absent: set[int]) -> Any:
    """``base`` (the run's :class:`fedpriv.scenarios.nodes.federation.PartitionGrid`, or its
    ``VirtualGrid`` over worker SuperNodes) as a grid that never offers the ``absent``
    partitions; ``base`` itself is left as it is."""

    class AbsentClientsGrid(type(base)):
        """The run's grid without the ``absent`` partitions."""

        def offer(self, partitions: Optional[Sequence[int]]) -> None:
            parts = sorted(self.partition_to_node) if partitions is None else partitions
            self._offered = sorted(p for p in parts if p not in self.absent)

    grid = AbsentClientsGrid.__new__(AbsentClientsGrid)  # base's state, shallow
    grid.__dict__.update(base.__dict__)
    grid.absent = set(absent)
    grid.online = set(base.online) - grid.absent
    grid.offer(None)
    return grid


def _attacker_view(attacker):
    """Extra evaluation: what the attacker computes from the global model of each round."""

    def observe(server_round: int, weights: list, record: dict) -> dict:
        agg = record.get("distributed", {}).get("loss") if server_round else None
        return {
            "cia": {**attacker.observe(weights, agg), "test_loss": record["server"].get("loss")}
        }

    return observe


def _strategy_config(cfg: Mapping[str, Any], absent: set[int]) -> dict[str, Any]:
    """The config the strategy (and its privacy wrapper) is built from in a phase.

    With clients absent, a DP wrapper's m (``num-sampled-clients``, when it is 0 = "the
    clients sampled per round") is the number of clients that actually take part, so the
    target-absent run adds the noise a server with those participants would add.
    """
    out = dict(cfg)
    if (
        absent
        and int(out.get("num-sampled-clients", -1)) == 0
        and not int(out["clients-per-round"])
    ):
        out["num-sampled-clients"] = int(out["num-clients"]) - len(absent)
    return out


def _run_phase(
    grid, run: ServerRun, data, attacker, absent: set[int], out_dir: str, catalog: Catalog
) -> dict:
    """One standard run (target present or absent) with the attacker observing each round.

    Resumable: each phase checkpoints every round in its own directory; a phase whose
    summary.json exists is done (its rounds are read back), a killed phase continues after
    its last completed round (``engine.train_run``; the attacker holds no state).
    """
    from fedpriv.scenarios.app.engine import RunHooks, train_run

    from fedpriv.reporting.runlog import read_rounds

    t0 = time.time()
    if (Path(out_dir) / "summary.json").is_file():  # phase finished before a kill
        rounds = read_rounds(out_dir)
        return {"rounds": [{"round": r["round"], **r["cia"]} for r in rounds], "wall_seconds": 0}

    def summary_extra(rounds: list[dict]) -> dict:
        per_round = [{"round": r["round"], **r["cia"]} for r in rounds]
        return {"cia": {"absent": sorted(absent), "rounds": per_round}}

    outcome = train_run(
        _absent_grid(grid, absent),
        run.variant({"output-dir": out_dir}),
        data,
        catalog,
        strategy_run=run.variant(_strategy_config(run.record, absent)),
        hooks=RunHooks(extra_evaluation=_attacker_view(attacker), summary_extra=summary_extra),
        resumable=True,
    )
    per_round = [{"round": r["round"], **r["cia"]} for r in outcome.rounds]
    return {"rounds": per_round, "wall_seconds": time.time() - t0}


def run_cia(grid, run: ServerRun, catalog: Catalog) -> None:
    """ServerApp runner of kind ``cia`` (module docstring)."""

    from fedpriv.clients.keras_client import federated_data, model_for, predict_proba
    from fedpriv.scenarios.nodes.virtual_grid import discover_federation

    from fedpriv.attacks.cia import CIAAttacker, check_cia_roles, shadow_indices
    from fedpriv.seeds import derive_seed

    t0 = time.time()
    run = run.variant({"local-epochs": int(run.record["cia-local-epochs"])})
    cfg, spec = run.record, run.spec  # the record: the attack's own keys
    n = spec.participation.population
    attacker_id, target_id = check_cia_roles(
        attacker=cfg["attacker-client"], target=cfg["target-client"], num_clients=n
    )
    data = federated_data(spec.data)
    target = data.clients[target_id]
    idx = shadow_indices(
        target.y_train,
        float(cfg["shadow-fraction"]),
        seed=derive_seed(int(spec.seed), "cia-shadow", target_id),
    )
    model = model_for(spec.train, data)
    attacker = CIAAttacker(
        lambda w, x: predict_proba(model, w, x),
        x_shadow=target.x_train[idx],
        y_shadow=target.y_train[idx],
        x_nonmember=target.x_test,
        y_nonmember=target.y_test,
        x_members=target.x_train,
        y_members=target.y_train,
    )
    pgrid = discover_federation(grid, run)  # one SuperNode per client, or worker SuperNodes
    out = Path(spec.output_dir)
    present = _run_phase(pgrid, run, data, attacker, set(), str(out), catalog)
    absent = (
        _run_phase(pgrid, run, data, attacker, {target_id}, str(out / CIA_ABSENT_DIR), catalog)
        if cfg["cia-absent-run"]
        else {"rounds": []}
    )
    info = {
        "dataset": spec.data.dataset,
        "partition": spec.data.partition,
        "attacker": attacker_id,
        "target": target_id,
        "shadow_fraction": float(cfg["shadow-fraction"]),
        "n_shadow": int(len(idx)),
        "n_nonmember": int(len(target.x_test)),
        "n_target_train": int(len(target.x_train)),
        "local_epochs": int(spec.train.local_epochs),
        "seed": int(spec.seed),
        "cia_reading": data.info.get("cia_reading", ""),
        "simulated": "the attacker's computation runs in the server process with only the "
        "global model, the shadow set and the aggregated loss",
    }
    doc = {
        "strategy": spec.strategy.strategy,
        "privacy": spec.mode_name,
        "info": info,
        "present": present["rounds"],
        "absent": absent["rounds"],
        "wall_seconds": time.time() - t0,
        "config": {k: v for k, v in cfg.items()},
    }
    from fedpriv.reporting.runlog import to_jsonable

    (out / "cia.json").write_text(json.dumps(to_jsonable(doc), indent=2, sort_keys=True))
    first = next((r for r in present["rounds"] if r["round"] == 1), {})
    print(
        f"fedpriv cia: round 1 difference {first.get('difference_pct')} % "
        f"(aggregated {first.get('loss_aggregated')}, shadow {first.get('loss_shadow')})",
        flush=True,
    )


FEATURE = Feature(
    name="attacks",
    description="Client inference attack runs (MP); DLG and membership inference reports.",
    keys=KEYS,
    scenarios=SCENARIOS,
    runners={CIA_KIND: run_cia},
    checks=(check_cia_config,),
    commands=(ATTACK_COMMAND,),
    completion={CIA_KIND: cia_complete},
)
