"""A party's state folder: its own, private, and not reachable through anyone else's link.

A node's release ledger (:mod:`fedpriv.privacy.ledger.store`) decides what the node may still
release, so whoever can write, replace or redirect its folder can reset its budget, and
whoever can read it learns every request digest it answered. :func:`checked_folder` creates
the folder owner-only (0700) or accepts an existing one only when

* it is not a symbolic link, and no component of its path is a link that another user owns;
* it is owned by this process's user;
* it is not writable by the group or by others (a readable one is made owner-only).

The ledger file and SQLite's companions (``-wal``, ``-shm``) get the same checks. Anything else
is refused with one line (:class:`StateFolderError`) naming the path and what is wrong, before
the node releases anything.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["StateFolderError", "checked_file", "checked_folder"]


class StateFolderError(ValueError):
    """A state folder or ledger file that another user could read, replace or redirect."""


def _foreign_link(path: Path) -> Path | None:
    """The first component of ``path`` that is a symbolic link owned by another user (links
    owned by root or by this user, e.g. ``/var -> private/var``, are the system's or ours)."""
    current = Path(path.anchor)
    for part in path.parts[1:]:
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode) and st.st_uid not in (0, os.getuid()):
            return current
    return None


def _refuse(path: Path, what: str) -> StateFolderError:
    return StateFolderError(
        f"state folder {str(path)!r} {what}; a node's ledger must live in a folder only its "
        "own user can write (set client-state-dir to a folder of your own, created 0700)"
    )


def checked_folder(path: str | Path) -> Path:
    """``path`` as a safe state folder (created 0700 with its parents when absent)."""
    path = Path(os.path.abspath(path))
    link = _foreign_link(path)
    if link is not None:
        raise _refuse(path, f"is reached through {str(link)!r}, a link owned by another user")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass  # another process made it first: checked below like any existing folder
        st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(path, "is a symbolic link")
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(path, "is not a folder")
    if st.st_uid != os.getuid():
        raise _refuse(path, f"is owned by uid {st.st_uid}, not by this node's uid {os.getuid()}")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _refuse(path, f"is writable by others (mode {stat.S_IMODE(st.st_mode):o})")
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o700)  # ours and not writable by others: no one else reads it either
    return path


def checked_file(path: str | Path) -> Path:
    """An existing ledger file in a checked folder: a regular file of this user, not a link,
    not writable by others (an absent file is fine: SQLite creates it with the folder's
    owner and this process's umask, made owner-only by the caller)."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        raise _refuse(path, "is a link or not a regular file")
    if st.st_uid != os.getuid():
        raise _refuse(path, f"is owned by uid {st.st_uid}, not by this node's uid {os.getuid()}")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _refuse(path, f"is writable by others (mode {stat.S_IMODE(st.st_mode):o})")
    return path
