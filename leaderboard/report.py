"""A short text summary of a table: best models per kappa, the top models and their families,
where a focus group (by default zero-shot CLIP) ranks, distilled models against their non-distilled
counterparts, ID accuracy vs. C-OOD detection, each kappa's C-OOD ranking of the models against their ID
rankings, and kappa-vs-kappa win rates. Flagged entries (broken runs) are left out of every number.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dataset_builder.console import plural
from harness.method.registry import registered
from leaderboard.errors import LeaderboardError
from leaderboard.views import benchmark_phrase, code_sha256, kappa_names

DEFAULT_FOCUS = r"^CLIP_(?!finetuned)"  # the paper's zero-shot CLIP models
DEFAULT_BASELINE = "softmax"
MIN_CORRELATED = 3  # entries a correlation needs (two points always lie on a line); the site's scatter agrees
DISTILLED = re.compile(
    r"_(?:distilled|dist)(?=_|$)"
)  # timm's names: deit_base_distilled_patch16_224, xcit_tiny_12_p8_224_dist
# the ID rankings set beside the C-OOD ranking (mean ood-auroc): table column -> (label, higher is better)
ID_RANKED = ("auroc", "aurc")  # the ID metrics (the metric registry's) whose rankings are set beside the C-OOD one


def id_rankings() -> dict[str, tuple[str, bool]]:
    """The ID rankings set beside the C-OOD ranking (mean ood-auroc): table column -> (label, higher is better), as
    the metric registry declares them."""
    metrics = {m.name: m for m in registered("id")}
    return {metrics[n].table_column: (metrics[n].label, metrics[n].higher_is_better) for n in ID_RANKED}


COUNTERPARTS = {
    "resnetv2_50x1_bit_distilled": "resnetv2_50x1_bitm"
}  # BiT R50x1 distilled from a 152x2 teacher vs BiT-M R50x1


@dataclass(frozen=True)
class FocusRank:
    """Where the focus group stands, like with like: its best model by its best kappa among the models each by its
    best kappa, and its best entry of the baseline kappa among the other models' entries of that kappa."""

    model: str
    kappa: str
    mean_ood_auroc: float
    rank: int  # among models, each by its best kappa
    num_models: int
    beats_models: float  # share of the other models (each by its best kappa) it beats
    baseline_model: str | None  # the focus group's best model by the baseline kappa; None if none has it
    baseline_auroc: float
    beats_baseline: float  # share of the other models' baseline-kappa entries that entry beats
    num_baseline: int


@dataclass(frozen=True)
class Skipped:
    """A section the report leaves out because the board lacks the models it needs: its name and why."""

    section: str
    why: str

    def __str__(self) -> str:
        return f"{self.section} ({self.why})"


def family(model: str) -> str:
    """The architecture family of a model name: its first token (``vit_large_patch16_384`` -> ``vit``)."""
    return re.split(r"[_\-~@.]", model, maxsplit=1)[0].lower()


def valid(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["flag"] == ""]


def best_per_kappa(table: pd.DataFrame, top: int = 3) -> dict[str, pd.DataFrame]:
    """The ``top`` entries of each kappa by mean ood-auroc."""
    ranked = valid(table).sort_values(["mean_ood_auroc", "model"], ascending=[False, True], kind="stable")
    return {kappa: rows.head(top) for kappa, rows in ranked.groupby("kappa", sort=True)}


def best_per_model(table: pd.DataFrame) -> pd.DataFrame:
    """Each model's best entry (over kappas), best model first."""
    ranked = valid(table).sort_values(
        ["mean_ood_auroc", "model", "kappa"], ascending=[False, True, True], kind="stable"
    )
    return ranked.drop_duplicates("model").reset_index(drop=True)


