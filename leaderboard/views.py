"""Selecting, ranking and printing table rows (the ``show`` command), and the names people read: a benchmark
revision, a kappa, a count."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence

import pandas as pd

from dataset_builder.console import plural
from harness.method.pairwise import rank_ranges
from harness.method.registry import registered
from harness.method.severity_names import declared
from leaderboard.errors import LeaderboardError
from leaderboard.foreign import NOTE
from leaderboard.pairs import BoardPairs, pair_key
from leaderboard.record import CANONICAL_SEVERITY_RULE
from leaderboard.table import ALIAS_SEPARATOR, LEVEL_PREFIX, table_levels

NOT_SEPARABLE = "\u2248"  # beside a rank: the paired test against the entry ranked above does not reject


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


def higher_is_better(sort: str) -> bool:
    """Whether a higher value ranks first for the sort key ``sort`` (not for a level metric where lower is better)."""
    return sort not in _averaged() or _averaged()[sort].higher_is_better


def select(
    table: pd.DataFrame, kappas: Sequence[str] = (), model: str = "", sort: str = "mean", include_flagged: bool = True
) -> pd.DataFrame:
    """Rows whose kappa name (or label) is one of ``kappas`` and whose model name or one of its aliases contains
    ``model`` (case-insensitive), best first by ``sort`` (lowest first for a metric where lower is better), with a
    ``rank`` column."""
    column = sort_column(table, sort)
    best_high = higher_is_better(sort)
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


def paired_marks(rows: pd.DataFrame, column: str, pairs: BoardPairs | None) -> list[bool]:
    """Per row of ``rows`` (in their order): whether the paired test of it against the row above on ``column`` does
    not reject a difference at 5% (:data:`NOT_SEPARABLE`). False for the first row, where either row has no per-image
    scores, and for a column without a paired test (:func:`leaderboard.pairs.pair_key`)."""
    key = pair_key(column)
    if pairs is None or key is None or key not in pairs.stats.values:
        return [False] * len(rows)
    at = pairs.index
    found = [None] + [
        pairs.stats.difference(key, at[i], at[i - 1]) if at[i] >= 0 and at[i - 1] >= 0 else None
        for i in range(1, len(rows))
    ]
    return [d is not None and not d.different() for d in found]


def rank_spans(rows: pd.DataFrame, column: str, pairs: BoardPairs | None, higher_is_better: bool = True) -> list[str]:
    """Per row, the range of ranks its paired tests on ``column`` allow among the rows with per-image scores
    (:func:`harness.method.pairwise.rank_ranges`, as Chatbot Arena shows them): ``2-3``, ``1`` for one rank, ``-``
    for a row without per-image scores or a value."""
    key = pair_key(column)
    if pairs is None or key is None or key not in pairs.stats.values:
        return ["-"] * len(rows)
    having = [i for i, at in enumerate(pairs.index) if at >= 0]
    values = [pairs.stats.values[key][pairs.index[i]] for i in having]
    found = rank_ranges(
        values,
        lambda i, j: pairs.stats.different(key, pairs.index[having[i]], pairs.index[having[j]]),
        higher_is_better,
    )
    spans = ["-"] * len(rows)
    for i, span in zip(having, found):
        if span is not None:
            spans[i] = str(span[0]) if span[0] == span[1] else f"{span[0]}-{span[1]}"
    return spans


def paired_note(column: str, pairs: BoardPairs | None) -> str | None:
    """The lines under the table on :data:`NOT_SEPARABLE` and the rank ranges: what they mean, or why no row can
    have them; None where no paired statistics were given."""
    if pairs is None:
        return None
    name = _header(column)
    if pair_key(column) is None:
        return f"no {NOT_SEPARABLE} marks or rank ranges: {name} has no paired test"
    if not any(at >= 0 for at in pairs.index):
        return (
            f"no {NOT_SEPARABLE} marks or rank ranges: no entry shown has per-image scores (the paired test needs them)"
        )
    test = "McNemar's, in Wald form" if column == "id_acc" else "DeLong's"
    return (
        f"{NOT_SEPARABLE}: the paired test of {name} against the row above ({test}, on the images both entries saw)"
        f" does not reject a difference at 5%\nranks: the ranks an entry's paired tests of {name} allow"
    )


def format_rows(
    rows: pd.DataFrame,
    sort: str = "mean",
    limit: int | None = None,
    pairs: BoardPairs | None = None,
    foreign: dict[str, dict] | None = None,
) -> str:
    """A plain-text table: rank (with :data:`NOT_SEPARABLE` where the paired test against the row above does not
    reject, :func:`paired_marks`), the ranks the paired tests allow (:func:`rank_spans`, where some row has per-image
    scores), model, kappa (a submission file's by its name: :func:`kappa_names`; ``[RULE]`` after it where the
    levels' severity rule is not the canonical one), id-acc, mean ood-auroc, the sorted level, flags; the other names
    of the models shown (:func:`alias_lines`); a line per rule (:func:`rule_lines`); the line on the marks
    (:func:`paired_note`) where ``pairs`` (the paired statistics of ``rows``, :func:`leaderboard.pairs.board_pairs`)
    are given; the columns of metrics the records describe themselves (``foreign``:
    :func:`leaderboard.foreign.foreign_columns`), and a line on them."""
    sorted_by = sort_column(rows, sort)
    marks = [NOT_SEPARABLE if mark else "" for mark in paired_marks(rows, sorted_by, pairs)]
    ranged = pairs is not None and pair_key(sorted_by) is not None and any(at >= 0 for at in pairs.index)
    spans = rank_spans(rows, sorted_by, pairs, higher_is_better(sort)) if ranged else None
    shown = rows.head(limit) if limit else rows
    rules = shown.get("severity_rule", pd.Series(None, index=shown.index, dtype="object"))
    shown = shown.assign(
        kappa=shown["kappa"].map(kappa_names(rows)) + rules.map(rule_suffix),
        rank=[f"{r}{m}" for r, m in zip(shown["rank"], marks)],
        **({"ranks": spans[: len(shown)]} if ranged else {}),
    )
    columns = ["rank", *(["ranks"] if ranged else []), "model", "kappa", "id_acc", "mean_ood_auroc"]
    if sorted_by not in columns:
        columns.append(sorted_by)
    foreign = {c: about for c, about in (foreign or {}).items() if c in rows.columns}
    out = _lines(shown, columns + list(foreign), {c: about["heading"] for c, about in foreign.items()})
    if len(shown) < len(rows):
        out.append(f"... {len(rows) - len(shown)} more (use --limit 0 for all)")
    out += alias_lines(shown) + rule_lines(rules) + foreign_lines(foreign)
    note = paired_note(sorted_by, pairs)
    return "\n".join(out + ([note] if note else []))


def foreign_lines(foreign: dict[str, dict]) -> list[str]:
    """What the columns marked :data:`leaderboard.foreign.MARK` are: a line each, as their records define them."""
    return [f"{about['heading']} ({about['name']}): {NOTE}: {about['definition']}" for about in foreign.values()]


def _lines(shown: pd.DataFrame, columns: list[str], headings: dict[str, str] | None = None) -> list[str]:
    """The heading (``headings`` where given), the rule and a line per row of ``shown``'s ``columns`` and flag,
    numbers right-aligned."""
    header = [(headings or {}).get(c) or _header(c) for c in columns] + ["flag"]
    body = [[_cell(r[c]) for c in columns] + [r["flag"]] for _, r in shown.iterrows()]
    left = {i for i, c in enumerate(columns) if c in ("model", "kappa")} | {len(columns)}  # the flag too
    return text_table(header, body, left)


def text_table(header: list[str], body: list[list[str]], left: set[int]) -> list[str]:
    """The heading, a rule and a line per row of ``body``, each column as wide as its widest cell; the columns of
    ``left`` left-aligned, the others (numbers) right-aligned; trailing blanks dropped."""
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(header)]

    def line(cells):
        return "  ".join(
            c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    return [line(header), line(["-" * w for w in widths])] + [line(b) for b in body]


def find_entry(table: pd.DataFrame, name: str) -> pd.Series:
    """The row of ``table`` that ``name`` names: its record file, or ``MODEL/KAPPA`` (split at the last ``/``; the
    model by its name or an alias, the kappa by its name, its label or as ``show`` prints it). A near miss says
    "did you mean", a name of several records lists them."""
    if name in set(table["record_file"]):
        return table[table["record_file"] == name].iloc[0]
    model, slash, kappa = name.rpartition("/")
    if not slash or not model or not kappa:
        raise LeaderboardError(f"{name!r}: name an entry as MODEL/KAPPA or by its record file")
    aliases = table.get("aliases", pd.Series("", index=table.index)).fillna("").str.split(ALIAS_SEPARATOR)
    of_model = table[(table["model"] == model) | aliases.map(lambda names: model in names)]
    if of_model.empty:
        known = sorted({*table["model"], *(a for names in aliases for a in names if a)})
        raise LeaderboardError(f"no model {model!r} on the board{_near(model, known)}")
    printed = of_model["kappa"].map(kappa_names(table))
    found = of_model[(of_model["kappa_name"] == kappa) | (of_model["kappa"] == kappa) | (printed == kappa)]
    if found.empty:
        known = sorted({*of_model["kappa_name"], *printed})
        raise LeaderboardError(f"{model} has no kappa {kappa!r}{_near(kappa, known)} (its kappas: {', '.join(known)})")
    if len(found) > 1:
        files = ", ".join(found["record_file"])
        raise LeaderboardError(f"{name} names {len(found)} records ({files}): name one by its record file")
    return found.iloc[0]


def _near(name: str, known: list[str]) -> str:
    """``; did you mean 'x'?`` for a near miss among ``known``; nothing for none."""
    close = difflib.get_close_matches(name, known, n=3)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


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


def rule_lines(rules: pd.Series) -> list[str]:
    """A line per severity rule of ``rules`` other than the canonical one, with its description: ``[original]: the
    levels' windows start by the original code's float window starts, ...``; a rule this build does not declare is
    named only."""
    described = declared()[1]
    shown = dict.fromkeys(r for r in rules.dropna() if r != CANONICAL_SEVERITY_RULE)
    return [
        f"[{rule}]: the levels' windows start by "
        + (described[rule] if rule in described else f"the rule {rule}, which this board's build does not describe")
        for rule in shown
    ]


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


def entry_line(label: str, row: pd.Series) -> str:
    """``A: glyph_cnn/softmax (records/...json): mean ood-auroc 0.8123, id-acc 0.9000, id-auroc 0.8000, 3 levels``."""
    values = ", ".join(
        f"{_header(c)} {_cell(row.get(c, float('nan')))}" for c in ("mean_ood_auroc", "id_acc", "id_auroc")
    )
    levels = plural(int(row["num_levels"]), "level")
    return f"{label}: {row['model']}/{row['kappa']} ({row['record_file']}): {values}, {levels}"


def format_comparison(comparison) -> str:
    """A table of A - B (:class:`harness.method.paired.Comparison`): each common level, the mean ood-auroc, id-acc
    and id-auroc, with the paired 95% interval, p-value, paired and unpaired standard errors and their ratio; a last
    line naming the differences the paired tests show at 5%."""
    named = [(f"level {level}", d) for level, d in enumerate(comparison.levels)]
    named += [("mean ood-auroc", comparison.mean_ood_auroc), ("id-acc", comparison.id_acc)]
    named += [("id-auroc", comparison.id_auroc)]
    header = ["A - B", "estimate", "95% interval", "p", "paired se", "unpaired se", "ratio"]
    body = [[name, *_difference_cells(d)] for name, d in named if d is not None]
    out = text_table(header, body, left={0})
    if comparison.id_auroc is None:
        out.append(f"id-auroc: - ({comparison.id_auroc_missing})")
    a, b = comparison.num_levels
    if a != b:
        out.append(f"levels: A has {a}, B has {b}; the first {min(a, b)} are compared one by one")
    shown = [name for name, d in named if d is not None and d.different()]
    out.append(f"different at 5% (paired): {', '.join(shown) if shown else 'none'}")
    return "\n".join(out)


def _difference_cells(d) -> list[str]:
    """A difference's cells in :func:`format_comparison`."""
    ratio = f"{d.unpaired_se / d.se:.1f}x" if d.se > 0 else "-"
    return [
        f"{d.estimate:+.4f}",
        f"[{d.low:+.4f}, {d.high:+.4f}]",
        f"{d.p_value:.3g}",
        f"{d.se:.4f}",
        f"{d.unpaired_se:.4f}",
        ratio,
    ]
