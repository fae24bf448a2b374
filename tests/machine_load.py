"""A machine kept loaded while a test runs: at least ``target`` runnable processes, the test's
own spinning processes making up what the rest of the machine does not supply.

The load average is the mean number of runnable processes, whoever they are; a test that
must run "at a load of k x the cores" needs that many runnable beside it, not that many of its
own. On an idle machine all of the test's spinners run. Beside other work (CI's second lane,
the other xdist worker) :class:`LoadKeeper` pauses (``SIGSTOP``) as many spinners as other
runnable processes stand in for, and resumes them (``SIGCONT``) when those stop: the same
load, without the spinners taking CPU from work that already loads the machine (in CI they
took minutes of it). Every :data:`PERIOD_S` it counts the processes runnable at that instant
beside the work under test: every thread in state R (``/proc/<pid>/task/<tid>/stat``: the
kernel's load counts threads) but the spinners, this test's process and the sessions the
test names as its own (``beside``: the runs it checks, so
that they never count as their own load), and acts on the mean of the last :data:`WINDOW`
samples. :attr:`LoadKeeper.mean_runnable` is the load the work ran beside (others plus the
running spinners), which the test asserts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections import deque
from collections.abc import Callable, Sequence

PERIOD_S = 0.25  # a scan of every thread costs ~5-25 ms of CPU on a busy 2-core machine
WINDOW = 4  # samples averaged: 1 s


def _fields(path: str) -> list[str] | None:
    """The fields after the command of a ``stat`` file (None: the task ended meanwhile)."""
    try:
        with open(path, encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _runnable_threads(pid: str, fields: list[str]) -> int:
    """Threads of process ``pid`` in state R (field 20 of stat: its number of threads)."""
    if int(fields[17]) == 1:
        return int(fields[0] == "R")
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    return sum(1 for tid in tasks if (f := _fields(f"/proc/{pid}/task/{tid}/stat")) and f[0] == "R")


def runnable_beside(skip_pids: set[int], skip_sessions: set[int]) -> int:
    """Threads runnable now (state R) but those of ``skip_pids`` and ``skip_sessions``."""
    count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in skip_pids:
            continue
        fields = _fields(f"/proc/{entry.name}/stat")
        if fields is not None and int(fields[3]) not in skip_sessions:  # field 6: session
            count += _runnable_threads(entry.name, fields)
    return count


class LoadKeeper:
    """Keeps at least ``target`` processes runnable beside the sessions ``beside()`` returns
    (the work under test) with the spinners ``pids``: a context manager; on exit every spinner
    is resumed (so a later SIGTERM reaches it)."""

    def __init__(
        self, pids: Sequence[int], target: int, beside: Callable[[], set[int]] = set
    ) -> None:
        self.pids, self.target, self.beside = list(pids), target, beside
        self.running = set(self.pids)  # spinners start running
        self.others: deque[float] = deque(maxlen=WINDOW)
        self.samples: list[int] = []
        self.spinning: list[int] = []  # spinners running at each sample
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, name="load-keeper", daemon=True)

    @property
    def mean_runnable(self) -> float:
        """The mean runnable count beside the work under test while kept."""
        return sum(self.samples) / len(self.samples) if self.samples else 0.0

    @property
    def mean_spinning(self) -> float:
        """The mean number of its spinners running while kept."""
        return sum(self.spinning) / len(self.spinning) if self.spinning else 0.0

    def __enter__(self) -> LoadKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for pid in self.pids:
            self._signal(pid, signal.SIGCONT)

    def _keep(self) -> None:
        me = os.getpid()
        while not self._stop.wait(PERIOD_S):
            others = runnable_beside({me, *self.pids}, self.beside())
            self.samples.append(others + len(self.running))
            self.spinning.append(len(self.running))
            self.others.append(others)
            wanted = self.target - round(sum(self.others) / len(self.others))
            self._set_running(min(len(self.pids), max(0, wanted)))

    def _set_running(self, count: int) -> None:
        for pid in self.pids:
            if len(self.running) < count and pid not in self.running:
                self._signal(pid, signal.SIGCONT)
                self.running.add(pid)
            elif len(self.running) > count and pid in self.running:
                self._signal(pid, signal.SIGSTOP)
                self.running.discard(pid)

    @staticmethod
    def _signal(pid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
