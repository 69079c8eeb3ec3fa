"""The WordNet 3.0 noun ``is-a`` graph, as a committed table, and its closures.

ImageNet class ids are WordNet noun synsets: ``n01440764`` is the noun at byte offset 01440764
of WordNet 3.0's ``data.noun``. The graph keeps both ``is-a`` pointers of a noun synset:
hypernyms (``@``) and instance hypernyms (``@i``).

The table ``data/wordnet_noun_parents.tsv.gz`` (every noun synset, one line each:
``wnid<TAB>parent,parent``) is derived from ``data.noun`` by :func:`generate` and committed, so
building a benchmark needs no WordNet install; ``python -m dataset_builder.wordnet`` regenerates
it byte for byte (Debian package ``wordnet-base``). WordNet's licence is in
``data/WORDNET_LICENSE.txt``.
"""

from __future__ import annotations

import gzip
import io
from collections import deque
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Annotated

import typer

from dataset_builder.errors import BenchmarkError

TABLE = Path(__file__).parent / "data" / "wordnet_noun_parents.tsv.gz"
DEBIAN_DATA_NOUN = Path("/usr/share/wordnet/data.noun")
IS_A_POINTERS = ("@", "@i")

Parents = Mapping[str, tuple[str, ...]]


def parse_data_noun(lines: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """``wnid -> sorted is-a parents`` of every synset in a WordNet 3.0 ``data.noun``.

    Licence header lines (starting with two spaces) are skipped; the fields of a synset line are
    ``offset lex_filenum ss_type w_cnt(hex) [word lex_id]... p_cnt [symbol offset pos source/target]...``.
    """
    parents: dict[str, tuple[str, ...]] = {}
    for number, line in enumerate(lines, 1):
        if line.startswith("  ") or not line.strip():
            continue
        fields = line.split(" ")
        try:
            at = 4 + 2 * int(fields[3], 16)
            n_pointers = int(fields[at])
            pointers = [fields[at + 1 + 4 * k : at + 5 + 4 * k] for k in range(n_pointers)]
        except (IndexError, ValueError) as exc:
            raise BenchmarkError(f"data.noun line {number} is not a WordNet synset line: {line[:60]!r}") from exc
        parents["n" + fields[0]] = tuple(
            sorted("n" + offset for symbol, offset, pos, _ in pointers if symbol in IS_A_POINTERS and pos == "n")
        )
    return parents


def dumps_table(parents: Parents) -> bytes:
    """The table's canonical gzip bytes (sorted lines, mtime 0: identical on every run)."""
    text = "".join(f"{wnid}\t{','.join(parents[wnid])}\n" for wnid in sorted(parents))
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", fileobj=buffer, mode="wb", compresslevel=9, mtime=0) as out:
        out.write(text.encode("ascii"))
    return buffer.getvalue()


def generate(data_noun: Path = DEBIAN_DATA_NOUN, table: Path = TABLE) -> int:
    """Derive the parents table from WordNet's ``data.noun``; return the number of synsets written."""
    if not Path(data_noun).is_file():
        raise BenchmarkError(f"no WordNet data.noun at {data_noun} (install the Debian package wordnet-base)")
    with open(data_noun, encoding="utf-8") as lines:
        parents = parse_data_noun(lines)
    Path(table).write_bytes(dumps_table(parents))
    return len(parents)


@lru_cache(maxsize=4)
def load_parents(table: Path = TABLE) -> dict[str, tuple[str, ...]]:
    """``wnid -> is-a parents`` of every WordNet 3.0 noun synset, read from the committed table."""
    with gzip.open(table, "rt", encoding="ascii") as lines:
        rows = (line.rstrip("\n").split("\t") for line in lines)
        return {wnid: tuple(p for p in joined.split(",") if p) for wnid, joined in rows}


def ancestor_distances(wnid: str, parents: Parents) -> dict[str, int]:
    """Every ancestor of ``wnid`` through the ``is-a`` closure, with its shortest distance in edges."""
    if wnid not in parents:
        raise BenchmarkError(f"{wnid} is not a WordNet 3.0 noun synset id")
    distance = {wnid: 0}
    queue = deque([wnid])
    while queue:
        node = queue.popleft()
        for parent in parents[node]:
            if parent not in distance:
                distance[parent] = distance[node] + 1
                queue.append(parent)
    del distance[wnid]
    return distance


def closest_relatives(wnids: Iterable[str], parents: Parents) -> dict[str, str]:
    """For every ancestor of any of ``wnids``: the nearest of ``wnids`` below it (ties: smallest id)."""
    best: dict[str, tuple[int, str]] = {}
    for wnid in wnids:
        for ancestor, distance in ancestor_distances(wnid, parents).items():
            if ancestor not in best or (distance, wnid) < best[ancestor]:
                best[ancestor] = (distance, wnid)
    return {ancestor: wnid for ancestor, (_, wnid) in best.items()}


def relation_removals(pool: Iterable[str], id_classes: Iterable[str], parents: Parents) -> dict[str, tuple[str, str]]:
    """The classes of ``pool`` that WordNet relates to an ID class: ``wnid -> (rule, ID class)``.

    Rules, first match wins: ``id_class`` (it is an ID class), ``hypernym`` (an ancestor of an ID
    class; the nearest ID descendant is named), ``hyponym`` (a descendant of an ID class; the nearest
    ID ancestor is named). Nearest = fewest ``is-a`` edges, ties broken by the smallest id.
    """
    id_set = set(id_classes)
    nearest_below = closest_relatives(sorted(id_set), parents)
    removals: dict[str, tuple[str, str]] = {}
    for wnid in pool:
        if wnid in id_set:
            removals[wnid] = ("id_class", wnid)
        elif wnid in nearest_below:
            removals[wnid] = ("hypernym", nearest_below[wnid])
        else:
            above = [(d, a) for a, d in ancestor_distances(wnid, parents).items() if a in id_set]
            if above:
                removals[wnid] = ("hyponym", min(above)[1])
    return removals


def main(
    data_noun: Annotated[Path, typer.Option(help="WordNet 3.0 data.noun")] = DEBIAN_DATA_NOUN,
    table: Annotated[Path, typer.Option(help="where to write the gzip table")] = TABLE,
) -> None:
    """Regenerate the committed WordNet noun parents table from data.noun."""
    try:
        count = generate(data_noun, table)
    except BenchmarkError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"wrote {count} noun synsets to {table}")


if __name__ == "__main__":
    typer.run(main)
