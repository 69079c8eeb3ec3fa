"""Entry point of a submission's child process (``python -m harness.sandbox FD``, started by :mod:`harness.isolation`).

Its first acts, while the process is still single-threaded and before torch is imported: die with the parent, take
the network away and make every file system read-only except its own home. Then it serves the parent over the
socket ``FD``. Namespaces and mounts are Linux system calls with no maintained Python wrapper, hence ctypes.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
from multiprocessing.connection import Connection

CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWUSER = 0x00020000, 0x40000000, 0x10000000
PR_SET_PDEATHSIG = 1
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
KEPT_FLAGS = {"nosuid": 2, "nodev": 4, "noexec": 8, "noatime": 1024, "nodiratime": 2048, "relatime": 1 << 21}
PSEUDO_FILE_SYSTEMS = {"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "mqueue", "securityfs", "debugfs",
                       "tracefs", "bpf", "pstore", "fusectl", "configfs", "hugetlbfs", "binfmt_misc", "autofs"}


def _unavailable(*_args, **_kwargs):
    raise OSError("network access is disabled for submissions")


def _isolate(libc, home: str) -> tuple[str, str]:
    """Take the network away from this (still single-threaded) process and, in a new mount namespace, make the file
    systems read-only except ``home``; return the network guard and the file-system guard that took."""
    for flags, guard in ((CLONE_NEWNET, "network namespace"), (CLONE_NEWUSER | CLONE_NEWNET, "user and network namespace")):
        if libc.unshare(flags | CLONE_NEWNS) == 0:
            return guard, _read_only(libc, home)
        if libc.unshare(flags) == 0:
            return guard, "not restricted (the OS offered no mount namespace)"
    socket.socket = socket.create_connection = socket.socketpair = _unavailable  # type: ignore[assignment,misc]
    return ("python socket block (the OS offered no network namespace; native code could bypass it)",
            "not restricted (the OS offered no mount namespace)")


def _read_only(libc, home: str) -> str:
    """Remount every real file system read-only in this process's own mount namespace, ``home`` excepted."""
    def mount(source, target, flags) -> bool:
        return libc.mount(source, target.encode(), None, flags, None) == 0

    if not (mount(None, "/", MS_REC | MS_PRIVATE) and mount(home.encode(), home, MS_BIND)):
        return "not restricted (mounts refused)"
    refused = []
    for target, fstype, options in _mounts():
        if target == home or fstype in PSEUDO_FILE_SYSTEMS:
            continue
        kept = sum(KEPT_FLAGS.get(option, 0) for option in options)
        if not mount(None, target, MS_REMOUNT | MS_BIND | MS_RDONLY | kept):
            refused.append(target)
    return "read-only except its home" + (f" (still writable: {', '.join(refused)})" if refused else "")


def _mounts() -> list[tuple[str, str, list[str]]]:
    """(mount point, file system type, per-mount options) of this process's mounts, from /proc/self/mountinfo."""
    mounts = []
    with open("/proc/self/mountinfo") as info:
        for line in info:
            fields = line.split()
            fstype = fields[fields.index("-") + 1]
            target = fields[4].encode().decode("unicode_escape")  # the kernel writes spaces as \040
            mounts.append((target, fstype, fields[5].split(",")))
    return mounts


def main() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the child never outlives the harness
    network, filesystem = _isolate(libc, os.environ["HOME"])
    from harness.isolation import serve

    serve(Connection(int(sys.argv[1])), {"network": network, "filesystem": filesystem})


if __name__ == "__main__":
    main()
