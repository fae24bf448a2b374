"""Who may read which output, and the ε that holds for each reader.

Adversary's view covered here: a reader of the PUBLIC outputs of a run — ``rounds.jsonl``,
``summary.json`` and the models — but not ``operator.jsonl`` or ``checkpoint.pkl``. The
headline ε is amplified by client sampling, which holds only while the schedule is secret:
the public outputs carry no partition list and no clip flag, and an independent accountant
(dp_accounting's own PLD of the subsampled Gaussian, built from nothing but what that view
shows: z, N, m, T, δ) gives no more than the reported headline. The reader of
``operator.jsonl`` sees the schedule: against that reader, each client's ε is the unamplified
Gaussian over its own participations, larger than the headline (measured: 71.4 vs 34.17 at
N = 100, m = 10, T = 100), and every line of that file says so.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from fedpriv.reporting.runlog import (
    OPERATOR_FILE,
    OPERATOR_KEYS,
    OPERATOR_NOTICE,
    OUTPUT_READERS,
    RunLog,
    read_rounds,
    split_round,
)

DELTA = 1e-5


def _record(r: int) -> dict:
    return {
        "round": r, "sampled": [1, 4], "replied": [1, 4], "failed": [], "aggregated": True,
        "rejected": {"4": "num-examples = 0 is outside (0, 1e+09]"}, "dp-clipped": [4],
        "dp-num-clipped": 1, "dp-num-reports": 2, "dp-sigma": 0.1, "dp-epsilon": 0.5 * r,
        "server": {"accuracy": 0.5},
    }  # fmt: skip


def test_round_lines_split_into_public_and_operator_files(tmp_path):
    log = RunLog(tmp_path, labels={"noise-randomness": "os-entropy (secret)"})
    for r in range(3):
        log.append_round(_record(r))
    public = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    operator = [json.loads(x) for x in (tmp_path / OPERATOR_FILE).read_text().splitlines()]
    assert len(public) == len(operator) == 3
    for line in public:
        assert not OPERATOR_KEYS & set(line), line
        assert line["dp-epsilon"] == 0.5 * line["round"] and line["server"]["accuracy"] == 0.5
    for r, line in enumerate(operator):
        assert line["round"] == r and line["sampled"] == [1, 4] and line["dp-clipped"] == [4]
        assert line["reader"] == OPERATOR_NOTICE and "amplification" in line["reader"]
    # the operator's view merges both back; the public view is rounds.jsonl alone
    merged = read_rounds(tmp_path)
    assert [{k: v for k, v in m.items() if k != "noise-randomness"} for m in merged] == [
        _record(r) for r in range(3)
    ]
    assert read_rounds(tmp_path, public=True) == public
    log.write_summary({"final": {}})
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["output-readers"] == OUTPUT_READERS
    assert "operator only" in summary["output-readers"]["checkpoint.pkl"]


def test_a_resume_keeps_both_files_line_aligned(tmp_path):
    log = RunLog(tmp_path)
    for r in range(5):
        log.append_round(_record(r))
    with (tmp_path / OPERATOR_FILE).open("a") as fh:  # killed between the two appends
        fh.write(json.dumps(split_round(_record(5))[1]) + "\n")
    RunLog(tmp_path, keep_rounds=3)
    merged = read_rounds(tmp_path)
    assert [r["round"] for r in merged] == [0, 1, 2, 3]
    assert all(r["sampled"] == [1, 4] for r in merged)
    assert len((tmp_path / OPERATOR_FILE).read_text().splitlines()) == 4


def test_split_moves_every_wrapper_node_report():
    public, operator = split_round({"round": 2, "zonal": {"x": 1}, "custom-nodes": [3]})
    assert public == {"round": 2, "zonal": {"x": 1}} and operator["custom-nodes"] == [3]


def independent_amplified_epsilon(z: float, sampled: int, population: int, rounds: int) -> float:
    """What the public view allows: z, m of N, T, δ. dp_accounting's PLD of the Poisson
    subsampled Gaussian with multiplier z/2 (replace-one: sensitivity 2C), q = m/N, both
    directions: a dominating pair for m-of-N sampling without replacement under replace-one
    (Zhu, Dong, Wang 2022, Thm. 11: (γP + (1−γ)Q, Q), γ = m/N)."""
    import dp_accounting as dpa
    from dp_accounting.pld import PLDAccountant

    acc = PLDAccountant(dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
    event = dpa.GaussianDpEvent(z / 2.0)
    if sampled < population:
        event = dpa.PoissonSampledDpEvent(sampled / population, event)
    acc.compose(event, rounds)
    return float(acc.get_epsilon(DELTA))


def independent_unamplified_epsilon(z: float, participations: int) -> float:
    """A reader who knows the schedule: the Gaussian with sensitivity 2C, σ = z·C/m on the
    mean, over the client's own participations — no amplification (GDP μ = 2√k/z)."""
    import dp_accounting as dpa
    from dp_accounting.pld import PLDAccountant

    acc = PLDAccountant(dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
    acc.compose(dpa.GaussianDpEvent(z / 2.0), participations)
    return float(acc.get_epsilon(DELTA))


def test_the_issue_figures_for_each_reader():
    """N = 100, m = 10, T = 100, z = 1 (the audit's setting): the headline the run reports
    (the project's accountant) bounds the public reader's independent figure; the operator's
    is far above it for a client sampled 20 times (the audit's most-sampled client)."""
    from fedpriv.privacy.accounting.rounds import global_dp_epsilon
    from fedpriv.privacy.participation import Participation

    headline = global_dp_epsilon([1.0] * 100, Participation(100, 10, 10), delta=DELTA)
    assert headline["epsilon"] == pytest.approx(34.17, abs=0.01)
    assert independent_amplified_epsilon(1.0, 10, 100, 100) <= headline["epsilon"]
    assert independent_unamplified_epsilon(1.0, 20) > 2 * headline["epsilon"]


@pytest.mark.slow
@pytest.mark.guard
@pytest.mark.simulation
def test_a_real_run_publishes_no_schedule_and_its_headline_holds_for_that_reader(tmp_path):
    from tests.simulate import IN_PROCESS, run_fedpriv

    # 8 draws of 6 clients: someone is sampled at least twice whatever the secret sampling
    # draws (with 2 of 6 for 3 rounds, all six once each, 2.7 % of runs, left the operator
    # log's per-client ε below the headline and failed the last assertion)
    n, m, rounds, z = 6, 4, 2, 1.0
    rc, summary, _, log = run_fedpriv(
        {"scenario": "digits", "privacy": "global-dp", "num-clients": n, "clients-per-round": m,
         "num-server-rounds": rounds, "local-epochs": 1, "noise-multiplier": z, "seed": 2,
         "reproducible-noise": False},
        tmp_path / "run", extra_args=IN_PROCESS,
    )  # fmt: skip
    assert rc == 0, log[-3000:]
    out = tmp_path / "run"
    public = read_rounds(out, public=True)
    trained = [r for r in public if r["round"] > 0]
    assert len(trained) == rounds
    # the public view: no key that names or counts the sampled or clipped clients
    for line in public:
        assert not OPERATOR_KEYS & set(line) and not any(k.endswith("-nodes") for k in line)
    text = (out / "rounds.jsonl").read_text() + (out / "summary.json").read_text()
    assert '"sampled"' not in text and '"dp-clipped"' not in text
    assert "num_clipped_per_round" not in summary["privacy"]  # clip counts: operator only
    assert summary["output-readers"] == OUTPUT_READERS
    # independent computation over that view (z, m of N, T, δ): no larger than reported
    reported = summary["privacy"]["epsilon"]["epsilon"]
    assert trained[-1]["dp-epsilon"] == pytest.approx(reported, rel=1e-9)
    assert independent_amplified_epsilon(z, m, n, rounds) <= reported * (1 + 1e-9)
    # the operator log holds the schedule, line by line, and says its reader is outside
    operator = [json.loads(x) for x in (out / OPERATOR_FILE).read_text().splitlines()]
    assert len(operator) == len(public)
    counts = Counter(p for line in operator if line["round"] > 0 for p in line["sampled"])
    assert sum(counts.values()) == m * rounds and all(x["reader"] == OPERATOR_NOTICE
                                                        for x in operator)  # fmt: skip
    most = max(counts.values())
    assert most >= -(-m * rounds // n) >= 2  # pigeonhole
    assert independent_unamplified_epsilon(z, most) > reported  # why it is operator only


def test_run_log_is_the_operators_from_its_first_line(tmp_path):
    """run.log holds Flower's "received N results" and the wrappers' clip counts: it is
    listed as operator-only, opened owner-only, its first line the notice (once: a resumed
    run appends to it)."""
    from fedpriv.scenarios.app.quiet import open_log

    from fedpriv.reporting.runlog import RUN_LOG_FILE, RUN_LOG_NOTICE

    assert OUTPUT_READERS[RUN_LOG_FILE] == RUN_LOG_NOTICE and "operator only" in RUN_LOG_NOTICE
    assert "amplification" in RUN_LOG_NOTICE and "clip counts" in RUN_LOG_NOTICE
    path = tmp_path / "out" / RUN_LOG_FILE
    for text in ("first run\n", "resumed\n"):
        with open_log(path) as log:
            log.write(text)
    assert path.read_text().splitlines() == [f"# {RUN_LOG_NOTICE}", "first run", "resumed"]
    assert path.stat().st_mode & 0o777 == 0o600


def test_operator_files_are_written_owner_only(tmp_path):
    """operator.jsonl, checkpoint.pkl and a checkpoint's model file are the operator's: each
    is readable by its owner only, an operator.jsonl left group/world-readable by an older
    version included (a resumed run tightens it)."""
    import numpy as np

    from fedpriv.checkpoint import MODEL_FILES, OWN_FILE_BYTES, CheckpointWriter
    from fedpriv.reporting.runlog import OPERATOR_FILE, RunLog

    old = tmp_path / OPERATOR_FILE
    old.write_text("")
    old.chmod(0o644)
    RunLog(tmp_path, keep_rounds=0).append_round(_record(1))
    CheckpointWriter(tmp_path).write(
        {"round": 1, "arrays": [np.zeros(OWN_FILE_BYTES // 4, np.float32)]}, model=object()
    )
    written = [old, tmp_path / "checkpoint.pkl", *tmp_path.glob(MODEL_FILES)]
    assert len(written) == 3 and all(p.stat().st_mode & 0o777 == 0o600 for p in written)
