"""The ``peers`` rows of ``make bench``: fedpriv beside vanilla Flower, pfl-research and two
floors on the same trainings, side by side in one invocation (``--only peers``).

Workloads (digits, IID, 5 local epochs, batch 8, digits-mlp, SGD 0.02):

- **A**: 100 clients, all trained every round, 20 rounds (2,000 client trainings);
- **B**: A with server-side Gaussian DP (``global-dp``: clip C = 5, z = 1.0, SPEC §3.1) and 20
  clients a round;
- **scale**: 1,000 clients, 100 a round, 5 rounds.

``--quick`` runs 2 rounds with a fifth of the clients (and of the clients a round). Each
system runs in a fresh process, start-up included, its process tree's resident memory sampled
every 0.1 s:

- fedpriv: ``fedpriv run`` (worker SuperNodes, the default), and on the in-process backend
  (``--federation local-in-process``: no Ray, every ClientApp in the simulation's process);
- the Keras floor (:mod:`bench.tf_floor`) and the numpy floor (:mod:`bench.numpy_floor`);
- vanilla Flower 1.42 (``bench/peers/flower_app``: the quickstart's Keras ClientApp and
  FedAvg ServerApp on the simulation engine, one SuperNode per client);
- pfl 0.6.0 (``bench/peers/pfl_peer.py`` in ``.venv-peers``, ``make bench-peers-env``), on
  Keras 3 and with ``TF_USE_LEGACY_KERAS=1`` (tf-keras): the variables its FedAvg aggregates.

Every system reads the shards ``fedpriv.data.load_federated`` makes with the run's seed (the
peers from an .npz written first). A peer that is missing or fails gives one line
``skipped: <why>`` and the row goes on. Start-up = first round's end − one round (the mean
round after the first); per round = that mean.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from functools import partial
from pathlib import Path

from bench.bench_speed import CROSS_DEVICE, _env, fedpriv_run, monitored_run
from bench.bench_virtual import slope

ROOT = Path(__file__).resolve().parent.parent
PEERS_PYTHON = ROOT / ".venv-peers" / "bin" / "python"
GIB = 2**30
DP = {"privacy": "global-dp", "noise-multiplier": 1.0, "clipping-norm": 5.0}
WORKLOADS = {
    "A": dict(CROSS_DEVICE),
    "B": dict(CROSS_DEVICE, **{"clients-per-round": 20}, **DP),
    "scale": dict(CROSS_DEVICE, **{"num-clients": 1000, "clients-per-round": 100}),
}
WORKLOADS["scale"]["num-server-rounds"] = 5
QUICK_SHRINK = 5


def workload(name: str, quick: bool) -> dict:
    """The run-config values of workload ``name`` (``--quick``: 2 rounds, the clients and the
    clients a round divided by 5)."""
    values = dict(WORKLOADS[name])
    if quick:
        values["num-server-rounds"] = 2
        values["num-clients"] = int(values["num-clients"]) // QUICK_SHRINK
        values["clients-per-round"] = int(values["clients-per-round"]) // QUICK_SHRINK
    return values


def write_shards(cfg: dict, path: Path) -> Path:
    """The run's shards as an .npz: ``x{k}``, ``y{k}`` (train), ``xt{k}``, ``yt{k}`` (test)
    per client and ``x_test``, ``y_test`` (the server's)."""
    import numpy as np

    from fedpriv.data import load_federated

    data = load_federated(
        cfg["dataset"],
        partition=cfg["partition"],
        num_clients=int(cfg["num-clients"]),
        seed=int(cfg["seed"]),
    )
    arrays = {"x_test": data.x_test, "y_test": data.y_test}
    for k, c in enumerate(data.clients):
        arrays.update({f"x{k}": c.x_train, f"y{k}": c.y_train})
        arrays.update({f"xt{k}": c.x_test, f"yt{k}": c.y_test})
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)
    return path


def peer_settings(cfg: dict, shards: Path, stamps: Path) -> dict:
    """The settings the Flower and pfl peers read (their module docs)."""
    keys = ("num-clients", "clients-per-round", "local-epochs", "batch-size", "learning-rate")
    keys += ("privacy", "noise-multiplier", "clipping-norm", "seed")
    out = {k: cfg[k] for k in keys}
    out.update(rounds=int(cfg["num-server-rounds"]), shards=str(shards), stamps=str(stamps))
    return out


