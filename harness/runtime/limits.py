"""The sandboxed child's resource limits: one memory budget for everything a run's sandboxes can allocate, and a cap on
their processes.

A run has two sandboxes, its own and its re-check's; from 8 GiB up (:func:`at_once`) both are alive at once (the
re-check's idle, holding its start-up alone) and each counts the other's start-up against the budget. The memory limit
(``--memory-limit``, B bytes) is held, where the host allows it, by a cgroup v2 of the sandbox's own with
``memory.max`` B (less :data:`STARTUP_RESERVE` for the other sandbox, where two are alive) and no swap: every page the
child's processes touch counts, their files in ``/tmp`` and their shared memory too, and going over kills them.
Elsewhere B is split, each share bounded:

- the address space the child maps beyond what its start-up mapped (Python and PyTorch, before any of the submission's
  code runs): half of B less the start-up of each sandbox alive at once (the child measures its own), as
  ``RLIMIT_AS`` (``RLIMIT_DATA`` on a CUDA run, whose driver reserves far more address space than it uses: there only
  private memory counts);
- ``/tmp``, a tmpfs: a quarter of B;
- the shared memory the child writes its answers into: a quarter of B (the batches' shared memory, which the harness
  fills, has that size too);
- one process: an rlimit binds one process, so the seccomp filter refuses every process but threads;
- on a CPU run, the calls that make shared memory no mapping holds (``memfd_create``, ``shmget``) are refused.

Processes (threads count): at most ``MAX_PROCESSES``, by ``RLIMIT_NPROC`` and, where the host allows one, a pids cgroup
(v2, or v1 where the host keeps that controller there). The kernel exempts root's own uid from ``RLIMIT_NPROC``, and the
child has it where the harness runs as root's uid in a user namespace (``unshare -r``): there only the cgroup holds.

The cgroups are made beside the harness's own (its cgroup holds processes, so it cannot hand controllers to children of
its own, unless it is the hierarchy's root), where that cgroup hands out the controllers and the harness may write.
"""

from __future__ import annotations

import contextlib
import os
import resource
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

MAX_PROCESSES = 4096  # processes and threads: a fork bomb stops there
STARTUP_RESERVE = 1 << 30  # what a sandbox's start-up (Python and PyTorch imported) may hold: about 0.4 GiB (PSS)
PAGE = os.sysconf("SC_PAGE_SIZE")
PREFIX = "cood-sandbox-"
RLIMITS = {"RLIMIT_AS": resource.RLIMIT_AS, "RLIMIT_DATA": resource.RLIMIT_DATA}


def at_once(memory_bytes: int) -> int:
    """How many sandboxes of one run may be alive at once under a budget of ``memory_bytes``: the run's and its
    re-check's (started beside it, idle until the run's has ended) where :data:`STARTUP_RESERVE` is a small part of
    the budget, else the run's alone (the re-check's starts once it has ended)."""
    return 2 if memory_bytes >= 8 * STARTUP_RESERVE else 1


