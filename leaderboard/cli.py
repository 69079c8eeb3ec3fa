"""``cood-leaderboard``: a thin command line over the leaderboard's Python API."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import typer

from dataset_builder.console import make_app, plural, run_app
from dataset_builder.errors import on_interrupt
from leaderboard import (
    __version__,
    jsonio,
    pairs,
    paper,
    requests,
    store,
    views,
)
from leaderboard import (
    publish as hub,
)
from leaderboard import (
    release as releases,
)
from leaderboard import (
    report as reports,
)
from leaderboard import (
    site as sites,
)
from leaderboard import worker as workers
from leaderboard.errors import LeaderboardError
from leaderboard.foreign import foreign_columns
from leaderboard.table import foreign_in

app = make_app(
    "Validated, versioned C-OOD results: add records, release versions, view and publish them.",
    f"cood-leaderboard {__version__}",
)
DIR = typer.Option(
    Path("cood-leaderboard"),
    "--dir",
    "-d",
    envvar="COOD_LEADERBOARD",
    help="Leaderboard directory (env COOD_LEADERBOARD).",
)
VERSION = typer.Option(
    None, "--version", "-v", show_default="the current, unreleased table", help="A released version N."
)


def _note_added(directory: Path) -> None:
    """An interrupted add says whether its records were added (all or nothing: the interruption came before or
    after)."""
    before = _accepted(directory)
    on_interrupt(
        lambda: "nothing was written" if _accepted(directory) == before else f"the entries were added to {directory}"
    )


def _accepted(directory: Path) -> int:
    try:
        return len(store.accepted_files(directory))
    except (LeaderboardError, OSError):
        return 0


def _table(directory: Path, version: int | None):
    return store.current_table(directory) if version is None else releases.release_table(directory, version)


def _label(version: int | None) -> str:
    return "current (unreleased)" if version is None else f"v{version}"


@app.command()
def init(
    directory: Path = DIR,
    record: Path | None = typer.Option(None, help="Take the benchmark revision and level count from this record."),
    benchmark_id: str | None = typer.Option(None),
    benchmark_version: str | None = typer.Option(None),
    manifest_sha256: str | None = typer.Option(None),
    num_id_classes: int | None = typer.Option(None),
    num_ood_classes: int | None = typer.Option(None),
    num_levels: int = typer.Option(11, help="Severity levels every record must have."),
) -> None:
    """Create a leaderboard tied to one benchmark revision."""

    if record is not None:
        data = jsonio.load(record)
        if not isinstance(data, dict) or not isinstance(data.get("benchmark"), dict):
            raise LeaderboardError(f"{record}: no benchmark block")
        benchmark, num_levels = data["benchmark"], data.get("num_levels", num_levels)
    else:
        benchmark = {
            "id": benchmark_id,
            "version": benchmark_version,
            "manifest_sha256": manifest_sha256,
            "num_id_classes": num_id_classes,
            "num_ood_classes": num_ood_classes,
        }
        unset = [
            k for k in ("id", "version", "manifest_sha256", "num_id_classes", "num_ood_classes") if benchmark[k] is None
        ]
        if unset:
            raise LeaderboardError(f"give --record or every benchmark option (missing --{unset[0].replace('_', '-')})")
    config = store.init_leaderboard(directory, benchmark, num_levels)
    bench = config["benchmark"]
    typer.echo(
        f"created {directory} for {bench['id']} {bench['version']} (manifest {bench['manifest_sha256']}),"
        f" {num_levels} levels"
    )


@app.command()
def add(
    records: list[Path] = typer.Argument(..., help="Result record JSON files."),
    directory: Path = DIR,
    create: bool = typer.Option(False, "--init", help="Create the leaderboard from the first record if needed."),
) -> None:
    """Validate records and append them; all or nothing. A record already on the board with the same results is
    skipped (one line each); one with other results is kept beside it, shown as a conflict until a verified run."""

    _note_added(directory)
    skipped = []

    def skip(line: str) -> None:
        skipped.append(line)
        typer.echo(line)

    ids = store.add_files(directory, records, create=create, say=skip)
    added = len(ids) - len(skipped)
    there = f" ({len(skipped)} already there)" if skipped else ""
    typer.echo(f"added {plural(added, 'entry', 'entries')} to {directory}{there}: {', '.join(ids)}")


@app.command("import-paper")
def import_paper(
    csv: Path = typer.Argument(
        paper.PAPER_TABLE,
        show_default="the copy shipped with cood-bench",
        help="The paper's all_paper_results.csv (or .csv.gz).",
    ),
    directory: Path = DIR,
) -> None:
    """Import the paper's published results (provenance "paper") into a leaderboard of their own; a model the table
    lists under several names (the same rows) becomes one, its other names kept as aliases."""
    _note_added(directory)
    records = paper.paper_records(paper.read_paper_table(csv))
    store.add_records(directory, records, create=True)
    table = store.current_table(directory)
    flagged = table[table["flag"] != ""]
    models = len({r["model"]["name"] for r in records})
    typer.echo(f"imported {plural(len(records), 'entry', 'entries')} ({plural(models, 'model')}) into {directory}")
    if flagged.empty:
        typer.echo("flagged none")
    else:
        entries = plural(len(flagged), "entry", "entries")
        typer.echo(f"flagged {entries} of {plural(flagged['model'].nunique(), 'model')}:")
    for row in flagged.itertuples():
        typer.echo(f"  {row.model} / {row.kappa}: {row.flag}")
    groups = {r["model"]["name"]: r["model"]["aliases"] for r in records if r["model"].get("aliases")}
    if groups:
        names = plural(sum(map(len, groups.values())), "model name")
        typer.echo(f"merged {names} the table lists beside another with the same rows (kept as aliases):")
    for model, aliases in groups.items():
        typer.echo(f"  {model}: also listed as {', '.join(aliases)}")


@app.command()
def release(directory: Path = DIR, note: str = typer.Option("", help="A line for the changelog.")) -> None:
    """Freeze the current table as the next version (v1, v2, ...)."""

    info = releases.release(directory, note)
    entries = plural(info["num_entries"], "entry", "entries")
    typer.echo(f"released v{info['version']}: {entries}, {len(info['added'])} new")


@app.command()
def show(
    directory: Path = DIR,
    version: int | None = VERSION,
    kappa: list[str] = typer.Option([], "--kappa", "-k", help="Only these kappas (name or label); repeatable."),
    model: str = typer.Option("", "--model", "-m", help="Only models whose name contains this (case-insensitive)."),
    sort: str = typer.Option(
        "mean",
        "--sort",
        "-s",
        help="mean, id_acc, a level number 0..L-1, or an averaged level metric (fpr_at_95_tpr: lowest first).",
    ),
    limit: int = typer.Option(30, "--limit", "-n", help="Rows to print; 0 for all."),
    hide_flagged: bool = typer.Option(False, help="Leave out flagged (broken) entries."),
) -> None:
    """Print the table, ranked."""

    rows = views.select(_table(directory, version), kappa, model, sort, include_flagged=not hide_flagged)
    typer.echo(views.heading(store.load_config(directory)["benchmark"], _label(version), len(rows)))
    if len(rows):
        column = views.sort_column(rows, sort)
        paired = pairs.board_pairs(directory, rows["record_file"].tolist(), column=column)
        typer.echo(views.format_rows(rows, sort, limit or None, paired, _foreign(directory, rows)))


def _foreign(directory: Path, rows) -> dict[str, dict]:
    """The columns of ``rows`` that metrics their records describe themselves fill, as the records describe them."""
    if not foreign_in(rows):
        return {}
    shown = set(rows["record_file"])
    records = store.stored_records(directory)
    return foreign_columns(json.loads(data) for path, data in records if f"{store.RECORDS}/{path.name}" in shown)


@app.command()
def compare(
    a: str = typer.Argument(..., help="Entry A: MODEL/KAPPA (model by name or alias) or its record file."),
    b: str = typer.Argument(..., help="Entry B, named as A."),
    directory: Path = DIR,
    version: int | None = VERSION,
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
) -> None:
    """A - B of two entries of the board: each common level's ood-auroc, the mean ood-auroc, id-acc and id-auroc,
    with paired 95% intervals and p-values from the images both entries saw (their per-image scores)."""

    table = _table(directory, version)
    rows = [views.find_entry(table, name) for name in (a, b)]
    missing = next((why for why in (pairs.no_scores(directory, r) for r in rows) if why), None)
    comparison = None if missing else pairs.compare_rows(directory, *rows)
    if as_json:
        found = None if comparison is None else comparison.as_dict()
        files = [r["record_file"] for r in rows]
        typer.echo(json.dumps({"a": files[0], "b": files[1], "comparison": found, "no_paired_interval": missing}))
        return
    for label, row in zip("AB", rows):
        typer.echo(views.entry_line(label, row))
    typer.echo(missing or views.format_comparison(comparison))


@app.command()
def report(
    directory: Path = DIR,
    version: int | None = VERSION,
    focus: str = typer.Option(reports.DEFAULT_FOCUS, help="Regex of the model group whose rank to report."),
    baseline: str = typer.Option(
        reports.DEFAULT_BASELINE, help="Kappa by which the focus group is also compared, entry against entry."
    ),
    top: int = typer.Option(10, help="Number of top models to list."),
) -> None:
    """A short summary: best models per kappa, top models, the focus group's rank, distillation, correlations, win
    rates; one line names the sections skipped for want of the models they need."""

    typer.echo(reports.report(_table(directory, version), focus, baseline, top))


@app.command()
def site(
    out: Path = typer.Argument(..., help="Output folder."), directory: Path = DIR, version: int | None = VERSION
) -> None:
    """Write a static HTML site (a row per model, filters, charts, downloads, a page per model, the raw records)."""

    pages = sites.build_site(_table(directory, version), out, _label(version), board=directory)
    typer.echo(f"wrote {plural(len(pages), 'page')} to {out} (open {out / 'index.html'})")


@app.command()
def publish(
    repo_id: str = typer.Argument(..., help="Hub dataset repo, e.g. org/cood-leaderboard."),
    directory: Path = DIR,
    version: int | None = typer.Option(None, "--version", "-v", show_default="the latest", help="Release to publish."),
    endpoint: str | None = typer.Option(None, envvar="HF_ENDPOINT", help="Hub URL (env HF_ENDPOINT)."),
    space: str | None = typer.Option(
        None,
        "--space",
        show_default="the dataset's repo id",
        help="Hub Space (sdk: static) that gets the release's site, tagged v<N> too.",
    ),
    no_space: bool = typer.Option(False, "--no-space", help="Publish the dataset repo only."),
) -> None:
    """Upload a release to a Hub dataset repo (config "results") and its site to a static Space; tag both v<N>."""

    if space is not None and no_space:
        raise LeaderboardError("give --space or --no-space, not both")
    on_interrupt("what was uploaded is kept: rerun the same command to finish publishing")
    result = hub.publish(directory, repo_id, version, endpoint, space_id=None if no_space else space or repo_id)
    for item, kind in ((result, ""), (result.get("space"), "Space ")):
        if item is None:
            continue
        if item["uploaded"]:
            typer.echo(f"published {item['tag']} to {kind}{item['repo_id']} (commit {item['commit']})")
        else:
            typer.echo(
                f"{item['tag']} was already published to {kind}{item['repo_id']} (commit {item['commit']});"
                " nothing to upload"
            )


QUEUE = typer.Argument(..., help="Hub dataset repo of the request queue, e.g. org/cood-requests.")
ENDPOINT = typer.Option(None, envvar="HF_ENDPOINT", help="Hub URL (env HF_ENDPOINT).")


@app.command("queue-init")
def queue_init(requests_repo: str = QUEUE, directory: Path = DIR, endpoint: str | None = ENDPOINT) -> None:
    """Create the request queue (a Hub dataset repo) tied to this leaderboard's benchmark revision."""

    config = requests.init_queue(requests_repo, directory, requests.hub_api(endpoint))
    typer.echo(
        f"{requests_repo} takes requests for {config['benchmark']['id']} {config['benchmark']['version']} "
        f"(manifest {config['benchmark']['manifest_sha256']})"
    )


