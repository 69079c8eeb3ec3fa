"""A static, self-contained site of a table, readable offline from its files:

- ``index.html``: one row per model (each by its best kappa, or one kappa for all), filters, search, sortable columns,
  a severity-curve plot and an id-accuracy vs mean ood-auroc scatter that follow the view (flagged runs in the scatter
  only when its toggle is ticked), the kappas' win rates, a permalink; the rows are JSON embedded in the page and
  drawn by the site's own script (``static/site.js``); given the board, the paired tests of the entries with per-image
  scores (:func:`paired_data`) mark the rows not shown different from the row above, give each row its range of ranks
  and fill the compare panel of two ticked rows;
- ``models/<model>.html``: every metric of a model's entries, its parameters, family, provenance, verification,
  per-class drill-down (when its records carry one) and links to the raw records;
- ``downloads/leaderboard.csv`` and ``.parquet``: the table itself; ``records/``: the raw records (given the
  leaderboard's folder), with ``attachments/`` for their per-class files.

Every value from the table or a record is HTML-escaped (or JSON-escaped for the embedded data).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import operator
import re
import shutil
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
from jinja2 import Environment, PackageLoader, Template, select_autoescape
from markupsafe import Markup

from dataset_builder.files import write_atomic
from harness.method.pairwise import Pairwise
from harness.method.registry import Metric, registered
from leaderboard.csvsafe import csv_bytes
from leaderboard.drilldown import level_classes, publishable, stored_folder
from leaderboard.errors import LeaderboardError
from leaderboard.foreign import MARK, NOTE, foreign_columns
from leaderboard.pairs import board_pairs
from leaderboard.per_image import name as per_image_name
from leaderboard.report import win_rates
from leaderboard.schema import VERIFIED
from leaderboard.table import foreign_in, interval_columns, table_levels
from leaderboard.views import code_sha256, family, kappa_names, rule_suffix

PAPER_URL = "https://arxiv.org/abs/2302.11893"
STATIC = ("site.js", "site.css")
DOWNLOADS = ("leaderboard.csv", "leaderboard.parquet")
MAX_CLASSES = 100  # classes listed per level on a model page (lowest ood-auroc first); the sidecar has them all
ENTRY_METRICS = (
    ("acc", "id-acc"),
    ("idauroc", "id-auroc"),
    ("idconf", "id avg conf"),
    ("mean", "mean ood-auroc"),
)  # a model page's metrics table (then the means of the level metrics); a column no entry has is left out
COLUMN_KEYS = {
    "id_acc": "acc",
    "id_auroc": "idauroc",
    "id_avg_conf": "idconf",
    "mean_ood_auroc": "mean",
}  # else: its name
PAIRED_KEYS = {"mean": "mean", "acc": "id_acc", "idauroc": "id_auroc"}  # site key -> paired key; then l0, l1, ...
DIGITS = 9  # significant digits of the paired data's numbers
OPTIONAL_COLUMNS = {"idauroc": "id_auroc"}  # index columns shown when filled (then the means, then "n")
CURVE = "ood_auroc"  # the level metric of the severity curves
FEW_MODELS = 3  # a win rate over fewer models is drawn grey, with its count, not coloured as a rate
LEVEL_COUNTS = (
    ("percentile", "percentile"),
    ("window_percentile", "window percentile"),
    ("num_id", "# id"),
    ("num_ood", "# ood"),
)


def mean_metrics() -> list[Metric]:
    """The level metrics the table shows by their mean over the levels (the metric registry's ``aggregate``)."""
    return [m for m in registered("level") if m.aggregate == "mean"]


def later_id_metrics() -> list[Metric]:
    """The ID metrics a model page shows after :data:`ENTRY_METRICS` (the selective and calibration metrics)."""
    return [m for m in registered("id") if m.table_column not in ("id_acc", "id_auroc", "id_avg_conf")]


def optional_columns() -> dict[str, str]:
    """The index's columns shown when some entry fills them: key -> table column."""
    return {**OPTIONAL_COLUMNS, **{m.name: m.table_column for m in mean_metrics()}, "n": "num_parameters"}


def level_metrics() -> list[tuple[str, str]]:
    """A model page's per-level columns: every registered level metric, then the level's percentiles (nominal and
    its window's real one) and counts."""
    return [*((m.name, m.label) for m in registered("level")), *LEVEL_COUNTS]


def interval_keys() -> dict[str, tuple[str, str]]:
    """The entry keys of the metrics with an interval (the metric registry's), with the table columns of its ends."""
    return {COLUMN_KEYS.get(column, column): ends for column, ends in interval_columns().items()}


def page_name(model: str) -> str:
    """A file name for a model's page: safe characters plus a hash, so distinct names never collide."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", model).strip("-.")[:60] or "model"
    return f"{stem}-{hashlib.sha256(model.encode()).hexdigest()[:8]}.html"


def short_kappas(table: pd.DataFrame) -> dict[str, str]:
    """The kappas whose label on the site differs from the table's, by label: a submission file's kappa by its name
    (:func:`leaderboard.views.kappa_names`; its label, the hash with it, goes to a ``title``). Every other kappa is
    shown by its label, as ``show``, the CSV and ``-k`` write it."""
    return {k: n for k, n in kappa_names(table).items() if n != k}


def status(verification: str, provenance: str) -> str:
    """What the site calls an entry's source of trust: ``verified``, ``paper`` (published numbers) or
    ``self-reported``."""
    return "paper" if provenance == "paper" and verification != VERIFIED else verification


def build_site(
    table: pd.DataFrame, out_dir: str | Path, version: str, board: str | Path | None = None, paper_url: str = PAPER_URL
) -> list[Path]:
    """Write the site of ``table`` (labelled ``version``, e.g. ``v3``) into ``out_dir``; return its HTML pages.

    ``board``: the leaderboard folder the table comes from; its raw records (and their per-class files) are copied
    into the site and give the model pages every per-level metric. Without it the pages show the table's columns.
    """
    out = Path(out_dir)
    for folder in ("models", "static", "downloads"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    bounds = {m.name: m.bounds for m in registered("level") if m.bounds}  # the level metrics with an interval
    env = _environment(bounds)
    levels = table_levels(table)
    records = _records(table, board)
    for name in STATIC:
        write_atomic(out / "static" / name, resources.files("leaderboard").joinpath("static", name).read_bytes())
    _downloads(table, out / "downloads")
    foreign = foreign_metrics(table, records)
    models = _models(table, levels, list(foreign))
    for entry in (e for model in models for e in model["e"] if e["rec"] in records):  # the index's curves' bars
        entry.update(_bars(records[entry["rec"]]["levels"], bounds.get(CURVE)))
    pairs, place = paired_data(board, records)
    for entry in (e for model in models for e in model["e"] if e["rec"] in place):
        entry["pi"] = place[entry["rec"]]
    common = _common(table, len(levels), version, paper_url, bool(records), bool(pairs))
    short = short_kappas(table)
    pages = [out / "index.html"]
    write_atomic(pages[0], _index(env, table, models, short, pairs, foreign, common).encode())
    template = env.get_template("model.html")
    details = table.set_index("record_file").to_dict("index")  # a dict per row: far faster to read than a Series
    for model in models:
        page = out / "models" / model["p"]
        entries = [
            {
                **_entry_page(e, details[e["rec"]], records.get(e["rec"]), board, out),
                "name": short.get(e["k"], e["k"]),
            }
            for e in model["e"]
        ]
        write_atomic(page, _model_page(template, model, entries, len(levels), foreign, common).encode())
        pages.append(page)
    if records:
        pages.append(_copy_records(env, out, board, records, common))
    return pages


def _environment(bounds: dict[str, tuple[str, str]]) -> Environment:
    """The pages' templates, with the helpers they call; ``bounds``: the level metrics' interval ends by name."""
    env = Environment(loader=PackageLoader("leaderboard", "templates"), autoescape=select_autoescape(default=True))
    env.globals["fmt"] = _fmt
    env.globals["metric_cells"] = functools.partial(_metric_cells, entry_keys=set(interval_keys()))
    env.globals["level_rows"] = functools.partial(_level_rows, level_bounds=bounds)
    return env


def _common(
    table: pd.DataFrame, num_levels: int, version: str, paper_url: str, has_records: bool, has_pairs: bool
) -> dict:
    """What every page shows: the benchmark, the level count, the version and what the board holds."""
    first = table.iloc[0] if len(table) else None
    return {
        "bench": {
            "id": first["benchmark_id"] if first is not None else "(empty)",
            "version": first["benchmark_version"] if first is not None else "",
            "manifest": first["manifest_sha256"] if first is not None else None,
        },
        "num_levels": num_levels,
        "version": version,
        "paper_url": paper_url,
        "has_records": has_records,
        "has_pairs": has_pairs,
    }


def _index(
    env: Environment,
    table: pd.DataFrame,
    models: list[dict],
    short: dict[str, str],
    pairs: dict,
    foreign: dict[str, dict],
    common: dict,
) -> str:
    """The index page: the table's data for the page's script, the kappas, the columns (``foreign``:
    :func:`foreign_metrics`) and the win rates."""
    rates, counts = win_rates(table) if len(table) else (pd.DataFrame(), pd.DataFrame())
    kappas = sorted(table["kappa"].unique().tolist())
    data = {
        "levels": common["num_levels"],
        "kappas": kappas,
        "short": short,
        "families": sorted({m["f"] for m in models}),
        "provenances": sorted(table["provenance"].unique().tolist()),
        "cols": [
            key
            for key, column in {**optional_columns(), **{c: c for c in foreign}}.items()
            if table[column].notna().any()
        ],
        "metrics": [*(m.name for m in mean_metrics()), *foreign],
        "lower": [*(m.name for m in mean_metrics() if not m.higher_is_better), *_lower(foreign)],
        "models": [{**m, "e": [_compact(e) for e in m["e"]]} for m in models],
        **({"pairs": pairs} if pairs else {}),
    }
    return env.get_template("index.html").render(
        data=_json(data),
        num_models=len(models),
        num_valid=sum(any(not e["flag"] for e in m["e"]) for m in models),
        num_entries=len(table),
        definition=table.iloc[0]["ood_auroc_definition"] if len(table) else "",
        kappas=[(k, short.get(k, k)) for k in kappas],
        cols=data["cols"],
        means=[
            (m.name, f"mean {m.label}", f"{m.label}, mean over the levels: {m.definition}")
            for m in mean_metrics()
            if m.name in data["cols"]
        ]
        + [
            (c, about["heading"], f"{NOTE}: {about['definition']}") for c, about in foreign.items() if c in data["cols"]
        ],
        foreign=[about for c, about in foreign.items() if c in data["cols"]],
        note=NOTE,
        statuses=sorted({e["ver"] for m in models for e in m["e"]}),
        rate_kappas=[(k, short.get(k, k)) for k in rates.columns],
        rates=_win_rate_rows(rates, counts, short),
        few=FEW_MODELS,
        root="",
        **common,
    )


def _model_page(
    template: Template, model: dict, entries: list[dict], num_levels: int, foreign: dict[str, dict], common: dict
) -> str:
    """A model's page: its entries, the metrics any of them holds (``foreign``: :func:`foreign_metrics`), and their
    curves over the levels."""
    shown = [*ENTRY_METRICS, *((m.name, f"mean {m.label}") for m in mean_metrics())]
    shown += [(c, about["heading"]) for c, about in foreign.items()]
    metrics = [(key, label) for key, label in shown if any(e.get(key) is not None for e in entries)]
    later = [(m.table_column, m.label) for m in later_id_metrics()]
    id_metrics = [(key, label) for key, label in later if any(e.get(key) is not None for e in entries)]
    curves = [  # the error bars the index's data already holds
        {"label": e["name"], "title": e["k"], "values": e["l"], **{k: e[k] for k in ("lo", "hi") if k in e}}
        for e in entries
    ]
    plot = {"levels": num_levels, "curves": curves}
    return template.render(
        model=model,
        entries=entries,
        metrics=metrics,
        id_metrics=id_metrics,
        foreign=[foreign[key] for key, _ in metrics if key in foreign],
        note=NOTE,
        plot=_json(plot),
        root="../",
        **common,
    )


def _records(table: pd.DataFrame, board: str | Path | None) -> dict[str, dict]:
    """Each row's raw record (``record_file`` -> parsed JSON), read from ``board``; empty without one."""
    if board is None:
        return {}
    out = {}
    for name in table["record_file"]:
        path = Path(board) / name
        try:
            out[name] = json.loads(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise LeaderboardError(f"cannot read the record {path}: {exc}") from exc
    return out


def paired_data(board: str | Path | None, records: dict[str, dict]) -> tuple[dict, dict[str, int]]:
    """The index's paired tests (:func:`leaderboard.pairs.board_pairs`) of the records that keep per-image scores:
    per site key (``mean``, ``acc``, ``idauroc``, ``l0``, ...) each entry's value ``v`` and the paired standard errors
    ``se`` of every pair ``i < j`` as one flat upper triangle, row by row (``None`` where either has no value),
    numbers to :data:`DIGITS` significant digits; and each such record's index in them. Empty without any."""
    files = [name for name, record in records.items() if per_image_name(record) is not None]
    if not files:
        return {}, {}
    found, at = board_pairs(board, files, records)
    return encode_pairs(found), dict(zip(files, at))


def encode_pairs(found: Pairwise) -> dict:
    """The index's form of ``found`` (:func:`paired_data`): per site key, ``v`` and the flat upper triangle ``se``."""
    keys = {**PAIRED_KEYS, **{key: key for key in found.values if key not in PAIRED_KEYS.values()}}
    upper = np.triu_indices(len(found.values["mean"]), 1)
    return {
        site: {"v": _digits(found.values[key]), "se": _digits(found.se[key][upper])}
        for site, key in keys.items()
        if key in found.values
    }


def _digits(values: np.ndarray) -> list[float | None]:
    """Numbers to :data:`DIGITS` significant digits for the JSON, None for NaN."""
    return [float(f"{v:.{DIGITS}g}") if np.isfinite(v) else None for v in values.tolist()]


def _downloads(table: pd.DataFrame, folder: Path) -> None:
    csv, parquet = (folder / name for name in DOWNLOADS)
    write_atomic(csv, csv_bytes(table))
    write_atomic(parquet, table.to_parquet(index=False))


def foreign_metrics(table: pd.DataFrame, records: dict[str, dict]) -> dict[str, dict]:
    """The table's columns of metrics its records describe themselves (:mod:`leaderboard.foreign`), as the records
    describe them; without the records, by their column name."""
    described = foreign_columns(records.values())
    bare = {"higher_is_better": True, "definition": "(the records are not in the site)"}
    return {c: described.get(c) or {**bare, "name": c, "heading": f"{c}{MARK}"} for c in foreign_in(table)}


def _lower(foreign: dict[str, dict]) -> list[str]:
    return [c for c, about in foreign.items() if not about["higher_is_better"]]


def _models(table: pd.DataFrame, levels: list[str], foreign: list[str] = ()) -> list[dict]:
    """One item per model, its entries best first (valid before flagged): the index page's embedded data; ``foreign``:
    the columns of metrics the records describe themselves."""
    rows = table.sort_values(["model", "mean_ood_auroc", "kappa"], ascending=[True, False, True], kind="stable")
    ends = interval_keys()
    models = []
    # one conversion of the whole table to dicts: reading a dict is far faster than a pandas row or group
    for model, group in itertools.groupby(rows.to_dict("records"), key=operator.itemgetter("model")):
        group = list(group)
        entries = sorted((_entry(r, levels, ends, foreign) for r in group), key=lambda e: bool(e["flag"]))
        params = [r["num_parameters"] for r in group if not pd.isna(r["num_parameters"])]
        models.append(
            {
                "m": model,
                "f": family(model),
                "p": page_name(model),
                "n": int(params[0]) if params else None,
                **({"a": group[0]["aliases"]} if group[0].get("aliases") else {}),  # where listed under other names
                "e": entries,
            }
        )
    return models


def _entry(r: dict, levels: list[str], ends: dict[str, tuple[str, str]], foreign: list[str] = ()) -> dict:
    """An entry of the index's data; ``ends``: :func:`interval_keys`; ``foreign``: see :func:`_models`."""
    return {
        "k": r["kappa"],
        "prov": r["provenance"],
        "flag": r["flag"],
        "ver": status(r["verification"], r["provenance"]),
        "acc": _num(r["id_acc"]),
        "idauroc": _num(r["id_auroc"]),
        "mean": _num(r["mean_ood_auroc"]),
        **{m.name: _num(r.get(m.table_column)) for m in mean_metrics()},
        **{column: _num(r.get(column)) for column in foreign},
        "l": [_num(r[c]) for c in levels],
        "ci": {
            key: [_num(r[low]), _num(r[high])]
            for key, (low, high) in ends.items()
            if _num(r.get(low)) is not None and _num(r.get(high)) is not None
        },
        "rec": r["record_file"],
        **({"rule": r["severity_rule"]} if rule_suffix(r.get("severity_rule")) else {}),  # where not the canonical
    }


def _bars(levels: list[dict], ends: tuple[str, str] | None) -> dict:
    """A curve's error bars: each level's ood-auroc interval ends (``lo``, ``hi``; ``ends``: their names in a record),
    None where a level has none; nothing for an entry without any (published numbers, a record made before
    intervals)."""
    if ends is None:
        return {}
    low, high = ([level.get(end) for level in levels] for end in ends)
    return {"lo": low, "hi": high} if any(v is not None for v in low) else {}


NO_INTERVAL = Markup(' <span class="ci none">no interval</span>')


def _metric_cells(entry: dict, metrics: list[tuple[str, str]], entry_keys: set[str]) -> Markup:
    """An entry's cells in a model page's metrics table: each metric with, beside it, its interval ``[low, high]``,
    ``no interval`` where the metric has one but the entry has none (published numbers, a record made before
    intervals), nothing for a metric without intervals or a missing value. ``entry_keys``: the entry keys with an
    interval (:func:`interval_keys`)."""
    cells = []
    for key, _ in metrics:  # numbers only (:func:`_fmt`) and markup
        value = entry.get(key)
        ci = "" if key not in entry_keys or value is None else _ends_text(*(entry["ci"].get(key) or (None, None)))
        cells.append(f"<td>{_fmt(value)}{ci}</td>")
    return Markup("".join(cells))


def _level_interval(level: dict, value, ends: tuple[str, str] | None) -> str:
    """Beside a level's metric ``value``: its interval read from the level's ``ends`` (the metric's interval ends,
    None for a metric without intervals), as :func:`_metric_cells` shows an entry's."""
    return "" if ends is None or value is None else _ends_text(level.get(ends[0]), level.get(ends[1]))


def _ends_text(low, high) -> str:
    """``[low, high]``, or ``no interval`` where an end is missing (HTML: numbers only)."""
    return NO_INTERVAL if low is None or high is None else f' <span class="ci">[{low:.4f}, {high:.4f}]</span>'


def _level_rows(entry: dict, level_bounds: dict[str, tuple[str, str]]) -> Markup:
    """An entry's per-level table body: per level, its number and each metric with its interval. Built here rather
    than cell by cell in the template: a page of the paper's board holds thousands of cells."""
    columns = [(key, level_bounds.get(key)) for key, _ in entry["metrics"]]
    rows = []
    for level in entry["levels"]:
        rows.append(f"<tr><td>{int(level['level'])}</td>")
        for key, ends in columns:  # numbers only (:func:`_fmt`) and markup
            value = level.get(key)
            rows.append(f"<td>{_fmt(value)}{_level_interval(level, value, ends)}</td>")
        rows.append("</tr>")
    return Markup("".join(rows))


def _compact(entry: dict) -> dict:
    """An entry as the index embeds it: no record path, no empty flag or intervals, the status only when not
    self-reported."""
    return {
        k: v
        for k, v in entry.items()
        if k != "rec" and not (k in ("flag", "ci") and not v) and not (k == "ver" and v == "self-reported")
    }


def _num(value) -> float | None:
    if value is None or pd.isna(value):
        return None
    return float(value)


def _fmt(value) -> str:
    """A metric for a page: 4 decimals, an integer as is, ``-`` when missing."""
    if value is None or value != value:  # None or NaN
        return "-"
    return str(value) if isinstance(value, int) else f"{value:.4f}"


def _json(data) -> Markup:
    """JSON safe inside a ``<script type="application/json">`` element (no ``</script>`` or ``<!--`` can appear)."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return Markup(text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


def _win_rate_rows(rates: pd.DataFrame, counts: pd.DataFrame, short: dict[str, str]) -> list[dict]:
    return [
        {
            "kappa": a,
            "short": short.get(a, a),
            "cells": [
                {
                    "rate": None if pd.isna(rates.loc[a, b]) else float(rates.loc[a, b]),
                    "n": int(counts.loc[a, b]),
                    "vs": b,
                }
                for b in rates.columns
            ],
        }
        for a in rates.index
    ]


def _entry_page(entry: dict, row: dict, record: dict | None, board, out: Path) -> dict:
    """A model page's view of one entry: its per-level metrics (every one the record has) and per-class drill-down."""
    levels = record["levels"] if record else [{"level": i, "ood_auroc": v} for i, v in enumerate(entry["l"])]
    metrics = [(key, label) for key, label in level_metrics() if any(level.get(key) is not None for level in levels)]
    return {
        **entry,
        "entry": row["entry_id"],
        "code": code_sha256(json.loads(row["kappa_params"])),
        "source": row["model_source"],
        "weights": row["weights_sha256"],
        "bundle": None if pd.isna(row.get("bundle_sha256")) else row["bundle_sha256"],  # absent: a table from before
        "idconf": _num(row["id_avg_conf"]),
        **{m.table_column: _num(row.get(m.table_column)) for m in later_id_metrics()},
        "definition": row["ood_auroc_definition"],
        "created": row["created"],
        "harness": row["harness_version"],
        "seed": None if pd.isna(row["seed"]) else int(row["seed"]),
        "verification": (record or {}).get("verification"),
        "conflict": row.get("conflict") or "",  # absent: a table from before conflicts
        "private": (record or {}).get("private"),
        "levels": levels,
        "metrics": metrics,
        "per_class": _per_class(entry, record, board, out) if record and record.get("per_class") else None,
    }


def _per_class(entry: dict, record: dict, board, out: Path) -> dict:
    """A record's per-class drill-down, its files copied into ``out/attachments/<record>/``: per level, the quantiles
    and the classes (from the sidecar when present, else the record's hardest classes), thumbnails as site paths."""
    source = stored_folder(board, entry["rec"])
    target = Path("attachments") / Path(entry["rec"]).stem
    sidecar = publishable(source, record, record["per_class"]["file"])
    folder = source if sidecar is not None else None
    if folder is not None:
        _copy(sidecar, out / target / record["per_class"]["file"])
    levels = []
    for summary in record["per_class"]["levels"]:
        classes = level_classes(record, summary["level"], folder)
        for item in classes[:MAX_CLASSES]:
            item["thumbnails"] = [_thumbnail(source, out, target, record, t) for t in item["thumbnails"]]
            item["thumbnails"] = [t for t in item["thumbnails"] if t]
        levels.append(
            {
                **summary,
                "classes": classes[:MAX_CLASSES],
                "more": max(0, summary["n_classes"] - MAX_CLASSES)
                if folder is not None
                else summary["n_classes"] - len(classes),
            }
        )
    return {
        "levels": levels,
        "sidecar": (target / record["per_class"]["file"]).as_posix() if folder is not None else None,
    }


def _thumbnail(source: Path, out: Path, target: Path, record: dict, relative: str) -> str | None:
    """Copy one thumbnail into the site; its path from a model page, or None when the leaderboard lacks it or it is not
    one a site publishes (a hidden file, another type: :func:`leaderboard.drilldown.publishable`)."""
    path = publishable(source, record, relative)
    if path is None:
        return None
    _copy(path, out / target / relative)
    return f"../{(target / relative).as_posix()}"


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def _copy_records(env: Environment, out: Path, board, records: dict[str, dict], common: dict) -> Path:
    """The raw records, byte for byte, under ``out/records/``, listed by ``records/index.html``."""
    (out / "records").mkdir(exist_ok=True)
    for name in records:
        _copy(Path(board) / name, out / name)
    page = out / "records" / "index.html"
    names = [Path(name).name for name in records]
    write_atomic(page, env.get_template("records.html").render(names=names, root="../", **common).encode())
    return page
