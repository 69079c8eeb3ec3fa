"""The trust boundary: a submission file's code runs in a child process, never in the harness's.

The parent reads shards, decodes and transforms images (timm's transform of the file's ``DATA_CONFIG``), computes the
built-in kappas from the logits, forms levels, measures and writes records. The child imports the file, builds the
model and runs only what needs the submitter's code or the model: forward passes, ODIN, MC-dropout and the file's own
kappas, and the passes of fitted kappas that read the model (their fit, arrays only, is handed over once). It returns
arrays, so nothing it does can reach the parent's memory. The child gets:

- no network: a new network namespace (as root, or through a user namespace where the OS allows one), else a
  Python-level socket block, which native code could bypass; the record names the guard that was active;
- a read-only view of every file system except its own home (a private mount namespace), so it cannot change the
  harness's code, the benchmark or earlier results on disk;
- a scrubbed environment (a short allow-list: no tokens or credentials) and a fresh, empty home and working folder;
- a wall-clock limit per batch and per run, and a memory limit (``RLIMIT_DATA``); a hang, a crash or an overrun
  ends the run with one line naming the batch's shard.

The child's own output goes to a log in its home; the last line is quoted when the child dies.
"""

from __future__ import annotations

import mmap
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np
import torch

from harness.errors import HarnessError
from harness.execution import Execution
from harness.kappas import LogitKappa
from dataset_builder.shards import file_sha256
from harness.submission import Submission, timm_transform

ALLOWED_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "PYTHONPATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH",
               "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
               "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "COOD_FAULT")


def _physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@dataclass(frozen=True)
class Limits:
    """What a submission may use: seconds per batch, seconds per run, bytes of memory, seconds to load.

    Loading (importing torch, building the model, a trial forward pass) has its own, fixed allowance: a tight
    ``batch_timeout_s`` is meant for batches, and a slow start says nothing about a hang."""

    batch_timeout_s: float = 600.0
    run_timeout_s: float = 48 * 3600.0
    memory_bytes: int = field(default_factory=_physical_memory)
    load_timeout_s: float = 600.0

    def __post_init__(self):
        if min(self.batch_timeout_s, self.run_timeout_s, self.load_timeout_s) <= 0 or self.memory_bytes <= 0:
            raise HarnessError(f"timeouts and the memory limit must be positive, got {asdict(self)}")


class SharedBatches:
    """The images of a batch, handed to the child through a shared memory file rather than through the pipe (a
    pickled batch of 256 ImageNet-size images is 154 MB). The parent writes, the child maps it read-only and
    copies; the parent never reads it back, so nothing the child does to it reaches the parent."""

    def __init__(self):
        self.fd, self.size, self.view = os.memfd_create("cood-batch"), 0, None

    def write(self, array: np.ndarray) -> tuple[tuple[int, ...], str]:
        """Place ``array`` in the shared file (grown when needed); return what the child needs to read it."""
        if array.nbytes > self.size:
            os.ftruncate(self.fd, array.nbytes)
            self.view, self.size = mmap.mmap(self.fd, array.nbytes), array.nbytes
        np.frombuffer(self.view, dtype=array.dtype, count=array.size).reshape(array.shape)[...] = array
        return array.shape, array.dtype.str

    def close(self) -> None:
        """Release the file (again: a no-op)."""
        if self.view is not None:
            self.view.close()
        if self.fd >= 0:
            os.close(self.fd)
        self.fd, self.size, self.view = -1, 0, None


def read_shared(fd: int, shape: tuple[int, ...], dtype: str) -> torch.Tensor:
    """The child's side of :class:`SharedBatches`: a private copy of the batch."""
    count = int(np.prod(shape))
    nbytes = count * np.dtype(dtype).itemsize
    with mmap.mmap(fd, nbytes, prot=mmap.PROT_READ) as view:
        return torch.from_numpy(np.frombuffer(view, dtype=dtype, count=count).reshape(shape).copy())


