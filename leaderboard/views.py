"""Selecting, ranking and printing table rows (the ``show`` command), and the names people read: a benchmark
revision, a kappa, a count."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import pandas as pd

from dataset_builder.console import plural
from harness.method.registry import registered
from leaderboard.errors import LeaderboardError
from leaderboard.record import CANONICAL_SEVERITY_RULE
from leaderboard.table import LEVEL_PREFIX, interval_columns, table_levels

NOT_SEPARABLE = "\u2248"  # beside a rank: not separable from the entry ranked above


def _averaged() -> dict:
    """The level metrics the table holds by their mean (the metric registry's), by name."""
    return {m.name: m for m in registered("level") if m.aggregate == "mean"}


def benchmark_phrase(bench: dict) -> str:
    """A benchmark revision in words: ``glyphs 1.0.0 (manifest abababababab)``, or ``(no manifest: published
    numbers)`` for a table of reported results."""
    manifest = bench.get("manifest_sha256")
    revision = f"manifest {manifest[:12]}" if isinstance(manifest, str) else "no manifest: published numbers"
    return f"{bench['id']} {bench['version']} ({revision})"


def heading(bench: dict, table: str, count: int) -> str:
    """``show``'s first line: the benchmark revision, the table's version, the number of entries shown."""
    return f"{benchmark_phrase(bench)}, table {table}: {plural(count, 'entry', 'entries')}"


def code_sha256(params: dict) -> str | None:
    """A submission file's kappa's code hash (the 64 hex digits of its ``code_sha256`` parameter); None for others."""
    value = params.get("code_sha256")
    return value if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value) else None


def kappa_names(table: pd.DataFrame) -> dict[str, str]:
    """Each kappa label of ``table`` -> the name people read: a submission file's kappa by its name (its label holds
    the code hash), followed by the hash's first 8 digits where another kappa goes by that name; others by their
    label."""
    kappas = table.drop_duplicates("kappa")
    codes = {k: code_sha256(json.loads(p)) for k, p in zip(kappas["kappa"], kappas["kappa_params"])}
    short = {k: n if codes[k] else k for k, n in zip(kappas["kappa"], kappas["kappa_name"])}
    taken = pd.Series(list(short.values()), dtype="object").value_counts()
    return {k: f"{name} #{codes[k][:8]}" if codes[k] and taken[name] > 1 else name for k, name in short.items()}


def sort_column(table: pd.DataFrame, key: str) -> str:
    """The column behind a sort key: ``mean`` (mean ood-auroc), ``id_acc``, a level ``0``..``L-1`` / ``l3``, or a
    level metric the table averages (``fpr_at_95_tpr``: its mean over the levels)."""
    if key == "mean":
        return "mean_ood_auroc"
    if key == "id_acc":
        return "id_acc"
    if key in _averaged():
        return _averaged()[key].table_column
    level = re.fullmatch(r"l?(\d+)", key)
    if level and f"{LEVEL_PREFIX}{int(level.group(1))}" in table.columns:
        return f"{LEVEL_PREFIX}{int(level.group(1))}"
    raise LeaderboardError(
        f"unknown sort key {key!r}: use mean, id_acc, a level 0..{len(table_levels(table)) - 1} or "
        f"{', '.join(_averaged())}"
    )


def select(
    table: pd.DataFrame, kappas: Sequence[str] = (), model: str = "", sort: str = "mean", include_flagged: bool = True
) -> pd.DataFrame:
    """Rows whose kappa name (or label) is one of ``kappas`` and whose model name or one of its aliases contains
    ``model`` (case-insensitive), best first by ``sort`` (lowest first for a metric where lower is better), with a
    ``rank`` column."""
    column = sort_column(table, sort)
    best_high = sort not in _averaged() or _averaged()[sort].higher_is_better
    rows = table
    if kappas:
        rows = rows[rows["kappa_name"].isin(kappas) | rows["kappa"].isin(kappas)]
    if model:
        names = rows["model"] + " " + rows.get("aliases", "")
        rows = rows[names.str.contains(model, case=False, regex=False)]
    if not include_flagged:
        rows = rows[rows["flag"] == ""]
    rows = rows.sort_values(
        [column, "model", "kappa"], ascending=[not best_high, True, True], kind="stable", na_position="last"
    )
    return rows.assign(rank=range(1, len(rows) + 1))


