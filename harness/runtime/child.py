"""A sandboxed submission's process (``python -m harness.runtime.child SETUP``, started in the sandbox of
:mod:`harness.runtime.sandbox`).

Before any of the submission's code runs it gives up root (as root: every capability, then the ``nobody`` user), caps
its processes, checks from inside that the sandbox holds, imports PyTorch, sets its memory limits
(:mod:`harness.runtime.limits`) and tells the harness what it found; then it loads the submission and answers batches
over the channel (:mod:`harness.runtime.channel`) until told to exit. Capabilities and mounts are Linux system calls
with no maintained Python wrapper, hence ctypes.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import socket
import sys

from harness.runtime import limits
from harness.runtime.channel import Arena, Channel
from harness.runtime.sandbox import NOBODY

PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
CLONE_NEWUSER = 0x10000000
IO_URING_SETUP = 425  # the same number on every architecture


def drop_root(libc) -> None:
    """As root: empty the capability bounding set, leave every group and become ``nobody``; the kernel then clears
    the remaining capabilities."""
    last_cap = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last_cap + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)


def _status() -> dict[str, str]:
    with open("/proc/self/status") as status:
        return dict(line.rstrip("\n").split(":\t", 1) for line in status if ":\t" in line)


def probe(libc, harness_pid: int, harness_start: str, port: int, bundle: str) -> dict:
    """The guards, as seen from inside: each entry is True when it holds."""
    status = _status()
    inside, outside = map(int, open("/proc/self/uid_map").read().split()[:2])
    outside_uid = outside + os.getuid() - inside
    try:
        with open(f"/proc/{harness_pid}/stat") as stat:
            seen = stat.read().rsplit(")", 1)[1].split()[19] == harness_start
    except OSError:
        seen = False
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        reached = True
    except OSError:
        reached = False
    mounted = libc.mount(b"none", b"/tmp", b"tmpfs", 0, None) == 0 or ctypes.get_errno() != errno.EPERM
    unshared = libc.unshare(CLONE_NEWUSER) == 0 or ctypes.get_errno() != errno.EPERM
    ring = libc.syscall(IO_URING_SETUP, 1, ctypes.create_string_buffer(120))  # struct io_uring_params, zeroed
    if ring >= 0:
        os.close(ring)
    try:
        socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).close()
        vsock = True
    except OSError:
        vsock = False
    try:
        open(os.path.join(bundle, ".written"), "w").close()
        wrote = True
    except OSError:
        wrote = False
    return {
        "uid_outside": outside_uid,
        "unprivileged_user": outside_uid != 0,
        "no_capabilities": int(status["CapEff"], 16) == 0,
        "no_new_privs": status.get("NoNewPrivs") == "1",
        "seccomp_filter": status.get("Seccomp") == "2",
        "harness_invisible": not seen,
        "no_network": not reached,
        "no_mount": not mounted,
        "no_new_namespaces": not unshared,
        "read_only_bundle": not wrote,
        "no_io_uring": ring < 0,
        "no_vsock": not vsock,
    }


def main() -> None:
    setup = json.loads(sys.argv[1])
    libc = ctypes.CDLL(None, use_errno=True)
    if os.getuid() == 0:
        drop_root(libc)
    limits.restrict_processes()
    guards = probe(libc, setup["harness_pid"], setup["harness_start"], setup["probe_port"], setup["bundle"])
    from harness.runtime.serving import serve  # PyTorch: mapped before the address space is limited

    guards["limits"] = limits.restrict(setup["limits"])
    channel = Channel(
        socket.socket(fileno=setup["channel"]), Arena(setup["answers"], "answer"), Arena(setup["batches"], "batch")
    )
    channel.send("ready", guards)
    serve(channel)


if __name__ == "__main__":
    main()
