"""Each escape a hostile submission running as root tried on the earlier child process, tried again: it fails, the
records equal the honest run's (or the run ends in one line and writes nothing), and nothing escaped."""

import hashlib
import json
import socket
import threading
import uuid
from pathlib import Path

import pytest

import harness
from attacks import KAPPAS, MIXED, USERS, hostile, processes_with, run, run_cli, same_scores
from glyph_fixtures import cnn_variant, negated_cnn
from harness import HarnessError, evaluate
from harness.runtime.limits import host_cgroup_parents

pytestmark = pytest.mark.slow  # real runs: the quick loop (-m 'not slow') leaves them to CI

LIBC = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_record_names_the_verified_guards_and_the_identity_the_harness_computed(honest):
    from glyph_fixtures import CNN, load_example
    from harness.submission import weights_sha256

    model = load_example(CNN).build_model()
    isolation = honest[0]["timings"]["isolation"]
    assert isolation["mode"] == "sandbox" and isolation["uid_outside"] == 65534  # root here: dropped to nobody
    assert set(isolation["verified"]) == {
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
    }
    assert len(isolation["bundle_sha256"]) == 64
    assert honest[0]["model"]["weights_sha256"] == weights_sha256(model)
    assert honest[0]["model"]["num_parameters"] == sum(p.numel() for p in model.parameters())


def test_secrets_stay_in_the_harness(tiny_glyphs, tmp_path):
    home = tmp_path / "home"
    (home / ".cache" / "huggingface").mkdir(parents=True)
    (home / ".cache" / "huggingface" / "token").write_text("hf_planted_secret")
    path = hostile(
        tmp_path,
        f"""
import glob, os
found = []
for f in glob.glob("/proc/*/environ") + glob.glob("/proc/*/cmdline") + [{str(home / ".cache/huggingface/token")!r}]:
    try:
        data = open(f, "rb").read()
    except OSError:
        continue
    found += [s for s in (b"hf_planted_secret", b"s3cret_value") if s in data]
found += [s for s in ("hf_planted_secret", "s3cret_value") if s in str(os.environ)]
""",
        "'secrets_' + str(len(found))",
    )
    env = {
        **__import__("os").environ,
        "HF_TOKEN": "hf_planted_secret",
        "COOD_PLANTED_SECRET": "s3cret_value",
        "HOME": str(home),
    }
    done = run_cli(
        "submit",
        path,
        "--benchmark",
        tiny_glyphs,
        "--out",
        tmp_path / "out",
        "--no-progress",
        "--no-cache",
        "-k",
        "softmax",
        env=env,
    )
    assert done.returncode == 0, done.stderr
    record = json.loads(next((tmp_path / "out" / "records").glob("*.json")).read_text())
    assert record["model"]["name"] == "secrets_0"
    for f in (tmp_path / "out").rglob("*"):
        assert not f.is_file() or b"planted_secret" not in f.read_bytes() and b"s3cret_value" not in f.read_bytes()


def test_no_network_even_through_the_harness_namespace(tiny_glyphs, tmp_path, honest):
    server = socket.create_server(("127.0.0.1", 0))
    accepted = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    path = hostile(
        tmp_path,
        LIBC
        + f"""
import socket
outcome = []
for ns in ("/proc/{__import__("os").getpid()}/ns/net", "/proc/1/ns/net", "/proc/self/ns/net"):
    try:
        fd = os.open(ns, os.O_RDONLY)
        outcome.append("joined" if libc.setns(fd, 0) == 0 else "refused")
    except OSError:
        outcome.append("hidden")
try:
    socket.create_connection(("127.0.0.1", {server.getsockname()[1]}), timeout=3).sendall(b"escaped")
    outcome.append("connected")
except OSError:
    outcome.append("unreachable")
""",
        "'net_' + '_'.join(outcome)",
    )
    records = run(path, tiny_glyphs)
    server.close()
    assert records[0]["model"]["name"] == "net_hidden_hidden_refused_unreachable" and accepted == []
    assert same_scores(records, honest)


