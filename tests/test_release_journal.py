"""The release ledger as an append-only journal (:mod:`fedpriv.privacy.journal`): one line
per charge, old whole-JSON ledgers read and extended as they are, a line torn by a crash
counted as a charge (its request refused, never answered with fresh noise)."""

from __future__ import annotations

import json
import os

import pytest

from fedpriv.privacy import journal
from fedpriv.privacy.releases import ReleaseCounter


def _forget(path) -> None:
    """Drop this process's cached fold, as a new process would start."""
    journal._CACHE.pop(path, None)


def test_a_charge_appends_one_line_and_the_file_never_holds_the_whole_ledger(tmp_path):
    counter = ReleaseCounter(tmp_path, "zone-node", 0)
    for r in range(1, 4):
        assert counter.begin("s", r, f"d{r}", run="a", cost=0.5).fresh
    lines = counter.path.read_bytes().splitlines()
    assert len(lines) == 3
    assert [json.loads(x)["digest"] for x in lines] == ["d1", "d2", "d3"]
    assert all(b"releases" not in x for x in lines)  # a line is one charge, not a ledger
    _forget(counter.path)
    ledger = counter.load()
    assert (ledger.releases, ledger.spent) == (3, 1.5)
    assert ledger.sequences["s"] == {"count": 3, "digests": ["d1", "d2", "d3"]}
    assert ledger.runs["s/a"] == {"round": 3, "count": 3}
    assert counter.begin("s", 2, "d2", run="b").kind == "refused"  # answered, in any run
    assert counter.begin("s", 3, "x", run="a").kind == "refused"  # rewound in run a


def test_a_ledger_written_before_the_journal_is_read_and_extended(tmp_path):
    counter = ReleaseCounter(tmp_path, "dp-sgd", 2)
    legacy = {
        "releases": 2,
        "spent": 2.0,
        "declined": 1,
        "sequences": {"s": {"count": 2, "digests": ["d1", "d2"]}},
        "runs": {"s/old": {"round": 2, "count": 2}},
    }
    counter.path.write_text(json.dumps(legacy, sort_keys=True))  # no newline at its end
    ledger = counter.load()
    assert (ledger.releases, ledger.spent, ledger.declined) == (2, 2.0, 1)
    assert counter.begin("s", 1, "d1", run="new", rewind="charge").kind == "refused"
    assert counter.begin("s", 3, "d3", run="old", rewind="charge").fresh
    first, second = counter.path.read_bytes().splitlines()
    assert json.loads(first) == legacy and json.loads(second)["digest"] == "d3"
    _forget(counter.path)
    ledger = counter.load()
    assert (ledger.releases, ledger.spent) == (3, 3.0)
    assert ledger.sequences["s"]["digests"] == ["d1", "d2", "d3"]
    assert ledger.runs["s/old"] == {"round": 3, "count": 3}


@pytest.mark.parametrize("cut", [10, 40, 70])
def test_a_torn_last_line_counts_as_a_charge_and_its_request_gets_no_fresh_noise(tmp_path, cut):
    """A crash while the charge line was written (its reply never left): the fragment counts
    as one release at the journal's largest cost, and when its sequence and digest survived,
    the identical request is refused. The next charge starts a new line."""
    counter = ReleaseCounter(tmp_path, "zone-node", 1)
    assert counter.begin("seq", 1, "digest-1", run="a", cost=0.25).fresh
    line = json.dumps(
        {"charge": "seq", "cost": 0.25, "digest": "digest-2", "round": 2, "run": "a"},
        sort_keys=True,
        separators=(",", ":"),
    ).encode()
    with counter.path.open("ab") as fh:
        fh.write(line[:cut])  # torn: no newline, not a JSON object
    _forget(counter.path)
    ledger = counter.load()
    assert (ledger.releases, ledger.spent) == (2, 0.5)
    digest_written = b'"digest":"digest-2"' in line[:cut]
    kind = counter.begin("seq", 2, "digest-2", run="b", cost=0.25).kind
    assert kind == ("refused" if digest_written else "fresh")
    assert counter.begin("seq", 3, "digest-3", run="b", cost=0.25).fresh
    _forget(counter.path)
    ledger = counter.load()
    assert ledger.releases == (3 if digest_written else 4)
    assert ledger.spent == pytest.approx(0.25 * ledger.releases)
    lines = counter.path.read_bytes().splitlines()
    assert lines[1] == line[:cut] and json.loads(lines[-1])["digest"] == "digest-3"


def test_a_journal_appended_or_replaced_by_another_process_is_read_again(tmp_path):
    counter = ReleaseCounter(tmp_path, "ifca", 0)
    assert counter.begin("s", 1, "d1").fresh
    assert counter.load().releases == 1
    other = {"charge": "s", "cost": 1.0, "digest": "d2", "round": 2, "run": ""}
    with counter.path.open("a") as fh:  # another process appends
        fh.write(json.dumps(other) + "\n")
    assert counter.load().releases == 2
    assert counter.begin("s", 2, "d2", rewind="charge").kind == "refused"
    replaced = tmp_path / "other.json"
    replaced.write_text(json.dumps({**other, "digest": "d9"}) + "\n")
    os.replace(replaced, counter.path)  # another file now: read from its start
    ledger = counter.load()
    assert ledger.releases == 1 and ledger.sequences["s"]["digests"] == ["d9"]


def test_a_decline_is_one_line_and_counts(tmp_path):
    counter = ReleaseCounter(tmp_path, "ifca", 4)
    assert counter.begin("s", 1, "d1", cost=2.0, budget=3.0).fresh
    assert counter.begin("s", 2, "d2", cost=2.0, budget=3.0).kind == "declined"
    _forget(counter.path)
    ledger = counter.load()
    assert (ledger.releases, ledger.spent, ledger.declined) == (1, 2.0, 1)
    assert len(counter.path.read_bytes().splitlines()) == 2
