"""The release ledger in SQLite (fedpriv.privacy.ledger.store, fedpriv.privacy.releases):
attacks replayed against the real code — racing processes, edited and deleted ledgers, a
second local user's folder, symlinks — and the lifetime ε of events with different settings
against an independent dp_accounting composition."""

from __future__ import annotations

import multiprocessing as mp
import os
import sqlite3
import stat
from collections import OrderedDict
from pathlib import Path

import dp_accounting
import numpy as np
import pytest

from fedpriv.privacy.dpsgd import dpsgd_event
from fedpriv.privacy.ledger.store import DB_NAME, pack_reply, unpack_reply
from fedpriv.privacy.releases import (
    NO_FOLDER,
    STATE_ROOT_ENV,
    ReleaseCounter,
    StateFolderError,
    node_dir,
    read_ledger,
)

NOBODY = 65534  # a second local user (root drops to it in a forked child)


def _race(folder: str, worker: int, budget: float, digest_of_worker: bool, out) -> None:
    counter = ReleaseCounter(folder, "dp-sgd", 0)
    digest = f"d{worker}" if digest_of_worker else "same"
    ticket = counter.begin("s", 1, digest, run=f"r{worker}", budget=budget, rewind="charge")
    out.put(ticket.kind)


def _start_together(target, args_list):
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*a, out)) for a in args_list]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    return [out.get(timeout=5) for _ in procs]


@pytest.mark.parametrize("trial", range(8))
def test_eight_racing_processes_never_release_past_a_budget_of_three(tmp_path, trial):
    kinds = _start_together(_race, [(str(tmp_path), w, 3.0, True) for w in range(8)])
    assert sorted(kinds).count("fresh") == 3, kinds
    ledger = read_ledger(tmp_path, "dp-sgd", 0)
    assert (ledger.releases, ledger.spent, ledger.declined) == (3, 3.0, 5)


def _open_new_ledger(folder: str, barrier, out) -> None:
    barrier.wait(30)  # all eight open the same new file at once
    try:
        ReleaseCounter(folder, "dp-sgd", 0).begin("s", 1, "d", run="r", budget=100.0)
        out.put("ok")
    except Exception as error:  # noqa: BLE001 - the test reports what a process raised
        out.put(repr(error))


def test_eight_processes_opening_one_new_ledger_at_once_all_get_in(tmp_path):
    """SQLite answers "database is locked" without waiting where a wait could deadlock (the
    switch to WAL and the schema write of a new file); before the retry, 8 processes opening
    one new ledger at the same instant failed in about 1 of 10 trials."""
    ctx = mp.get_context("fork")
    for trial in range(30):
        barrier, folder = ctx.Barrier(8), tmp_path / f"t{trial}"
        args = [(str(folder), barrier)] * 8
        outcomes = _start_together(_open_new_ledger, args)
        assert outcomes == ["ok"] * 8, (trial, outcomes)
        assert read_ledger(folder, "dp-sgd", 0).releases == 1


@pytest.mark.parametrize("trial", range(8))
def test_two_processes_with_one_identical_request_get_one_fresh_release(tmp_path, trial):
    kinds = _start_together(_race, [(str(tmp_path), w, 100.0, False) for w in range(2)])
    assert sorted(kinds) == ["fresh", "refused"], kinds  # the second: answered, no cached reply
    assert read_ledger(tmp_path, "dp-sgd", 0).releases == 1


def _db(folder: Path) -> sqlite3.Connection:
    return sqlite3.connect(folder / DB_NAME, isolation_level=None)


