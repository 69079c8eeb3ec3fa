"""What a hostile submission chooses and the harness used unchecked, tried again as root and as root of a user
namespace (the harness under ``unshare -r``): kappa and model names, text it sends or prints, the sizes of its answers
and images, and the files it can read. Each hostile file proves the attack ran: the harness names what it sent, or the
file names itself after what it found."""

import json
import math
import os
import re
import sys
from pathlib import Path

import pytest
from timm.data import DEFAULT_CROP_PCT

import harness
from attacks import QUICK, USERS, hostile, run_cli
from glyph_fixtures import cnn_variant
from harness.config import PHYSICAL_MEMORY
from harness.runtime.isolation import MAX_FEATURES
from harness.runtime.limits import share

pytestmark = pytest.mark.slow  # real runs: the quick loop (-m 'not slow') leaves them to CI

MODES = ("sandboxed", "trusted")
TRUSTED = {"sandboxed": (), "trusted": ("--trust-submission",)}
NAME_RULE = r"is not a lower-case letter followed by at most 63 lower-case letters, digits and '_'"
PEAK = (  # run a command, then write the largest resident set (KiB) of it and of every process it started to a file
    "import resource, subprocess, sys; code = subprocess.run(sys.argv[2:]).returncode; "
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); sys.exit(code)"
)


def off_in_child(check: str, mode: str) -> str:
    """An attack line that turns off the child's own ``check`` of harness.submission, so that the harness's check is
    what refuses (a trusted file runs in the harness: its checks stay on)."""
    if mode == "trusted":
        return ""
    return f"import harness.submission as submission\nsubmission.{check} = lambda value, what=None: value\n"


def submit(user: str, path: Path, benchmark: Path, *options, env: dict | None = None, peak: Path | None = None, **run):
    """``cood-harness submit`` as ``user`` (root, or root of a new user namespace), writing no bytecode; with ``peak``,
    the largest resident set of the run's processes is written there."""
    return run_cli(
        "submit",
        path,
        "--benchmark",
        benchmark,
        *QUICK,
        *options,
        wrap=(*USERS[user], *(() if peak is None else (sys.executable, "-c", PEAK, peak))),
        env={**os.environ, **(env or {}), "PYTHONDONTWRITEBYTECODE": "1"},
        **run,
    )


def error_line(done, pattern: str) -> re.Match:
    """The run's one line on stderr, which must match ``error: PATTERN``, after an exit with status 2."""
    stderr = done.stderr if isinstance(done.stderr, str) else done.stderr.decode()
    assert done.returncode == 2 and len(stderr.splitlines()) == 1, stderr
    match = re.fullmatch(f"error: {pattern}", stderr.strip())
    assert match, stderr
    return match


def files_under(folder: Path) -> set[bytes]:
    return {os.path.join(root, name) for root, dirs, files in os.walk(bytes(folder)) for name in dirs + files}


@pytest.mark.parametrize("user", sorted(USERS))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("where", ["absolute", "parent"])
def test_a_kappa_named_like_a_path_is_refused_and_writes_nothing(tiny_glyphs, tmp_path, user, mode, where):
    (tmp_path / "file").mkdir()
    name = {"absolute": str(tmp_path / "planted"), "parent": "../../planted"}[where]
    path = hostile(
        tmp_path / "file",
        off_in_child("check_kappa_name", mode) + f"KAPPAS = {{{name!r}: lambda logits: logits.max(axis=1)}}\n",
    )
    before = files_under(tmp_path)
    done = submit(user, path, tiny_glyphs, "--out", tmp_path / "out", *TRUSTED[mode])
    source = re.escape(str(path))  # the harness's check, not the child's: the path as the user named it
    shown = repr(name if len(name) <= 60 else name[:60] + "...")
    error_line(done, f"submission {source}: kappa name {re.escape(shown)} {NAME_RULE}")
    assert files_under(tmp_path) == before and done.stdout == ""


ESCAPES = {  # an attack, and the expression it names the model by
    "model_name": (off_in_child("check_name", "sandboxed"), "'\\x1b[31mred\\x1b]0;owned\\x07'"),
    "kappa_name": (
        off_in_child("check_kappa_name", "sandboxed") + "KAPPAS = {'\\x1b[2Jwiped': lambda logits: logits[:, 0]}",
        "'glyph_cnn'",
    ),
    "error": ("raise ValueError('\\x1b[2J\\x1b[31mred\\nsecond line')", "'glyph_cnn'"),
    "last_line": ("import os\nprint('\\x1b]0;owned\\x07\\x1b[31mred', flush=True)\nos._exit(3)", "'glyph_cnn'"),
}


