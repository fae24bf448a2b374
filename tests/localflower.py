"""Start Flower's own executables on localhost for a test, and always clean them up.

Free loopback ports, one log file per process, bounded waits, and a stop that ends every
process the test started *and their descendants*. Each is started in its own session; what
belongs to the test (:meth:`Processes.tree`, read from ``/proc``) is every process below one
it started, every process still in one of its sessions (an orphan is re-parented but keeps
its session), and every process seen before that still runs the same command line
(Flower's SuperExec starts a session of its own: its ServerApp, orphaned, is in neither).
Only those ids are signalled: all are stopped (SIGSTOP, until no new one appears: a stopped
process starts nothing), then SIGKILLed until none is left. A wait that runs out raises
:class:`Failure` with one line; :meth:`Processes.leftovers` lists what is still alive (a
test's proof that nothing is left behind).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (bound together, then released)."""
    socks, ports = [], []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class Failure(AssertionError):
    """A deployment step that failed or ran out of time: one line, the reason."""


def _table() -> dict[int, tuple[str, int, int]]:
    """pid -> (state, parent pid, session id) of every process, read from /proc (Linux)."""
    table: dict[int, tuple[str, int, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        table[int(entry.name)] = (fields[0], int(fields[1]), int(fields[3]))
    return table


def descendants(pids: Sequence[int], sessions: Sequence[int] = ()) -> list[int]:
    """``pids``, every process below them (breadth first), and every process in one of
    ``sessions``; zombies (exited, not yet reaped) left out."""
    table = _table()
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [*pids, *(p for p, (_, _, sid) in table.items() if sid in set(sessions))]
    while todo:
        pid = todo.pop(0)
        if pid in out:
            continue
        if table.get(pid, ("Z",))[0] != "Z":
            out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def command_of(pid: int) -> str:
    """A process's command line ('' once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def holding(variable: str, value: str) -> list[str]:
    """``pid command`` of every live process (zombies left out) whose environment has
    ``variable=value`` (read from ``/proc/<pid>/environ``): a check of what is left that does
    not rely on the process tree (a test's processes and all they start inherit its
    ``FLWR_HOME``)."""
    marker = f"{variable}={value}".encode()
    out = []
    for pid, (state, _, _) in _table().items():
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if state != "Z" and marker in env:
            out.append(f"{pid} {command_of(pid)}")
    return out


def _signal(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


class Processes:
    """The processes of one test: :meth:`start` them, :meth:`stop` them all (idempotent)."""

    def __init__(self, log_dir: Path, env: Mapping[str, str]) -> None:
        self.log_dir, self.env = log_dir, dict(env)
        self.procs: list[subprocess.Popen] = []
        self.seen: dict[int, str] = {}  # every process of the test seen so far: its command

    def tree(self) -> list[int]:
        """Every live process of the test (recorded in :attr:`seen`): those started, their
        descendants, whatever is still in one of their sessions, and every process seen
        before that is still alive with the same command line (Flower starts a ServerApp in a
        session of its own: once its SuperExec is gone, only this finds it) and what is
        below those."""
        live = [p.pid for p in self.procs if p.poll() is None]
        # an exited leader's session still holds its orphans; its pid number is not reused
        # while they live (a process that now has the number is someone else's: not ours)
        gone = [p.pid for p in self.procs if p.poll() is not None]
        earlier = [pid for pid, cmd in self.seen.items() if cmd and command_of(pid) == cmd]
        sessions = [*live, *(g for g in gone if not Path(f"/proc/{g}").exists())]
        pids = descendants([*live, *earlier], sessions)
        for pid in pids:
            self.seen.setdefault(pid, command_of(pid))
        return pids

    @staticmethod
    def _end(collect: Callable[[], list[int]], wait_s: float) -> None:
        """SIGSTOP what ``collect()`` lists until it lists nothing new (a stopped process
        starts nothing), then SIGKILL it, again until ``collect()`` is empty or ``wait_s``
        passed (a killed process can take seconds to exit on a loaded machine)."""
        stopped: set[int] = set()
        for _ in range(20):
            new = set(collect()) - stopped
            if not new:
                break
            _signal(sorted(new), signal.SIGSTOP)
            stopped |= new
            time.sleep(0.05)
        deadline = time.monotonic() + wait_s
        while (left := collect()) and time.monotonic() < deadline:
            _signal(left, signal.SIGKILL)
            time.sleep(0.2)

    def leftovers(self) -> list[str]:
        """``pid command`` of every process of the test still alive ([] after :meth:`stop`)."""
        table = _table()
        return [
            f"{pid} [{table.get(pid, ('gone',))[0]}, parent {table.get(pid, (0, 0))[1]}] "
            f"{command_of(pid) or self.seen.get(pid, '?')}"
            for pid in self.tree()
        ]

    def start(
        self,
        name: str,
        cmd: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.Popen:
        """Start ``cmd`` in its own session (``env`` added to the common environment), output
        appended to ``<log_dir>/<name>.log``."""
        log = (self.log_dir / f"{name}.log").open("a")
        proc = subprocess.Popen(
            list(cmd),
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**self.env, **(env or {})},
            cwd=cwd,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def run(
        self,
        name: str,
        cmd: Sequence[str],
        *,
        timeout_s: float,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> str:
        """Run ``cmd`` to its end (as :meth:`start`); its output. Past ``timeout_s`` it is
        killed with everything below it and :class:`Failure` says so in one line."""
        proc = self.start(name, cmd, env=env, cwd=cwd)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill(proc)
            raise Failure(f"{name} did not finish within {timeout_s:.0f} s") from None
        return (self.log_dir / f"{name}.log").read_text(errors="replace")

    def kill(self, proc: subprocess.Popen) -> None:
        """SIGKILL ``proc``, every process below it and in its session (a crash of that
        machine)."""
        mine = {pid: command_of(pid) for pid in descendants([proc.pid], [proc.pid])}
        self.tree()  # recorded in seen, for stop()

        def below() -> list[int]:
            for pid in descendants([p for p, c in mine.items() if command_of(p) == c], [proc.pid]):
                mine.setdefault(pid, command_of(pid))
            return [p for p, c in mine.items() if c and command_of(p) == c]

        self._end(below, wait_s=20)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=20)

    def stop(self, kill_wait_s: float = 30.0) -> None:
        """End every process of the test (:meth:`tree`): all stopped first (SIGSTOP, until no
        new one appears), then SIGKILLed until none is left or ``kill_wait_s`` passed. A
        test's processes keep nothing that needs a clean shutdown (their folders are the
        test's)."""
        self._end(self.tree, wait_s=kill_wait_s)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)

    def logs(self, tail: int = 3000) -> str:
        """The last ``tail`` characters of every log (for assertion messages)."""
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-tail:]}"
            for p in sorted(self.log_dir.glob("*.log"))
        )

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_http_ok(url: str, *, timeout_s: float, procs: Processes) -> None:
    """Poll ``url`` until it answers 2xx; fail early if a started process exited."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        dead = [p for p in procs.procs if p.poll() is not None]
        if dead:
            raise Failure(f"{dead[0].args[0]} exited with {dead[0].returncode}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 (loopback)
                if 200 <= response.status < 300:
                    return
        time.sleep(0.5)
    raise Failure(f"{url} did not answer within {timeout_s:.0f} s")


@contextlib.contextmanager
def processes(log_dir: Path, env: Mapping[str, str]) -> Iterator[Processes]:
    """``with processes(dir, env) as procs:`` -- everything started is stopped on exit."""
    procs = Processes(log_dir, env)
    try:
        yield procs
    finally:
        procs.stop()
