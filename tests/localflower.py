"""Start Flower's own executables on localhost for a test, and always clean them up.

Free loopback ports, one log file per process, bounded waits, and a stop that ends every
process the test started *and their descendants* (SuperExec, ServerApp, ClientApp and Ray
processes are started detached by Flower, so a process group is not enough): the process
tree is read from ``/proc`` before anything is signalled; only those ids are signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
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


def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids, read from /proc (Linux)."""
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def descendants(pids: Sequence[int]) -> list[int]:
    """``pids`` and every process below them (breadth first)."""
    tree, out, todo = _children(), [], list(pids)
    while todo:
        pid = todo.pop(0)
        out.append(pid)
        todo.extend(tree.get(pid, []))
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

    def start(
        self, name: str, cmd: Sequence[str], env: Mapping[str, str] | None = None
    ) -> subprocess.Popen:
        """Start ``cmd`` in its own session (``env`` added to the common environment), output
        appended to ``<log_dir>/<name>.log``."""
        log = (self.log_dir / f"{name}.log").open("a")
        proc = subprocess.Popen(
            list(cmd),
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**self.env, **(env or {})},
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen) -> None:
        """SIGKILL ``proc`` and every process below it (a crash of that machine)."""
        _signal(descendants([proc.pid]), signal.SIGKILL)
        proc.wait(timeout=20)

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM every started process and its descendants; SIGKILL what is left."""
        pids = descendants([p.pid for p in self.procs if p.poll() is None])
        _signal(pids, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        _signal(descendants(pids), signal.SIGKILL)  # children that outlived SIGTERM
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
            raise RuntimeError(f"{dead[0].args[0]} exited with {dead[0].returncode}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 (loopback)
                if 200 <= response.status < 300:
                    return
        time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {timeout_s:.0f} s")


@contextlib.contextmanager
def processes(log_dir: Path, env: Mapping[str, str]) -> Iterator[Processes]:
    """``with processes(dir, env) as procs:`` -- everything started is stopped on exit."""
    procs = Processes(log_dir, env)
    try:
        yield procs
    finally:
        procs.stop()
