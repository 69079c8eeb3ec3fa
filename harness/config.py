"""The options of a run, with every default written once here: :class:`EvalConfig`, which refuses in one line what
cannot work, and the sandbox's :class:`Limits`. Without torch, so that the command line checks its options first."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from harness.errors import HarnessError
from harness.method.severity import DEFAULT_NUM_LEVELS, DEFAULT_RULE, check_rule
from harness.options import DECODERS, FEATURE_DTYPES, check_name

PHYSICAL_MEMORY = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")  # the default memory limit


@dataclass(frozen=True)
class Limits:
    """What a submission may use: seconds per batch, seconds per run, bytes of memory, seconds to load.

    Loading (starting the sandbox, importing the file, building the model, a trial forward pass) has its own limit,
    ``load_timeout_s`` (``--load-timeout``): a tight ``batch_timeout_s`` is meant for batches, and a slow start says
    nothing about a hang."""

    batch_timeout_s: float = 600.0
    run_timeout_s: float = 48 * 3600.0
    memory_bytes: int = PHYSICAL_MEMORY
    load_timeout_s: float = 600.0

    def __post_init__(self):
        if min(self.batch_timeout_s, self.run_timeout_s, self.load_timeout_s) <= 0 or self.memory_bytes <= 0:
            raise HarnessError(f"timeouts and the memory limit must be positive, got {asdict(self)}")


@dataclass(frozen=True)
class EvalConfig:
    """How :func:`harness.run.evaluate` runs; what cannot work is refused here, in one line.

    ``benchmark``: an embedded name, a folder or ``hf://datasets/<repo>@<revision>``. ``kappas`` default to softmax,
    entropy, max_logit, energy, then the submission's own; ``odin_preset`` (default paper) and ``mc_passes`` (default
    30) apply to odin and mc_dropout and are refused without them. ``channels``: the planes an in-memory model's images
    are converted to; ``weights``: for the zoo targets (none: a ``timm:`` target's pretrained weights from the Hub, at
    ``revision``); ``limits``: a submission file's sandbox (see :mod:`harness.runtime.isolation`) unless
    ``trust_submission``. ``workers`` default by device, ``channels_last`` on for CUDA. ``cache`` keeps per-shard
    scores in ``cache_dir`` (default ``$COOD_BENCH_CACHE/scores``), with ``keep_logits`` the logits and features too
    (in ``feature_dtype``, float32 or float16, which the kappas then read in every run alike), so that a rerun resumes
    and a new kappa needs no new pass; and, with the ``torchvision`` decoder on the CPU, the decoded images (up to
    ``decoded_cache_gb``; 0: none), so that the next model with the same preprocessing skips decoding.
    ``severity_rule``: how the levels' windows start (:data:`harness.method.severity.SEVERITY_RULES`; integer, the
    canonical). ``order_seed``: the secret order the images cross the model in (None: drawn from the operating system;
    every record names the one used, and a rerun given it streams the same batches). ``private``: also score the
    benchmark's private test images (None: when its folder holds them; True: refused without them; False: never),
    read from ``private_part`` (a folder; default ``<benchmark>/private``; given, it implies ``private``: a Hub
    benchmark's private part is kept apart by its operator)."""

    benchmark: str | Path = "glyphs"
    kappas: tuple[str, ...] | None = None
    name: str | None = None
    channels: int = 3
    weights: str | Path | None = None
    revision: str | None = None
    num_levels: int = DEFAULT_NUM_LEVELS
    severity_rule: str = DEFAULT_RULE
    batch_size: int = 256
    workers: int | None = None
    decoder: str = "auto"
    device: str = "auto"
    amp: str = "auto"
    channels_last: bool | None = None
    compile: bool = False
    seed: int = 0
    order_seed: int | None = None
    order_seed_drawn: bool = False  # set by the harness: it drew the order seed itself (no order_seed was given)
    private: bool | None = None
    private_part: str | Path | None = None
    odin_preset: str | None = None
    mc_passes: int | None = None
    verify: bool = True
    cache: bool = False
    cache_dir: str | Path | None = None
    keep_logits: bool = True
    progress: bool = True
    trust_submission: bool = False
    limits: Limits = field(default_factory=Limits)
    feature_dtype: str = "float32"
    decoded_cache_gb: float = 8.0

    def __post_init__(self):
        if self.kappas is not None:
            object.__setattr__(self, "kappas", tuple(self.kappas))
        if self.feature_dtype not in FEATURE_DTYPES:
            raise HarnessError(
                f"--feature-dtype must be one of {', '.join(FEATURE_DTYPES)}, got '{self.feature_dtype}'"
            )
        if self.name is not None:
            check_name(self.name)
        if self.num_levels < 2:
            raise HarnessError(
                f"--levels must be at least 2 (the method needs a first and a last level), got {self.num_levels}"
            )
        check_rule(self.severity_rule)
        if self.order_seed is not None and not 0 <= self.order_seed < 1 << 63:
            raise HarnessError(f"--order-seed must be from 0 to 2**63 - 1, got {self.order_seed}")
        if self.batch_size < 1:
            raise HarnessError(f"--batch-size must be at least 1, got {self.batch_size}")
        if self.workers is not None and self.workers < 0:
            raise HarnessError(f"--workers must be 0 or more, got {self.workers}")
        if self.decoder not in DECODERS:
            raise HarnessError(f"--decoder must be one of {', '.join(DECODERS)}, got '{self.decoder}'")


SUBMIT_DEFAULTS = EvalConfig(cache=True)  # submit() and the command line keep the resumable score cache on

# the command line's options: each sets the field of its name, but these (option -> field)
RENAMED_OPTIONS = {"levels": "num_levels", "kappa": "kappas"}
LIMIT_OPTIONS = {
    "timeout": "batch_timeout_s",
    "run_timeout": "run_timeout_s",
    "load_timeout": "load_timeout_s",
    "memory_limit": "memory_bytes",
}
# an in-memory model's own (a file or a target brings its own), and what the harness sets itself
NOT_OPTIONS = ("channels", "order_seed_drawn")


def config_from_options(options: dict) -> EvalConfig:
    """The config the command line's ``options`` (by parameter name) give: an option sets its field, a limit its
    field of :class:`Limits` (``memory_limit`` in GiB; None: the default), ``quiet`` turns the progress bars off, and
    the options that are not fields (the target, ``out``...) are left out."""
    names = {f.name for f in fields(EvalConfig)}
    values = {RENAMED_OPTIONS.get(k, k): v for k, v in options.items() if RENAMED_OPTIONS.get(k, k) in names}
    limits = {LIMIT_OPTIONS[k]: v for k, v in options.items() if k in LIMIT_OPTIONS and v is not None}
    if "memory_bytes" in limits:
        limits["memory_bytes"] = int(limits["memory_bytes"] * 2**30)
    values |= {"kappas": values.get("kappas") or None, "limits": Limits(**limits)}
    values["progress"] = values.get("progress", True) and not options.get("quiet", False)
    return EvalConfig(**values)