@app.command()
def request(
    target: str = typer.Argument(..., help=f"{requests.target_usage()}."),
    requests_repo: str = typer.Option(..., "--queue", "-q", help="The request queue's Hub dataset repo."),
    weights: str | None = typer.Option(None, help="Hub model repo holding the weights file, <owner>/<name>."),
    file: str | None = typer.Option(None, help="The weights file in that repo (.safetensors, .pt, .pth, .bin, .ckpt)."),
    revision: str = typer.Option("main", help="Branch, tag or commit of the model repo; pinned to its commit now."),
    name: str | None = typer.Option(None, show_default="the model repo's name", help="Model name on the board."),
    kappa: list[str] = typer.Option(
        [], "--kappa", "-k", help="Kappas to evaluate (none given: the harness's own set); repeatable."
    ),
    endpoint: str | None = ENDPOINT,
) -> None:
    """Ask the leaderboard to evaluate a model: validated now, evaluated by a worker, its records marked verified."""

    made = requests.make_request(
        requests.hub_api(endpoint), requests_repo, target, weights, file, revision, name, kappa
    )
    model = made["model"]
    typer.echo(
        f"requested {made['id']}: {target} from {model['repo']}@{model['revision'][:12]} "
        f"({model['weights_format']} weights, sha256 {model['weights_sha256'][:12]}), pending in {requests_repo}"
    )


