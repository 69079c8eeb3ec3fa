"""One memory budget for everything a sandboxed submission can allocate, and a cap on its processes, tried as root and
as root of a user namespace (the harness under ``unshare -r``) under ``--memory-limit 1``: files in ``/tmp`` and
``/dev/shm``, a memfd, shared anonymous memory, a System V segment, the shared memory of the channel, threads. Each
hostile file reports in its error (which ends the run in one line) how far it got. Where the host gives the sandbox a
memory cgroup, what only the rlimits bound elsewhere ends the run instead."""

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attacks import QUICK, hostile
from glyph_fixtures import cnn_variant
from harness.config import PHYSICAL_MEMORY
from harness.runtime import limits, sandbox
from harness.runtime.limits import STARTUP_RESERVE, Budget, at_once, host_cgroup_parents, share
from test_child_inputs import USERS, error_line, submit

pytestmark = pytest.mark.slow  # real runs: the quick loop (-m 'not slow') leaves them to CI

LIMIT = 1 << 30  # --memory-limit 1
SHARE = LIMIT // 4  # /tmp's size, and each shared-memory arena's
ADDRESS = LIMIT // 2  # the address space the submission's code may map beyond the child's start-up
CHUNK = 16 << 20
CGROUPS = host_cgroup_parents()
RLIMITS_ONLY = ("memfd", "shared_anonymous", "sysv_shm")  # what a memory cgroup counts instead
FILL = f"""
import os
def fill(fd, total):
    block = b"\\1" * {CHUNK}
    try:
        while os.fstat(fd).st_size < total:
            os.write(fd, block)
    except OSError:
        pass
    return os.fstat(fd).st_blocks * 512
"""

ATTACKS = {  # what the attack reached, and what it may reach
    "tmp": (
        FILL + "reached = fill(os.open('/tmp/fill', os.O_WRONLY | os.O_CREAT), 3 << 29)",
        lambda reached: SHARE - CHUNK < reached <= SHARE,
    ),
    "dev_shm": (
        FILL
        + """
try:
    reached = fill(os.open('/dev/shm/fill', os.O_WRONLY | os.O_CREAT), 3 << 29)
except OSError:
    reached = 0
""",
        lambda reached: reached == 0,
    ),
    "memfd": (
        FILL
        + """
try:
    reached = fill(os.memfd_create('fill'), 1 << 30)
except OSError:
    reached = 0
""",
        lambda reached: reached == 0,
    ),
    "shared_anonymous": (
        f"""
import mmap
block, held = b"\\1" * {CHUNK}, []
try:
    while len(held) * {CHUNK} < 1 << 30:
        held.append(mmap.mmap(-1, {CHUNK}, flags=mmap.MAP_SHARED))
        held[-1][:] = block
except (OSError, MemoryError):
    pass
reached = len(held) * {CHUNK}
""",
        lambda reached: CHUNK <= reached <= ADDRESS,
    ),
    "sysv_shm": (
        """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
reached = 0
segment = libc.shmget(0, 1 << 30, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
if segment >= 0:
    address = libc.shmat(segment, None, 0)
    if address not in (None, ctypes.c_void_p(-1).value):
        ctypes.memset(address, 1, 1 << 30)
        libc.shmdt(ctypes.c_void_p(address))  # held on, by no process
        reached = 1 << 30
""",
        lambda reached: reached == 0,
    ),
    "threads": (  # threads of the C library that wait in pause(): no Python thread state, 16 KiB stacks
        """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
attributes, thread = ctypes.create_string_buffer(64), ctypes.c_ulong()
libc.pthread_attr_init(attributes)
libc.pthread_attr_setstacksize(attributes, ctypes.c_size_t(1 << 14))
pause = ctypes.cast(libc.pause, ctypes.c_void_p)
reached = 0
while reached < 4500 and libc.pthread_create(ctypes.byref(thread), attributes, pause, None) == 0:
    reached += 1
""",
        lambda reached: 1000 <= reached < 4096,
    ),
    "arenas": (
        """
import json, os, sys
setup = json.loads(sys.argv[1])
reached = max(os.fstat(setup[name]).st_size for name in ("batches", "answers"))
""",
        lambda reached: reached == SHARE,
    ),
}


@pytest.mark.parametrize("user", sorted(USERS))
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_what_the_child_can_hold_is_bounded(tiny_glyphs, tmp_path, user, attack):
    if attack in RLIMITS_ONLY and "memory" in CGROUPS:
        pytest.skip("the host gives the sandbox a memory cgroup: test_a_memory_cgroup_ends_the_run covers this")
    code, bounded = ATTACKS[attack]
    path = hostile(tmp_path, code + "\nraise ValueError(f'reached {reached}')\n")
    done = submit(user, path, tiny_glyphs, "--out", tmp_path / "out", "--memory-limit", "1")
    reached = int(error_line(done, r"cannot load submission \S+, line \d+: ValueError: reached (\d+)").group(1))
    assert bounded(reached), f"{attack} reached {reached} bytes (or threads)"
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif("memory" not in CGROUPS, reason="the host lets the harness make no cgroup v2 with memory")
@pytest.mark.parametrize("user", sorted(USERS))
@pytest.mark.parametrize("attack", RLIMITS_ONLY)
def test_a_memory_cgroup_ends_the_run(tiny_glyphs, tmp_path, user, attack):
    path = hostile(tmp_path, ATTACKS[attack][0] + "\nraise ValueError(f'reached {reached}')\n")
    done = submit(user, path, tiny_glyphs, "--out", tmp_path / "out", "--memory-limit", "1")
    error_line(done, rf".*the submission ran out of memory \(limit {LIMIT} bytes\) and was killed")
    assert not (tmp_path / "out").exists()


