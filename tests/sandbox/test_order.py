"""Nothing in a batch tells ID from OOD: hostile models that look for sample keys on their end of the channel, for the
splits' order, or at the other images of their batch, run sandboxed as root and as root of a user namespace, and win
nothing. Each proves it ran through ``probe``, a kappa of its own computed in its process: its per-sample values say
what it saw."""

import numpy as np
import pytest

from attacks import BATCH, KAPPAS, ORDER_SEED, WHERE, attacked, hostile_file, same_scores
from glyph_fixtures import cnn_variant
from harness import evaluate

pytestmark = pytest.mark.slow

ATTACKS = {
    # the keys (class id, file stem) the batch messages used to carry: certain of the right class for ID, unsure else
    "keys": """
ID = {line.split()[0] for line in open(Path(__file__).with_name("id_classes.txt"))}
class Cheat(cnn.GlyphCNN):
    def forward(self, x):
        logits = super().forward(x)
        keys = SEEN[-1].get("keys") if SEEN else None
        if keys is None or len(keys) != len(x):
            return logits
        certain = torch.tensor([k.split("__")[0] in ID for k in keys])
        return torch.where(certain[:, None], logits * 100, torch.zeros_like(logits))
def probe(logits):  # 1: batches were seen, and none held anything but pixels, seeds and the kappas asked for
    fields = set().union(*(body.keys() for body in SEEN))
    return np.full(len(logits), 1.0 if SEEN and fields == {"images", "seeds", "kappas"} else -1.0)
""",
    # the order: id_test used to come first, so every full batch before the first short one was ID
    "order": """
STATE = {"full": 0, "short": False, "batches": 0}
class Cheat(cnn.GlyphCNN):
    def forward(self, x):
        logits = super().forward(x)
        STATE["batches"] += 1
        STATE["short"] |= 0 < len(x) < STATE["full"]
        STATE["full"] = max(STATE["full"], len(x))
        return torch.zeros_like(logits) if STATE["short"] else logits * 100
def probe(logits):
    return np.full(len(logits), float(STATE["batches"]))
""",
    # the batch's context: its mean confidence is high on ID batches, low on OOD ones
    "context": """
STATE = {"batches": 0}
class Cheat(cnn.GlyphCNN):
    def forward(self, x):
        logits = super().forward(x)
        STATE["batches"] += 1
        return logits * 10 * logits.softmax(1).amax(1).mean()
def probe(logits):
    return np.full(len(logits), float(STATE["batches"]))
""",
    # honest in the pass, but answers otherwise once a lone image follows full batches (the old re-check's first)
    "recheck": """
STATE = {"full": 0, "rechecked": False, "batches": 0}
class Cheat(cnn.GlyphCNN):
    def forward(self, x):
        logits = super().forward(x)
        STATE["batches"] += 1
        STATE["rechecked"] |= len(x) == 1 and STATE["full"] > 1
        STATE["full"] = max(STATE["full"], len(x))
        return logits * 2 if STATE["rechecked"] else logits
def probe(logits):  # 1 in a process that has answered a batch (a count would differ between the pass and re-check)
    return np.full(len(logits), float(STATE["batches"] > 0))
""",
    # honest in the first batches of a process (as long as a re-check lasts), then sure of everything
    "late": """
STATE = {"batches": 0}
class Cheat(cnn.GlyphCNN):
    def forward(self, x):
        logits = super().forward(x)
        STATE["batches"] += 1
        return logits * 10 if STATE["batches"] > 16 else logits
def probe(logits):
    return np.full(len(logits), float(STATE["batches"] > 0))
""",
    # the batch's context, and every image it has seen answered again from memory: a re-check in its own process passes
    "memory": """
import hashlib
MEMORY = {}
class Cheat(cnn.GlyphCNN):
    def forward(self, x):
        logits = super().forward(x) * 10 * super().forward(x).softmax(1).amax(1).mean()
        keys = [hashlib.sha256(image.numpy().tobytes()).hexdigest() for image in x]
        return torch.stack([MEMORY.setdefault(key, row) for key, row in zip(keys, logits)])
def probe(logits):
    return np.full(len(logits), float(len(MEMORY)))
""",
}


@pytest.fixture(scope="module")
def honest_in_batches(tiny_glyphs, tmp_path_factory):
    path = cnn_variant(tmp_path_factory.mktemp("honest") / "honest.py", "build_model = cnn.build_model\n")
    return evaluate(
        path, benchmark=tiny_glyphs, kappas=KAPPAS, batch_size=BATCH, order_seed=ORDER_SEED, progress=False
    ).records


@pytest.mark.parametrize("where", WHERE)
def test_a_model_that_reads_keys_finds_none_and_wins_nothing(tiny_glyphs, tmp_path, honest_in_batches, where):
    run = attacked(hostile_file(tmp_path, ATTACKS["keys"], tiny_glyphs), tiny_glyphs, where)
    probed = np.concatenate([np.asarray(v) for v in run["probe"].values()])
    assert probed.size and np.all(probed == 1.0)  # it read every batch message: pixels, seeds, the kappas
    records = [r for r in run["records"] if r["kappa"]["name"] != "probe"]
    assert same_scores(records, honest_in_batches)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("attack", ["order", "context", "memory", "late"])
def test_a_model_whose_answers_depend_on_more_than_its_image_fails_the_re_check(
    tiny_glyphs, tmp_path, honest_in_batches, attack, where
):
    run = attacked(hostile_file(tmp_path, ATTACKS[attack], tiny_glyphs), tiny_glyphs, where)
    assert "records" not in run, "the attack went unnoticed"
    assert run["error"].startswith("the model answered ") and "asked again" in run["error"], run["error"]
    assert "\n" not in run["error"]
    assert not list(tmp_path.glob("**/records"))  # nothing written


@pytest.mark.parametrize("where", WHERE)
def test_a_model_that_would_answer_the_re_check_otherwise_is_never_asked_it(
    tiny_glyphs, tmp_path, honest_in_batches, where
):
    """The re-check asks the file loaded anew in batches of the pass's size: the cheat's trigger (a lone image after
    full batches) never fires, and the run's records are the honest ones (its probe answered in every batch)."""
    run = attacked(hostile_file(tmp_path, ATTACKS["recheck"], tiny_glyphs), tiny_glyphs, where)
    assert "records" in run, run.get("error")
    answered = np.concatenate([np.asarray(v) for v in run["probe"].values()])
    assert answered.size and np.all(answered == 1.0)
    records = [r for r in run["records"] if r["kappa"]["name"] != "probe"]
    assert same_scores(records, honest_in_batches)
    assert {r["timings"]["recheck_process"] for r in records} == {"a fresh sandbox"}
