"""A party's release ledger in an embedded database: SQLite, one file per state folder.

Every party that adds noise or keeps a budget (a DP-SGD client, an IFCA user, a zone node, an
LDP client, the server) records each release it makes as one row of ``releases`` in
``<state folder>/ledger.sqlite3``, before the release leaves (:class:`LedgerStore.decide`):

* **Atomic across threads and processes.** Deciding and charging a request is one
  transaction opened with ``BEGIN IMMEDIATE`` (SQLite's write lock is taken before the ledger
  is read), in WAL mode with ``synchronous = FULL`` (:func:`sync_level`): two processes
  can never both see the same ledger and both charge past a budget, and a committed charge
  survives a kill at any point (a transaction cut by a kill is rolled back: nothing was
  released from it).
* **Refuses impossible rows.** ``CHECK`` constraints refuse a cost that is not a finite
  number ≥ 0 (NaN, ±Infinity, negative) and a row without its digest (a release that adds
  no noise against its reader, whose cost is unbounded, is a row with ``unbounded = 1``:
  it exhausts every finite budget; a cost of 0 is a release the party's own unit does not
  charge, an IFCA user with ν = 0); triggers refuse
  any ``UPDATE`` or ``DELETE`` of a release (append-only). An edit of the file by its owner
  outside SQLite is not prevented (nothing in a file the owner can write can be), but an
  edit through SQLite fails, and :func:`fedpriv.privacy.ledger.folder.checked_folder` keeps
  every other local user out of the folder.
* **Event-level.** Each release row holds its own privacy event (a ``dp_accounting``
  ``DpEvent``, serialised by :mod:`fedpriv.privacy.ledger.events`), its request digest, run id and
  time, so a party's lifetime ε is the composition of the events it really released, whatever
  settings each release had (:func:`fedpriv.privacy.ledger.events.compose`).
* **Cached replies are arrays, never pickles.** The reply of a sequence's last release is kept
  as an ``.npz`` blob read with ``allow_pickle=False`` (:func:`pack_reply`).
* **Whose data.** A party's first release records the resolved data settings it was made on
  (``identities``); a later request on other data is refused (the caller's one line).
"""

from __future__ import annotations

import io
import json
import math
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DB_NAME",
    "LedgerStore",
    "Row",
    "Snapshot",
    "count_releases",
    "pack_reply",
    "unpack_reply",
]

DB_NAME = "ledger.sqlite3"
BUSY_TIMEOUT_MS = 120_000  # a writer waits this long for another process's transaction

SCHEMA = """
CREATE TABLE IF NOT EXISTS releases (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    party TEXT NOT NULL,
    identity INTEGER NOT NULL,
    sequence TEXT NOT NULL,
    round INTEGER NOT NULL,
    digest TEXT NOT NULL CHECK (length(digest) > 0),
    run TEXT NOT NULL,
    cost REAL NOT NULL CHECK (typeof(cost) = 'real' AND cost >= 0 AND cost < 1e308),
    unbounded INTEGER NOT NULL CHECK (unbounded IN (0, 1)),
    event TEXT NOT NULL,
    time REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS releases_of ON releases (party, identity, sequence, digest);
CREATE INDEX IF NOT EXISTS releases_in_run ON releases (party, identity, sequence, run);
CREATE TABLE IF NOT EXISTS declines (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    party TEXT NOT NULL,
    identity INTEGER NOT NULL,
    reason TEXT NOT NULL,
    time REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS replies (
    party TEXT NOT NULL,
    identity INTEGER NOT NULL,
    sequence TEXT NOT NULL,
    round INTEGER NOT NULL,
    digest TEXT NOT NULL,
    reply BLOB NOT NULL,
    PRIMARY KEY (party, identity, sequence)
);
CREATE TABLE IF NOT EXISTS identities (
    party TEXT NOT NULL,
    identity INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (party, identity)
);
CREATE TRIGGER IF NOT EXISTS releases_append_only_update BEFORE UPDATE ON releases
BEGIN SELECT RAISE(ABORT, 'the release ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS releases_append_only_delete BEFORE DELETE ON releases
BEGIN SELECT RAISE(ABORT, 'the release ledger is append-only'); END;
"""


@dataclass(frozen=True)
class Snapshot:
    """What one decision needs of a party's ledger (read inside its transaction)."""

    releases: int
    spent: float
    answered: bool  # the sequence already answered this request digest
    run_round: int | None  # the sequence's last released round in this run (None: none)
    run_count: int  # the sequence's releases in this run


@dataclass(frozen=True)
class Row:
    """One release as stored."""

    sequence: str
    round: int
    digest: str
    run: str
    cost: float
    event: str


_LOCAL = threading.local()
SYNC_ENV = "FEDPRIV_LEDGER_SYNC"  # full (default) | normal (fedpriv's simulations)


def sync_level() -> str:
    """SQLite's ``synchronous`` for this process's ledgers: ``FULL`` (a committed charge
    survives a power loss: every commit is synced), unless ``$FEDPRIV_LEDGER_SYNC`` is
    ``normal`` (WAL's NORMAL: a committed charge survives a kill of any process, not a power
    loss; what fedpriv's simulation launcher sets for its simulated federations, where a
    synced commit per charge cost ~3 ms on this project's machine)."""
    return "NORMAL" if os.environ.get(SYNC_ENV, "").strip().lower() == "normal" else "FULL"


