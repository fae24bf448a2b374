"""Resume a killed run and the checkpoint module under it.

Fast checks drive the real server chain of a standard run (RoundRecorder -> ValidUpdatesOnly
-> DP wrapper -> stock strategy) round by round with real Flower Messages: a chain restored
from a checkpoint must give bit-identical rounds to the chain that never stopped (sampling
and noise Generators, accountant, FedAvgM momentum, FedOpt/FedYogi moments). The simulation
test (in tests/test_run_simulation.py, whose multi-run simulation holds the uninterrupted
reference run) kills a real ``fedpriv run`` after round 3 of 6 and runs the same command again.

Every config here opts in to ``reproducible-noise``: only then are the sampling and noise
Generators seeded and checkpointed (a secret run's are not: tests/test_secret_noise.py).
"""

from __future__ import annotations

import json
import pickle

import flwr.app  # noqa: F401  (unpickling a checkpoint in the poll loop must not import it)
import numpy as np
import pytest
from fedpriv.scenarios.app.engine import RoundState, build_strategy, run_config_as_record
from fedpriv.scenarios.app.recorder import wrapper_chain
from fedpriv.scenarios.app.resume import checkpoint_hook, load_resumable, restore
from fedpriv.scenarios.cli.preflight import run_state
from fedpriv.scenarios.config.features import CATALOG
from fedpriv.scenarios.config.manifest import fingerprint, write_manifest
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import server_run
from fedpriv.scenarios.nodes.federation import PartitionGrid, ZoneGrid
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

from fedpriv.checkpoint import capture_state, save_checkpoint
from fedpriv.reporting.runlog import RunLog, read_rounds

SHAPES = [(5, 3), (3,)]
NUM = 6
NODES = {200 + p: p for p in range(NUM)}


ZONE_NODES = {100 + z: z for z in range(2)}  # privacy "zonal-nodes": 2 zone SuperNodes


def _cfg(strategy: str, privacy: str) -> dict:
    zonal = privacy.startswith("zonal")
    runtime = {"zonal-runtime": "zone-nodes" if privacy == "zonal-nodes" else "in-server"}
    return resolve_run_config(
        {
            "strategy": strategy,
            "privacy": "zonal" if zonal else privacy,
            **(runtime if zonal else {}),
            "num-clients": NUM,
            "clients-per-round": 3,
            "noise-multiplier": 0.3,
            "clipping-norm": 1.0,
            "seed": 3,
            "reproducible-noise": True,
            **({"supernode-failure-rate": 0.4, "num-zones": 2} if zonal else {}),
        }  # fmt: skip
    )


def _round(recorder, pgrid, cfg, server_round: int, arrays: list[np.ndarray]) -> list:
    """One training round: every sampled client moves the model by a seeded step."""
    config = run_config_as_record({**cfg, "server-round": server_round})
    replies = []
    for msg in recorder.configure_train(server_round, ArrayRecord(arrays), config, pgrid):
        partition = msg.metadata.dst_node_id % 100  # a client's partition, or a zone node's zone
        rng = np.random.default_rng([server_round, partition])
        local = [(a + rng.normal(0, 0.5, a.shape)).astype(np.float32) for a in arrays]
        content = RecordDict(
            {"arrays": ArrayRecord(local), "metrics": MetricRecord({"num-examples": 10})}
        )
        replies.append(Message(content=content, reply_to=msg))
    replies.sort(key=lambda m: m.metadata.src_node_id)
    out, _ = recorder.aggregate_train(server_round, replies)
    return arrays if out is None else out.to_numpy_ndarrays()


def _chain(cfg):
    zone_nodes = cfg["privacy"] == "zonal" and cfg["zonal-runtime"] == "zone-nodes"
    pgrid = ZoneGrid(None, ZONE_NODES, NUM) if zone_nodes else PartitionGrid(None, NODES)
    rng = np.random.default_rng(int(cfg["seed"]))
    return build_strategy(server_run(cfg), pgrid, rng, CATALOG), pgrid


