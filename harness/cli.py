"""``cood-harness``: a thin command line over :func:`harness.run.submit`."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import typer

from dataset_builder.console import make_app, plural, require_torch_extra, run_app
from dataset_builder.errors import NOTHING_WRITTEN, on_interrupt
from harness import __version__, bundle, phases
from harness.config import SUBMIT_DEFAULTS as DEFAULTS
from harness.config import Limits, config_from_options
from harness.errors import HarnessError
from harness.method.severity_names import rules_described
from harness.options import check_target
from harness.preflight import check_before_loading
from harness.zoo import pretrained_kinds, weights_kinds, zoo_usage

# Nothing above imports torch: --help, and the options and targets that cannot work, answer at once (and help works
# on the light install); each command imports the heavy modules only once its arguments are checked.
LISTING_WIDTH = 120
SCORES_KEPT = (
    "nothing was written to the outputs; the score cache keeps every shard scored so far: rerun the same command to "
    "resume"
)

app = make_app("Evaluate classifiers on a C-OOD benchmark.", f"cood-harness {__version__}")


@app.command()
def submit(
    target: str = typer.Argument(
        ..., help=f"A submission file (docs/submitting.md: the contract) or a model-zoo target: {zoo_usage()}."
    ),
    name: str | None = typer.Option(
        None,
        show_default="the file's NAME, else its stem; a target's own",
        help="The model's name in records and output paths.",
    ),
    weights: Path | None = typer.Option(
        None,
        help=f"Weights file (.safetensors/.pt/.pth/.bin) for {weights_kinds()} targets. Without it, "
        f"{pretrained_kinds(hub=True)} targets fetch their pretrained weights from the Hugging Face Hub (HF_HOME's "
        f"cache; HF_HUB_OFFLINE=1: the cache only), {pretrained_kinds(hub=False)} targets theirs through their "
        "library's cache (torch.hub's: TORCH_HOME).",
    ),
    revision: str | None = typer.Option(
        None,
        show_default="main",
        help=f"Hub revision (branch, tag or commit) of the pretrained weights of {pretrained_kinds(hub=True)} targets "
        f"without --weights, or of {pretrained_kinds(hub=True, folder=True, suffix='OWNER/REPO')} targets.",
    ),
    benchmark: str = typer.Option(
        DEFAULTS.benchmark,
        help="'glyphs' (embedded, built on first use), a benchmark folder, or hf://datasets/OWNER/NAME@REVISION.",
    ),
    kappa: list[str] | None = typer.Option(
        None,
        "--kappa",
        "-k",
        show_default="softmax entropy max_logit energy, then the submission's own",
        help="Confidence function, with parameters as NAME:KEY=VALUE[,KEY=VALUE] (e.g. knn:k=200) or as the "
        "leaderboard prints it, 'NAME(KEY=VALUE,...)' (quoted in a shell); T and eps stand for temperature and "
        "epsilon; repeat for several.",
    ),
    out: Path | None = typer.Option(
        None, show_default="cood-results/MODEL", help="Output folder; earlier outputs there are moved aside."
    ),
    levels: int = typer.Option(
        DEFAULTS.num_levels,
        help="Number of severity levels: at least 2, at most the OOD classes less the ID classes plus 1.",
    ),
    severity_rule: str = typer.Option(
        DEFAULTS.severity_rule,
        help=f"How the levels' windows start: {rules_described()}; docs/method.md section 3. The records name it.",
    ),
    batch_size: int = typer.Option(DEFAULTS.batch_size, help="Images per batch."),
    workers: int | None = typer.Option(
        None,
        help="Data-loading worker processes; 0: a background thread of the main process. "
        "Default: 0 on the CPU (the model keeps every core); beside a GPU, all cores but one "
        "(shared among torchrun's ranks on a host).",
    ),
    decoder: str = typer.Option(
        DEFAULTS.decoder,
        help="Image decoder: pil (the model's transform on each Pillow image), torchvision (batched decoding, "
        "nvJPEG on a GPU, Pillow's resize reproduced as tensor ops; timm-style transforms only), or auto "
        "(torchvision where the transform allows it). The record names it.",
    ),
    device: str = typer.Option(
        DEFAULTS.device,
        help="auto (CUDA when available, else cpu), cpu, cuda or cuda:N (under torchrun: each rank's own GPU).",
    ),
    amp: str = typer.Option(DEFAULTS.amp, help="Autocast: auto (bf16 on CUDA, none on CPU), bf16, fp16 or none."),
    channels_last: bool | None = typer.Option(
        None, "--channels-last/--no-channels-last", show_default="on for CUDA", help="Channels-last memory format."
    ),
    compile: bool = typer.Option(DEFAULTS.compile, "--compile", help="torch.compile the model."),
    seed: int = typer.Option(DEFAULTS.seed, help="Seed for stochastic kappas (MC-dropout)."),
    order_seed: int | None = typer.Option(
        None,
        show_default="drawn per run",
        help="Seed of the secret order the images cross the model in; the records name the one used: give it to "
        "rerun the same batches (reproducing a run; only a drawn seed verifies one).",
    ),
    private: bool | None = typer.Option(
        None,
        "--private/--no-private",
        show_default="when the benchmark's folder holds its private part",
        help="Also score the benchmark's private test images (never published) in the same pass, and test whether "
        "the scores on them fall below the public ones (a model that memorised the public images).",
    ),
    private_part: Path | None = typer.Option(
        None,
        "--private-part",
        show_default="<benchmark>/private",
        help="The folder of the benchmark's private part, where its operator keeps it apart (a Hub benchmark's); "
        "implies --private.",
    ),
    odin_preset: str | None = typer.Option(
        None,
        show_default="paper",
        help="ODIN preset (with -k odin): paper (T=2, eps=1e-5) or original (T=1000, eps=0.0014).",
    ),
    mc_passes: int | None = typer.Option(
        None, show_default="30", help="Stochastic passes for mc_dropout (with -k mc_dropout)."
    ),
    verify: bool = typer.Option(
        DEFAULTS.verify, help="Check every shard's sha256 against the manifest before reading it."
    ),
    cache: bool = typer.Option(
        DEFAULTS.cache, help="Keep per-shard scores so that an interrupted run resumes where it stopped."
    ),
    cache_dir: Path | None = typer.Option(None, show_default="$COOD_BENCH_CACHE/scores", help="Score cache folder."),
    keep_logits: bool = typer.Option(
        DEFAULTS.keep_logits, help="Also cache the logits and features, so that new kappas need no new pass."
    ),
    decoded_cache_gb: float = typer.Option(
        DEFAULTS.decoded_cache_gb,
        "--decoded-cache-gb",
        help="Keep decoded images (torchvision decoder, CPU) in the cache, up to this many GB, "
        "so the next model with the same preprocessing skips decoding; 0: none.",
    ),
    feature_dtype: str = typer.Option(
        DEFAULTS.feature_dtype,
        help="Precision of the cached features: float32, or float16 for half the disk "
        "(kappas read the same values in every run).",
    ),
    progress: bool = typer.Option(
        DEFAULTS.progress,
        help="Show progress bars, on a terminal only (none in a file or a pipe); a line as each phase starts or ends "
        "is shown either way.",
    ),
    quiet: bool = typer.Option(
        False, "--quiet", "-q", help="Print only the results, warnings and errors: no phase lines, no progress bars."
    ),
    leaderboard: Path | None = typer.Option(None, help="Also add the records to this local leaderboard folder."),
    trust_submission: bool = typer.Option(
        DEFAULTS.trust_submission,
        "--trust-submission",
        help="Run a submission file in the harness's own process (no sandbox); needed for a file's transform().",
    ),
    timeout: float = typer.Option(
        Limits.batch_timeout_s, help="Seconds a sandboxed submission may take to score one batch (not to load)."
    ),
    load_timeout: float = typer.Option(
        Limits.load_timeout_s,
        help="Seconds a sandboxed submission may take to load: its sandbox's start, its import, build_model() and a "
        "trial forward pass.",
    ),
    run_timeout: float = typer.Option(
        Limits.run_timeout_s, help="Seconds a sandboxed submission may run in all, loading included."
    ),
    memory_limit: float | None = typer.Option(
        None, show_default="the machine's memory", help="GiB of memory a sandboxed submission may use."
    ),
    max_bundle_gb: float = typer.Option(
        bundle.DEFAULT_MAX_BYTES / 2**30,
        "--max-bundle-gb",
        help="GiB a submission file's folder may hold, counted from its files' sizes before any is read (the sandbox "
        "runs a copy of it).",
    ),
) -> None:
    """Evaluate a submission: severity levels per kappa, metrics per level, records, CSV and plot."""
    config = config_from_options(locals())
    check_target(target, weights, revision)
    check_before_loading(target, config)
    is_file = weights is None and Path(target).is_file()
    with bundle.limited_to(int(max_bundle_gb * 2**30)):
        if is_file:
            bundle.Bundle.of(target)  # a folder that cannot be a bundle is refused at once, before torch is imported
        require_torch_extra("cood-harness submit")
        on_interrupt(SCORES_KEPT if cache else NOTHING_WRITTEN)
        with phases.shown(not quiet and int(os.environ.get("RANK", "0")) == 0):  # under torchrun, rank 0 speaks
            sandboxed = is_file and not trust_submission
            phases.say(
                f"cood-harness {__version__}: {target} on {benchmark}; starting"
                + (" its sandbox and" if sandboxed else "")
                + " PyTorch"
            )
            if sandboxed:  # a file: its sandbox starts beside our imports
                from harness.runtime import sandbox

                cuda = device.startswith("cuda") or device == "auto" and bool(sandbox.gpu_devices())
                sandbox.prestart(target, cuda, config.limits.memory_bytes)
            from harness.outputs import LeaderboardRefused
            from harness.run import submit as run_submit

            try:
                result, refused = run_submit(target, config, out=out, leaderboard=leaderboard), None
            except LeaderboardRefused as exc:  # the outputs are written: the results are shown, then the refusal
                result, refused = exc.evaluation, exc
    if result is None:  # a torchrun rank other than 0
        return
    show_result(result, cache)
    if refused is not None:
        raise refused
    if leaderboard is not None:
        typer.echo(f"added {len(result.records)} entries to the leaderboard in {leaderboard}")


def show_result(result, cache: bool) -> None:
    """A run's closing lines: the benchmark, the table, what was forwarded and what was written where."""
    bench = result.benchmark.identity()
    typer.echo(
        f"{result.submission.name} on {bench['id']} {bench['version']} ({bench['num_id_classes']} ID classes, "
        f"{bench['num_ood_classes']} OOD classes, revision {bench['manifest_sha256'][:12]})"
    )
    typer.echo(result.table)
    typer.echo(forwarded_line(result.stats, cache))
    if result.paths.get("previous"):
        typer.echo(
            f"moved the earlier outputs in {result.paths['records'][0].parents[1]} to {result.paths['previous']}"
        )
    typer.echo(
        f"wrote {plural(len(result.paths['records']), 'record')}, {result.paths['csv']} and {result.paths['plot']} "
        f"in {result.records[0]['timings']['total_s']:.1f} s"
    )