def focus_rank(table: pd.DataFrame, pattern: str = DEFAULT_FOCUS, baseline: str = DEFAULT_BASELINE) -> FocusRank | None:
    """The best entry among models matching ``pattern`` and how many models it beats; None if none match."""
    try:
        matcher = re.compile(pattern)
    except re.error as exc:
        raise LeaderboardError(f"bad focus pattern {pattern!r}: {exc}") from exc
    models = best_per_model(table)
    hits = models[models["model"].map(lambda m: bool(matcher.search(m)))]
    if hits.empty:
        return None
    best = hits.iloc[0]
    others = models[models["model"] != best["model"]]
    base = valid(table)
    base = base[base["kappa"] == baseline].sort_values(["mean_ood_auroc", "model"], ascending=[False, True])
    own = base[base["model"].map(lambda m: bool(matcher.search(m))).astype(bool)].head(1)
    rest = base[~base["model"].isin(own["model"])]
    own_auroc = float(own["mean_ood_auroc"].iloc[0]) if len(own) else float("nan")
    return FocusRank(
        model=best["model"],
        kappa=best["kappa"],
        mean_ood_auroc=float(best["mean_ood_auroc"]),
        rank=int(hits.index[0]) + 1,
        num_models=len(models),
        beats_models=float((others["mean_ood_auroc"] < best["mean_ood_auroc"]).mean()) if len(others) else float("nan"),
        baseline_model=own["model"].iloc[0] if len(own) else None,
        baseline_auroc=own_auroc,
        beats_baseline=float((rest["mean_ood_auroc"] < own_auroc).mean()) if len(own) and len(rest) else float("nan"),
        num_baseline=len(rest) if len(own) else 0,
    )


def distillation_pairs(table: pd.DataFrame, kappa: str = DEFAULT_BASELINE) -> tuple[pd.DataFrame, list[str]]:
    """Each distilled model (a ``distilled`` or ``dist`` token in its name) against its non-distilled counterpart (the
    same name without the token, or :data:`COUNTERPARTS`), both by their ``kappa`` entry: one row per pair with both
    mean ood-aurocs and the gain; and the distilled models left unpaired (no counterpart, or no ``kappa`` entry)."""
    entries = valid(table)
    means = entries[entries["kappa"] == kappa].drop_duplicates("model").set_index("model")["mean_ood_auroc"]
    rows, alone = [], []
    for model in sorted(m for m in entries["model"].unique() if DISTILLED.search(m)):
        base = COUNTERPARTS.get(model, DISTILLED.sub("", model))
        if model in means.index and base in means.index:
            rows.append(
                {
                    "distilled": model,
                    "base": base,
                    "family": family(model),
                    "distilled_auroc": means[model],
                    "base_auroc": means[base],
                    "gain": means[model] - means[base],
                }
            )
        else:
            alone.append(model)
    columns = ["distilled", "base", "family", "distilled_auroc", "base_auroc", "gain"]
    return pd.DataFrame(rows, columns=columns), alone


def correlations(table: pd.DataFrame) -> pd.DataFrame:
    """Pearson r and Spearman rho between id-acc and mean ood-auroc: all entries, then per kappa; NaN for a group of
    fewer than :data:`MIN_CORRELATED` entries (or whose values do not vary)."""
    rows = []
    groups = [("all entries", valid(table))] + list(valid(table).groupby("kappa", sort=True))
    for name, group in groups:
        acc, auroc = group["id_acc"], group["mean_ood_auroc"]
        enough = len(group) >= MIN_CORRELATED
        rows.append(
            {
                "kappa": name,
                "n": len(group),
                "pearson": acc.corr(auroc) if enough else float("nan"),
                "spearman": acc.rank().corr(auroc.rank()) if enough else float("nan"),
            }
        )
    return pd.DataFrame(rows, columns=["kappa", "n", "pearson", "spearman"])


def kendall_tau(x, y) -> float:
    """Kendall's tau-b of two equally long sequences (ties in either count in neither the concordant nor the
    discordant pairs, and shrink the denominator); NaN when either is constant. In numpy over all pairs (the
    leaderboard reads without scipy; scipy.stats.kendalltau gives the same)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    i, j = np.triu_indices(len(x), k=1)
    dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
    untied = math.sqrt(np.count_nonzero(dx) * np.count_nonzero(dy))
    return float(np.sum(dx * dy) / untied) if untied else float("nan")


def model_rankings(table: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per kappa, its models (each by its best entry of that kappa) ranked by mean ood-auroc and by each ID ranking of
    :func:`id_rankings` the table holds (1 = best; ties share the best rank; NaN where a model lacks the value), best
    C-OOD rank first."""
    entries = valid(table).sort_values(["mean_ood_auroc", "model"], ascending=[False, True], kind="stable")
    held = {c: higher for c, (_, higher) in id_rankings().items() if c not in _missing_rankings(table)}
    out = {}
    for kappa, rows in entries.groupby("kappa", sort=True):
        rows = rows.drop_duplicates("model")
        ranks = {"model": rows["model"], "ood": rows["mean_ood_auroc"].rank(ascending=False, method="min")}
        for column, higher in held.items():
            ranks[column] = rows[column].astype("float64").rank(ascending=not higher, method="min")
        out[kappa] = pd.DataFrame(ranks).reset_index(drop=True)
    return out


