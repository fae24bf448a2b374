"""Load row of ``make bench``: many virtual clients, 100 per round, in the
simulation engine — time per round and peak memory per process, side by side for two
federation sizes in one run.

Each size is one ``fedpriv run`` (digits, ``partition = bootstrap``: every client holds 20
examples drawn independently, so 10,000 clients fit 1,437 examples; digits MLP; FedAvg; no
privacy; ``clients-per-round = 100``; ``evaluate-sampled-only``). While it runs, the process
tree is polled: the peak resident set (``VmHWM`` of ``/proc/PID/status``) of every Ray
ClientApp worker and of the server process, and the moment each round line lands in
``rounds.jsonl``. The data is built once per worker process (``federated_data`` is cached
per process), so a worker's peak should stay flat as the number of clients grows tenfold;
the row shows the ratio.

Usage: ``python bench/bench_load.py [--quick]`` (also called by ``bench/run_bench.py`` via
:func:`load_rows`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROUNDS = 4
PER_ROUND = 100


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _descendants(root: int) -> list[int]:
    tree, out, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += tree.get(pid, [])
    return out


def _peak_mb(pid: int) -> tuple[str, float] | None:
    """(process title, peak RSS in MB) of a live process, or None."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        title = raw.replace(b"\0", b" ").decode(errors="ignore")
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return title, int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def measure(num_clients: int, out: Path) -> dict:
    """One run; per-round seconds (rounds 2..R), peak MB per worker and of the server."""
    overrides = (
        f"partition='bootstrap' num-clients={num_clients} clients-per-round={PER_ROUND} "
        f"evaluate-sampled-only=true model='digits-mlp' privacy='none' local-epochs=1 "
        f"num-server-rounds={ROUNDS} output-dir='{out}'"
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedpriv.scenarios.cli.main", "run", "--run-config", overrides],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    t0 = time.perf_counter()
    peaks: dict[int, tuple[str, float]] = {}
    landed: dict[int, float] = {}
    rounds_path = out / "rounds.jsonl"
    while proc.poll() is None:
        for pid in _descendants(proc.pid):
            got = _peak_mb(pid)
            if got is not None:
                peaks[pid] = (got[0], max(got[1], peaks.get(pid, ("", 0.0))[1]))
        if rounds_path.exists():
            for line in rounds_path.read_text().splitlines():
                if line.strip():
                    landed.setdefault(json.loads(line)["round"], time.perf_counter())
        time.sleep(0.5)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.read()[-2000:] if proc.stderr else "fedpriv run failed")
    marks = [landed[r] for r in sorted(landed) if r >= 1]
    per_round = statistics.median(b - a for a, b in zip(marks, marks[1:])) if len(marks) > 1 else 0
    workers = [mb for title, mb in peaks.values() if "ClientAppActor" in title]
    servers = [
        mb for title, mb in peaks.values() if "fedpriv.scenarios.cli.simulation_runner" in title
    ]
    return {
        "clients": num_clients,
        "wall_s": wall,
        "first_round_at_s": (landed.get(1, t0) - t0) if landed else None,
        "s_per_round": per_round,
        "workers": len(workers),
        "worker_peak_mb": max(workers) if workers else float("nan"),
        "server_peak_mb": max(servers) if servers else float("nan"),
    }


def load_rows(quick: bool = False) -> list[dict]:
    """The two sizes side by side (quick: 1,000 vs 100 clients)."""
    sizes = (100, 1_000) if quick else (1_000, 10_000)
    with tempfile.TemporaryDirectory() as tmp:
        return [measure(n, Path(tmp) / f"n{n}") for n in sizes]


def load_table(rows: list[dict]) -> str:
    """Markdown: one line per size, and the worker-memory ratio large/small."""
    lines = [
        "| clients | per round | s/round | start-up to round 1 (s) | Ray workers | worker peak "
        "RSS (MB) | server peak RSS (MB) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['clients']} | {PER_ROUND} | {r['s_per_round']:.2f} | "
            f"{r['first_round_at_s']:.1f} | {r['workers']} | {r['worker_peak_mb']:.0f} | "
            f"{r['server_peak_mb']:.0f} |"
        )
    small, large = rows[0], rows[-1]
    lines.append("")
    lines.append(
        f"Worker peak RSS {large['clients']} vs {small['clients']} clients: "
        f"{large['worker_peak_mb'] / small['worker_peak_mb']:.2f}x "
        f"(data built once per worker process, not per client)."
    )
    return "\n".join(lines)


def load_row(quick: bool = False) -> list[str]:
    """The row of ``make bench``'s table (benchmark | fedpriv | reference | ratio)."""
    small, large = load_rows(quick)
    ratio = large["worker_peak_mb"] / small["worker_peak_mb"]
    return [
        f"| scale: standard run (digits bootstrap, MLP, FedAvg), {PER_ROUND} of "
        f"{large['clients']:,} vs {small['clients']:,} virtual clients per round, sampled "
        f"evaluation | {large['s_per_round']:.2f} s per round; peak RSS per Ray worker "
        f"{large['worker_peak_mb']:.0f} MB ({large['workers']} workers), server "
        f"{large['server_peak_mb']:.0f} MB; start-up + discovery {large['first_round_at_s']:.0f} s "
        f"| {small['s_per_round']:.2f} s per round; worker {small['worker_peak_mb']:.0f} MB, "
        f"server {small['server_peak_mb']:.0f} MB | worker peak RSS {ratio:.2f}x for "
        f"{large['clients'] // small['clients']}x the clients (data built once per worker) |"
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    print(load_table(load_rows(parser.parse_args().quick)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