@pytest.mark.parametrize("user", sorted(USERS))
def test_no_io_uring_and_no_socket_of_a_family_outside_its_namespace(tiny_glyphs, tmp_path, user):
    path = hostile(
        tmp_path,
        LIBC
        + """
import errno, socket
libc.syscall.restype = ctypes.c_long
SOCKET, SOCKETPAIR = {"x86_64": (41, 53), "aarch64": (198, 199)}[os.uname().machine]
def tried(result):
    return "made" if result >= 0 else errno.errorcode[ctypes.get_errno()].lower()
def family(value):
    return ctypes.c_long(value), socket.SOCK_STREAM, 0
outcome = [
    tried(libc.syscall(425, 1, ctypes.create_string_buffer(120))),  # io_uring_setup
    tried(libc.syscall(426, -1, 1, 0, 0, None, 0)),  # io_uring_enter
    tried(libc.syscall(427, -1, 0, None, 0)),  # io_uring_register
    tried(libc.syscall(SOCKET, *family(socket.AF_VSOCK))),
    tried(libc.syscall(SOCKET, *family(1 << 32 | socket.AF_VSOCK))),  # the kernel reads the low 32 bits
    tried(libc.syscall(SOCKETPAIR, *family(socket.AF_VSOCK), (ctypes.c_int * 2)())),
    tried(libc.syscall(SOCKET, ctypes.c_long(socket.AF_ALG), socket.SOCK_SEQPACKET, 0)),
    tried(libc.syscall(SOCKET, *family(socket.AF_UNIX))),  # its own families stay
    tried(libc.syscall(SOCKET, *family(socket.AF_INET))),
]
""",
        "'calls_' + '_'.join(outcome)",
    )
    done = run_cli(
        "submit", path, "--benchmark", tiny_glyphs, "--out", tmp_path / "out", "--quiet", "--no-cache", wrap=USERS[user]
    )
    assert done.returncode == 0, done.stderr
    name = json.loads((tmp_path / "out" / "records" / "softmax.json").read_text())["model"]["name"]
    assert name == "calls_" + "_".join(["eperm"] * 7 + ["made"] * 2)


def test_no_write_outside_its_home_even_after_a_remount(tiny_glyphs, tmp_path, honest):
    earlier = tmp_path / "earlier" / "records" / "model__softmax.json"
    earlier.parent.mkdir(parents=True)
    earlier.write_text('{"mean_ood_auroc": 0.5}')
    shard = next(tiny_glyphs.rglob("*.tar"))
    own_code = Path(harness.__file__).parent / "method" / "metrics.py"
    before = {p: digest(p) for p in (earlier, shard, own_code)}
    path = hostile(
        tmp_path,
        LIBC
        + f"""
import pathlib
MS_REMOUNT, MS_BIND = 32, 4096
outcome = ["remounted" if libc.mount(None, target, None, MS_REMOUNT | MS_BIND, None) == 0 else "refused"
           for target in (b"/", b"/submission", {str(own_code.parent).encode()!r})]
for ns in ("/proc/{__import__("os").getpid()}/ns/mnt", "/proc/1/ns/mnt"):
    try:
        outcome.append("joined" if libc.setns(os.open(ns, os.O_RDONLY), 0) == 0 else "refused")
    except OSError:
        outcome.append("hidden")
for target in ({str(earlier)!r}, {str(shard)!r}, {str(own_code)!r}, "/submission/hostile.py", "/usr/lib/planted"):
    try:
        with open(target, "a") as f:
            f.write("0.99")
        outcome.append("written")
    except OSError:
        outcome.append("no")
pathlib.Path(os.environ["HOME"], "scratch").write_text("its own")
""",
        "'files_' + '_'.join(outcome)",
    )
    records = run(path, tiny_glyphs)
    assert records[0]["model"]["name"] == "files_refused_refused_refused_hidden_hidden_no_no_no_no_no"
    assert {p: digest(p) for p in before} == before and same_scores(records, honest)


def test_nothing_it_starts_outlives_the_run(tiny_glyphs, tmp_path, honest):
    """A daemon and a bounded fork bomb: where a memory cgroup holds the sandbox, they start and die with the run;
    elsewhere the seccomp filter refuses every process beyond threads (each would have its own memory limits)."""
    marker = f"cood-daemon-{uuid.uuid4().hex}"
    path = hostile(
        tmp_path,
        f"""
import os
try:
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv("/usr/bin/sleep", ["{marker}", "600"])
        os._exit(0)
    os.wait()
    children = 0
    for _ in range(300):  # a bounded fork bomb
        pid = os.fork()
        if pid == 0:
            os.execv("/usr/bin/sleep", ["{marker}", "600"])
        children += 1
    outcome = str(children)
except PermissionError:
    outcome = "refused"
""",
        "'forked_' + outcome",
    )
    records = run(path, tiny_glyphs)
    expected = "forked_300" if "memory" in host_cgroup_parents() else "forked_refused"
    assert records[0]["model"]["name"] == expected and same_scores(records, honest)
    assert processes_with(marker) == []


