"""A local Ray started beside other simulations on one machine, or one line that says why not.

Several ``fedpriv run`` started at once each start their own local Ray (``ray.init``), and Ray
2.55's start has two fixed deadlines: the raylet waits about 20 s for its dashboard agent (a
Python process importing Ray's dashboard modules) to write its port files, and aborts when
it misses them (``Timed out waiting for file .../metrics_agent_port_...``); the driver waits
30 s for the raylet to register ("The current node timed out during startup"). Four starts
in the same second on 2 busy CPUs miss them (measured: all four failed at a load of 35, each
agent taking about 60 s). Neither deadline can be set (``RAY_agent_register_timeout_ms`` is
not read for the port files: measured at 500 ms, the raylet still waited 16 s).

So a local start here (:func:`start_local_ray`)

- holds a lock of the machine (:data:`LOCK_NAME` in the temp folder, ``flock``: the kernel
  frees it when its holder ends) while ``ray.init`` runs: one Ray starts at a time, the
  other simulations wait (and say so) instead of starving each other's agents;
- retries, still holding the lock, a start that failed on those deadlines
  (:func:`is_startup_race`), up to :data:`ATTEMPTS` times, after stopping what the failed
  start left running (:func:`stop_failed_start`);
- gives up with :class:`RayStartError`, one line: Ray's message, the raylet's own fatal line
  from its session's log (:func:`raylet_cause`), the machine's load, and where Ray's logs are.

An attached cluster (``address``) is started by someone else: no lock, no retry.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

ATTEMPTS = 5  # at a load of 80 on 2 CPUs a start took up to 3 (measured); each miss costs ~1 min
LOCK_NAME = "fedpriv-ray-start.lock"
# what Ray 2.55 raises when its start missed a deadline on a busy machine (lower case)
RACE_MARKERS = (
    "timed out during startup",  # node.py: the raylet did not register within 30 s
    "gcs has become overloaded",
    "failed to connect to gcs",
    "timed out while waiting for gcs",
    "failed to get node info",
)
_FATAL = re.compile(r"^\[[^\]]*\s([CE])\s[^\]]*\]\s*\(raylet\)\s*(?P<text>.*)$")
_CHECK = re.compile(r"Check failed:\s*\S+\s*(?P<text>.*)$")


class RayStartError(RuntimeError):
    """Ray did not start; ``str()`` is the one-line reason."""


def one_line(text: object, limit: int = 300) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def is_startup_race(err: BaseException) -> bool:
    """Whether ``err`` is a local Ray start that missed one of its fixed deadlines (worth
    another try), not a setting that can never work (a temp folder that is a file, ...)."""
    text = str(err).lower()
    return isinstance(err, TimeoutError) or any(m in text for m in RACE_MARKERS)


@contextlib.contextmanager
def start_lock(say: Callable[[str], None], folder: str | None = None) -> Iterator[None]:
    """Hold the machine's Ray start lock (``folder``/:data:`LOCK_NAME`, default the temp
    folder); ``say`` is told once when another simulation holds it. Without ``fcntl`` or a
    writable folder: no lock."""
    path = Path(folder or tempfile.gettempdir()) / LOCK_NAME
    try:
        import fcntl

        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except PermissionError:  # another user's lock file: flock needs no write access
            fd = os.open(path, os.O_RDONLY)
    except (ImportError, OSError):
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            say("another simulation on this machine is starting its Ray: waiting for it")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor frees the lock


def session_dir(pid: int | None = None, temp_dir: str | None = None) -> Path | None:
    """The newest Ray session folder that process ``pid`` (default this one) started under
    ``temp_dir`` (default Ray's: ``RAY_TMPDIR``, else ``TMPDIR``, else /tmp, + ``/ray``);
    Ray names it ``session_<date>_<time>_<micro>_<pid>``."""
    pid = os.getpid() if pid is None else pid
    if temp_dir is None:
        from ray._common.utils import get_default_ray_temp_dir

        temp_dir = get_default_ray_temp_dir()
    try:
        found = sorted(Path(temp_dir).glob(f"session_*_{pid}"), key=lambda p: p.stat().st_mtime)
    except OSError:
        return None
    return found[-1] if found else None


def raylet_cause(session: Path | None) -> str | None:
    """The raylet's last fatal or error line in ``session``'s ``logs/raylet.out``, shortened
    (the text after ``Check failed: <expr>``, file paths to their names); None without one."""
    if session is None:
        return None
    try:
        lines = (session / "logs" / "raylet.out").read_text(errors="replace").splitlines()
    except OSError:
        return None
    fatal = [m.group("text") for m in map(_FATAL.match, lines) if m]
    if not fatal:
        return None
    text = fatal[-1]
    check = _CHECK.search(text)
    text = check.group("text") if check else re.sub(r"^\S+:\d+:\s*", "", text)
    return one_line(re.sub(r"/\S*/([^/\s]+)", r"\1", text), 200)


def agent_hint(cause: str | None) -> str:
    """What a raylet cause means, where it is one of the start-up deadlines."""
    if cause and "Timed out waiting for file" in cause:
        return " (Ray's agent process did not start within the raylet's wait: the machine is busy)"
    return ""


def load_text() -> str:
    """``load average L on N CPUs`` (empty where the OS has no load average)."""
    try:
        return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    except (AttributeError, OSError):
        return ""


def reason(err: BaseException, attempt: int, session: Path | None) -> str:
    """The one-line reason a local Ray did not start."""
    parts = [f"Ray did not start: {one_line(err, 200)}"]
    cause = raylet_cause(session)
    if cause:
        parts.append(f"raylet: {cause}{agent_hint(cause)}")
    tried = f"{attempt} attempt{'s' if attempt > 1 else ''}"
    load = load_text()
    parts.append(f"{tried}, {load}" if load else tried)
    if session is not None:
        parts.append(f"Ray's logs: {session / 'logs'}")
    return "; ".join(parts)


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children first), from ``/proc``; empty elsewhere."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents[int(stat.parent.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = [], [pid]
    while frontier:
        kids = [p for p, parent in parents.items() if parent in frontier and p not in found]
        found += kids
        frontier = kids
    return found


def born(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, ``/proc/PID/stat`` field 22):
    with the pid, who a process is (a pid can be reused); None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        return int(text.rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def snapshot(pids: list[int]) -> dict[int, int]:
    """``pids`` that are alive now, each with its :func:`born` time."""
    return {p: b for p in pids if (b := born(p)) is not None}


def alive(processes: dict[int, int]) -> list[int]:
    """The processes of a :func:`snapshot` that still run (same pid, same start time; a
    zombie, which holds no memory and waits for its parent, counts as ended)."""

    def running(pid: int) -> bool:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state != "Z" and born(pid) == processes[pid]

    return [p for p in processes if running(p)]


def end_processes(processes: dict[int, int], grace: float = 1.0) -> list[int]:
    """End the processes of a :func:`snapshot` that still run: SIGTERM, up to ``grace``
    seconds to exit, then SIGKILL; the pids that had to be killed. What a finished run's
    ``ray.shutdown`` leaves: Ray stops its GCS and raylet, and the workers (the ClientApp
    actors, each holding its TensorFlow: ~850 MB) exit only once they notice the raylet is
    gone (measured: up to 10 s after the run)."""
    import time

    left = alive(processes)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = alive({p: processes[p] for p in left})
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return left


def stop_failed_start() -> None:
    """End what a failed ``ray.init`` left: Ray's state in this process and the processes it
    started (GCS, raylet, agents, log monitor: this process's children and theirs), which
    would otherwise use the CPUs the next attempt needs until this process exits."""
    import ray

    with contextlib.suppress(Exception):
        ray.shutdown()
    for pid in descendants(os.getpid()):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def start_local_ray(
    start: Callable[[], None],
    say: Callable[[str], None],
    attempts: int = ATTEMPTS,
    *,
    stop: Callable[[], None] = stop_failed_start,
    lock_folder: str | None = None,
) -> int:
    """Run ``start`` (``ray.init`` of a local Ray) under :func:`start_lock`, again after a
    start that missed Ray's deadlines (``stop`` ends what it left), at most ``attempts``
    times; the attempts it took. :class:`RayStartError` with the one-line :func:`reason`
    when it never started."""
    with start_lock(say, lock_folder):  # held across the attempts: a retry waits for nobody
        for attempt in range(1, attempts + 1):
            try:
                start()
                return attempt
            except Exception as err:  # noqa: BLE001 -- Ray raises plain Exception here
                session = session_dir()
                stop()
                if not is_startup_race(err) or attempt == attempts:
                    raise RayStartError(reason(err, attempt, session)) from err
                why = one_line(raylet_cause(session) or err, 160)
                say(f"Ray did not start ({why}); starting it again ({attempt + 1}/{attempts})")
    raise AssertionError("unreachable")  # pragma: no cover