class ChildForward:
    """A submission file's model in a child process, called like :class:`harness.inference.LocalForward`."""

    def __init__(self, path: Path, execution: Execution, num_classes: int, seed: int, limits: Limits):
        self.limits, self.started = limits, time.monotonic()
        self.home = Path(tempfile.mkdtemp(prefix="cood-submission-"))
        ours, theirs = socket.socketpair()
        self.batches = SharedBatches()
        env = {k: os.environ[k] for k in ALLOWED_ENV if k in os.environ}
        env.update(HOME=str(self.home), TMPDIR=str(self.home), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        with open(self.home / "child.log", "wb") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "harness.sandbox", str(theirs.fileno())],
                                            pass_fds=[theirs.fileno(), self.batches.fd], env=env, cwd=self.home, stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=log)
        theirs.close()
        self.conn = Connection(ours.detach())
        self.meta = self._ask(("load", {"path": str(Path(path).resolve()), "device": str(execution.device), "amp": execution.amp,
                                        "channels_last": execution.channels_last, "compile": execution.compile,
                                        "threads": torch.get_num_threads(), "num_classes": num_classes, "seed": seed,
                                        "batches_fd": self.batches.fd,
                                        "memory_bytes": limits.memory_bytes}), limits.load_timeout_s)
        self.head = self.meta["head"]  # the model's last layer (weight, bias), or None
        self.isolation = {"mode": "child process", **self.meta["guards"], "environment": "scrubbed",
                          "memory_limit_bytes": limits.memory_bytes, "batch_timeout_s": limits.batch_timeout_s,
                          "run_timeout_s": limits.run_timeout_s}

    def _ask(self, message, limit: float):
        """Send a request, wait for the answer within ``limit`` and the run's limit; any failure stops the child and is
        one line."""
        timeout = min(limit, self.limits.run_timeout_s - (time.monotonic() - self.started))
        try:
            self.conn.send(message)
            if not self.conn.poll(max(timeout, 0)):
                self.close()
                raise HarnessError(f"the submission did not answer within {timeout:.0f} s (see --timeout and --run-timeout)")
            kind, *answer = self.conn.recv()
        except (EOFError, OSError):
            code = self.process.wait(timeout=30)
            how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
            last = self._last_log_line()
            self.close()
            raise HarnessError(f"the submission's process died ({how}){': ' + last if last else ''}") from None
        if kind == "oom":
            raise torch.cuda.OutOfMemoryError(answer[0])
        if kind == "error":
            raise HarnessError(answer[0])
        return answer[0]

    def _last_log_line(self) -> str:
        try:
            lines = (self.home / "child.log").read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1][:300] if lines else ""

    def __call__(self, images: torch.Tensor, keys: list[str], kappas) -> "ModelOutput":
        from harness.inference import ModelOutput

        shape, dtype = self.batches.write(images.numpy())
        answer = self._ask(("batch", shape, dtype, keys, [(k.name, k.params) for k in kappas]), self.limits.batch_timeout_s)
        return ModelOutput(answer["logits"], answer["features"], answer["scores"], answer["confs"])

    def extract(self, images: torch.Tensor, kappas) -> dict[str, dict]:
        """What the kappas that read intermediate layers need of a batch of the fit split, from the child."""
        shape, dtype = self.batches.write(images.numpy())
        return self._ask(("extract", shape, dtype, [(k.name, k.params) for k in kappas]), self.limits.batch_timeout_s)

    def load_states(self, kappas) -> None:
        """Hand the fitted state of kappas computed in the child (arrays only) to the child, once."""
        states = {k.name: k.impl.state() for k in kappas if hasattr(k.impl, "state")}
        if states:
            self._ask(("states", states), self.limits.batch_timeout_s)

    def close(self) -> None:
        """Stop the child (politely, then for good) and remove its home."""
        if self.process.poll() is None:
            try:
                self.conn.send(("exit",))
                self.process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self.conn.close()
        self.batches.close()
        shutil.rmtree(self.home, ignore_errors=True)


