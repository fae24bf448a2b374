"""``privacy = dp-sgd``: client-side DP-SGD in the standard run (MP §4, untrusted server).

Declared here (``FEATURE``):

- client task ``dp-sgd`` (:func:`fedpriv.scenarios.app.client_tasks.train_dpsgd`): the client
  trains with Poisson-sampled DP-SGD (``fedpriv.clients.dpsgd_client``,
  ``fedpriv.privacy.dpsgd``) and puts its
  example-level ε in the train MetricRecord (``dp-sgd-epsilon``). The client computes ε from
  its own config and its own count of the rounds it trained in (its own release ledger,
  :mod:`fedpriv.privacy.releases`): the server sends no participation count and cannot set the ε a
  client reports.
- privacy mode ``dp-sgd``: :class:`fedpriv.scenarios.dp_sgd.server.DpSgdClients`, a thin
  Message-API wrapper around the stock strategy. It sets ``client-task = "dp-sgd"`` in
  the train config, mirrors how many rounds it asked each client to train (for the
  summary, not sent), and keeps each client's latest ε from its replies (Flower averages
  MetricRecords weighted by num-examples, so the per-client values are read from the
  replies here before delegating). ``round_metrics()`` reports them per partition.
- summary block: summary.json ``privacy = {"mode": "dp-sgd", "epsilon" (headline: the
  largest client's ε), "dp_sgd": {...}}`` with ε per client, δ, the accountant, z and C: the
  clients' own as their replies report them (a deployed node's node config sets them; the
  run config's only where no client reported its own), per client and the weakest.
- a consistency check: ``microbatches`` must be 0 (one example per clip).

The ε is a bound for the batching the clients run: Poisson sampling q = min(1, B/n),
add/remove-one example, PLD/RDP (``fedpriv.privacy.dpsgd``). The server adds no noise: aggregation
is the stock strategy's, on DP-SGD-trained models.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from fedpriv.scenarios.app.privacy_modes import declare
from fedpriv.scenarios.app.task_names import DPSGD_TASK as TASK
from fedpriv.scenarios.app.task_names import OWN_MECHANISM_KEYS
from fedpriv.scenarios.config.feature import Catalog, Feature
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import ServerRun
from fedpriv.scenarios.dp_sgd.keys import KEYS

from fedpriv.privacy.disclosure import unaccounted_channels
from fedpriv.privacy.dpsgd import ACCOUNTANT_TEXT, ADJACENCY_TEXT, SAMPLING_TEXT
from fedpriv.privacy.modes import dp_sgd, mode_of
from fedpriv.reporting.records import PrivacyFigures

DPSGD_MODE = dp_sgd.MODE


def __getattr__(name: str) -> Any:
    """``DpSgdClients`` lives in :mod:`fedpriv.scenarios.dp_sgd.server` (Flower), loaded on use."""
    if name in ("DpSgdClients", "EPSILON_LABEL"):
        from fedpriv.scenarios.dp_sgd import server as dpsgd_server

        return getattr(dpsgd_server, name)
    raise AttributeError(name)


def _wrapper(strategy: Any, run: ServerRun, rng: Any) -> Any:
    """Privacy mode ``dp-sgd``: :class:`fedpriv.scenarios.dp_sgd.server.DpSgdClients` around the
    stock strategy (``rng`` unused: the clients draw their own noise)."""
    del rng, run
    from fedpriv.scenarios.dp_sgd.server import DpSgdClients

    return DpSgdClients(strategy)


def _last_per_client(rounds: list[dict], key: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for record in rounds:
        if isinstance(record.get(key), dict):
            out.update({str(k): v for k, v in record[key].items()})
    return dict(sorted(out.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else kv[0]))


def _own_mechanism(cfg: Mapping[str, Any], rounds: list[dict]) -> dict[str, Any]:
    """z, C and δ the summary reports: the clients' own, from their replies (a deployed node's
    node config decides them; the run config's are the server's guess), else the run
    config's. Several values: the least noise (smallest z), the largest C and δ."""
    z_key, c_key, d_key = OWN_MECHANISM_KEYS
    per_client = {key: _last_per_client(rounds, key) for key in OWN_MECHANISM_KEYS}
    if not per_client[z_key]:
        z, clip = float(cfg["noise-multiplier"]), float(cfg["clipping-norm"])
        return {"z": z, "clip": clip, "delta": float(cfg["dp-delta"]), "sigma_mean": z * clip,
                "source": "run config (no client reported its own)"}  # fmt: skip
    zs, clips = per_client[z_key], per_client[c_key]
    sigmas = [float(zs[p]) * float(clips.get(p, cfg["clipping-norm"])) for p in zs]
    return {
        "z": min(map(float, zs.values())),
        "clip": max(map(float, clips.values()), default=float(cfg["clipping-norm"])),
        "delta": max(map(float, per_client[d_key].values()), default=float(cfg["dp-delta"])),
        "sigma_mean": float(np.mean(sigmas)),
        "source": "the clients' own (their replies)",
        "per_client": {"noise_multiplier": zs, "l2_norm_clip": clips, "delta": per_client[d_key]},
    }