def test_the_record_names_the_limits_that_held(honest):
    limits = honest[0]["timings"]["isolation"]["limits"]
    quarter = share(PHYSICAL_MEMORY)  # the default limit: the machine's memory
    shared = ", shared by 2 sandboxes" if at_once(PHYSICAL_MEMORY) == 2 else ""
    if "memory" in CGROUPS:
        assert limits["memory"] == (
            f"cgroup memory.max {Budget(PHYSICAL_MEMORY, False).cgroup_memory} (no swap), /tmp {quarter}, "
            f"shared memory 2 x {quarter}{shared}"
        )
    else:  # the address space beyond the start-up: the budget less /tmp, the answers and each sandbox's start-up
        beyond = re.fullmatch(
            rf"RLIMIT_AS start-up \+ (\d+), /tmp {quarter}, shared memory 2 x {quarter}, memfd_create and shmget "
            rf"refused, one process \(threads alone\){shared}",
            limits["memory"],
        )
        startups = PHYSICAL_MEMORY - 2 * quarter - int(beyond.group(1))
        assert 0 < startups <= at_once(PHYSICAL_MEMORY) * STARTUP_RESERVE
    cgroup = ", cgroup pids.max 4096" if "pids" in CGROUPS else ""
    assert limits["processes"] == "RLIMIT_NPROC 4096" + cgroup  # as root: the child is nobody


@pytest.mark.skipif(not CGROUPS, reason="the host lets the harness make no cgroup")
def test_the_sandboxs_cgroups_hold_it_and_go_with_it(tmp_path):
    started = sandbox.Sandbox(cnn_variant(tmp_path / "plain.py", "build_model = cnn.build_model\n"), False, LIMIT)
    try:
        started.ready(120)
        made = set(started.budget.cgroups.values())
        assert made and started.budget.holds(started.process.pid)
        assert all(cgroup.parent == CGROUPS[c] for c, cgroup in started.budget.cgroups.items())
    finally:
        started.close()
    assert not any(cgroup.exists() for cgroup in made)


GREEDY = f"""
import os, resource, subprocess, time
def room():  # what the child's address-space limit leaves it now; -1 where no rlimit bounds it (a memory cgroup does)
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    rooms = [
        limit - int(status[field].split()[0]) * 1024
        for which, field in ((resource.RLIMIT_AS, "VmSize"), (resource.RLIMIT_DATA, "VmData"))
        for limit in [resource.getrlimit(which)[0]]
        if limit != resource.RLIM_INFINITY
    ]
    return min(rooms, default=-1)
left = room()
def hold():
    held = []
    try:
        while True:
            held.append(b"\\1" * {CHUNK})
    except MemoryError:
        return held
held, forks = hold(), 0
for _ in range(3):  # each process would have an address space of its own
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        more = hold()
        time.sleep(3)
        os._exit(0)
    forks += 1
try:
    subprocess.Popen(["/bin/sleep", "3"])  # the C library's vfork, then exec
    forks += 1
except OSError:
    pass
time.sleep(3)
raise ValueError(f"reached {{forks}} forks, {{len(held) * {CHUNK}}} of {{left}} bytes")
"""


CHILD = b"harness.runtime.child"


def tree_pss(pid: int) -> tuple[int, int]:
    """The proportional set size of every process below ``pid`` (not ``pid`` itself), and how many are children of
    the harness's sandbox (``harness.runtime.child``)."""
    total = children = 0
    for member in sandbox._tree(pid):
        if member != pid:
            try:
                total += limits.proportional_set_size(member)
                children += Path(f"/proc/{member}/cmdline").read_bytes().split(b"\0")[1:3] == [b"-m", CHILD]
            except (OSError, StopIteration):
                continue
    return total, children


@pytest.mark.parametrize("user", sorted(USERS))
@pytest.mark.parametrize("memory_limit", [1, 8])  # 8 GiB: the run's and the re-check's sandboxes alive at once
def test_every_process_of_every_sandbox_shares_one_budget(tiny_glyphs, tmp_path, user, memory_limit):
    """A child that takes all the memory it can, then forks to take as much again, each time: the PSS of the harness's
    whole tree below it, sampled, stays under ``--memory-limit``."""
    path, peaks = hostile(tmp_path, GREEDY), []
    command = [*USERS[user], sys.executable, "-c", "from harness.cli import main; main()", "submit", path]
    command += ["--benchmark", tiny_glyphs, *QUICK, "--out", tmp_path / "out", "--memory-limit", memory_limit]
    process = subprocess.Popen(list(map(str, command)), stderr=subprocess.PIPE, text=True)
    while process.poll() is None:
        peaks.append(tree_pss(process.pid))
        time.sleep(0.05)
    done = subprocess.CompletedProcess(command, process.returncode, "", process.stderr.read())
    line = r"cannot load submission \S+, line \d+: ValueError: reached (\d+) forks, (\d+) of (-?\d+) bytes"
    forks, held, left = map(int, error_line(done, line).groups())
    limit = memory_limit << 30
    assert forks == (4 if "memory" in CGROUPS else 0)
    assert held >= (left - 3 * CHUNK if left >= 0 else limit // 3) and held >= 2 * CHUNK  # it took what it may
    assert max(pss for pss, _ in peaks) < limit
    assert max(children for _, children in peaks) == at_once(limit)  # both sandboxes alive, under 8 GiB