def load_isolated(path: str | Path, execution: Execution, num_classes: int, seed: int,
                  limits: Limits) -> tuple[Submission, ChildForward]:
    """A submission file loaded in a child process: the parent's view of it, and its forward pass."""
    if not Path(path).is_file():
        raise HarnessError(f"submission file {path} not found")
    forward = ChildForward(Path(path), execution, num_classes, seed, limits)
    meta = forward.meta
    kappas = {name: LogitKappa(name, _computed_in_child, params=params, wants_features=wants)
              for name, (params, wants) in meta["kappas"].items()}
    config = meta["data_config"]
    submission = Submission(name=meta["name"], model=None, transform=timm_transform(config), channels=int(config["input_size"][0]),
                            preprocessing=meta["preprocessing"], source=meta["source"], file_sha256=file_sha256(path),
                            user_kappas=kappas, weights_sha256=meta["weights_sha256"], num_parameters=meta["num_parameters"])
    return submission, forward


def _computed_in_child(*_args):
    raise HarnessError("a submission's kappa runs in its child process")


def serve(conn: Connection, guards: dict) -> None:
    """The child (:mod:`harness.sandbox`): load the submission, then answer batches until told to exit."""
    import resource

    from harness.inference import LocalForward
    from harness.kappas import rebuild_kappa
    from harness.submission import check_output, load_file

    kind, options = conn.recv()
    resource.setrlimit(resource.RLIMIT_DATA, (options["memory_bytes"], options["memory_bytes"]))
    torch.set_num_threads(options["threads"])
    try:
        submission = load_file(options["path"])
        if submission.preprocessing["transform"] == "custom":
            raise HarnessError(f"submission {options['path']} defines transform(), which would run outside the sandbox; "
                               "declare DATA_CONFIG instead, or pass --trust-submission to run the file in the harness's process")
        check_output(submission, options["num_classes"])
        execution = Execution(torch.device(options["device"]), options["amp"], options["channels_last"], options["compile"])
        forward = LocalForward(execution.prepare(submission.model), execution, options["num_classes"], options["seed"])
    except HarnessError as exc:
        conn.send(("error", str(exc)))
        return
    except MemoryError:
        conn.send(("error", f"the submission ran out of memory while loading (limit {options['memory_bytes']} bytes)"))
        return
    module_config = submission.preprocessing
    conn.send(("ok", {"name": submission.name, "source": submission.source, "preprocessing": module_config, "data_config": {k: v for k, v in module_config.items() if k != "transform"},
                      "weights_sha256": submission.weights_sha256,
                      "num_parameters": submission.num_parameters, "guards": guards, "head": forward.head,
                      "kappas": {n: (k.params, k.wants_features) for n, k in submission.user_kappas.items()}}))
    states = {}  # fitted kappas' state, by name, from the parent

    def rebuilt(name, params):
        kappa = rebuild_kappa(name, params, submission.user_kappas)
        if name in states:
            kappa.impl.load(states[name])
        return kappa

    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message[0] == "exit":
            return
        try:
            if message[0] == "states":
                states.update(message[1])
                conn.send(("ok", None))
                continue
            if message[0] == "extract":
                _, shape, dtype, wanted = message
                kappas = [rebuilt(name, params) for name, params in wanted]
                conn.send(("ok", forward.extract(read_shared(options["batches_fd"], shape, dtype), kappas)))
                continue
            _, shape, dtype, keys, wanted = message
            kappas = [rebuilt(name, params) for name, params in wanted]
            out = forward(read_shared(options["batches_fd"], shape, dtype), keys, kappas)
            conn.send(("ok", {"logits": out.logits, "features": out.features, "scores": out.scores, "confs": out.confs}))
        except torch.cuda.OutOfMemoryError as exc:
            conn.send(("oom", str(exc).splitlines()[0]))
        except HarnessError as exc:
            conn.send(("error", str(exc)))
        except MemoryError:
            conn.send(("error", f"the submission ran out of memory (limit {options['memory_bytes']} bytes)"))