def dpsgd_summary(run: ServerRun, rounds: list[dict]) -> dict:
    """summary.json ``privacy`` block of a dp-sgd run (ε per client, keyed by partition).

    ε per client is the latest figure the client reported (its own accounting); a client
    that was never sampled has ε = 0 (its data was never used). z, C and δ are the clients'
    own as their replies report them (:func:`_own_mechanism`), per client and the weakest.
    """
    cfg, spec = run.record, run.spec
    if spec.mode is not DPSGD_MODE:
        return {}
    never = {str(p): 0.0 for p in range(spec.participation.population)}
    bound = {**never, **_last_per_client(rounds, "dp-sgd-epsilon")}
    finite = [float(v) for v in bound.values() if np.isfinite(float(v))]
    headline = max((float(v) for v in bound.values()), default=None)
    own = _own_mechanism(cfg, rounds)
    figures = PrivacyFigures(
        mode=TASK,
        bound=f"{ADJACENCY_TEXT}; {SAMPLING_TEXT}",
        noise_multiplier=own["z"],
        sigma_mean=own["sigma_mean"],  # the noise std on the summed clipped gradients
        epsilon=headline,
        delta=own["delta"],
    )
    return {
        PrivacyFigures.KEY: figures.to_json(),
        "privacy": {
            "mode": TASK,
            "epsilon": headline,
            "delta": own["delta"],
            "accountant": ACCOUNTANT_TEXT,
            "adjacency": ADJACENCY_TEXT,
            "sampling": SAMPLING_TEXT,
            "unaccounted": unaccounted_channels(spec.mode_name, opted_in=spec.unaccounted_metrics),
            "dp_sgd": {
                "epsilon_per_client": bound,
                "participations_per_client": _last_per_client(rounds, "dp-sgd-participations"),
                "epsilon_max": headline,
                "epsilon_mean": float(np.mean(finite)) if finite else None,
                "delta": own["delta"],
                "noise_multiplier": own["z"],
                "l2_norm_clip": own["clip"],
                "mechanism_source": own["source"],
                **({"per_client": own["per_client"]} if "per_client" in own else {}),
                "batch_size": int(spec.train.batch_size),
                "local_epochs": int(spec.train.local_epochs),
                "sampling": SAMPLING_TEXT,
                "accountant": ACCOUNTANT_TEXT,
            },
        },
    }


def check_microbatches(cfg: Mapping[str, Any], catalog: Catalog) -> None:
    """``microbatches`` must be 0: DP-SGD clips each example (the option went with
    tensorflow-privacy; clipping means of several examples would double the sensitivity)."""
    del catalog
    if mode_of(cfg) is DPSGD_MODE and cfg["microbatches"] != 0:
        raise ConfigError(
            "microbatches", cfg["microbatches"], "0 (DP-SGD clips each example on its own)"
        )


FEATURE = Feature(
    name="dp-sgd",
    description="Client-side DP-SGD (Poisson batches), example-level epsilon per client.",
    keys=KEYS,
    privacy_modes=(declare(DPSGD_MODE, _wrapper),),
    client_tasks=(TASK,),
    summary=dpsgd_summary,
    checks=(check_microbatches,),
)
