"""Glyph classes and the rules that build the OOD pool, each removal with its reason.

Mirrors the ImageNet recipe of docs/method.md section 2: the universe is every character that all the
font faces draw; ID characters are removed; characters tied to an ID character by Unicode
(decomposition, case, or a name such as "LATIN SMALL LETTER A WITH STROKE": the analogue of a
WordNet hypernym/hyponym) are removed; characters that draw like an ID character (Greek Alpha,
Cyrillic A) are removed by the optional "visually_ambiguous" rule set; characters with too little
ink or too wide to fit, and near-duplicates of an earlier pool character, are removed too.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from functools import reduce

import numpy as np
import pandas as pd
from matplotlib.ft2font import FT2Font

from dataset_builder.glyphs import render
from dataset_builder.glyphs.settings import ID_CHARS

OPTIONAL_RULE_SETS = {"visually_ambiguous": True}
RULES = {
    "id_class": "the character is an ID class",
    "not_a_glyph": "Unicode category is a mark, separator or control/format/private-use character",
    "unicode_relation": "NFKD decomposition, case mapping or Unicode name ties the character to an ID character",
    "not_renderable": "too little ink (< MIN_INK pixels) or wider/taller than MAX_EXTENT pixels at the canonical size",
    "visually_ambiguous": "draws like an ID character: ink IoU >= AMBIGUOUS_IOU with it in some font face",
    "duplicate_glyph": "draws like a pool character of lower code point: ink IoU >= DUPLICATE_IOU in every face",
}
MIN_INK = 12
MAX_EXTENT = 28
AMBIGUOUS_IOU = 0.85
DUPLICATE_IOU = 0.85
_DIGIT_NAMES = ["ZERO", "ONE", "TWO", "THREE", "FOUR", "FIVE", "SIX", "SEVEN", "EIGHT", "NINE"]
_LATIN_NAME = re.compile(
    r"\bLATIN\b.*\bLETTER (?:SMALL CAPITAL |CAPITAL |SMALL |INVERTED |TURNED |REVERSED )*([A-Z])\b"
)
_DIGIT_NAME = re.compile(r"\bDIGIT (" + "|".join(_DIGIT_NAMES) + r")\b")


def class_id(char: str) -> str:
    """Stable, filename- and key-safe id of a character class: ``u`` + hex code point."""
    return f"u{ord(char):04x}"


def char_name(char: str) -> str:
    return unicodedata.name(char, f"U+{ord(char):04X}")


def universe() -> list[str]:
    """Every character that all the font faces map, in code point order."""
    maps = [set(FT2Font(render.face_path(face)).get_charmap()) for face in render.FACES]
    return [chr(cp) for cp in sorted(reduce(set.intersection, maps))]


def unicode_relation(char: str) -> tuple[str, str] | None:
    """(ID character, how) when Unicode ties ``char`` to an ID character, else None."""
    for part in unicodedata.normalize("NFKD", char):
        for variant in dict.fromkeys((part, part.upper())):
            if variant in ID_CHARS:
                return variant, "decomposition" if part != char else "case"
    name = unicodedata.name(char, "")
    if match := _LATIN_NAME.search(name):
        return match.group(1), "name"
    if match := _DIGIT_NAME.search(name):
        return str(_DIGIT_NAMES.index(match.group(1))), "name"
    return None


def _ink_masks(chars: list[str]) -> np.ndarray:
    """(faces, chars, pixels) boolean ink masks of the canonical drawings."""
    return np.stack([np.stack([render.canonical(c, face).ravel() > 0.5 for c in chars]) for face in render.FACES])


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU between mask sets a (faces, n, p) and b (faces, m, p): (faces, n, m)."""
    a, b = a.astype(np.float32), b.astype(np.float32)
    inter = a @ b.transpose(0, 2, 1)
    union = a.sum(-1)[:, :, None] + b.sum(-1)[:, None, :] - inter
    return inter / np.maximum(union, 1.0)


def classify(rule_sets: dict[str, bool] | None = None) -> pd.DataFrame:
    """One row per character of the universe: id, char, name, status ('id' | 'ood' | 'removed'), rule, collides_with,
    detail."""
    rule_sets = {**OPTIONAL_RULE_SETS, **(rule_sets or {})}
    unknown = set(rule_sets) - set(OPTIONAL_RULE_SETS)
    if unknown:
        raise ValueError(f"unknown rule sets {sorted(unknown)}; known: {sorted(OPTIONAL_RULE_SETS)}")
    rows = {
        c: {
            "id": class_id(c),
            "char": c,
            "name": char_name(c),
            "status": "ood",
            "rule": None,
            "collides_with": None,
            "detail": None,
        }
        for c in universe()
    }

    def remove(c: str, rule: str, collides: str | None = None, detail: str | None = None) -> None:
        rows[c].update(status="removed", rule=rule, collides_with=collides and class_id(collides), detail=detail)

    for c in rows:
        if c in ID_CHARS:
            rows[c].update(status="id")
        elif unicodedata.category(c)[0] in "MZC":
            remove(c, "not_a_glyph", detail=unicodedata.category(c))
        elif related := unicode_relation(c):
            remove(c, "unicode_relation", related[0], related[1])
        else:
            ink = int((render.canonical(c) > 0.5).sum())
            width, height = render.ink_box(c)
            if ink < MIN_INK or max(width, height) > MAX_EXTENT:
                remove(c, "not_renderable", detail=f"ink={ink}px extent={width}x{height}px")

    ids = list(ID_CHARS)
    candidates = [c for c, row in rows.items() if row["status"] == "ood"]
    masks = _ink_masks(candidates)
    if rule_sets["visually_ambiguous"]:
        to_id = _iou(masks, _ink_masks(ids)).max(axis=0)  # best face
        for i, c in enumerate(candidates):
            j = int(to_id[i].argmax())
            if to_id[i, j] >= AMBIGUOUS_IOU:
                remove(c, "visually_ambiguous", ids[j], f"iou={to_id[i, j]:.2f}")
    kept = [i for i, c in enumerate(candidates) if rows[c]["status"] == "ood"]
    pairwise = _iou(masks[:, kept], masks[:, kept]).min(axis=0)  # worst face
    for a in range(len(kept)):
        earlier = np.flatnonzero(pairwise[a, :a] >= DUPLICATE_IOU)
        earlier = [e for e in earlier if rows[candidates[kept[e]]]["status"] == "ood"]
        if earlier:
            twin = candidates[kept[earlier[0]]]
            remove(
                candidates[kept[a]],
                "duplicate_glyph",
                None,
                f"draws like {class_id(twin)} ({twin}), iou={pairwise[a, earlier[0]]:.2f}",
            )
    return pd.DataFrame(list(rows.values()))


def select_pool(table: pd.DataFrame, pool_size: int | None, seed: int) -> pd.DataFrame:
    """The OOD pool: every surviving class, or a seeded subset of ``pool_size`` (others marked 'not_sampled')."""
    table = table.copy()
    survivors = table.index[table["status"] == "ood"]
    if pool_size is not None and pool_size < len(survivors):
        rank = sorted(survivors, key=lambda i: hashlib.sha256(f"{seed}/pool/{table.at[i, 'id']}".encode()).digest())
        dropped = rank[pool_size:]
        table.loc[dropped, ["status", "rule"]] = ["removed", "not_sampled"]
        table.loc[dropped, "detail"] = f"pool capped at {pool_size} classes by seeded sampling"
    return table
