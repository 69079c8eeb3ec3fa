"""The ImageNet OOD pool by class rules (docs/method.md section 2, steps 1-3, 5, 6).

Start from the ImageNet-21K classes, remove the ImageNet-1K classes and every WordNet hypernym
or hyponym of one (full ``is-a`` closure, see :mod:`dataset_builder.wordnet`), then apply the
named rule sets that are switched on. Every class of the pool comes out as a row with its
status (``ood`` or ``removed``) and, when removed, the rule and the ID class it collides with.

The class lists, lemmas and definitions are the ones timm ships (``timm/data/_info``), read as
files so that torch is not imported.

The two named rule sets come from the paper's Section 4, which names one example of each
(ping-pong ball vs. cue ball; monarch vs. viceroy). The authors never published the lists (their
repository lists them as an upcoming feature), so the entries below beyond those examples are
this project's curation: OOD classes that survive the WordNet rules, are siblings or cousins of
an ImageNet-1K class in WordNet, and look the same as it in photographs.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from dataset_builder.errors import BenchmarkError
from dataset_builder.wordnet import Parents, load_parents, relation_removals

COLUMNS = ["id", "name", "definition", "status", "rule", "collides_with"]
POOLS = {
    "imagenet21k": "imagenet21k_goog_synsets.txt",  # 21,843 classes (Google's full ImageNet)
    "imagenet22k": "imagenet22k_synsets.txt",  # 21,841 classes (fall11.tar)
}
ID_CLASSES = "imagenet_synsets.txt"
RELATION_RULES = {  # the WordNet rules (:func:`dataset_builder.wordnet.relation_removals`), in their order
    "id_class": "an ImageNet-1K class itself",
    "hypernym": "a WordNet hypernym (an is-a ancestor) of an ImageNet-1K class",
    "hyponym": "a WordNet hyponym (an is-a descendant) of an ImageNet-1K class",
}


@dataclass(frozen=True)
class RuleSet:
    """A named, switchable list of OOD classes to remove, each paired with the ID class it resembles."""

    name: str
    default_on: bool
    rationale: str
    summary: str  # what its classes are, in a few words (the builder's line of its removals)
    entries: tuple[tuple[str, str, str], ...]  # (OOD class, ID class, why)


VISUALLY_AMBIGUOUS = RuleSet(
    name="visually_ambiguous",
    default_on=True,
    rationale=(
        "Objects that a photograph cannot tell apart from an ImageNet-1K class: calling them OOD "
        "would punish a classifier for a correct answer. Removed by default, as in the paper."
    ),
    summary="looks the same as an ImageNet-1K class in photographs",
    entries=(
        ("n03145719", "n03942813", "cue ball vs. ping-pong ball: a small plain white ball (the paper's example)"),
        ("n04256891", "n02799071", "softball vs. baseball: same look, different size"),
        ("n03914438", "n04131690", "pepper shaker vs. saltshaker: the same container"),
        ("n04608923", "n03924679", "Xerox (xerographic copier) vs. photocopier: the same machine"),
        ("n03927299", "n03924679", "Photostat machine vs. photocopier: the same machine"),
        ("n02814428", "n02808304", "beach towel vs. bath towel"),
        ("n03490006", "n02808304", "hand towel vs. bath towel"),
        ("n04592099", "n03443371", "wineglass vs. goblet: stemmed drinking glasses"),
        ("n04097373", "n03100240", "roadster vs. convertible: open two-seater cars"),
        ("n04125257", "n04125021", "safe-deposit box vs. safe"),
        ("n03596543", "n02690373", "jetliner vs. airliner: today's airliners are jetliners"),
        ("n04607869", "n03197337", "wristwatch vs. digital watch"),
    ),
)

BIOLOGICALLY_DISTINCT = RuleSet(
    name="biologically_distinct",
    default_on=False,
    rationale=(
        "Species that look like an ImageNet-1K species but are different taxa: genuinely new "
        "classes, hard to detect. Kept by default, as in the paper; switch on to remove them."
    ),
    summary="a species that looks like an ImageNet-1K species but is another taxon",
    entries=(
        ("n02277268", "n02279972", "viceroy vs. monarch butterfly: Mullerian mimics (the paper's example)"),
        ("n01745484", "n01734418", "New World coral snake vs. king snake: king snakes mimic coral snakes"),
        ("n01745902", "n01734418", "eastern coral snake vs. king snake: king snakes mimic coral snakes"),
        ("n02119477", "n02119022", "American red fox (Vulpes fulva) vs. red fox (Vulpes vulpes)"),
        ("n02119634", "n02119789", "swift fox (Vulpes velox) vs. kit fox (Vulpes macrotis)"),
        ("n02437482", "n02437312", "Bactrian camel vs. Arabian camel"),
        ("n01443831", "n01443537", "crucian carp vs. goldfish (both Carassius)"),
        ("n02409508", "n02408429", "Cape buffalo vs. water buffalo"),
        ("n02077152", "n02077923", "fur seal (Arctocephalus) vs. sea lion"),
        ("n02077658", "n02077923", "fur seal (Callorhinus) vs. sea lion"),
        ("n02115096", "n02114855", "golden jackal vs. coyote"),
        ("n01698782", "n01698640", "Chinese alligator vs. American alligator"),
        ("n01697611", "n01697457", "saltwater crocodile vs. Nile crocodile"),
        ("n02391617", "n02391049", "quagga vs. zebra"),
    ),
)

RULE_SETS: dict[str, RuleSet] = {s.name: s for s in (VISUALLY_AMBIGUOUS, BIOLOGICALLY_DISTINCT)}
DEFAULT_RULE_SETS: tuple[str, ...] = tuple(name for name, s in RULE_SETS.items() if s.default_on)


def _timm_info() -> Path:
    spec = importlib.util.find_spec("timm")
    if spec is None or not spec.submodule_search_locations:
        raise BenchmarkError("timm is not installed: it ships the ImageNet class lists")
    return Path(spec.submodule_search_locations[0]) / "data" / "_info"


def read_synsets(filename: str) -> list[str]:
    """A class id list shipped by timm, in its order."""
    return (_timm_info() / filename).read_text(encoding="utf-8").split()


def read_descriptions() -> tuple[dict[str, str], dict[str, str]]:
    """``(wnid -> lemmas, wnid -> definition)`` of every ImageNet-21K class, as shipped by timm."""

    def table(filename: str) -> dict[str, str]:
        lines = (_timm_info() / filename).read_text(encoding="utf-8").splitlines()
        return dict(line.split("\t", 1) for line in lines if line)

    return table("imagenet_synset_to_lemma.txt"), table("imagenet_synset_to_definition.txt")


def check_rule_sets(names: Iterable[str]) -> tuple[str, ...]:
    """The names, validated and in canonical order; an unknown name is an error."""
    names = set(names)
    unknown = sorted(names - RULE_SETS.keys())
    if unknown:
        raise BenchmarkError(f"unknown rule set {', '.join(unknown)}; known: {', '.join(RULE_SETS)}")
    return tuple(name for name in RULE_SETS if name in names)


def classify_pool(
    pool: Iterable[str],
    id_classes: Iterable[str],
    parents: Parents,
    rule_sets: Iterable[str] = DEFAULT_RULE_SETS,
    names: Mapping[str, str] | None = None,
    definitions: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """One row per pool class (columns :data:`COLUMNS`, pool order): ``ood`` or ``removed`` with its reason.

    WordNet rules first (``id_class``, ``hypernym``, ``hyponym``), then the switched-on rule sets
    (rule = the set's name, ``collides_with`` = the ID class the entry names).
    """
    pool = list(pool)
    if len(set(pool)) != len(pool):
        raise BenchmarkError("the class pool lists a class twice")
    removals = relation_removals(pool, id_classes, parents)
    for name in check_rule_sets(rule_sets):
        for wnid, id_class, _ in RULE_SETS[name].entries:
            removals.setdefault(wnid, (name, id_class))
    names, definitions = names or {}, definitions or {}
    rows = []
    for wnid in pool:
        rule, collides_with = removals.get(wnid, (None, None))
        status = "ood" if rule is None else "removed"
        rows.append((wnid, names.get(wnid, ""), definitions.get(wnid, ""), status, rule, collides_with))
    return pd.DataFrame(rows, columns=COLUMNS)


def imagenet_ood_classes(rule_sets: Iterable[str] = DEFAULT_RULE_SETS, pool: str = "imagenet21k") -> pd.DataFrame:
    """The ImageNet-21K pool classified against ImageNet-1K (see :func:`classify_pool`)."""
    if pool not in POOLS:
        raise BenchmarkError(f"unknown class pool {pool!r}; known: {', '.join(POOLS)}")
    names, definitions = read_descriptions()
    return classify_pool(
        read_synsets(POOLS[pool]), read_synsets(ID_CLASSES), load_parents(), rule_sets, names, definitions
    )


def class_rule_reasons() -> dict[str, str]:
    """What each class rule that removes a pool class means, in the order they apply: WordNet's, then the rule
    sets'."""
    return {**RELATION_RULES, **{s.name: f"{s.summary} (a rule set)" for s in RULE_SETS.values()}}


def rules_record(rule_sets: Iterable[str] = DEFAULT_RULE_SETS) -> dict:
    """What the manifest records about the class rules: WordNet relations and every rule set, on or off."""
    enabled = check_rule_sets(rule_sets)
    return {
        "wordnet": "WordNet 3.0 is-a closure (hypernyms @ and instance hypernyms @i): "
        "ID classes, their hypernyms and their hyponyms are removed",
        "rule_sets": {
            s.name: {"enabled": s.name in enabled, "rationale": s.rationale, "classes": [e[0] for e in s.entries]}
            for s in RULE_SETS.values()
        },
    }