@pytest.mark.parametrize("user", sorted(USERS))
@pytest.mark.parametrize("case", sorted(ESCAPES))
def test_escape_sequences_from_the_child_are_shown_escaped(tiny_glyphs, tmp_path, user, case):
    (tmp_path / "file").mkdir()
    (tmp_path / "cwd").mkdir()  # the default --out, cood-results/<model name>, would be made here
    path = hostile(tmp_path / "file", *ESCAPES[case])
    done = submit(user, path, tiny_glyphs, cwd=tmp_path / "cwd", text=False)
    line = error_line(
        done, r"(cannot load submission |submission |the model name |the submission's process died).*"
    ).group(0)
    assert b"\x1b" not in done.stdout + done.stderr and "\x1b" not in line
    assert "\\x1b[" in line  # what the child sent, shown escaped
    assert not any(b"\x1b" in name for name in files_under(tmp_path))


HUGE = {
    # in a batch: grow the answers' shared memory, then declare an array as large as it is
    "answer": (
        """
import json, os, socket, sys, time
setup = json.loads(sys.argv[1])
class M(cnn.GlyphCNN):
    def forward(self, x):
        if len(x) > 1:
            fd = setup["answers"]
            try:
                os.ftruncate(fd, os.fstat(fd).st_size + (1 << 36))
            except OSError:
                pass
            header = json.dumps({"kind": "answer", "body": {"$array": 0},
                                 "arrays": [["|u1", [os.fstat(fd).st_size], 0]]}).encode()
            socket.socket(fileno=os.dup(setup["channel"])).sendall(len(header).to_bytes(4, "big") + header)
            time.sleep(600)
        return super().forward(x)
def build_model():
    return variant(M)
""",
        [],
        r"shard \S+ \(and \d+ more shards in its batch\): ",
    ),
    # at load: a state entry larger than the shared memory, a quarter of the 1 GiB memory limit
    "load": (
        """
import json, os, socket, sys
setup = json.loads(sys.argv[1])
size = os.fstat(setup["answers"]).st_size + 1
header = json.dumps({"kind": "loaded", "body": {"name": "x", "data_config": cnn.DATA_CONFIG, "kappas": {}, "head": None,
    "state": [{"name": "w", "dtype": "torch.uint8", "shape": [size], "bytes": {"$array": 0}}], "parameters": ["w"]},
    "arrays": [["|u1", [size], 0]]}).encode()
socket.socket(fileno=os.dup(setup["channel"])).sendall(len(header).to_bytes(4, "big") + header)
build_model = cnn.build_model
""",
        ["--memory-limit", "1"],
        "",
    ),
}