@app.command("requests")
def list_requests(requests_repo: str = QUEUE, endpoint: str | None = ENDPOINT) -> None:
    """List the queue's requests, oldest first, with their status (and a failure's reason)."""

    _, items = requests.list_requests(requests.hub_api(endpoint), requests_repo)
    typer.echo(f"{requests_repo}: {plural(len(items), 'request')}")
    for item in items:
        typer.echo(requests.listing_line(item))


@app.command()
def worker(
    requests_repo: str = QUEUE,
    directory: Path = DIR,
    benchmark: str = typer.Option(
        "glyphs", help="The benchmark the leaderboard is tied to: an embedded name or a folder."
    ),
    private_part: Path | None = typer.Option(
        None,
        "--private-part",
        show_default="<benchmark>/private",
        help="The folder of the benchmark's private part (never published), scored in every run when the benchmark "
        "has one; a benchmark whose private part is not there is refused.",
    ),
    publish_repo: str | None = typer.Option(
        None, "--publish", help="Hub dataset repo to republish to after each request."
    ),
    space: str | None = typer.Option(None, "--space", show_default="the --publish repo id", help="Space for the site."),
    device: str = typer.Option("auto", help="cuda, cpu, cuda:N or auto."),
    batch_size: int | None = typer.Option(None, show_default="the harness's", help="Images per forward pass."),
    work_dir: Path = typer.Option(Path("cood-worker"), help="Where each request's run folder goes."),
    max_requests: int | None = typer.Option(None, "--max", help="Stop after this many requests."),
    poll: float = typer.Option(0.0, help="Seconds between looks at an empty queue; 0: stop when it is empty."),
    name: str = typer.Option(
        f"{socket.gethostname()}-{os.getpid()}", show_default="host-pid", help="This worker's name."
    ),
    endpoint: str | None = ENDPOINT,
) -> None:
    """Claim pending requests one at a time, evaluate each, add its records as verified, release, republish."""

    on_interrupt("the request being evaluated, if any, went back to pending")
    sized = {} if batch_size is None else {"batch_size": batch_size}
    evaluator = workers.load_evaluator()(
        benchmark, device=device, work_dir=work_dir, private_part=private_part, **sized
    )
    api = requests.hub_api(endpoint)
    served = workers.Worker(
        api, requests_repo, directory, evaluator, publish_repo, space or publish_repo, name, log=typer.echo
    ).run(max_requests, poll)
    done = sum(r["status"] == "done" for r in served)
    typer.echo(f"{name}: served {plural(len(served), 'request')}, {done} done, {len(served) - done} failed")


def main() -> None:
    run_app(app, "cood-leaderboard")