@app.command()
def kappas(
    needs: str | None = typer.Option(None, help="Only kappas that need this: logits, features, head, fit or model."),
) -> None:
    """List every registered kappa: its name, what it needs, its parameters, its source and reference."""
    require_torch_extra("cood-harness kappas")  # the registry reads pytorch-ood's detector classes (torch)
    from harness.kappas import NEEDS, registry

    if needs is not None and needs not in NEEDS:
        raise HarnessError(f"unknown need '{needs}'; known: {', '.join(NEEDS)}")
    defs = [d for d in registry().defs.values() if needs is None or needs in d.needs]
    for line in kappa_table(defs, list(registry().defs.values()), NEEDS):
        typer.echo(line)
    typer.echo(plural(len(defs), "kappa"))


def kappa_table(defs, every, needs_order, width: int = LISTING_WIDTH) -> list[str]:
    """The listing's lines, none longer than ``width``: name, source, needs and summary (wrapped under itself), then an
    indented line (wrapped alike) with the parameters, whether it reports a probability, and the reference. Columns
    are as wide as ``every`` needs."""
    name_w = max(len(d.name) for d in every)
    source_w = max(len(d.source) for d in every)
    need = lambda d: "+".join(n for n in needs_order if n in d.needs)  # noqa: E731
    need_w = max(len(need(d)) for d in every)
    lines = []
    for d in defs:
        head = f"{d.name:<{name_w}}  {d.source:<{source_w}}  needs {need(d):<{need_w}}  "
        summary = textwrap.wrap(d.summary or "-", width - len(head), break_on_hyphens=False) or ["-"]
        lines += [f"{head}{summary[0]}", *(" " * len(head) + part for part in summary[1:])]
        params = ", ".join(f"{k}={v}" for k, v in d.defaults.items())
        reports = d.probability and "reports a probability (ECE, NLL, Brier)"
        detail = " -- ".join(filter(None, [params and f"[{params}]", reports, d.reference]))
        if detail:
            lines += textwrap.wrap(
                detail, width, initial_indent="    ", subsequent_indent="    ", break_on_hyphens=False
            )
    return lines


def forwarded_line(stats: dict, cache: bool = True) -> str:
    """What the run forwarded and what it took from the score cache, e.g. ``scored 12 shards (8,000 images forwarded);
    38 shards from the score cache``."""
    line = (
        f"scored {plural(stats['shards_scored'], 'shard')} ({plural(stats['images_forwarded'], 'image')} forwarded); "
    )
    if not cache:
        return line + "no score cache (--no-cache)"
    line += f"{plural(stats['shards_from_cache'], 'shard')} from the score cache"
    if stats.get("shards_from_logits"):
        line += f", {plural(stats['shards_from_logits'], 'shard')} scored from its cached logits and features"
    return line


def main() -> None:
    run_app(app)


if __name__ == "__main__":
    main()