def not_separable(rows: pd.DataFrame, column: str) -> list[bool]:
    """Per row of ``rows`` (in their order): whether its interval of ``column`` overlaps that of the row above, so
    the two are not separable (the data cannot tell their order at the intervals' confidence). False for the first
    row, where either row has no interval (a published result, a record made before intervals) and for a column
    without intervals."""
    ends = interval_columns().get(column)
    if ends is None or not set(ends) <= set(rows.columns):
        return [False] * len(rows)
    low, high = (rows[end].to_numpy(dtype="float64", na_value=float("nan")) for end in ends)
    return [False] + [bool(low[i] <= high[i - 1] and low[i - 1] <= high[i]) for i in range(1, len(rows))]


def format_rows(rows: pd.DataFrame, sort: str = "mean", limit: int | None = None) -> str:
    """A plain-text table: rank (with :data:`NOT_SEPARABLE` where the sorted metric's interval overlaps the row
    above's, :func:`not_separable`), model, kappa (a submission file's by its name: :func:`kappa_names`; ``[RULE]``
    after it where the levels' severity rule is not the canonical one), id-acc, mean ood-auroc, the sorted level,
    flags; the other names of the models shown (:func:`alias_lines`); a legend line when a rank is marked."""
    sorted_by = sort_column(rows, sort)
    marks = [NOT_SEPARABLE if mark else "" for mark in not_separable(rows, sorted_by)]
    shown = rows.head(limit) if limit else rows
    rules = shown.get("severity_rule", pd.Series(None, index=shown.index, dtype="object"))
    shown = shown.assign(
        kappa=shown["kappa"].map(kappa_names(rows)) + rules.map(rule_suffix),
        rank=[f"{r}{m}" for r, m in zip(shown["rank"], marks)],
    )
    columns = ["rank", "model", "kappa", "id_acc", "mean_ood_auroc"]
    if sorted_by not in columns:
        columns.append(sorted_by)
    header = [_header(c) for c in columns] + ["flag"]
    body = [[_cell(r[c]) for c in columns] + [r["flag"]] for _, r in shown.iterrows()]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(header)]
    numeric = {i for i, c in enumerate(columns) if c not in ("model", "kappa")}

    def line(cells):
        return "  ".join(
            c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    out = [line(header), line(["-" * w for w in widths])] + [line(b) for b in body]
    if len(shown) < len(rows):
        out.append(f"... {len(rows) - len(shown)} more (use --limit 0 for all)")
    out += alias_lines(shown)
    if any(marks[: len(shown)]):
        name = sorted_by.replace("_", "-")
        out.append(f"{NOT_SEPARABLE}: not separable from the row above (their 95% intervals of {name} overlap)")
    return "\n".join(out)


def alias_lines(rows: pd.DataFrame) -> list[str]:
    """A line per model of ``rows`` that a published table also lists under other names: ``vgg13: also listed as
    vgg13_torchvision``; none for a table without aliases."""
    if "aliases" not in rows.columns:
        return []
    named = rows[rows["aliases"].fillna("") != ""].drop_duplicates("model")
    return [f"{r.model}: also listed as {r.aliases}" for r in named.itertuples()]


def _header(column: str) -> str:
    """A column's heading in ``show``: a level metric's mean by its label (``mean fpr@95 (ID+)``), any other by its
    name with dashes."""
    means = {m.table_column: f"mean {m.label}" for m in _averaged().values()}
    return means.get(column, column.replace("_", "-"))


def rule_suffix(rule) -> str:
    """`` [original]`` for a severity rule other than the canonical one; nothing for it or for none (a record made
    before the rule was named, which used the canonical one)."""
    return "" if pd.isna(rule) or rule == CANONICAL_SEVERITY_RULE else f" [{rule}]"


def _cell(value) -> str:
    if isinstance(value, float):
        return "-" if pd.isna(value) else f"{value:.4f}"
    return str(value)


# Architecture families, first match wins; a name is matched lowercased, after its weight-source prefix
# (tf_, gluon_, legacy_, ssl_, swsl_, ig_, adv_, ens_adv_, dm_, jx_, new_timm_) is dropped.
FAMILIES: tuple[tuple[str, str], ...] = (
    ("CLIP", r"^clip_"),
    ("MobileViT", r"^mobilevit"),
    ("DeiT", r"^deit"),
    ("BEiT", r"^beit"),
    ("CaiT", r"^cait"),
    ("XCiT", r"^xcit"),
    ("Swin", r"^swin"),
    ("PiT", r"^pit_"),
    ("CrossViT", r"^crossvit"),
    ("LeViT", r"^levit"),
    ("Twins", r"^twins"),
    ("CoaT", r"^coat"),
    ("ConViT", r"^convit"),
    ("NesT", r"^nest"),
    ("TNT", r"^tnt"),
    ("Visformer", r"^visformer"),
    ("ViT", r"^vit_"),
    ("ConvNeXt", r"^convnext"),
    ("EdgeNeXt", r"^edgenext"),
    ("MLP-Mixer", r"^(g?mixer|gmlp|resmlp)"),
    ("PoolFormer", r"^poolformer"),
    ("Sequencer", r"^sequencer"),
    ("NFNet", r"^(nfnet|eca_nfnet|nf_)"),
    ("EfficientNet", r"efficientnet|^tinynet"),
    ("MobileNet/NAS", r"^(mobilenet|mnasnet|semnasnet|spnasnet|fbnet|lcnet|hardcorenas|ghostnet|mixnet)"),
    ("RegNet", r"regnet"),
    ("HaloNet/BoTNet", r"halo|botnet"),
    ("DLA", r"^dla"),
    ("Res2Net", r"^res2ne"),
    ("ResNeSt", r"^resnest"),
    ("ResNeXt", r"resnext"),
    ("SENet", r"^senet"),
    ("DenseNet", r"^densenet"),
    ("TResNet", r"^tresnet"),
    ("RepVGG", r"^repvgg"),
    ("VGG", r"^vgg"),
    ("DPN", r"^dpn"),
    ("HRNet", r"^hrnet"),
    ("CSP/DarkNet", r"^(cs3|csp|darknet)"),
    ("Inception/Xception", r"inception|xception|googlenet"),
    ("NASNet", r"nasnet"),
    ("ReXNet", r"^rexnet"),
    ("SelecSLS", r"^selecsls"),
    ("VoVNet", r"vovnet"),
    ("GENet", r"^gernet"),
    ("ShuffleNet", r"^shufflenet"),
    ("SqueezeNet", r"^squeezenet"),
    ("AlexNet", r"^alexnet"),
    ("ResNet", r"resnet"),
)
_FAMILY_PATTERNS = [(name, re.compile(pattern)) for name, pattern in FAMILIES]
_SOURCE_PREFIX = re.compile(r"^(tf|gluon|legacy|ssl|swsl|ig|adv|ens_adv|dm|jx|new_timm)_(?=.)")


def family(model: str) -> str:
    """A model name's architecture family from :data:`FAMILIES` (``tf_efficientnet_b0_ns`` -> ``EfficientNet``);
    an unlisted name's first token (``mynet_small`` -> ``mynet``)."""
    name = _SOURCE_PREFIX.sub("", model.lower())
    for family_name, pattern in _FAMILY_PATTERNS:
        if pattern.search(name):
            return family_name
    return re.split(r"[_\-~@.]", name, maxsplit=1)[0] or model
