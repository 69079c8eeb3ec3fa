"""The trust boundary: a submission file's code runs in a sandboxed child process, never in the harness's.

The harness reads shards, decodes and transforms images (timm's transform of the file's ``DATA_CONFIG``), computes the
built-in kappas from the logits, forms levels, measures and writes records. The child (:mod:`harness.runtime.child`, in
the sandbox of :mod:`harness.runtime.sandbox`) imports the file from a copy of its bundle, builds the model and runs
only what needs the submitter's code or the model: forward passes, ODIN, MC-dropout and the file's own kappas, and the
passes of fitted kappas that read the model (their fit, arrays only, is handed over once). Everything it sends crosses
the channel of :mod:`harness.runtime.channel` as data, and is checked here before use: its size (an answer's bytes
against what it can hold, before anything is copied), shapes, dtypes, finiteness, the kappas asked for and their names.
What names the model in records is computed here: the bundle's hash, and the weights hash and parameter count of the
parameter bytes the child hands over.

Before the file is imported the child checks from inside that the guards hold; the harness checks that its probe
listener on 127.0.0.1 was not reached, and refuses to go on unless every guard holds. Limits: a wall-clock limit to
load, per batch and per run, one memory budget and a process cap (:mod:`harness.runtime.limits`, which the record
names); a hang, a crash or an overrun ends the run with one line naming the limit's option or the batch's shard. The
child's output is kept (its last 64 KiB) and its last line quoted when it dies or overruns a limit.
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from harness.config import Limits
from harness.errors import HarnessError, escaped
from harness.kappas import LogitFunction, StatefulModelKappa, check_kappa_name, registry
from harness.runtime import sandbox
from harness.runtime.channel import Malformed
from harness.runtime.execution import Execution
from harness.runtime.serving import as_numpy
from harness.submission import ClassSubset, Submission, check_data_config, state_sha256, timm_transform

if TYPE_CHECKING:
    from harness.runtime.inference import Done, ModelOutput

FLOATS = ("<f2", "<f4", "<f8")
TORCH_DTYPES = {
    str(t): t
    for t in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
        torch.complex64,
        torch.complex128,
    )
}
CONFIG_KEYS = {"input_size", "mean", "std", "interpolation", "crop_pct", "crop_mode"}
MAX_FEATURES = 1 << 16  # the features' width an answer may hold before the first one gives it


class ChildForward:
    """A submission file's model in a sandboxed child process, called like
    :class:`harness.runtime.inference.LocalForward`.

    It takes a sandbox the command line started for the file before importing the harness and no other has taken (its
    Python and torch start-up then overlap the harness's own), or starts one."""

    def __init__(
        self,
        path: Path,
        execution: Execution,
        num_classes: int,
        limits: Limits,
        subset: ClassSubset | None = None,
    ):
        self.limits, self.num_classes, self.started, self.subset = limits, num_classes, time.monotonic(), subset
        self.path, self.execution, self.features_dim = path, execution, None
        self.waiting: deque[ChildAnswer] = deque()  # batches sent whose answers are not taken yet (:meth:`launch`)
        cuda = execution.device.type == "cuda"
        self.sandbox = sandbox.take(path, cuda, limits.memory_bytes) or sandbox.Sandbox(path, cuda, limits.memory_bytes)
        try:
            if execution.compile and self.sandbox.budget.threads_only:
                raise HarnessError(
                    "--compile needs a memory cgroup for the sandbox (its compiler works in processes of their own, "
                    "which the sandbox refuses where per-process limits are all it has); run without --compile"
                )
            self.isolation = {
                **self.sandbox.ready(limits.load_timeout_s),
                "memory_limit_bytes": limits.memory_bytes,
                "batch_timeout_s": limits.batch_timeout_s,
                "load_timeout_s": limits.load_timeout_s,
                "run_timeout_s": limits.run_timeout_s,
            }
            self.meta = self._ask(
                (
                    "load",
                    {
                        "path": f"{sandbox.BUNDLE_MOUNT}/{self.sandbox.file}",
                        "device": str(execution.device),
                        "amp": execution.amp,
                        "channels_last": execution.channels_last,
                        "compile": execution.compile,
                        "threads": torch.get_num_threads(),
                        "num_classes": num_classes,
                        "subset": None if subset is None else {**vars(subset), "columns": list(subset.columns)},
                        "memory_bytes": limits.memory_bytes,
                    },
                ),
                "loaded",
                self.sandbox.budget.share,  # what the answers' shared memory holds
                loading=True,
            )
        except BaseException:
            self.close()
            raise

    def _ask(self, message, expected: str, budget: int, loading: bool = False):
        """One exchange with the child within what is left of the load limit (``loading``) or within the batch limit,
        and within what is left of the run's, its answer's arrays within ``budget`` bytes (see :meth:`Sandbox.ask`); a
        silence is one line naming the limit it overran and the option that sets it. The answers of batches sent
        before (:meth:`launch`) are taken first."""
        while self.waiting:
            self._next_answer()
        return self._exchange(message, expected, budget, loading)

    def _exchange(self, message, expected: str, budget: int, loading: bool = False):
        limits, elapsed = self.limits, time.monotonic() - self.started
        if loading:
            limit = limits.load_timeout_s - elapsed  # the sandbox's start counts too
            late = f"the submission did not load within {limits.load_timeout_s:g} s (see --load-timeout)"
        else:
            limit = limits.batch_timeout_s
            late = f"the submission did not answer within {limit:g} s (see --timeout)"
        if limits.run_timeout_s - elapsed < limit:
            limit = limits.run_timeout_s - elapsed
            late = f"the submission's run reached its limit of {limits.run_timeout_s:g} s (see --run-timeout)"
        try:
            return self.sandbox.ask(message, expected, limit, budget, late)
        except sandbox.OutOfMemory as exc:
            raise torch.cuda.OutOfMemoryError(str(exc)) from exc

    def fresh(self) -> ChildForward:
        """The same file loaded anew in a sandbox of its own, which has seen none of the run's images: the re-check
        asks it once this one has ended (:mod:`harness.runtime.recheck`), so that a model answering from a memory of
        what it saw, or by asking a process of the run, cannot pass. Refused in one line if the folder's files changed
        since the run began."""
        other = ChildForward(self.path, self.execution, self.num_classes, self.limits, self.subset)
        try:
            other.submission()
            if other.sandbox.bundle_sha256 != self.sandbox.bundle_sha256:
                raise HarnessError(f"the files of {self.path.parent} changed during the run; nothing is written")
        except BaseException:
            other.close()
            raise
        return other

    def submission(self) -> Submission:
        """The harness's view of the file: what it declared, checked, and the identity computed here."""
        meta = self.meta
        fields = {"name", "data_config", "kappas", "head", "state", "parameters", "subset"}
        if not isinstance(meta, dict) or set(meta) != fields:
            raise Malformed(f"its load answer has other fields than {', '.join(sorted(fields))}")
        if meta["subset"] not in (False, True) or (meta["subset"] and self.subset is None):
            raise Malformed("its load answer's subset is not a boolean, or names a subset the harness did not offer")
        config = meta["data_config"]
        if not isinstance(config, dict) or not set(config) <= CONFIG_KEYS:
            raise Malformed("its data config has unknown fields")
        file = self.sandbox.file
        check_data_config(config, f"submission {self.path}: DATA_CONFIG")
        try:
            transform = timm_transform(config)
        except Exception as exc:
            why = escaped(f"{type(exc).__name__}: {exc}", 300)  # the child's values may be in timm's message
            raise HarnessError(f"submission {self.path}: DATA_CONFIG is not a timm data config: {why}") from exc
        self.head = self._head(meta["head"])
        weights, count = self._identity(meta["state"], meta["parameters"])
        return Submission(
            name=meta["name"],
            model=None,
            transform=transform,
            channels=int(config["input_size"][0]),
            preprocessing={**config, "transform": "timm.create_transform"},
            source=file,
            file_sha256=self.sandbox.file_sha256,
            user_kappas=self._kappas(meta["kappas"]),
            weights_sha256=weights,
            num_parameters=count,
            bundle_sha256=self.sandbox.bundle_sha256,
            class_subset=self.subset.record() if meta["subset"] else None,
        )

    def _head(self, head):
        if head is None:
            return None
        if not (
            isinstance(head, list)
            and len(head) == 2
            and all(isinstance(a, np.ndarray) and a.dtype.str in FLOATS for a in head)
            and head[0].ndim == 2
            and head[0].shape[0] == self.num_classes
            and head[1].shape == (self.num_classes,)
        ):
            raise Malformed("its head is not a weight and a bias of one row per ID class")
        return head[0].astype(np.float64), head[1].astype(np.float64)

    def _identity(self, state, parameters) -> tuple[str, int]:
        """The weights hash and parameter count of the parameter bytes the child handed over, each entry checked."""
        if not isinstance(state, list) or not isinstance(parameters, list):
            raise Malformed("its state is not a list of tensors")
        entries, sizes = [], {}
        for entry in state:
            if not (
                isinstance(entry, dict)
                and set(entry) == {"name", "dtype", "shape", "bytes"}
                and isinstance(entry["name"], str)
                and entry["dtype"] in TORCH_DTYPES
                and isinstance(entry["shape"], list)
                and all(type(n) is int and n >= 0 for n in entry["shape"])
                and isinstance(entry["bytes"], np.ndarray)
                and entry["bytes"].dtype == np.uint8
            ):
                raise Malformed("a state entry is not a named tensor's bytes")
            numel = int(np.prod(entry["shape"], dtype=object))
            if entry["bytes"].size != numel * TORCH_DTYPES[entry["dtype"]].itemsize:
                raise Malformed(
                    f"state entry {entry['name'][:60]!r} has {entry['bytes'].size} bytes for its shape and dtype"
                )
            entries.append((entry["name"], entry["dtype"], entry["shape"], entry["bytes"]))
            sizes[entry["name"]] = numel
        if [e[0] for e in entries] != sorted(sizes) or len(sizes) != len(entries):
            raise Malformed("its state entries are not unique and in name order")
        if not all(isinstance(p, str) and p in sizes for p in parameters) or len(set(parameters)) != len(parameters):
            raise Malformed("it names parameters that are not in its state")
        return state_sha256(entries), sum(sizes[p] for p in parameters)

    def _kappas(self, kappas) -> dict[str, LogitFunction]:
        if not isinstance(kappas, dict):
            raise Malformed("its kappas are not an object")
        out = {}
        for name, spec in kappas.items():
            check_kappa_name(name, f"submission {self.path}")
            if name in registry().defs or not (
                isinstance(spec, dict)
                and set(spec) == {"params", "wants_features", "probability"}
                and isinstance(spec["wants_features"], bool)
                and isinstance(spec["probability"], bool)
                and isinstance(spec["params"], dict)
                and set(spec["params"]) == {"source", "code_sha256"}
            ):
                raise Malformed(f"kappa {name[:60]!r} is not a submission kappa")
            out[name] = LogitFunction(
                name,
                _computed_in_child,
                params=spec["params"],
                wants_features=spec["wants_features"],
                probability=spec["probability"],
            )
        return out

    def __call__(self, images: torch.Tensor, seeds: np.ndarray, kappas) -> ModelOutput:
        """A batch's answer: only its pixels and its rows' seeds for the seeded kappas cross to the child (no key,
        class, shard or split)."""
        body = self._ask(self._batch(images, seeds, kappas), "answer", self._answer_budget(len(images), kappas))
        return self._output(body, len(images), kappas)

    def launch(self, images: torch.Tensor, seeds: np.ndarray, kappas) -> ChildAnswer | Done:
        """A batch sent to the child, its answer taken when the returned :class:`ChildAnswer` is asked for it: on the
        CPU the child works on it while the harness finishes the batch before (:func:`harness.runtime.inference.
        score_mixed`). The answers come in order, each batch and answer placed in the shared memory clear of the one
        before, which the other side may still be reading (else the answers before are taken first); an
        out-of-memory answer halves the batch when it is taken. On a GPU the answer is taken at once, as before: the
        overlap is measured on the CPU only."""
        from harness.runtime.inference import Done

        if self.execution.device.type == "cuda":
            return Done(self(images, seeds, kappas))
        budget = self._answer_budget(len(images), kappas)
        channel = self.sandbox.channel
        if self.waiting and not (channel.out.beside(images.nbytes) and 3 * budget <= channel.into.size):
            while self.waiting:
                self._next_answer()
        try:
            self.sandbox.send(self._batch(images, seeds, kappas))
        except HarnessError as exc:  # the sandbox has ended: no answer comes any more
            for earlier in self.waiting:
                earlier.error = exc
            self.waiting.clear()
            raise
        answer = ChildAnswer(self, len(images), kappas, budget)
        self.waiting.append(answer)
        return answer

    def _next_answer(self) -> None:
        """Take the answer of the first batch still waiting; a failure is that batch's, and every later one's when the
        sandbox ended."""
        answer = self.waiting.popleft()
        try:
            answer.output = self._output(self._exchange(None, "answer", answer.budget), answer.n, answer.kappas)
        except (HarnessError, torch.cuda.OutOfMemoryError) as exc:  # out of memory: the caller halves the batch
            answer.error = exc
        if answer.error is not None and self.sandbox.channel is None:
            for later in self.waiting:
                later.error = answer.error
            self.waiting.clear()

    @staticmethod
    def _batch(images: torch.Tensor, seeds: np.ndarray, kappas) -> tuple[str, dict]:
        seeds = np.asarray(seeds, dtype=np.int64)
        return "batch", {"images": images.numpy(), "seeds": seeds, "kappas": [(k.name, k.params) for k in kappas]}

    def _output(self, body, n: int, kappas) -> ModelOutput:
        """A batch's answer as the harness uses it, every field checked."""
        from harness.runtime.inference import ModelOutput

        if not isinstance(body, dict) or set(body) != {"logits", "features", "scores", "confs"}:
            raise Malformed("its answer has other fields than logits, features, scores, confs")
        logits = self._floats(body["logits"], "logits", (n, self.num_classes))
        features = None
        if body["features"] is not None:
            features = self._floats(body["features"], "features", (n, self.features_dim or -1))
            self.features_dim = features.shape[1]
        values = {}
        for part in ("scores", "confs"):
            if not isinstance(body[part], dict) or set(body[part]) != {k.name for k in kappas}:
                raise Malformed(f"its {part} are not those of the kappas asked for")
            values[part] = {name: self._floats(v, f"kappa '{name}' {part}", (n,)) for name, v in body[part].items()}
        return ModelOutput(logits, features, values["scores"], values["confs"])

    def _answer_budget(self, n: int, kappas) -> int:
        """The most bytes an answer for ``n`` images holds: float64 logits and features (``MAX_FEATURES`` wide until an
        answer gives their width), and a score and a confidence per image for each kappa."""
        return 8 * n * (self.num_classes + (self.features_dim or MAX_FEATURES) + 2 * len(kappas))

    @staticmethod
    def _floats(array, what: str, shape: tuple[int, ...]) -> np.ndarray:
        """A float array of ``shape`` (-1: any length), as float32 unless float64 is needed for kappa values."""
        if not isinstance(array, np.ndarray) or array.dtype.str not in FLOATS:
            raise HarnessError(f"the model returned {what} that are not floating-point numbers")
        if array.ndim != len(shape) or any(want not in (-1, got) for want, got in zip(shape, array.shape)):
            raise HarnessError(
                f"the model returned {what} of shape {array.shape}, "
                f"expected {tuple('any' if s < 0 else s for s in shape)}"
            )
        return array.astype(np.float32) if array.ndim == 2 else array

    def extract(self, images: torch.Tensor, kappas) -> dict[str, dict]:
        """What the kappas that read intermediate layers need of a batch of the fit split, from the child."""
        body = self._ask(
            ("extract", {"images": images.numpy(), "kappas": [(k.name, k.params) for k in kappas]}),
            "extracted",
            self.sandbox.budget.share,
        )
        if (
            not isinstance(body, dict)
            or set(body) != {k.name for k in kappas}
            or not all(isinstance(v, dict) for v in body.values())
        ):
            raise Malformed("its extraction is not one object per kappa asked for")
        return body

    def load_states(self, kappas) -> None:
        """Hand the fitted state of kappas computed in the child (arrays only) to the child, once."""
        states = {k.name: as_numpy(k.impl.state()) for k in kappas if isinstance(k.impl, StatefulModelKappa)}
        if states:
            self._ask(("states", states), "ok", 0)

    def close(self) -> None:
        """End the sandbox: its every process dies with it, and the bundle's copy is removed."""
        self.waiting.clear()
        self.sandbox.close()


class ChildAnswer:
    """The answer of a batch :meth:`ChildForward.launch` sent, taken in order when :meth:`result` asks for it."""

    def __init__(self, forward: ChildForward, n: int, kappas, budget: int):
        self.forward, self.n, self.kappas, self.budget = forward, n, kappas, budget
        self.output, self.error = None, None

    def result(self) -> ModelOutput:
        while self.output is None and self.error is None:
            self.forward._next_answer()
        if self.error is not None:
            raise self.error
        return self.output


def load_isolated(
    path: str | Path, execution: Execution, num_classes: int, limits: Limits, subset: ClassSubset | None = None
) -> tuple[Submission, ChildForward]:
    """A submission file loaded in a sandboxed child process: the harness's view of it, and its forward pass (a model
    of ``subset.total`` outputs restricted there to the ID classes' columns)."""
    forward = ChildForward(Path(path), execution, num_classes, limits, subset=subset)
    try:
        return forward.submission(), forward
    except BaseException:
        forward.close()
        raise


def _computed_in_child(*_args):
    raise HarnessError("a submission's kappa runs in its child process")
