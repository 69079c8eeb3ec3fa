"""A static, self-contained HTML site of a table: ``index.html`` (sortable, searchable, severity
curves of the top entries) and ``models/<model>.html`` (one page per model). No network needed:
CSS, JS and SVG plots are inline; every value from the table is HTML-escaped.
"""

from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path

import pandas as pd
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from leaderboard.atomic import write_bytes_atomic
from leaderboard.svg import severity_svg
from leaderboard.table import table_levels
from leaderboard.views import select

TOP_CURVES = 10


def page_name(model: str) -> str:
    """A file name for a model's page: safe characters plus a hash, so distinct names never collide."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", model).strip("-.")[:60] or "model"
    return f"{stem}-{hashlib.sha256(model.encode()).hexdigest()[:8]}.html"


def build_site(table: pd.DataFrame, out_dir: str | Path, version: str) -> list[Path]:
    """Write the site of ``table`` (labelled ``version``, e.g. ``v3``) into ``out_dir``; return the pages."""
    out = Path(out_dir)
    (out / "models").mkdir(parents=True, exist_ok=True)
    env = Environment(loader=PackageLoader("leaderboard", "templates"), autoescape=select_autoescape(default=True))
    levels = table_levels(table)
    ranked = select(table)
    rows = [_row(r, levels) for _, r in ranked.iterrows()]
    first = ranked.iloc[0] if len(ranked) else None
    common = {
        "bench": {"id": first["benchmark_id"] if first is not None else "(empty)",
                  "version": first["benchmark_version"] if first is not None else "",
                  "manifest": first["manifest_sha256"] if first is not None else None},
        "num_levels": len(levels),
        "version": version,
    }
    top = ranked[ranked["flag"] == ""].head(TOP_CURVES)
    index = env.get_template("index.html").render(
        rows=rows, top=top, num_models=ranked["model"].nunique(),
        definition=first["ood_auroc_definition"] if first is not None else "",
        plot=Markup(severity_svg([(f"{r['model']} / {r['kappa']}", [r[c] for c in levels]) for _, r in top.iterrows()],
                                 "ood-auroc per severity level, top entries")),
        **common)
    pages = [out / "index.html"]
    write_bytes_atomic(pages[0], index.encode())
    template = env.get_template("model.html")
    by_model: dict[str, list[dict]] = {}
    for row in rows:
        by_model.setdefault(row["model"], []).append(row)
    for model, model_rows in by_model.items():
        plot = Markup(severity_svg([(r["kappa"], [c["raw"] for c in r["levels"]]) for r in model_rows],
                                   f"ood-auroc per severity level: {model}"))
        page = out / "models" / page_name(model)
        write_bytes_atomic(page, template.render(model=model, rows=model_rows, plot=plot, **common).encode())
        pages.append(page)
    return pages


def _row(r: pd.Series, levels: list[str]) -> dict:
    return {
        "rank": int(r["rank"]), "model": r["model"], "kappa": r["kappa"], "page": page_name(r["model"]),
        "search": f"{r['model']} {r['kappa']}".lower(), "flag": r["flag"], "provenance": r["provenance"],
        "id_acc": _cell(r["id_acc"]), "id_auroc": _cell(r["id_auroc"]), "mean": _cell(r["mean_ood_auroc"]),
        "levels": [_cell(r[c]) for c in levels], "entry_id": r["entry_id"], "weights": r["weights_sha256"],
        "source": r["model_source"], "record_file": r["record_file"], "definition": r["ood_auroc_definition"],
    }


def _cell(value) -> dict:
    missing = value is None or (isinstance(value, float) and math.isnan(value))
    return {"v": "" if missing else repr(float(value)), "text": "-" if missing else f"{value:.4f}",
            "raw": float("nan") if missing else float(value)}
