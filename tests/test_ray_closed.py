"""A simulation's own Ray is closed to the network (docs/multi-machine.md, "Network security"),
and its workers run at the run's own priority.

Ray has no authentication by default; a local Ray that ``ray.init`` starts on Linux listens on
every interface. The simulation runner binds it to loopback
(:func:`fedpriv.scenarios.cli.ray_cluster.loopback_args`). Ray also starts its workers at nice
15; the runner keeps them at the driver's priority
(:func:`fedpriv.scenarios.cli.ray_cluster.worker_priority_env`). The helpers here read, while a
default ``fedpriv run`` runs, the listening TCP sockets of its whole process tree from
``/proc/net/tcp`` and ``/proc/net/tcp6`` (no psutil), which must all be on a loopback address,
and the niceness of each of its Ray workers (``ray::`` processes), which must be the test's
own. The simulation they check is the default run that :mod:`tests.test_run_leaves_no_process`
samples anyway (one simulation for both: ~16 CPU-s of the fast tier less).
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's "st" column


def _parents() -> dict[int, int]:
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            out[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def descendants(root: int) -> set[int]:
    """``root`` and every process below it (Linux /proc)."""
    parent, tree = _parents(), {root}
    while True:
        grown = tree | {pid for pid, up in parent.items() if up in tree}
        if grown == tree:
            return tree
        tree = grown


def _socket_inodes(pid: int) -> set[str]:
    found = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return found
    for fd in fds:
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            found.add(link[len("socket:[") : -1])
    return found


def _address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return ipaddress.IPv4Address(raw[::-1])
    return ipaddress.IPv6Address(b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4)))


def listening(pids: set[int]) -> set[tuple[str, str, int]]:
    """(process name, address, port) of every listening TCP socket that ``pids`` hold."""
    owner = {inode: pid for pid in pids for inode in _socket_inodes(pid)}
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            field = line.split()
            if field[3] != LISTEN or field[9] not in owner:
                continue
            host, port = field[1].split(":")
            try:
                name = Path(f"/proc/{owner[field[9]]}/comm").read_text().strip()
            except OSError:
                name = "?"
            found.add((name, str(_address(host)), int(port, 16)))
    return found


def niceness(pids: set[int]) -> dict[str, int]:
    """``{"<pid> <name>": nice}`` of the Ray workers (``ray::`` processes) among ``pids``."""
    found = {}
    for pid in pids:
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if name.startswith("ray::"):
            found[f"{pid} {name}"] = int(stat.rsplit(")", 1)[1].split()[16])  # field 19
    return found


def is_loopback(address: str) -> bool:
    """127.0.0.0/8, ::1, or an IPv4-mapped loopback (::ffff:127.0.0.1)."""
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def test_loopback_parsing_tells_open_from_closed():
    assert _address("0100007F") == ipaddress.IPv4Address("127.0.0.1")
    assert str(_address("0000000000000000FFFF00000100007F")) == "::ffff:7f00:1"
    assert is_loopback("::ffff:7f00:1") and is_loopback("127.0.0.1") and is_loopback("::1")
    for address in ("0.0.0.0", "::", "192.0.2.2", "::ffff:c000:202"):
        assert not is_loopback(address)


def test_local_ray_args_bind_loopback_and_an_attached_cluster_is_left_alone(monkeypatch):
    from fedpriv.scenarios.cli.ray_cluster import CLUSTER_SWITCH, LOOPBACK, loopback_args
    from ray._private import ray_constants

    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", True)
    monkeypatch.delenv(CLUSTER_SWITCH, raising=False)
    attached = {"address": "auto", "include_dashboard": False}
    assert loopback_args(attached) == attached and CLUSTER_SWITCH not in os.environ
    named = {"_node_ip_address": "10.0.0.5"}  # opened on purpose: the operator's choice
    assert loopback_args(named) == named
    local = loopback_args({"include_dashboard": False})
    assert local == {"include_dashboard": False, "_node_ip_address": LOOPBACK}
    assert os.environ[CLUSTER_SWITCH] == "0" and ray_constants.ENABLE_RAY_CLUSTER is False
