"""Speed rows of ``make bench``: each a ratio measured side by side in one run.

- cross-device work: ``fedpriv run`` of digits, 100 IID clients all sampled, 5 local epochs,
  batch 8, digits-mlp, SGD 0.02, 20 rounds (start-up included) vs the plain-Keras floor on
  the TensorFlow backend, the CPU default (:mod:`bench.tf_floor`: the same shards and rounds,
  one ``tf.function`` call per client, in one process, start-up included);
- the message floor: Flower's own cost per message in the simulation engine (the null app of
  ``bench/nullapp``: a ClientApp that returns its input) vs fedpriv's cost per client call
  above the training compute (cross-device strategy seconds / calls − the floor's compute
  per call), and the fedpriv ClientApp handlers' own cost per call measured in-process;
- 10,000 virtual clients, 100 per round (gp-synthetic, IFCA's runner, linear model): seconds
  per round (from the times the round records appear) and the peak memory of the whole
  process tree (sampled every 0.2 s).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CROSS_DEVICE = {
    "scenario": "digits",
    "privacy": "none",
    "strategy": "fedavg",
    "model": "digits-mlp",
    "num-clients": 100,
    "partition": "iid",
    "clients-per-round": 0,
    "local-epochs": 5,
    "batch-size": 8,
    "optimizer": "sgd",
    "learning-rate": 0.02,
    "num-server-rounds": 20,
}


def training_seconds(summary: dict) -> float:
    """A run's time in its rounds: summary.json's ``training_seconds`` (``wall_seconds`` is
    the whole run with its start-up; a summary written before the split has only that)."""
    return summary.get("training_seconds", summary.get("wall_seconds", float("nan")))


def _overrides(values: dict) -> str:
    def toml(v) -> str:
        return repr(v) if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)

    return " ".join(f"{k}={toml(v)}" for k, v in values.items())


def _env() -> dict:
    return dict(
        os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow"
    )


def _tree_rss(pid: int, seen: set[int] | None = None) -> int:
    """Resident memory (bytes) of ``pid`` and all its descendants, from /proc (Linux); their
    pids added to ``seen`` when given."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    total, todo, page = 0, [pid], os.sysconf("SC_PAGE_SIZE")
    while todo:
        current = todo.pop()
        todo += children.get(current, [])
        if seen is not None:
            seen.add(current)
        try:
            with open(f"/proc/{current}/statm", encoding="utf-8") as fh:
                total += int(fh.read().split()[1]) * page
        except (OSError, IndexError, ValueError):
            pass
    return total


# which part of a simulation a process is, by its command line (first match)
PROCESS_ROLES = (
    ("workers", ("default_worker.py",)),
    ("driver", ("simulation_runner",)),
    ("Ray daemons", ("raylet", "gcs_server", "log_monitor", "dashboard", "runtime_env")),
)


def process_role(cmdline: str) -> str:
    """The role of a process of a run in :data:`PROCESS_ROLES`, else ``other`` (the CLI)."""
    for role, marks in PROCESS_ROLES:
        if any(mark in cmdline for mark in marks):
            return role
    return "other"


def _sample_cpu(pids: set[int], cpu: dict[int, list]) -> None:
    """Update ``cpu[pid] = [role, CPU seconds]`` (user + system, from /proc) for ``pids``."""
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            seconds = (int(fields[11]) + int(fields[12])) / tick
            if pid not in cpu:
                with open(f"/proc/{pid}/cmdline", encoding="utf-8") as fh:
                    cpu[pid] = [process_role(fh.read().replace("\0", " ")), 0.0]
        except (OSError, IndexError, ValueError):
            continue
        cpu[pid][1] = max(cpu[pid][1], seconds)