def test_edited_rows_are_refused_by_the_database(tmp_path):
    counter = ReleaseCounter(tmp_path, "ifca", 3)
    for r in (1, 2, 3):
        assert counter.begin("s", r, f"d{r}", cost=1.0, budget=3.0).fresh
    db = _db(tmp_path)
    for sql in (
        "UPDATE releases SET cost = -1000",
        "DELETE FROM releases",
        "INSERT INTO releases (party, identity, sequence, round, digest, run, cost, unbounded,"
        " event, time) VALUES ('ifca', 3, 's', 9, 'x', '', -1000.0, 0, '', 0)",
        "INSERT INTO releases (party, identity, sequence, round, digest, run, cost, unbounded,"
        " event, time) VALUES ('ifca', 3, 's', 9, 'x', '', -1e999, 0, '', 0)",
        "INSERT INTO releases (party, identity, sequence, round, digest, run, cost, unbounded,"
        " event, time) VALUES ('ifca', 3, 's', 9, 'x', '', 1e999, 0, '', 0)",
    ):
        with pytest.raises(sqlite3.DatabaseError):
            db.execute(sql)
    assert counter.begin("s", 4, "d4", cost=1.0, budget=3.0).kind == "declined"
    assert read_ledger(tmp_path, "ifca", 3).spent == 3.0


def test_a_nan_or_negative_cost_is_refused_before_anything_is_written(tmp_path):
    counter = ReleaseCounter(tmp_path, "zone-node", 0)
    for cost in (float("nan"), -1.0, float("-inf")):
        with pytest.raises(ValueError, match="cost"):
            counter.begin("s", 1, "d", cost=cost)
    assert counter.load().releases == 0


def test_an_unbounded_release_exhausts_every_finite_budget(tmp_path):
    counter = ReleaseCounter(tmp_path, "zone-node", 0)
    assert counter.begin("s", 1, "d1", cost=float("inf")).fresh
    assert counter.load().spent == float("inf")
    assert counter.begin("s", 2, "d2", cost=1.0, budget=1e9).kind == "declined"


def test_the_ledger_deleted_between_processes_is_a_new_node_only_for_its_owner(tmp_path):
    """Deleting needs write access to the folder: only the node's own user has it (0700)."""
    counter = ReleaseCounter(tmp_path / "state", "dp-sgd", 0)
    assert counter.begin("s", 1, "d1").fresh
    mode = stat.S_IMODE(os.stat(tmp_path / "state").st_mode)
    assert mode == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "state" / DB_NAME).st_mode) == 0o600


def _as_nobody(fn, *args) -> int:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            code = fn(*args)
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


needs_root = pytest.mark.skipif(os.getuid() != 0, reason="a second local user needs root here")