def ranking_correlations(table: pd.DataFrame) -> pd.DataFrame:
    """Per kappa and ID ranking: Spearman rho and Kendall tau-b between the models' C-OOD ranks and their ID ranks,
    over the models that have both (``n``); NaN for fewer than :data:`MIN_CORRELATED` models or a constant ranking. A
    positive value: the models that rank better on the ID task rank better at C-OOD detection too."""
    rows = []
    for kappa, ranks in model_rankings(table).items():
        for column in [c for c in id_rankings() if c in ranks.columns]:
            both = ranks[["ood", column]].dropna()
            enough = len(both) >= MIN_CORRELATED
            rows.append(
                {
                    "kappa": kappa,
                    "id": column,
                    "n": len(both),
                    "spearman": both["ood"].rank().corr(both[column].rank()) if enough else float("nan"),
                    "kendall": kendall_tau(both["ood"], both[column]) if enough else float("nan"),
                }
            )
    return pd.DataFrame(rows, columns=["kappa", "id", "n", "spearman", "kendall"])


def win_rates(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Share of models where the row kappa's mean ood-auroc beats the column kappa's (ties count 1/2),
    over the models evaluated with both; and those model counts."""
    wide = valid(table).pivot_table(index="model", columns="kappa", values="mean_ood_auroc", aggfunc="max")
    kappas = list(wide.columns)
    rates = pd.DataFrame(index=kappas, columns=kappas, dtype="float64")
    counts = pd.DataFrame(0, index=kappas, columns=kappas, dtype="int64")
    for a in kappas:
        for b in kappas:
            both = wide[[a, b]].dropna()
            if a != b and len(both):
                rates.loc[a, b] = ((both[a] > both[b]) + 0.5 * (both[a] == both[b])).mean()
                counts.loc[a, b] = len(both)
    return rates, counts


def report(table: pd.DataFrame, focus: str = DEFAULT_FOCUS, baseline: str = DEFAULT_BASELINE, top: int = 10) -> str:
    """The report as text; its first line names the benchmark revision. A submission file's kappa goes by its name
    (:func:`leaderboard.views.kappa_names`), its code hash in the last section."""
    if table.empty:
        raise LeaderboardError("the table is empty: nothing to report")
    names = kappa_names(table)
    baseline = names.get(baseline, baseline)
    table = table.assign(kappa=table["kappa"].map(names))
    flagged = table[table["flag"] != ""]
    first = table.iloc[0]
    bench = {
        "id": first["benchmark_id"],
        "version": first["benchmark_version"],
        "manifest_sha256": first["manifest_sha256"],
    }
    out = [
        f"Leaderboard of {benchmark_phrase(bench)}, {plural(int(first['num_levels']), 'severity level')}: "
        f"{plural(len(table), 'entry', 'entries')}, {plural(table['model'].nunique(), 'model')}, "
        f"{plural(table['kappa'].nunique(), 'kappa')}.",
    ]
    if len(flagged):
        out.append(
            f"Flagged and left out below ({plural(len(flagged), 'entry', 'entries')}, "
            f"{plural(flagged['model'].nunique(), 'model')}):"
        )
        out += [f"  {r.model} / {r.kappa}: {r.flag}" for r in flagged.itertuples()]
    sections = [
        leader_lines(table, top),
        focus_lines(table, focus, baseline),
        distillation_lines(table, baseline),
        correlation_lines(table),
        ranking_lines(table, top),
        win_rate_lines(table),
    ]
    skipped = [str(s) for s in sections if isinstance(s, Skipped)]
    if skipped:
        out.append(f"Skipped, as the board lacks the models they need: {'; '.join(skipped)}.")
    for lines in sections:
        out += [] if isinstance(lines, Skipped) else ["", *lines]
    codes = {name: code_sha256(json.loads(params)) for name, params in zip(table["kappa"], table["kappa_params"])}
    if any(codes.values()):
        out += ["", "Submission files' kappas, by the sha256 of their code:"]
        out += [f"  {name}: {code}" for name, code in sorted(codes.items()) if code]
    return "\n".join(out)


def leader_lines(table: pd.DataFrame, top: int = 10) -> list[str]:
    """The report's best models per kappa, and its top ``top`` models with their families."""
    out = ["Best models per kappa (mean ood-auroc over levels):"]
    for kappa, rows in best_per_kappa(table).items():
        n = valid(table)["kappa"].eq(kappa).sum()
        out.append(
            f"  {kappa} ({plural(n, 'model')}): "
            + ", ".join(f"{r.model} {r.mean_ood_auroc:.4f}" for r in rows.itertuples())
        )
    models = best_per_model(table)
    leaders = models.head(top)
    out += ["", f"Top {len(leaders)} of {plural(len(models), 'model')}, each by its best kappa:"]
    width = max([12, *map(len, leaders["kappa"])])
    out += [
        f"  {i:>3}. {r.model:<40} {r.kappa:<{width}} {r.mean_ood_auroc:.4f}  (id-acc {r.id_acc:.4f})"
        for i, r in enumerate(leaders.itertuples(), start=1)
    ]
    families = leaders["model"].map(family).value_counts()
    out.append("  families: " + (", ".join(f"{name} {count}" for name, count in families.items()) or "none"))
    return out


def focus_lines(
    table: pd.DataFrame, focus: str = DEFAULT_FOCUS, baseline: str = DEFAULT_BASELINE
) -> list[str] | Skipped:
    """The report's section on the focus group, like with like: its best model's rank and the share of the other
    models it beats, each model by its best kappa; its best ``baseline`` entry against the other models' entries of
    that kappa; skipped when no model matches."""
    rank = focus_rank(table, focus, baseline)
    if rank is None:
        return Skipped("the focus group's rank", f"no model matches {focus!r}")
    out = [f"Best model matching {focus!r}:"]
    others = rank.num_models - 1
    out += [
        f"  {rank.model} / {rank.kappa}: mean ood-auroc {rank.mean_ood_auroc:.4f}",
        f"  rank {rank.rank} of {plural(rank.num_models, 'model')} (each by its best kappa): "
        + (
            f"its {rank.kappa} entry beats {rank.beats_models:.1%} of the other {plural(others, 'model')}' best entries"
            if others
            else "no other model to compare"
        ),
    ]
    if rank.baseline_model is None:
        return [*out, f"  by {baseline} alone: no model matching {focus!r} has a {baseline} entry to compare"]
    if not rank.num_baseline:
        return [*out, f"  by {baseline} alone: no other model has a {baseline} entry to compare"]
    return [
        *out,
        f"  by {baseline} alone: {rank.baseline_model} / {baseline} (mean ood-auroc {rank.baseline_auroc:.4f}) beats "
        f"{rank.beats_baseline:.1%} of the other {plural(rank.num_baseline, 'model')}' {baseline} entries",
    ]


def too_few_models(table: pd.DataFrame, section: str) -> Skipped | None:
    """``section`` skipped when the board has fewer valid models than a correlation needs (:data:`MIN_CORRELATED`);
    None when it has enough."""
    models = valid(table)["model"].nunique()
    if models >= MIN_CORRELATED:
        return None
    return Skipped(section, f"{plural(models, 'model')}, a correlation needs {MIN_CORRELATED}")


def correlation_lines(table: pd.DataFrame) -> list[str] | Skipped:
    """The report's correlations of id-acc with mean ood-auroc, in words where there are too few entries; skipped on
    a board of too few models (:func:`too_few_models`)."""
    skipped = too_few_models(table, "ID accuracy vs. mean ood-auroc")
    if skipped:
        return skipped
    corr = correlations(table)
    width = max(map(len, corr["kappa"]))
    out = ["ID accuracy vs. mean ood-auroc:"]
    for r in corr.itertuples():
        what = ("entry", "entries") if r.kappa == "all entries" else ("model", "models")
        if r.n < MIN_CORRELATED:
            text = f"not enough {what[1]} to correlate ({plural(r.n, *what)})"
        elif pd.isna(r.pearson) or pd.isna(r.spearman):
            text = f"no correlation: id-acc or mean ood-auroc is the same for all {plural(r.n, *what)}"
        else:
            text = f"n={r.n:<5} Pearson r={r.pearson:+.3f}  Spearman rho={r.spearman:+.3f}"
        out.append(f"  {r.kappa:<{width}}  {text}")
    return out


def _missing_rankings(table: pd.DataFrame) -> list[str]:
    """The ID rankings no valid entry of the table holds (a column absent, or blank in every entry)."""
    entries = valid(table)
    return [c for c in id_rankings() if c not in entries.columns or entries[c].isna().all()]


def ranking_lines(table: pd.DataFrame, top: int = 10) -> list[str] | Skipped:
    """The report's C-OOD ranking against the ID rankings, per kappa: the correlations over the models (in words where
    they cannot be computed), then the ``top`` models' ranks side by side; the ID rankings the board lacks, in
    words; skipped on a board of too few models (:func:`too_few_models`)."""
    skipped = too_few_models(table, "C-OOD vs. ID ranking")
    if skipped:
        return skipped
    missing = _missing_rankings(table)
    rankings = id_rankings()
    shown = {c: label for c, (label, _) in rankings.items() if c not in missing}
    labels = " and ".join(label for label, _ in rankings.values())
    out = [f"C-OOD ranking (mean ood-auroc) vs. ID ranking ({labels}) of the models, per kappa (rank 1 = best):"]
    if missing:
        lacks = ", ".join(f"{rankings[c][0]} ({c})" for c in missing)
        them = "them" if len(missing) > 1 else "it"
        out.append(f"  the board lacks {lacks}: no valid entry holds {them}; not ranked by {them}")
    if not shown:
        return out
    corr = ranking_correlations(table).set_index(["kappa", "id"])
    for kappa, ranks in model_rankings(table).items():
        out.append(f"  {kappa} ({plural(len(ranks), 'model')}):")
        for column, label in shown.items():
            r = corr.loc[(kappa, column)]
            if r["n"] < MIN_CORRELATED:
                text = f"not enough models to correlate ({plural(int(r['n']), 'model')} with both)"
            elif pd.isna(r["spearman"]) or pd.isna(r["kendall"]):
                text = f"no correlation: one of the rankings is the same for all {plural(int(r['n']), 'model')}"
            else:
                text = f"n={int(r['n']):<5} Spearman rho={r['spearman']:+.3f}  Kendall tau={r['kendall']:+.3f}"
            out.append(f"    {label:<9} {text}")
        head = ranks.head(top)
        out.append("    " + "".join(f"{name:>10}" for name in ["c-ood", *shown.values()]) + "  model")
        for row in head.itertuples(index=False):
            cells = [row.ood, *(getattr(row, c) for c in shown)]
            out.append(
                "    " + "".join("-".rjust(10) if pd.isna(v) else f"{int(v):>10}" for v in cells) + f"  {row.model}"
            )
        if len(ranks) > len(head):
            out.append(f"    ... {plural(len(ranks) - len(head), 'more model')}")
    return out


def win_rate_lines(table: pd.DataFrame) -> list[str] | Skipped:
    """The report's kappa-vs-kappa win rates, one row per kappa; skipped when there is one kappa or none."""
    rates, counts = win_rates(table)
    if len(rates) < 2:
        return Skipped("kappa win rates", f"{plural(len(rates), 'kappa')} with valid entries, nothing to compare")
    names = {kappa: f"[{i}]" for i, kappa in enumerate(rates.index, start=1)}
    width = max(map(len, rates.index)) + 5
    out = ["Kappa win rates (row beats column, over models with both; n in brackets):"]
    out.append("  " + " " * width + "".join(f"{names[k]:>11}" for k in rates.columns))
    for a in rates.index:
        cells = [
            "-".rjust(11) if pd.isna(rates.loc[a, b]) else f"{rates.loc[a, b]:.0%} ({counts.loc[a, b]})".rjust(11)
            for b in rates.columns
        ]
        out.append(f"  {names[a] + ' ' + a:<{width}}" + "".join(cells))
    return out


def distillation_lines(table: pd.DataFrame, kappa: str = DEFAULT_BASELINE) -> list[str] | Skipped:
    """The report's section on knowledge distillation: pairs won per family, the exceptions; skipped when the board
    holds no pair."""
    pairs, alone = distillation_pairs(table, kappa)
    if pairs.empty:
        return Skipped(
            "knowledge distillation",
            f"no distilled model and its undistilled counterpart both with a valid {kappa} entry",
        )
    won = pairs["gain"] > 0
    out = [
        f"Knowledge distillation (distilled models vs. the same architecture without it, {kappa} mean ood-auroc):",
        f"  distilled better in {won.sum()} of {plural(len(pairs), 'pair')}, mean gain {pairs['gain'].mean():+.4f} "
        f"(median {pairs['gain'].median():+.4f})",
    ]
    for name, group in pairs.groupby("family", sort=True):
        out.append(f"  {name}: {(group['gain'] > 0).sum()} of {len(group)}, mean gain {group['gain'].mean():+.4f}")
    out += [
        f"  not better: {r.distilled} {r.distilled_auroc:.4f} vs {r.base} {r.base_auroc:.4f} ({r.gain:+.4f})"
        for r in pairs[~won].itertuples()
    ]
    if alone:
        out.append(
            f"  not paired (no counterpart, or no {kappa} entry for one of the two): {len(alone)}"
            f" ({', '.join(alone[:3])}{', ...' if len(alone) > 3 else ''})"
        )
    return out