@pytest.mark.parametrize(
    "strategy,privacy",
    [
        ("fedavg", "global-dp"),
        ("fedavgm", "metric-dp"),
        ("fedopt", "none"),
        ("fedyogi", "none"),
        ("fedavgm", "zonal"),  # elections (super-nodes, log, Generator), failure Generator
        ("fedavg", "zonal-nodes"),  # the same with zone SuperNodes
    ],
)
def test_restored_chain_continues_bit_identically(strategy, privacy, tmp_path):
    cfg = {**_cfg(strategy, privacy), "output-dir": str(tmp_path)}
    start = [np.full(s, 0.1, np.float32) for s in SHAPES]
    straight, pgrid = _chain(cfg)
    arrays, history = start, []
    for r in range(1, 5):
        arrays = _round(straight, pgrid, cfg, r, arrays)
        history.append((list(straight.current["sampled"]), arrays))
        if r == 2:  # the engine's after_round hook (fedpriv.scenarios.app.resume.checkpoint_hook)
            checkpoint_hook(server_run(cfg))(RoundState(2, ArrayRecord(arrays), {}, straight))
    resumed, pgrid2 = _chain(cfg)
    assert load_resumable(server_run({**cfg, "seed": 4})) is None  # another config's checkpoint
    checkpoint = load_resumable(server_run(cfg))
    restore(resumed, checkpoint)
    assert checkpoint["round"] == 2
    arrays = checkpoint["arrays"]
    for r in (3, 4):
        arrays = _round(resumed, pgrid2, cfg, r, arrays)
        sampled, expected = history[r - 1]
        assert resumed.current["sampled"] == sampled
        for a, b in zip(arrays, expected):
            np.testing.assert_array_equal(a, b)
    if privacy.startswith("zonal"):  # the super-nodes and the election log went on
        zonal = [w for w in wrapper_chain(resumed) if hasattr(w, "election")][0]
        assert [e.round for e in zonal.election.log][0] == 1
        assert "_node_to_partition" not in capture_state([zonal])[0]  # this simulation's ids
        assert "_grid" not in capture_state([zonal])[0]
    if privacy == "global-dp":  # metric DP has no accountant (no (epsilon, delta) claim)
        dp = [w for w in wrapper_chain(resumed) if hasattr(w, "accountant")][0]
        assert len(dp.accountant.noise_multipliers) == 4  # rounds 1, 2 restored + 3, 4


def test_state_that_matters_is_captured():
    cfg = _cfg("fedyogi", "global-dp")
    chain, pgrid = _chain(cfg)
    _round(chain, pgrid, cfg, 1, [np.zeros(s, np.float32) for s in SHAPES])
    names = [set(s) for s in capture_state(wrapper_chain(chain))]
    assert "rng" in names[0]  # the recorder's sampling Generator
    assert {"rng", "accountant"} <= names[2]  # the DP wrapper's noise stream and accountant
    # ... but not its model-sized copies of the round (set again by every configure_train)
    assert not {"current_arrays", "noised_mean"} & names[2]
    assert "reference" not in names[1]  # nor the validator's
    assert {"m_t", "v_t", "current_arrays"} <= names[3]  # FedYogi's moments
    assert all("strategy" not in n and "grid" not in n for n in names)


def test_run_state_new_resume_finished_and_refused(tmp_path):
    cfg = {**_cfg("fedavg", "none"), "output-dir": str(tmp_path)}
    assert run_state(tmp_path / "absent", cfg).action == "new"
    write_manifest(tmp_path, cfg)
    assert run_state(tmp_path, cfg).action == "new"  # started, killed before round 1 ended
    save_checkpoint(tmp_path, {"round": 2, "fingerprint": fingerprint(cfg)})
    assert (run_state(tmp_path, cfg).action, run_state(tmp_path, cfg).round) == ("resume", 2)
    assert run_state(tmp_path, {**cfg, "verbose": True, "output-dir": "x"}).action == "resume"
    with pytest.raises(ConfigError) as info:
        run_state(tmp_path, {**cfg, "seed": 4, "learning-rate": 0.5})
    message = str(info.value)
    assert "output-dir" in message and "seed 3 -> 4" in message and "\n" not in message
    (tmp_path / "summary.json").write_text("{}")
    assert run_state(tmp_path, cfg).action == "finished"