@pytest.fixture
def shared_tmp():
    """A folder every local user can reach, like /tmp (sticky, world-writable)."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="fedpriv-shared-"))
    os.chmod(folder, 0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _precreate(folder: str) -> int:
    os.makedirs(folder, mode=0o777)
    os.chmod(folder, 0o777)
    return 0


@needs_root
def test_a_state_folder_precreated_by_another_user_is_refused(shared_tmp):
    folder = shared_tmp / "fedpriv-state-0"
    assert _as_nobody(_precreate, str(folder)) == 0
    assert os.stat(folder).st_uid == NOBODY
    with pytest.raises(StateFolderError, match="owned by uid 65534"):
        ReleaseCounter(folder, "dp-sgd", 0).begin("s", 1, "d")
    assert not (folder / DB_NAME).exists()


def _read_ledger(folder: str) -> int:
    try:
        (Path(folder) / DB_NAME).read_bytes()
    except PermissionError:
        return 3
    return 0


@needs_root
def test_another_user_can_neither_read_nor_replace_a_ledger(shared_tmp):
    folder = shared_tmp / "state"
    assert ReleaseCounter(folder, "dp-sgd", 0).begin("s", 1, "d").fresh
    assert _as_nobody(_read_ledger, str(folder)) == 3


def test_a_symlinked_or_others_writable_folder_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(StateFolderError, match="symbolic link"):
        ReleaseCounter(link, "zone-node", 1).begin("s", 1, "d")
    loose = tmp_path / "loose"
    loose.mkdir()
    os.chmod(loose, 0o777)
    with pytest.raises(StateFolderError, match="writable by others"):
        ReleaseCounter(loose, "zone-node", 1).begin("s", 1, "d")


def test_a_symlinked_ledger_file_is_refused(tmp_path):
    folder = tmp_path / "state"
    folder.mkdir(mode=0o700)
    (folder / DB_NAME).symlink_to(tmp_path / "elsewhere.sqlite3")
    with pytest.raises(StateFolderError, match="link"):
        ReleaseCounter(folder, "zone-node", 1).begin("s", 1, "d")


def test_a_node_without_a_state_folder_refuses_in_one_line(monkeypatch):
    monkeypatch.delenv(STATE_ROOT_ENV, raising=False)
    folder = node_dir("", "abc")
    assert str(folder) == NO_FOLDER
    with pytest.raises(StateFolderError) as err:
        ReleaseCounter(folder, "dp-sgd", 0).begin("s", 1, "d")
    assert "client-state-dir" in str(err.value) and "\n" not in str(err.value)


def test_no_shared_temporary_default(monkeypatch, tmp_path):
    monkeypatch.setenv(STATE_ROOT_ENV, str(tmp_path))
    assert node_dir("", "k") == tmp_path / "node-k"
    assert node_dir(str(tmp_path / "own"), "k") == tmp_path / "own"


def test_a_node_asked_to_train_on_other_data_refuses(tmp_path):
    counter = ReleaseCounter(tmp_path, "dp-sgd", 2)
    digits = {"dataset": "digits", "partition": "iid", "num-clients": 4, "seed": 0}
    assert counter.begin("s", 1, "d1", data=digits).fresh
    assert counter.begin("s", 2, "d2", data=dict(digits)).fresh
    other = {**digits, "dataset": "synthetic-mri"}
    ticket = counter.begin("s", 3, "d3", data=other)
    assert ticket.kind == "refused" and "other data" in ticket.reason


def test_a_cached_reply_is_an_npz_of_arrays_never_a_pickle(tmp_path):
    counter = ReleaseCounter(tmp_path, "dp-sgd", 0)
    reply = {
        "arrays": ("arrays", OrderedDict(w=np.arange(6.0).reshape(2, 3), b=np.ones(3, "f4"))),
        "metrics": ("metrics", {"loss": 0.5, "num-examples": 10}),
        "config": ("config", {"note": "x", "raw": b"\x00\x01", "list": [1, 2]}),
    }
    assert counter.begin("s", 1, "d").fresh
    counter.remember("s", 1, "d", reply)
    got = counter.cached("s", 1, "d")
    assert np.array_equal(got["arrays"][1]["w"], reply["arrays"][1]["w"])
    assert got["arrays"][1]["b"].dtype == np.float32
    assert got["metrics"][1] == reply["metrics"][1] and got["config"][1] == reply["config"][1]
    blob = sqlite3.connect(tmp_path / DB_NAME).execute("SELECT reply FROM replies").fetchone()[0]
    assert bytes(blob[:2]) == b"PK"  # a zip (npz)
    with np.load(__import__("io").BytesIO(blob), allow_pickle=False) as npz:
        assert all(npz[k].dtype != object for k in npz.files)
    assert unpack_reply(pack_reply(reply))["config"][1]["raw"] == b"\x00\x01"


def test_lifetime_epsilon_composes_the_stored_events_whatever_their_settings(tmp_path):
    """Releases with different z, batch sizes and δ: the ledger's ε is dp_accounting's
    composition of exactly those events (RDP and PLD computed here independently)."""
    settings = [(2.0, 8, 1), (3.0, 16, 2), (1.2, 8, 1), (2.5, 32, 3)]
    counter = ReleaseCounter(tmp_path, "dp-sgd", 0)
    events = []
    for r, (z, batch, epochs) in enumerate(settings, start=1):
        event = dpsgd_event(num_examples=256, batch_size=batch, epochs=epochs, noise_multiplier=z)
        events.append(event)
        assert counter.begin("s", r, f"d{r}", event=event, rewind="charge").fresh
    delta = 1e-5
    composed = dp_accounting.ComposedDpEvent(events)
    rdp = dp_accounting.rdp.RdpAccountant().compose(composed).get_epsilon(delta)
    pld = dp_accounting.pld.PLDAccountant().compose(composed).get_epsilon(delta)
    got = counter.load().lifetime_epsilon(delta)
    # PLD's discretisation interval differs from the default one here: 1e-4 relative
    assert got == pytest.approx(min(rdp, pld), rel=1e-4)
    assert got <= rdp * (1 + 1e-9)
    # a later node that now runs with z = 3 cannot make the earlier releases cheaper
    cheap = dpsgd_event(num_examples=256, batch_size=8, epochs=1, noise_multiplier=3.0)
    assert got > ReleaseCounter(tmp_path / "x", "dp-sgd", 0).load().lifetime_epsilon(delta)
    rdp_cheap = (
        dp_accounting.rdp.RdpAccountant()
        .compose(dp_accounting.SelfComposedDpEvent(cheap, len(settings)))
        .get_epsilon(delta)
    )
    assert got > rdp_cheap


def test_an_epsilon_budget_declines_on_the_composition_of_stored_events(tmp_path):
    counter = ReleaseCounter(tmp_path, "dp-sgd", 0)
    loose = dpsgd_event(num_examples=256, batch_size=8, epochs=1, noise_multiplier=0.8)
    tight = dpsgd_event(num_examples=256, batch_size=8, epochs=1, noise_multiplier=3.0)
    budget = (8.0, 1e-5)
    kinds = []
    for r in range(1, 40):
        event = loose if r < 4 else tight  # z changed between runs: 0.8, then 3
        ticket = counter.begin(
            "s", r, f"d{r}", event=event, epsilon_budget=budget, budget_name="max-epsilon = 8",
            rewind="charge",
        )  # fmt: skip
        kinds.append(ticket.kind)
    assert "declined" in kinds
    assert counter.load().lifetime_epsilon(1e-5) <= 8.0 + 1e-9


def test_another_tmpdir_or_a_reboot_does_not_move_a_ledger(monkeypatch, tmp_path):
    """No folder depends on the temporary directory: a node's ledger is where its own
    client-state-dir (or its process's state root) says, whatever TMPDIR is."""
    import tempfile

    monkeypatch.setenv(STATE_ROOT_ENV, str(tmp_path / "root"))
    before = node_dir("", "k"), node_dir(str(tmp_path / "own"), "k")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "elsewhere"))
    monkeypatch.setattr(tempfile, "tempdir", None)
    assert (node_dir("", "k"), node_dir(str(tmp_path / "own"), "k")) == before
    monkeypatch.delenv(STATE_ROOT_ENV)
    assert str(node_dir("", "k")) == NO_FOLDER  # never a fallback into TMPDIR