def share(memory_bytes: int) -> int:
    """A quarter of the memory limit in whole pages (at least one): ``/tmp``'s size and each shared-memory arena's."""
    return max(memory_bytes // 4 // PAGE, 1) * PAGE


def cgroup_parents(mountinfo: str, membership: str) -> dict[str, Path]:
    """Where the sandbox's cgroup can be made for each of ``memory`` (cgroup v2) and ``pids`` (v2, else v1): the folder
    that holds the harness's own cgroup (v2: a cgroup holding processes hands no controller to children, unless it is
    the hierarchy's root, which is then used itself), or the harness's own (v1), where that folder hands the controller
    to its children and the harness may write there. ``mountinfo`` and ``membership`` are the texts of
    ``/proc/self/mountinfo`` and ``/proc/self/cgroup``."""
    own = {controllers: path for _, controllers, path in (line.split(":", 2) for line in membership.splitlines())}
    found: dict[str, Path] = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        after = fields.index("-")
        root, point, fstype, options = fields[3], Path(fields[4]), fields[after + 1], fields[after + 3].split(",")
        if fstype == "cgroup2":
            path = own.get("")
        elif fstype == "cgroup" and "pids" in options:
            path = next((p for c, p in own.items() if "pids" in c.split(",")), None)
        else:
            continue
        if path is None or os.path.relpath(path, root).startswith(".."):
            continue
        folder = point / os.path.relpath(path, root)
        if fstype == "cgroup2" and folder != point:
            folder = folder.parent
        try:
            handed = (folder / "cgroup.subtree_control").read_text().split() if fstype == "cgroup2" else ["pids"]
        except OSError:
            continue
        if os.access(folder, os.W_OK) and os.access(folder / "cgroup.procs", os.W_OK):
            for controller in ("memory", "pids") if fstype == "cgroup2" else ("pids",):
                if controller in handed:
                    found.setdefault(controller, folder)
    return found


def host_cgroup_parents() -> dict[str, Path]:
    """:func:`cgroup_parents` of this process (none where the files cannot be read)."""
    try:
        with open("/proc/self/mountinfo") as mountinfo, open("/proc/self/cgroup") as membership:
            return cgroup_parents(mountinfo.read(), membership.read())
    except (OSError, ValueError):
        return {}


@dataclass
class Budget:
    """A sandbox's limits, chosen by the harness: its cgroups (made by :meth:`make_cgroups`, removed by
    :meth:`remove_cgroups`), what the child sets itself (:meth:`for_child`) and the record's account of them."""

    memory_bytes: int
    cuda: bool
    root_uid: bool = False  # whether the child runs as root's own uid (see :func:`root_uid`)
    cgroups: dict[str, Path] = field(default_factory=dict)  # controller -> the sandbox's cgroup holding it

    @property
    def sandboxes(self) -> int:
        """The run's sandboxes that may be alive at once (:func:`at_once`), which share the budget."""
        return at_once(self.memory_bytes)

    @property
    def cgroup_memory(self) -> int:
        """A sandbox's ``memory.max``: the budget, less the start-up of each other sandbox alive beside it."""
        return self.memory_bytes - (self.sandboxes - 1) * STARTUP_RESERVE

    @property
    def share(self) -> int:
        return share(self.memory_bytes)

    @property
    def rlimit(self) -> str | None:
        """The rlimit that bounds the child's address space, where no memory cgroup does."""
        return None if "memory" in self.cgroups else "RLIMIT_DATA" if self.cuda else "RLIMIT_AS"

    @property
    def threads_only(self) -> bool:
        """Whether the child may start threads but no process: where only rlimits bound its memory, each of its
        processes would have a budget of its own (the seccomp filter refuses ``fork``, ``vfork`` and every ``clone``
        without ``CLONE_THREAD``)."""
        return self.rlimit is not None

    @property
    def refused_calls(self) -> tuple[str, ...]:
        """The calls the seccomp filter refuses besides its own: those that make shared memory no mapping holds,
        where the address space is what counts, and those that make a process, where a process's limits are its
        own."""
        shared = ("memfd_create", "shmget") if self.rlimit == "RLIMIT_AS" else ()
        return shared + (("fork", "vfork") if self.threads_only else ())

    def make_cgroups(self, parents: dict[str, Path]) -> None:
        """The sandbox's cgroups in ``parents`` (:func:`cgroup_parents`), each with its limits; none where one cannot be
        made (the rlimits then hold alone)."""
        settings = {
            "memory": {"memory.max": self.cgroup_memory, "memory.swap.max": 0, "memory.oom.group": 1},
            "pids": {"pids.max": MAX_PROCESSES},
        }
        try:
            for parent in dict.fromkeys(parents.values()):
                cgroup = parent / f"{PREFIX}{secrets.token_hex(8)}"
                cgroup.mkdir()
                for controller in [c for c, p in parents.items() if p == parent]:
                    self.cgroups[controller] = cgroup
                    for name, value in settings[controller].items():
                        if name in ("memory.max", "pids.max") or (cgroup / name).exists():
                            (cgroup / name).write_text(f"{value}\n")
        except OSError:
            self.remove_cgroups()

    def joining(self) -> list[str]:
        """The command line prefix that moves the sandbox into its cgroups before bubblewrap starts."""
        if not self.cgroups:
            return []
        join = 'while [ "$1" != -- ]; do echo 0 > "$1" || exit 125; shift; done; shift; exec "$@"'
        procs = [str(cgroup / "cgroup.procs") for cgroup in dict.fromkeys(self.cgroups.values())]
        return ["/bin/sh", "-c", join, "sh", *procs, "--"]

    def holds(self, pid: int) -> bool:
        """Whether each of the sandbox's cgroups holds process ``pid``."""
        try:
            return all(str(pid) in (c / "cgroup.procs").read_text().split() for c in self.cgroups.values())
        except OSError:
            return False

    def out_of_memory(self) -> bool:
        """Whether the memory cgroup killed the child for going over the limit."""
        try:
            events = (self.cgroups["memory"] / "memory.events").read_text().split()
            return int(events[events.index("oom_kill") + 1]) > 0
        except (KeyError, OSError, ValueError, IndexError):
            return False

    def remove_cgroups(self, wait_s: float = 2.0) -> None:
        """Remove the sandbox's cgroups once their processes are gone (killed first, where the kernel can)."""
        deadline = time.monotonic() + wait_s
        for cgroup in dict.fromkeys(self.cgroups.values()):
            with contextlib.suppress(OSError):
                (cgroup / "cgroup.kill").write_text("1\n")
            while cgroup.exists():
                try:
                    cgroup.rmdir()
                except OSError:  # busy until its last process is gone
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.01)
        self.cgroups.clear()

    def for_child(self) -> dict:
        """What the child sets itself, before any of the submission's code runs (:func:`restrict`): the address space
        it may map beyond its start-up is the budget less ``/tmp``, its answers' shared memory and the start-up of each
        of the run's sandboxes alive at once (its own included: the child measures it)."""
        return {"rlimit": self.rlimit, "beyond_budget": self.memory_bytes - 2 * self.share, "sandboxes": self.sandboxes}

    def beyond_start(self, startup: int) -> int:
        """The address space a child whose start-up holds ``startup`` bytes may map beyond it."""
        return allowance(self.for_child(), startup)

    def account(self, report: dict, pid: int) -> tuple[dict, list[str]]:
        """The record's account of the limits from the child's ``report`` of them, and those that did not hold."""
        startup = report.get("startup_bytes")
        memory = (
            f"cgroup memory.max {self.cgroup_memory} (no swap)"
            if self.rlimit is None
            else f"{self.rlimit} start-up + {report.get('beyond_start')}"
        )
        memory += f", /tmp {self.share}, shared memory 2 x {self.share}"
        if self.rlimit == "RLIMIT_AS":
            memory += ", memfd_create and shmget refused"
        elif self.rlimit == "RLIMIT_DATA":
            memory += ", shared mappings not counted"
        if self.threads_only:
            memory += ", one process (threads alone)"
        if self.sandboxes > 1:
            memory += f", shared by {self.sandboxes} sandboxes"
        caps = ([] if self.root_uid else [f"RLIMIT_NPROC {MAX_PROCESSES}"]) + (
            [f"cgroup pids.max {MAX_PROCESSES}"] if "pids" in self.cgroups else []
        )
        processes = ", ".join(caps) or "none (the kernel exempts root's uid from RLIMIT_NPROC)"
        failed = [
            what
            for what, held in (
                ("/tmp's size", report.get("tmp_bytes") == self.share),
                (
                    "the address-space limit",
                    self.rlimit is None
                    or isinstance(startup, int)
                    and 0 < startup <= STARTUP_RESERVE
                    and report.get("beyond_start") == self.beyond_start(startup),
                ),
                ("RLIMIT_NPROC", report.get("processes") == MAX_PROCESSES),
                ("the cgroups", not self.cgroups or self.holds(pid)),
            )
            if not held
        ]
        return {"memory": memory, "processes": processes}, failed