def timing(wall: float, stamps: list[float]) -> dict:
    """Per round (mean gap after round 1; the only round when there is one) and start-up
    (round 1's end − one round), from round-end stamps in seconds since the start."""
    per_round = slope([0.0, *stamps]) if len(stamps) > 1 else (stamps[0] if stamps else wall)
    start = stamps[0] - per_round if stamps else float("nan")
    return {"wall": wall, "per_round": per_round, "startup": start}


def run_fedpriv(values: dict, tmp: Path, federation: str = "local-simulation") -> dict:
    """``fedpriv run`` (fresh process): timing, peak RSS, final accuracy."""
    run = fedpriv_run(values, tmp, watch_rounds=True, interval=0.1, federation=federation)
    stamps = run["stamps"][1:]  # the round-0 line (initial evaluation) comes first
    out = timing(run["wall"], stamps)
    return dict(out, rss=run["peak_rss"], accuracy=run["summary"]["final"]["accuracy"])


def run_floor(module: str, cfg: dict) -> dict:
    """A floor (``bench.tf_floor`` | ``bench.numpy_floor``) in a fresh process."""
    cmd = [sys.executable, "-m", module, json.dumps(dict(cfg, **{"floor-client-eval": True}))]
    res = monitored_run(cmd, None, _env(), 0.1)
    line = json.loads(res["output"].strip().splitlines()[-1])
    out = timing(res["wall"], line["round_stamps"])
    return dict(out, rss=res["peak_rss"], accuracy=line["accuracy"])


def run_flower(cfg: dict, shards: Path, tmp: Path) -> dict:
    """The vanilla-Flower peer (``bench/peers/flower_app``) in a fresh process."""
    tmp.mkdir(parents=True, exist_ok=True)
    stamps_file, settings = tmp / "flower-stamps.json", tmp / "flower.json"
    stamps_file.unlink(missing_ok=True)
    settings.write_text(json.dumps(peer_settings(cfg, shards, stamps_file)))
    app = ROOT / "bench" / "peers" / "flower_app"
    env = dict(_env(), FLOWER_PEER_CONFIG=str(settings), PYTHONPATH=str(app))
    cmd = [sys.executable, str(app / "run_flower.py"), str(cfg["num-clients"])]
    t0 = time.time()
    res = monitored_run(cmd, None, env, 0.1)
    stamps = json.loads(stamps_file.read_text())  # round 0 = the initial model
    ends = [s["time"] - t0 for s in stamps if s["round"] > 0]
    if len(ends) != int(cfg["num-server-rounds"]):
        raise RuntimeError(f"{len(ends)} rounds ran: {res['output'][-300:]}")
    return dict(timing(res["wall"], ends), rss=res["peak_rss"], accuracy=stamps[-1]["accuracy"])


def run_pfl(cfg: dict, shards: Path, legacy: bool) -> dict:
    """The pfl peer in ``.venv-peers`` (fresh process); ``legacy``: ``TF_USE_LEGACY_KERAS=1``."""
    if not PEERS_PYTHON.exists():
        raise FileNotFoundError(f"{PEERS_PYTHON} is missing (make bench-peers-env)")
    env = {k: v for k, v in _env().items() if k not in ("PYTHONPATH", "KERAS_BACKEND")}
    env["TF_USE_LEGACY_KERAS"] = "1" if legacy else "0"
    settings = peer_settings(cfg, shards, Path(os.devnull))
    script = ROOT / "bench" / "peers" / "pfl_peer.py"
    t0 = time.time()
    res = monitored_run([str(PEERS_PYTHON), str(script), json.dumps(settings)], None, env, 0.1)
    line = json.loads(res["output"].strip().splitlines()[-1])
    out = timing(res["wall"], [s - t0 for s in line["stamps"]])
    return dict(out, rss=res["peak_rss"], accuracy=line["accuracy"], pfl=line)