def cpu_by_role(cpu: dict[int, list]) -> dict[str, tuple[float, int]]:
    """(CPU seconds, processes) per role of :func:`_sample_cpu`'s samples."""
    roles: dict[str, tuple[float, int]] = {}
    for role, seconds in cpu.values():
        total, count = roles.get(role, (0.0, 0))
        roles[role] = (total + seconds, count + 1)
    return roles


def monitored_run(
    cmd: list[str],
    rounds_file: Path | None = None,
    env: dict | None = None,
    interval: float = 0.2,
) -> dict:
    """Run ``cmd`` (with ``env``, default :func:`_env`); wall seconds, peak tree RSS (bytes,
    sampled every ``interval`` s), times at which round lines appeared, its output,
    ``left``: the processes of its tree (any sample) still running 1 s after it returned, and
    ``cpu``: CPU seconds and processes per role (:func:`cpu_by_role`; each process's last
    sample, so a lower bound by at most ``interval`` per process)."""
    from fedpriv.scenarios.cli.ray_start import alive, snapshot

    t0 = time.perf_counter()
    tree: set[int] = set()
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env or _env(), stdout=log, stderr=subprocess.STDOUT
        )
        peak, seen, stamps, born, cpu = 0, 0, [], {}, {}
        while proc.poll() is None:
            peak = max(peak, _tree_rss(proc.pid, tree))
            _sample_cpu(tree, cpu)
            born.update(snapshot(sorted(tree - set(born))))
            if rounds_file is not None and rounds_file.exists():
                lines = rounds_file.read_text().count("\n")
                stamps += [time.perf_counter() - t0] * max(0, lines - seen)
                seen = max(seen, lines)
            time.sleep(interval)
        wall = time.perf_counter() - t0
        log.seek(0)
        output = log.read()
    time.sleep(1.0)
    left = alive({p: b for p, b in born.items() if p != proc.pid})
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} failed: {output[-1500:]}")
    return {
        "wall": wall, "peak_rss": peak, "stamps": stamps, "output": output, "left": left,
        "cpu": cpu_by_role(cpu),
    }  # fmt: skip


def fedpriv_run(
    values: dict,
    out: Path,
    *,
    watch_rounds: bool = False,
    interval: float = 0.2,
    federation: str = "local-simulation",
) -> dict:
    """One ``fedpriv run`` with ``values`` (wall, peak RSS, round stamps, summary), into an
    emptied ``out``: a finished run left there by an earlier bench would be resumed (nothing to
    do) and time nothing. Its nodes keep their ledgers in an emptied ``<out>-state``
    (``FEDPRIV_STATE_ROOT``), not the machine's default folder: there every earlier run of
    the same data (an earlier bench, a test, another user's run) would have charged them,
    spent their budgets (declines: rounds without training) and cached replies. ``federation``:
    ``local-in-process`` for the in-process backend (no Ray)."""
    shutil.rmtree(out, ignore_errors=True)
    state = out.with_name(f"{out.name}-state")
    shutil.rmtree(state, ignore_errors=True)
    cmd = [sys.executable, "-m", "fedpriv.scenarios.cli.main", "run", "--federation", federation]
    cmd += ["--run-config", _overrides({**values, "output-dir": str(out)})]
    env = dict(_env(), FEDPRIV_STATE_ROOT=str(state))
    res = monitored_run(cmd, out / "rounds.jsonl" if watch_rounds else None, env, interval)
    res["summary"] = json.loads((out / "summary.json").read_text())
    return res


def tf_floor(cfg: dict) -> dict:
    """The plain-Keras floor on TensorFlow (a fresh process; its clock starts at interpreter
    start)."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "bench.tf_floor", json.dumps(cfg)],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["wall"] = time.perf_counter() - t0
    return out


def null_floor(num_nodes: int, rounds: int, out: Path) -> dict:
    """Flower's null app on ``num_nodes`` SuperNodes: seconds per message (engine only)."""
    from fedpriv.scenarios.cli.launch import federation_settings, runner_command

    backend = federation_settings("local-simulation")["backend"]
    result = out / "null.json"
    out.mkdir(parents=True, exist_ok=True)
    run_config = f"num-server-rounds={rounds} num-nodes={num_nodes} output='{result}'"
    cmd = runner_command(ROOT / "bench" / "nullapp", num_nodes, backend, run_config)
    res = monitored_run(cmd)
    res.update(json.loads(result.read_text()))
    return res