def root_uid(as_root: bool) -> bool:
    """Whether the child will run as root's own uid: the harness, building the sandbox as an ordinary user does, has
    it (its user namespace maps its uid to the host's 0, as ``unshare -r`` does for root)."""
    if as_root:
        return False  # the child drops to nobody
    uid = os.geteuid()
    with open("/proc/self/uid_map") as uid_map:
        for inside, outside, count in (map(int, line.split()) for line in uid_map):
            if inside <= uid < inside + count:
                return outside + uid - inside == 0
    return False


def restrict_processes() -> None:
    """Cap the child's processes and threads (in the child, as the user it runs as)."""
    resource.setrlimit(resource.RLIMIT_NPROC, (MAX_PROCESSES, MAX_PROCESSES))


def allowance(plan: dict, startup: int) -> int:
    """The address space a child whose start-up holds ``startup`` bytes may map beyond it under ``plan``
    (:meth:`Budget.for_child`): the budget left once each sandbox alive at once has its start-up."""
    return max(plan["beyond_budget"] - plan["sandboxes"] * startup, 0)


def restrict(plan: dict) -> dict:
    """Set the child's address-space limit of ``plan`` (:meth:`Budget.for_child`) beyond what it has mapped now, and
    report the limits as they read back."""
    tmp = os.statvfs("/tmp")
    report = {"tmp_bytes": tmp.f_blocks * tmp.f_frsize}
    if plan["rlimit"] is not None:
        which = RLIMITS[plan["rlimit"]]
        mapped = _mapped("VmSize" if which == resource.RLIMIT_AS else "VmData")
        report["startup_bytes"] = startup = proportional_set_size()
        resource.setrlimit(which, (mapped + allowance(plan, startup),) * 2)
        report["beyond_start"] = resource.getrlimit(which)[0] - mapped
    report["processes"] = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    return report


def _mapped(field_name: str) -> int:
    """A size of ``/proc/self/status`` in bytes (``VmSize``: all mappings; ``VmData``: private writable ones)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith(field_name + ":"))


def proportional_set_size(pid: int | str = "self") -> int:
    """A process's proportional set size in bytes (its pages, each shared one divided among those that map it)."""
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        return next(int(line.split()[1]) * 1024 for line in rollup if line.startswith("Pss:"))
