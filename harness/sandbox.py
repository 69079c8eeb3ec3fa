"""Entry point of a submission's child process (``python -m harness.sandbox FD``, started by :mod:`harness.isolation`).

Its first acts, while the process is still single-threaded and before torch is imported: die with the parent, and
take the network away. Then it serves the parent over the socket ``FD``.
"""

from __future__ import annotations

import ctypes
import signal
import socket
import sys
from multiprocessing.connection import Connection

CLONE_NEWNET, CLONE_NEWUSER = 0x40000000, 0x10000000
PR_SET_PDEATHSIG = 1


def _unavailable(*_args, **_kwargs):
    raise OSError("network access is disabled for submissions")


def _cut_network() -> str:
    """Take the network away from this (still single-threaded) process; return the guard that took."""
    libc = ctypes.CDLL(None, use_errno=True)
    for flags, guard in ((CLONE_NEWNET, "network namespace"), (CLONE_NEWUSER | CLONE_NEWNET, "user and network namespace")):
        if libc.unshare(flags) == 0:
            return guard
    socket.socket = socket.create_connection = socket.socketpair = _unavailable  # type: ignore[assignment,misc]
    return "python socket block (the OS offered no network namespace; native code could bypass it)"


def main() -> None:
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the child never outlives the harness
    network = _cut_network()
    from harness.isolation import serve

    serve(Connection(int(sys.argv[1])), network)


if __name__ == "__main__":
    main()