def _connection(path: Path) -> sqlite3.Connection:
    """This thread's connection to ``path`` (schema created once, WAL, FULL sync)."""
    conns: dict[str, sqlite3.Connection] = getattr(_LOCAL, "conns", None) or {}
    _LOCAL.conns = conns
    key = str(path)
    conn = conns.get(key)
    if conn is not None and _same_file(conn, path):
        return conn
    conn = sqlite3.connect(key, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    _retry_while_locked(lambda: _use_wal(conn))
    conn.execute(f"PRAGMA synchronous = {sync_level()}")
    _retry_while_locked(lambda: _create_schema(conn))
    _LOCAL.idents = {**getattr(_LOCAL, "idents", {}), key: _ident(path)}
    conns[key] = conn
    return conn


def _use_wal(conn: sqlite3.Connection) -> None:
    """WAL mode (kept in the file: only the first connection to a new file switches it)."""
    if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
        conn.execute("PRAGMA journal_mode = WAL")


def _create_schema(conn: sqlite3.Connection) -> None:
    """The tables, indexes and triggers, in one write transaction (rolled back if cut)."""
    try:
        conn.executescript(f"BEGIN IMMEDIATE;{SCHEMA}COMMIT;")
    except sqlite3.Error:
        if conn.in_transaction:
            conn.rollback()
        raise


def _retry_while_locked(action: Any) -> None:
    """``action()``, again while SQLite answers "database is locked" without waiting, up to
    ``BUSY_TIMEOUT_MS``. SQLite skips the busy handler where waiting could deadlock: a
    journal-mode switch or a schema write racing other processes' first opening of a new
    file (8 processes opening one new ledger at once failed in 3 of 30 trials before)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    pause = 0.005
    while True:
        try:
            action()
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.25)


def _ident(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def _same_file(conn: sqlite3.Connection, path: Path) -> bool:
    """False when the database file this connection opened was removed or replaced."""
    return getattr(_LOCAL, "idents", {}).get(str(path)) == _ident(path)


class LedgerStore:
    """The ledger database of one state folder (``<folder>/ledger.sqlite3``)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.path = self.folder / DB_NAME

    def __repr__(self) -> str:
        return f"LedgerStore({str(self.path)!r})"

    def connect(self) -> sqlite3.Connection:
        """This thread's connection (the folder must already be checked and exist)."""
        return _connection(self.path)

    def transaction(self) -> _Transaction:
        """``with store.transaction() as db:`` one ``BEGIN IMMEDIATE`` ... ``COMMIT``."""
        return _Transaction(self.connect())

    def rows(self, party: str, identity: int, db: sqlite3.Connection | None = None) -> list[Row]:
        """Every release of one party, oldest first."""
        db = db or self.connect()
        cur = db.execute(
            "SELECT sequence, round, digest, run, cost, unbounded, event FROM releases "
            "WHERE party = ? AND identity = ? ORDER BY id",
            (party, int(identity)),
        )
        return [
            Row(s, int(r), d, run, math.inf if u else float(c), e)
            for s, r, d, run, c, u, e in cur.fetchall()
        ]

    def snapshot(
        self, db: sqlite3.Connection, party: str, identity: int, sequence: str, digest: str,
        run: str,
    ) -> Snapshot:  # fmt: skip
        """The party's totals, whether ``digest`` was answered, and the run's last round."""
        key = (party, int(identity))
        releases, spent, unbounded = db.execute(
            "SELECT count(*), total(cost), max(unbounded) FROM releases "
            "WHERE party = ? AND identity = ?",
            key,
        ).fetchone()
        answered = db.execute(
            "SELECT 1 FROM releases WHERE party = ? AND identity = ? AND sequence = ? "
            "AND digest = ? LIMIT 1",
            (*key, sequence, digest),
        ).fetchone()
        last, count = db.execute(
            "SELECT (SELECT round FROM releases WHERE party = :party AND identity = :identity "
            "AND sequence = :sequence AND run = :run ORDER BY id DESC LIMIT 1), count(*) FROM "
            "releases WHERE party = :party AND identity = :identity AND sequence = :sequence "
            "AND run = :run",
            {"party": party, "identity": int(identity), "sequence": sequence, "run": run},
        ).fetchone()
        total = math.inf if unbounded else float(spent)
        return Snapshot(int(releases), total, answered is not None, last, int(count))

    def events(self, db: sqlite3.Connection, party: str, identity: int) -> list[str]:
        """The stored privacy events of the party's releases (JSON), oldest first."""
        cur = db.execute(
            "SELECT event FROM releases WHERE party = ? AND identity = ? AND event != '' "
            "ORDER BY id",
            (party, int(identity)),
        )
        return [str(e) for (e,) in cur.fetchall()]

    def declined(self, party: str, identity: int, db: sqlite3.Connection | None = None) -> int:
        db = db or self.connect()
        (n,) = db.execute(
            "SELECT count(*) FROM declines WHERE party = ? AND identity = ?", (party, identity)
        ).fetchone()
        return int(n)

    @staticmethod
    def charge(db: sqlite3.Connection, party: str, identity: int, row: Row) -> None:
        """Append one release (inside the caller's transaction)."""
        cost = float(row.cost)
        if math.isnan(cost) or cost < 0:
            raise ValueError(f"cost = {row.cost!r} is not allowed; expected a number >= 0")
        unbounded = math.isinf(cost)
        db.execute(
            "INSERT INTO releases (party, identity, sequence, round, digest, run, cost,"
            " unbounded, event, time) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (party, int(identity), row.sequence, int(row.round), row.digest, row.run,
             0.0 if unbounded else cost, int(unbounded), row.event, time.time()),
        )  # fmt: skip

    @staticmethod
    def decline(db: sqlite3.Connection, party: str, identity: int, reason: str) -> None:
        db.execute(
            "INSERT INTO declines (party, identity, reason, time) VALUES (?, ?, ?, ?)",
            (party, int(identity), reason, time.time()),
        )

    def data_of(self, party: str, identity: int, db: sqlite3.Connection) -> str | None:
        """The data settings (JSON) the party's releases were made on, or None."""
        got = db.execute(
            "SELECT data FROM identities WHERE party = ? AND identity = ?", (party, identity)
        ).fetchone()
        return None if got is None else str(got[0])

    @staticmethod
    def bind_data(db: sqlite3.Connection, party: str, identity: int, data: str) -> None:
        db.execute(
            "INSERT OR IGNORE INTO identities (party, identity, data) VALUES (?, ?, ?)",
            (party, int(identity), data),
        )

    def remember(
        self, party: str, identity: int, sequence: str, server_round: int, digest: str, reply: bytes
    ) -> None:
        """Keep ``reply`` (:func:`pack_reply`'s bytes) as the sequence's last reply."""
        with self.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO replies (party, identity, sequence, round, digest, reply)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (party, int(identity), sequence, int(server_round), digest, reply),
            )

    def reply(
        self, party: str, identity: int, sequence: str, server_round: int, digest: str
    ) -> bytes | None:
        got = (
            self.connect()
            .execute(
                "SELECT reply FROM replies WHERE party = ? AND identity = ? AND sequence = ? "
                "AND round = ? AND digest = ?",
                (party, int(identity), sequence, int(server_round), digest),
            )
            .fetchone()
        )
        return None if got is None else bytes(got[0])