def test_finished_means_the_kinds_completion_check(tmp_path):
    """A CIA run is finished when cia.json holds its config, not when its first phase's
    summary.json exists (a kill during the target-absent phase resumes it)."""
    cfg = {**resolve_run_config({"scenario": "cia-digits"}), "output-dir": str(tmp_path)}
    complete = CATALOG.completion(CATALOG.kind(cfg))
    write_manifest(tmp_path, cfg)
    (tmp_path / "summary.json").write_text("{}")  # the target-present phase is done
    assert run_state(tmp_path, cfg, complete).action == "new"
    (tmp_path / "cia.json").write_text(json.dumps({"config": cfg}))
    assert run_state(tmp_path, cfg, complete).action == "finished"


def test_runlog_keeps_completed_rounds_only(tmp_path):
    log = RunLog(tmp_path)
    for r in range(5):
        log.append_round({"round": r})
    with (tmp_path / "rounds.jsonl").open("a") as fh:
        fh.write('{"round": 5, "cut')  # a line the kill cut
    RunLog(tmp_path, keep_rounds=3)
    assert [r["round"] for r in read_rounds(tmp_path)] == [0, 1, 2, 3]
    RunLog(tmp_path)
    assert read_rounds(tmp_path) == []


def test_checkpoint_write_is_atomic(tmp_path):
    save_checkpoint(tmp_path, {"round": 1})
    assert not list(tmp_path.glob("*.tmp"))
    assert pickle.loads((tmp_path / "checkpoint.pkl").read_bytes())["round"] == 1


def test_capture_state_keeps_plain_data_without_pickling_it_and_skips_what_does_not_pickle(
    monkeypatch,
):
    """Arrays and containers of plain data are captured as they are, without a trial
    pickling (a model's arrays were pickled twice a round); what does not pickle (a lambda in
    a list, a lock) is still left out, and objects that are not plain data still pickle."""
    import pickle
    import threading

    from fedpriv import checkpoint

    class Holder:
        pass

    holder = Holder()
    holder.weights = [np.ones((3, 2), np.float32), np.zeros(4)]
    holder.history = {"round": [1, 2], "loss": (0.5, None)}
    holder.rng = np.random.default_rng(1)  # not plain: pickled to find out, and kept
    holder.hooks = [1, lambda: 0]  # a lambda inside: left out
    holder.lock = threading.Lock()
    holder.boxed = np.array([object()], dtype=object)  # object arrays are pickled to test
    calls = []
    real = pickle.dumps
    monkeypatch.setattr(checkpoint.pickle, "dumps", lambda v, *a, **k: calls.append(v) or real(v))
    state = capture_state([holder])[0]
    assert set(state) == {"weights", "history", "rng", "boxed"}
    assert state["weights"][0] is holder.weights[0] and state["history"] is holder.history
    assert not any(isinstance(v, (list, dict, np.ndarray)) and v is not holder.boxed for v in calls)
    assert any(v is holder.rng for v in calls)