def _cell(name: str, res: dict | str, base: dict | None) -> str:
    """One system's figures (or its ``skipped:`` line) for the table."""
    if isinstance(res, str):
        return f"{name}: {res}"
    ratio = f" (**{res['wall'] / base['wall']:.2f}x** fedpriv's wall)" if base else ""
    return (
        f"{name}: {res['wall']:.1f} s wall{ratio}, start-up {res['startup']:.1f} s, "
        f"{res['per_round']:.2f} s/round, peak RSS {res['rss'] / GIB:.2f} GiB, "
        f"acc {res['accuracy']:.3f}"
    )


def _try(make) -> dict | str:
    """A system's result, or ``skipped: <why>`` in one line."""
    try:
        return make()
    except Exception as err:  # noqa: BLE001  (a missing or failing peer must not stop the row)
        return "skipped: " + " ".join(f"{type(err).__name__}: {err}".split())[:200]


def caveat(pfl3: dict | str, pfl2: dict | str) -> str:
    """pfl's Keras 3 caveat as measured: what its FedAvg aggregates, and the accuracy."""
    if isinstance(pfl3, str) or isinstance(pfl2, str):
        why = pfl3 if isinstance(pfl3, str) else pfl2
        return f"pfl Keras 3 vs tf-keras: not measured ({why})"
    a, b = pfl3["pfl"], pfl2["pfl"]
    return (
        f"pfl 0.6.0 on Keras {a['keras']} aggregates {len(a['aggregated'])} of "
        f"{len(a['trainable'])} variables ({', '.join(a['aggregated'])}), final acc "
        f"{a['accuracy']:.3f}; with TF_USE_LEGACY_KERAS=1 (Keras {b['keras']}) "
        f"{len(b['aggregated'])} of {len(b['trainable'])}, acc {b['accuracy']:.3f}"
    )


def peer_rows(tmp: Path, quick: bool) -> list[str]:
    """One row per workload (module doc), then pfl's Keras 3 caveat."""
    from fedpriv.scenarios.config.registry import resolve_run_config

    rows, caveats = [], []
    for name in WORKLOADS:
        values = workload(name, quick)
        cfg = resolve_run_config(values)
        shards = write_shards(cfg, tmp / f"peers-{name}" / "shards.npz")
        ours = _try(partial(run_fedpriv, values, tmp / f"peers-{name}" / "fedpriv"))
        base = ours if isinstance(ours, dict) else None
        in_process = partial(run_fedpriv, values, tmp / f"peers-{name}" / "in-process")
        others = {
            "fedpriv in-process": _try(partial(in_process, "local-in-process")),
            "Keras floor": _try(partial(run_floor, "bench.tf_floor", cfg)),
            "numpy floor": _try(partial(run_floor, "bench.numpy_floor", cfg)),
            "Flower 1.42": _try(partial(run_flower, cfg, shards, tmp / f"peers-{name}")),
            "pfl 0.6.0 (tf-keras)": _try(partial(run_pfl, cfg, shards, legacy=True)),
            "pfl 0.6.0 (Keras 3)": _try(partial(run_pfl, cfg, shards, legacy=False)),
        }
        pfl3, pfl2 = others["pfl 0.6.0 (Keras 3)"], others["pfl 0.6.0 (tf-keras)"]
        caveats.append(f"{name}: " + caveat(pfl3, pfl2))
        rounds, clients = int(cfg["num-server-rounds"]), int(cfg["num-clients"])
        per = int(cfg["clients-per-round"]) or clients
        label = f"peers {name}: digits, {clients} IID clients, {per} a round, {rounds} rounds" + (
            ", global-dp z=1 C=5" if cfg.get("privacy") == "global-dp" else ""
        )
        cells = "; ".join(_cell(k, v, base) for k, v in others.items())
        rows.append(f"| {label} | {_cell('fedpriv', ours, None)} | {cells} | — |")
        print(rows[-1], flush=True)
        shutil.rmtree(tmp / f"peers-{name}", ignore_errors=True)
    rows.append(f"| peers: pfl's Keras 3 caveat | {' / '.join(caveats)} | — | — |")
    return rows


if __name__ == "__main__":
    print("\n".join(peer_rows(ROOT / "runs" / "bench", "--quick" in sys.argv)))