def test_a_budget_at_another_delta_composes_every_stored_event(tmp_path):
    """z and δ changed between runs (2 then 3; 1e-5 then 1e-3): the budget is decided on the
    composition of all stored events at the δ asked now, an (ε, δ) pair that holds for every
    release the node made."""
    counter = ReleaseCounter(tmp_path, "dp-sgd", 0)
    first = dpsgd_event(num_examples=256, batch_size=8, epochs=1, noise_multiplier=2.0)
    later = dpsgd_event(num_examples=256, batch_size=8, epochs=1, noise_multiplier=3.0)
    for r in (1, 2, 3):
        assert counter.begin("s", r, f"d{r}", event=first, rewind="charge").fresh
    composed = dp_accounting.ComposedDpEvent([first] * 3 + [later])
    eps_all = min(
        dp_accounting.rdp.RdpAccountant().compose(composed).get_epsilon(1e-3),
        dp_accounting.pld.PLDAccountant().compose(composed).get_epsilon(1e-3),
    )
    ticket = counter.begin("s", 4, "d4", event=later, epsilon_budget=(eps_all * 0.99, 1e-3),
                           budget_name="max-epsilon", rewind="charge")  # fmt: skip
    assert ticket.kind == "declined" and "over its 4 releases" in ticket.reason
    assert counter.begin("s", 4, "d4b", event=later, epsilon_budget=(eps_all * 1.01, 1e-3),
                         rewind="charge").fresh  # fmt: skip