@pytest.mark.parametrize("user", sorted(USERS))
@pytest.mark.parametrize("when", sorted(HUGE))
def test_a_huge_answer_is_refused_before_the_harness_copies_it(tiny_glyphs, tmp_path, user, when):
    code, options, prefix = HUGE[when]
    path = cnn_variant(tmp_path / "hostile.py", code)
    done = submit(user, path, tiny_glyphs, "--out", tmp_path / "out", *options, peak=tmp_path / "peak")
    declared, budget = map(
        int,
        error_line(
            done,
            prefix + r"the submission's process sent a malformed message \(its arrays hold at least (\d+) bytes, "
            r"more than the (\d+) bytes expected\); nothing is written",
        ).groups(),
    )
    if when == "load":  # what the answers' shared memory holds: a quarter of --memory-limit 1 (GiB)
        assert budget == 1 << 28 and declared == budget + 1
    else:  # float64 logits of 36 classes and features of the widest kind, per image of the batch
        assert declared == share(PHYSICAL_MEMORY)  # the arena the harness made, sparse: the child could not grow it
        assert budget % (8 * (36 + MAX_FEATURES)) == 0
    assert int((tmp_path / "peak").read_text()) < 3 << 20  # KiB: neither the harness nor its child held 3 GiB
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("user", sorted(USERS))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("config", ["input_size", "crop_pct"])
def test_a_data_config_of_huge_images_is_refused_before_decoding(tiny_glyphs, tmp_path, user, mode, config):
    change = {"input_size": "'input_size': (1, 4096, 4096)", "crop_pct": "'crop_pct': 0.01"}[config]
    path = cnn_variant(
        tmp_path / "hostile.py",
        off_in_child("check_data_config", mode)
        + f"DATA_CONFIG = {{**{{k: v for k, v in cnn.DATA_CONFIG.items() if k != 'crop_pct'}}, {change}}}\n"
        + "class M(cnn.GlyphCNN):\n    def forward(self, x):\n        return super().forward(x[..., :32, :32])\n"
        + "def build_model():\n    return variant(M)\n",
    )
    done = submit(user, path, tiny_glyphs, "--out", tmp_path / "out", *TRUSTED[mode])
    source = re.escape(str(path))  # as the user named it, in either mode
    side = math.floor(4096 / DEFAULT_CROP_PCT)  # timm's crop where the config names none
    size, resized = {"input_size": ("4096x4096", f"{side}x{side}"), "crop_pct": ("32x32", "3200x3200")}[config]
    error_line(
        done,
        f"submission {source}: DATA_CONFIG: input_size {size} \\(resized to {resized} before the crop\\) makes images "
        "of more than 1024x1024 pixels, the most the harness makes",
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("user", sorted(USERS))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("config", ["mean", "std"])
def test_a_data_config_of_nan_mean_or_zero_std_is_its_own_line(tiny_glyphs, tmp_path, user, mode, config):
    value, shown, rule = {  # pixels made NaN or infinite: the model's logits would be
        "mean": ("float('nan')", "nan", "1 finite number"),
        "std": ("0.0", r"0\.0", "1 finite positive number"),
    }[config]
    path = cnn_variant(
        tmp_path / "hostile.py",
        off_in_child("check_data_config", mode)
        + f"DATA_CONFIG = {{**cnn.DATA_CONFIG, {config!r}: ({value},)}}\nbuild_model = cnn.build_model\n",
    )
    done = submit(user, path, tiny_glyphs, "--out", tmp_path / "out", *TRUSTED[mode])
    source = re.escape(str(path))  # as the user named it, in either mode
    got = rf"[(\[]{shown},?[)\]]"  # the child's tuple crosses the channel as a list
    error_line(done, f"submission {source}: DATA_CONFIG: {config} must be {rule}, one per channel, got {got}")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("user", sorted(USERS))
def test_the_child_reads_no_path_of_the_environment_the_benchmark_or_the_caches(
    tiny_glyphs, benchmark_cache, tmp_path, user
):
    for folder in ("pythonpath", "libraries", "cwd", "file"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "marker.txt").write_text("planted")
    ours = Path(harness.__file__)
    targets = [
        *(tmp_path / folder / "marker.txt" for folder in ("pythonpath", "libraries", "cwd")),
        tiny_glyphs / "manifest.json",  # its folder's parent is on PYTHONPATH
        ours.parents[1] / "pyproject.toml",  # beside the harness's package, in a development checkout
    ]
    path = hostile(
        tmp_path / "file",
        f"""
import os, sys
import harness
found = []
for target in {[str(t) for t in targets]!r}:
    try:
        open(target).read()
        found.append("read")
    except OSError:
        found.append("unread")
try:
    os.listdir({str(benchmark_cache)!r})
    found.append("listed")
except OSError:
    found.append("unlisted")
found.append("leaked" if {str(tmp_path)!r} in repr([os.environ, sys.path]) else "clean")
found.append("same" if harness.__file__ == {str(ours)!r} else "other")
""",
        "'_'.join(found)",
    )
    entries = [tmp_path / "pythonpath", ".", tiny_glyphs.parent, os.environ.get("PYTHONPATH")]
    env = {
        "PYTHONPATH": os.pathsep.join(str(entry) for entry in entries if entry),
        "LD_LIBRARY_PATH": str(tmp_path / "libraries"),
    }
    done = submit(user, path, tiny_glyphs, "--out", tmp_path / "out", "-k", "softmax", cwd=tmp_path / "cwd", env=env)
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "out" / "records" / "softmax.json").read_text())
    assert record["model"]["name"] == "unread_unread_unread_unread_unread_unlisted_clean_same"