def test_a_pickle_in_the_channel_is_refused_unread(tiny_glyphs, tmp_path):
    pwned = tmp_path / "pwned"
    path = hostile(
        tmp_path,
        f"""
import json, os, pickle, socket, sys
class Payload:
    def __reduce__(self):
        return (open, ({str(pwned)!r}, "w"))
data = pickle.dumps(("ok", Payload()))
channel = socket.socket(fileno=os.dup(json.loads(sys.argv[1])["channel"]))
channel.sendall(len(data).to_bytes(4, "big") + data)  # multiprocessing's framing: a length, then the pickle
""",
    )
    with pytest.raises(
        HarnessError, match=r"^the submission's process sent a malformed message \(its header is not JSON\)"
    ):
        evaluate(path, benchmark=tiny_glyphs, kappas=KAPPAS, progress=False, out=tmp_path / "out")
    assert not pwned.exists() and not (tmp_path / "out").exists()


def test_an_identity_the_child_claims_is_refused(tiny_glyphs, tmp_path):
    path = hostile(
        tmp_path,
        """
import json, os, socket, sys
from harness.runtime.channel import Arena, Channel
setup = json.loads(sys.argv[1])
forged = Channel(socket.socket(fileno=os.dup(setup["channel"])), Arena(os.dup(setup["answers"])), \
Arena(os.dup(setup["batches"])))
forged.send("loaded", {"name": "glyph_cnn", "data_config": cnn.DATA_CONFIG, "kappas": {}, "head": None, "state": [],
                       "parameters": [], "weights_sha256": "ab" * 32, "num_parameters": 123456789})
""",
    )
    with pytest.raises(HarnessError, match=r"malformed message \(its load answer has other fields"):
        evaluate(path, benchmark=tiny_glyphs, kappas=KAPPAS, progress=False, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_other_code_with_the_same_weights_never_shares_the_score_cache(tiny_glyphs, tmp_path, honest):
    negated = negated_cnn(tmp_path / "negated")
    cache = tmp_path / "cache"
    poisoned = evaluate(negated, benchmark=tiny_glyphs, kappas=KAPPAS, progress=False, cache=True, cache_dir=cache)
    assert poisoned.records[0]["model"]["weights_sha256"] == honest[0]["model"]["weights_sha256"]
    assert poisoned.records[0]["summary"] != honest[0]["summary"]
    (tmp_path / "again").mkdir()
    again = hostile(tmp_path / "again", "")
    result = evaluate(again, benchmark=tiny_glyphs, kappas=KAPPAS, progress=False, cache=True, cache_dir=cache)
    assert result.stats["shards_from_cache"] == 0 and same_scores(result.records, honest)


def test_the_harness_cannot_be_traced_read_written_or_stopped(tiny_glyphs, tmp_path, honest):
    pid = __import__("os").getpid()
    path = hostile(
        tmp_path,
        LIBC
        + f"""
import signal
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(16)
local, remote = iovec(ctypes.addressof(buf), 16), iovec(0x400000, 16)
outcome = ["traced" if libc.ptrace(16, {pid}, None, None) == 0 else "untraced",
           "read" if libc.process_vm_readv({pid}, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) > 0 else "unread",
           "written" if libc.process_vm_writev({pid}, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) > 0 \
else "unwritten"]
try:
    with open("/proc/{pid}/mem", "wb") as mem:
        mem.write(b"x")
    outcome.append("mem")
except OSError:
    outcome.append("nomem")
for sig in (signal.SIGSTOP, signal.SIGKILL):
    try:
        os.kill({pid}, sig)
        outcome.append("signalled")
    except OSError:
        outcome.append("unsignalled")
""",
        "'host_' + '_'.join(outcome)",
    )
    records = run(path, tiny_glyphs)
    assert records[0]["model"]["name"] == "host_untraced_unread_unwritten_nomem_unsignalled_unsignalled"
    assert same_scores(records, honest)


def test_the_shared_memory_can_be_neither_sealed_nor_shrunk(tiny_glyphs, tmp_path, honest):
    path = cnn_variant(
        tmp_path / "sealing.py",
        """
import fcntl, json, os, sys
setup = json.loads(sys.argv[1])
outcome = []
for fd in (setup["answers"], setup["batches"]):
    try:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW)
        outcome.append("sealed")
    except OSError:
        outcome.append("open")
class M(cnn.GlyphCNN):
    def forward(self, x):
        for fd in (setup["answers"], setup["batches"]):
            try:
                os.ftruncate(fd, os.fstat(fd).st_size // 2)
            except OSError:
                continue
            raise RuntimeError("an arena shrank")
        return super().forward(x)
NAME = "shm_" + "_".join(outcome)
def build_model():
    return variant(M)
""",
    )
    records = run(path, tiny_glyphs)
    assert records[0]["model"]["name"] == "shm_open_open" and same_scores(records, honest)


def test_scribbling_over_the_shared_memory_spoils_only_the_scribblers_own_answers(tiny_glyphs, tmp_path):
    # the harness sends the next batch while the child works on one, and takes the answer before it while the child
    # works: a child that scribbles over both arenas then spoils the next batch it reads, or the answer of its own
    # that the harness copies (private copies, checked after the copy): the run ends in one line, nothing is written
    path = cnn_variant(
        tmp_path / "scribble.py",
        """
import json, mmap, os, sys, time
setup = json.loads(sys.argv[1])
calls = []
class M(cnn.GlyphCNN):
    def forward(self, x):
        calls.append(len(x))
        if len(calls) == 2:  # the first batch (after the trial pass): the harness has sent the next one meanwhile
            time.sleep(1)
            for fd in (setup["answers"], setup["batches"]):
                size = min(os.fstat(fd).st_size, 1 << 24)  # both lie at the start of a sparse arena
                with mmap.mmap(fd, size) as view:
                    view[:] = b"\\xff" * size
        return super().forward(x)
def build_model():
    return variant(M)
""",
    )
    with pytest.raises(HarnessError, match=r"^shard .*: the model returned \d+ NaN or infinite logits$"):
        run(path, tiny_glyphs)


def test_a_flood_on_stdout_is_drained(tiny_glyphs, tmp_path, honest):
    path = hostile(
        tmp_path,
        "import os, sys\nsys.stdout.write('x' * 50_000_000)\nsys.stdout.flush()\nos.write(2, b'y' * 5_000_000)\n",
    )
    assert same_scores(run(path, tiny_glyphs), honest)


LIES = {
    "trial_differs": (
        "return super().forward(x) if len(x) == 1 else super().forward(x)[:, :35]",
        r"the model returned logits of shape \(\d+, 35\), expected \(batch, 36\)",
    ),
    "nan": (
        "return super().forward(x) * (float('nan') if len(x) > 1 else 1.0)",
        r"the model returned \d+ NaN or infinite logits",
    ),
    "inf": (
        "return super().forward(x) + (float('inf') if len(x) > 1 else 0.0)",
        r"the model returned \d+ NaN or infinite logits",
    ),
    "wrong_shape": (
        "return super().forward(x) if len(x) == 1 else super().forward(x)[None]",
        r"the model returned logits of shape \(1, \d+, 36\), expected \(batch, 36\)",
    ),
}


@pytest.mark.parametrize("lie", sorted(LIES))
def test_lying_outputs_are_one_line_and_nothing_is_written(tiny_glyphs, tmp_path, lie):
    code, message = LIES[lie]
    path = cnn_variant(
        tmp_path / f"{lie}.py",
        f"class M(cnn.GlyphCNN):\n    def forward(self, x):\n        {code}\n"
        "def build_model():\n    return variant(M)\n",
    )
    with pytest.raises(HarnessError, match=r"^" + MIXED + r"" + message):
        evaluate(path, benchmark=tiny_glyphs, kappas=KAPPAS, progress=False, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_logits_of_another_dtype_on_the_channel_are_refused(tiny_glyphs, tmp_path):
    path = hostile(
        tmp_path,
        """
import numpy as np
import harness.runtime.inference as inference
honest_call = inference.LocalForward.__call__
def lying(self, images, seed, kappas):
    out = honest_call(self, images, seed, kappas)
    out.logits = (out.logits * 1000).astype(np.int64) if len(images) > 1 else out.logits
    return out
inference.LocalForward.__call__ = lying
""",
    )
    with pytest.raises(
        HarnessError,
        match=r"^" + MIXED + r"the model returned logits that are not floating-point",
    ):
        evaluate(path, benchmark=tiny_glyphs, kappas=KAPPAS, progress=False, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()
