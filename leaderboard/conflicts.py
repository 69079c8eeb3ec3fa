"""Records that claim one entry: which of them a board shows for it, and how it shows the others.

Records added by hand are self-reported, so the first record of an entry has no claim over a later one: records of one
entry with other results are all kept and all shown, flagged as a conflict, until a verified run (the leaderboard's
worker's) settles it. A verified record replaces the self-reported records of its entry on the board; they stay in the
store, the board's history. A record with the same results as one already kept (and verified if that one is not) adds
nothing: the store skips it.
"""

from __future__ import annotations

from collections import defaultdict

from leaderboard.schema import VERIFIED, entry_id, verification_status

# two runs of one model differ in these (their per-image files too: scores summed in other batches round apart)
RUN_DETAILS = (
    "created",
    "timings",
    "harness_version",
    "order_seed",
    "order_seed_drawn",
    "per_image",
)
SAME_WITHIN = 1e-6  # two runs in other secret orders sum in other batches: their metrics agree to float rounding
# a record's standing (the table's conflict column): "" when it stands alone for its entry
CONFLICT = "conflict"  # shown beside records of its entry with other results, none verified above them
SETTLED = "settled"  # a verified record that replaced self-reported records with other results
REPLACED = "replaced"  # a self-reported record of an entry that has a verified one: in the history, off the board
CONFLICT_FLAG = "conflict: another record of this entry holds other results"


def first_difference(a, b, path: str = "") -> str | None:
    """The first path (``model.name``, ``levels[3].ood_auroc``) where two JSON values differ, or None; a key one
    object lacks and the other holds as null counts as the same (a field older records leave out), and numbers within
    ``SAME_WITHIN`` are the same."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in dict.fromkeys([*a, *b]):
            found = first_difference(a.get(key), b.get(key), f"{path}.{key}" if path else key)
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for index, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{path}[{index}]")
            if found is not None:
                return found
        return None
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))  # 2 and 2.0 are one value
    if numbers:
        return None if abs(a - b) <= SAME_WITHIN else path or "the record"
    return None if a == b and type(a) is type(b) else path or "the record"


def difference(record: dict, other: dict) -> str | None:
    """Where two records differ in their results (anything but :data:`RUN_DETAILS` and who verified them), or None."""
    return first_difference(_results(record), _results(other))


def _results(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in RUN_DETAILS and k != "verification"}


def is_verified(record: dict) -> bool:
    return verification_status(record) == VERIFIED


def repeats(record: dict, kept: dict) -> bool:
    """Whether ``record`` adds nothing to ``kept``, a record of its entry: the same results, and ``kept`` verified if
    ``record`` is (a verified run of results known only self-reported settles them)."""
    return difference(record, kept) is None and (is_verified(kept) or not is_verified(record))


def standings(records: list[dict]) -> list[str]:
    """Each record's standing (``""``, :data:`CONFLICT`, :data:`SETTLED` or :data:`REPLACED`), records in arrival
    order: an entry's verified records stand for it where it has any, else all its records."""
    entries = defaultdict(list)
    for index, record in enumerate(records):
        entries[entry_id(record)].append(index)
    out = [""] * len(records)
    for indices in entries.values():
        shown = [i for i in indices if is_verified(records[i])] or indices
        hidden = [i for i in indices if i not in shown]
        for i in hidden:
            out[i] = REPLACED
        for i in shown:
            if any(difference(records[i], records[j]) is not None for j in shown if j != i):
                out[i] = CONFLICT
            elif any(difference(records[i], records[j]) is not None for j in hidden):
                out[i] = SETTLED
    return out