def test_checkpoint_writer_writes_each_model_once_and_never_names_a_missing_file(
    tmp_path, monkeypatch
):
    """A small model stays in the checkpoint; a round's charged and recorded checkpoints of
    one large model share one model file (the
    same file, not rewritten); a new model gets a new file and the old one goes once the
    checkpoint no longer names it; a failure between the model file and the checkpoint's
    rename leaves the previous checkpoint whole, its model file included."""
    from fedpriv import checkpoint as ck

    writer = ck.CheckpointWriter(tmp_path)
    small = [np.ones(3)]  # under OWN_FILE_BYTES: in the checkpoint itself
    writer.write({"round": 0, "arrays": small, "stage": "recorded"}, model=object())
    assert not list(tmp_path.glob(ck.MODEL_FILES))
    assert (
        pickle.loads((tmp_path / "checkpoint.pkl").read_bytes())["arrays"][0].tolist() == [1.0] * 3
    )
    first, second = object(), object()
    one = [np.arange(ck.OWN_FILE_BYTES / 8).reshape(2, -1), np.ones(2, np.float32)]
    writer.write({"round": 1, "arrays": one, "stage": "charged"}, model=first)
    (model_file,) = tmp_path.glob(ck.MODEL_FILES)
    inode = model_file.stat().st_ino
    writer.write({"round": 1, "arrays": one, "stage": "recorded"}, model=first)
    assert [p.stat().st_ino for p in tmp_path.glob(ck.MODEL_FILES)] == [inode]
    loaded = ck.load_checkpoint(tmp_path)
    assert loaded["stage"] == "recorded" and "arrays_file" not in loaded
    assert [a.tolist() for a in loaded["arrays"]] == [a.tolist() for a in one]
    two = [a + 1 for a in one]
    writer.write({"round": 2, "arrays": two, "stage": "charged"}, model=second)
    (new_file,) = tmp_path.glob(ck.MODEL_FILES)
    assert new_file != model_file
    assert ck.load_checkpoint(tmp_path)["arrays"][0].tolist() == two[0].tolist()

    def killed(*_args, **_kwargs):
        raise OSError("killed before the rename")

    monkeypatch.setattr(ck, "save_checkpoint", killed)
    with pytest.raises(OSError):
        writer.write({"round": 3, "arrays": [a * 3 for a in one], "stage": "charged"}, object())
    kept = ck.load_checkpoint(tmp_path)
    assert kept["round"] == 2 and kept["arrays"][1].tolist() == two[1].tolist()
    assert not list(tmp_path.glob("*.tmp"))


def test_a_finished_run_keeps_its_model_once_for_the_checkpoint(tmp_path):
    """After ``final_weights.npz`` is written, the checkpoint names it and its own model file
    (the same arrays) goes; the checkpoint still loads. Different arrays, or a small model
    kept inside the checkpoint, stay as they are."""
    from fedpriv import checkpoint as ck

    writer = ck.CheckpointWriter(tmp_path)
    final = [np.arange(ck.OWN_FILE_BYTES / 4, dtype=np.float32).reshape(2, -1), np.ones(2)]
    writer.write({"round": 2, "arrays": final, "stage": "recorded", "states": []}, object())
    np.savez(tmp_path / ck.FINAL_WEIGHTS, *[a + 1 for a in final])
    assert not ck.share_final_weights(tmp_path, [a + 1 for a in final])  # not the same model
    assert len(list(tmp_path.glob(ck.MODEL_FILES))) == 1
    np.savez(tmp_path / ck.FINAL_WEIGHTS, *final)
    assert ck.share_final_weights(tmp_path, final)
    assert not list(tmp_path.glob(ck.MODEL_FILES))
    loaded = ck.load_checkpoint(tmp_path)
    assert loaded["round"] == 2 and loaded["stage"] == "recorded"
    assert [a.tolist() for a in loaded["arrays"]] == [a.tolist() for a in final]
    assert not ck.share_final_weights(tmp_path, final)  # done once
    small = tmp_path / "small"
    small.mkdir()
    ck.CheckpointWriter(small).write({"round": 1, "arrays": [np.ones(3)], "states": []}, None)
    np.savez(small / ck.FINAL_WEIGHTS, np.ones(3))
    assert not ck.share_final_weights(small, [np.ones(3)])  # in the checkpoint itself