def client_handler_cost(cfg_values: dict, calls: int = 100) -> dict:
    """fedpriv's ClientApp ``train``/``evaluate`` handlers called in-process (no engine)."""
    code = f"""
import json, time
from flwr.app import ArrayRecord, Context, Message, RecordDict
import fedpriv.scenarios.app.client_app as ca
from fedpriv.clients.keras_client import federated_data, initial_weights
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.scenarios.config.specs import data_spec, train_spec
from fedpriv.scenarios.app.engine import run_config_as_record
from fedpriv.scenarios.cli.main import app_config
from fedpriv.scenarios.app.wire_config import set_base
try:  # Flower >= 1.3x builds instruction messages only inside a task (the runtime's identity)
    from flwr.supercore.task_identity import TaskIdentity
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
except ImportError:
    pass
run_config = app_config(json.loads({json.dumps(json.dumps(cfg_values))}))
cfg = resolve_run_config(run_config)
set_base(run_config)
data = federated_data(data_spec(cfg))
w = initial_weights(train_spec(cfg), data)
rec = run_config_as_record({{**cfg, "server-round": 1}})
n = int(cfg["num-clients"])
ctx = [Context(run_id=1, node_id=p, node_config={{"partition-id": p}}, state=RecordDict(),
               run_config=run_config) for p in range(n)]
def msg(p, kind):
    content = RecordDict({{"arrays": ArrayRecord(w), "config": rec}})
    return Message(content=content, dst_node_id=p, message_type=kind)
for p in range(3):
    ca.train(msg(p, "train"), ctx[p]); ca.evaluate(msg(p, "evaluate"), ctx[p])
out = {{}}
for kind, fn in (("train", ca.train), ("evaluate", ca.evaluate)):
    t = time.perf_counter()
    for i in range({calls}):
        fn(msg(i % n, kind), ctx[i % n])
    out[kind] = (time.perf_counter() - t) / {calls}
print(json.dumps(out))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=_env(), capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-1500:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cross_device_rows(tmp: Path, quick: bool) -> tuple[list[str], dict]:
    """Cross-device ratio row + the message-floor row; returns the rows and raw figures."""
    from fedpriv.scenarios.config.registry import resolve_run_config

    values = dict(CROSS_DEVICE, **({"num-server-rounds": 3} if quick else {}))
    cfg = resolve_run_config(values)
    floor = tf_floor(cfg)
    run = fedpriv_run(values, tmp / "cross-device")
    null = null_floor(int(cfg["num-clients"]), int(cfg["num-server-rounds"]), tmp / "null")
    handlers = client_handler_cost(values)
    rounds, clients = int(cfg["num-server-rounds"]), int(cfg["num-clients"])
    calls = 2 * rounds * clients
    strategy = float(training_seconds(run["summary"]))
    per_call = strategy / calls
    compute = floor["train_seconds"] / floor["calls"]
    null_msg = null["seconds"] / null["messages"]
    above = per_call - compute
    rows = [
        f"| cross-device: `fedpriv run` digits, {clients} IID clients all sampled, 5 epochs, "
        f"batch 8, digits-mlp, SGD 0.02, {rounds} rounds (start-up included) vs plain-Keras "
        f"compiled loop (TensorFlow backend) over the same shards in one process | "
        f"{run['wall']:.1f} s "
        f"(strategy {strategy:.1f} s, final acc {run['summary']['final']['accuracy']:.3f}) | "
        f"{floor['wall']:.1f} s (training+eval {floor['train_seconds']:.1f} s, "
        f"acc {floor['accuracy']:.3f}) | **{run['wall'] / floor['wall']:.2f}x** wall "
        f"(goal <= 5x; issue: 46.6x) |",
        f"| message floor: fedpriv per client call above the training compute vs Flower's null "
        f"ClientApp per message ({clients} nodes, {null['messages']} messages) | "
        f"{above * 1e3:.1f} ms/call (= {per_call * 1e3:.1f} ms strategy time per call − "
        f"{compute * 1e3:.1f} ms compute in the floor); ClientApp handlers in-process: train "
        f"{handlers['train'] * 1e3:.1f} ms, evaluate {handlers['evaluate'] * 1e3:.1f} ms | "
        f"{null_msg * 1e3:.1f} ms/message | **{above / null_msg:.2f}x** the Flower floor |",
    ]
    return rows, {"floor": floor, "run": run, "null": null, "handlers": handlers}


def many_clients_row(tmp: Path, quick: bool) -> list[str]:
    """10,000 virtual clients (gp-synthetic IFCA), 100 per round: s/round and peak memory."""
    users = 2_000 if quick else 10_000
    rounds = 3
    values = {
        "scenario": "gp-synthetic",
        "num-clients": users + 20,
        "validation-clients": 20,
        "users-per-round": 100,
        "num-server-rounds": rounds,
        "patience": 1000,
    }
    run = fedpriv_run(values, tmp / "many-clients", watch_rounds=True)
    stamps = run["stamps"]
    per_round = (stamps[-1] - stamps[0]) / max(1, len(stamps) - 1) if len(stamps) > 1 else 0
    return [
        f"| scale: {users:,} virtual clients (+20 validation), 100 per round, gp-synthetic IFCA "
        f"(linear), {rounds} rounds | {per_round:.2f} s per round; peak memory "
        f"{run['peak_rss'] / 2**30:.2f} GiB (process tree) | total {run['wall']:.1f} s wall "
        f"(start-up + discovery of {users + 20:,} nodes {stamps[0] if stamps else 0:.1f} s) | "
        f"— |"
    ]


def grid_row(tmp: Path, quick: bool) -> list[str]:
    """An N-cell ``fedpriv grid`` (one started simulation) vs N x one cell's ``fedpriv run``."""
    import importlib.util

    if importlib.util.find_spec("fedpriv.scenarios.app.multirun") is None:
        return ["| grid: N cells in one simulation | not measured: the multi-run runner "
                "(scenarios/app/multirun.py) is not in this checkout | — | — |"]  # fmt: skip
    strategies, privacy, rounds = ("fedavg", "fedprox"), ("none", "global-dp"), 2 if quick else 3
    cells = len(strategies) * len(privacy)
    single = {"scenario": "digits", "strategy": "fedavg", "privacy": "none"}
    one = fedpriv_run({**single, "num-server-rounds": rounds}, tmp / "grid-one")
    cmd = [sys.executable, "-m", "fedpriv.scenarios.cli.main", "grid", "--scenario", "digits"]
    cmd += ["--strategies", ",".join(strategies), "--privacy", ",".join(privacy)]
    cmd += ["--seeds", "0", "--output-dir", str(tmp / "grid"), "--run-config"]
    cmd += [f"num-server-rounds={rounds}"]
    grid = monitored_run(cmd)
    train = float(training_seconds(one["summary"]))
    return [
        f"| grid: `fedpriv grid` digits, {cells} cells ({rounds} rounds each) in one simulation "
        f"vs {cells} x one cell's `fedpriv run` | {grid['wall']:.1f} s | {cells} x "
        f"{one['wall']:.1f} s = {cells * one['wall']:.1f} s (one cell's training "
        f"{train:.1f} s) | **{grid['wall'] / (cells * one['wall']):.2f}x** of N runs; "
        f"{grid['wall'] / (cells * train):.2f}x of N x training |"
    ]