class _Transaction:
    """``BEGIN IMMEDIATE`` on enter; ``COMMIT`` on a clean exit, else ``ROLLBACK``."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        self.db.execute("COMMIT" if kind is None else "ROLLBACK")


def count_releases(root: str | Path) -> int:
    """The releases recorded in every ledger database under ``root`` (its own and its
    ``node-*`` folders'; 0 when there is none), read-only."""
    total = 0
    root = Path(root)
    for db in [root / DB_NAME, *sorted(root.glob(f"node-*/{DB_NAME}"))]:
        if not db.is_file():
            continue
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
        try:
            total += int(conn.execute("SELECT count(*) FROM releases").fetchone()[0])
        except sqlite3.OperationalError:  # no table yet
            pass
        finally:
            conn.close()
    return total


# --- cached replies: arrays and JSON, never pickles ----------------------------------------

_META = "__meta__"


def pack_reply(plain: Mapping[str, tuple[str, Any]]) -> bytes:
    """A reply's plain records (``{name: (kind, value)}``: ``arrays`` an ordered mapping of
    numpy arrays, ``metrics`` / ``config`` a flat mapping) as one ``.npz``: every array under
    its own key, the structure and the scalar records as JSON in ``__meta__``."""
    arrays: dict[str, np.ndarray] = {}
    meta: list[Any] = []
    for name, (kind, value) in plain.items():
        if kind == "arrays":
            keys = []
            for i, (key, array) in enumerate(value.items()):
                arrays[f"a{len(arrays)}"] = np.asarray(array)
                keys.append([key, f"a{len(arrays) - 1}"])
                del i
            meta.append([name, kind, keys])
        else:
            meta.append([name, kind, [[k, _jsonable(v)] for k, v in value.items()]])
    arrays[_META] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def unpack_reply(blob: bytes) -> dict[str, tuple[str, Any]]:
    """The inverse of :func:`pack_reply` (``allow_pickle=False``)."""
    with np.load(io.BytesIO(blob), allow_pickle=False) as npz:
        meta = json.loads(bytes(npz[_META]).decode())
        out: dict[str, tuple[str, Any]] = {}
        for name, kind, items in meta:
            if kind == "arrays":
                out[name] = (kind, OrderedDict((k, npz[ref]) for k, ref in items))
            else:
                out[name] = (kind, {k: _from_jsonable(v) for k, v in items})
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"__bytes__": value.hex()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _from_jsonable(value: Any) -> Any:
    if isinstance(value, dict) and "__bytes__" in value:
        return bytes.fromhex(value["__bytes__"])
    if isinstance(value, list):
        return [_from_jsonable(v) for v in value]
    return value
