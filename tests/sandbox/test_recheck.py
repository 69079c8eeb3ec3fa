"""The re-check cannot be dodged: hostile models that widen its tolerance, cheat in what they compute beside the
logits (their own kappas, ODIN's passes, the features), replay a failed run from the score cache, or ask a process of
the run for their first answers, run sandboxed as root and as root of a user namespace. Each either fails in one line
with nothing written, or proves through its ``probe`` kappa that its attack ran and found nothing to use."""

import numpy as np
import pytest

from attacks import WHERE, attacked, hostile_file, user_namespaces

pytestmark = pytest.mark.slow

CONTEXT = "logits.softmax(1).amax(1).mean()"  # the batch's mean confidence: high on mostly-ID batches
ATTACKS = {
    # every logit 1e5 larger: the old tolerance, relative to the largest logit, grew to 10 nats, and the cheat, a
    # boost of the top class by the batch's confidence, fitted inside it
    "inflated": f"""
class Cheat(cnn.GlyphCNN):
    def forward(self, x):
        logits = super().forward(x)
        top = torch.nn.functional.one_hot(logits.argmax(1), logits.shape[1])
        return logits + 1e5 + 5 * {CONTEXT} * top
def probe(logits):
    return np.full(len(logits), float(np.min(logits) > 5e4))  # 1: the logits it answered were inflated
""",
    # honest logits, and a kappa of its own computed in its process from the batch's context
    "own_kappa": """
class Cheat(cnn.GlyphCNN):
    pass
def sure(logits):
    p = np.exp(logits - logits.max(1, keepdims=True))
    p = p.max(1) / p.sum(1)
    return p * p.mean()
KAPPAS['sure'] = sure
def probe(logits):
    return np.ones(len(logits))
""",
    # honest logits in the pass's forward (under inference mode), the batch's context in ODIN's passes
    "odin": f"""
class Cheat(cnn.GlyphCNN):
    def forward(self, x):
        logits = super().forward(x)
        return logits if torch.is_inference_mode_enabled() else logits * 10 * {CONTEXT}.detach()
def probe(logits):
    return np.ones(len(logits))
""",
    # honest logits in the pass, the batch's context in MC-dropout's passes (its masks come through hooks it can see)
    "mc_dropout": f"""
class Cheat(cnn.GlyphCNN):
    def forward(self, x):
        logits = super().forward(x)
        hooked = any(m._forward_hooks for m in self.modules() if isinstance(m, torch.nn.Dropout))
        return logits * 10 * {CONTEXT} if hooked else logits
def probe(logits):
    return np.ones(len(logits))
""",
    # honest logits, features scaled by the batch's context (for the feature detectors)
    "features": f"""
class Cheat(cnn.GlyphCNN):
    def forward(self, x):
        features = self.features(x)
        logits = self.head(features)
        return logits, features * {CONTEXT}
def probe(logits):
    return np.ones(len(logits))
""",
    # the batch's context on every logit, for the score cache to keep
    "context": f"""
class Cheat(cnn.GlyphCNN):
    def forward(self, x):
        logits = super().forward(x)
        return logits * 10 * {CONTEXT}
def probe(logits):
    return np.ones(len(logits))
""",
    # a lock on a file every sandbox sees: held shared while a process of the file lives, so the re-check's process
    # would find the run's alive and answer otherwise (the channel a hostile file could ask its first answers over)
    "bus": """
import fcntl, os
LOCK = open(os.__file__, "rb")
try:
    fcntl.flock(LOCK, fcntl.LOCK_EX | fcntl.LOCK_NB)
    ALONE = True
except OSError:
    ALONE = False
fcntl.flock(LOCK, fcntl.LOCK_SH)
class Cheat(cnn.GlyphCNN):
    def forward(self, x):
        logits = super().forward(x)
        return logits if ALONE else logits * 2
def probe(logits):
    return np.full(len(logits), 1.0 if ALONE else 2.0)
""",
}
REFUSED = {  # the attack, the kappas it is run with, and what the re-check names as disagreeing
    "inflated": ((), "logits"),
    "own_kappa": (("sure",), "kappa 'sure'"),
    "odin": (("odin",), "kappa 'odin'"),
    "mc_dropout": (("mc_dropout",), "kappa 'mc_dropout'"),
    "features": (("knn",), "features"),
}


def _failed_the_re_check(run: dict, what: str) -> None:
    assert "records" not in run, "the attack went unnoticed"
    error = run["error"]
    assert error.startswith("the model answered ") and "asked again" in error and "\n" not in error, error
    assert what in error and error.endswith("nothing is written"), error


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("attack", sorted(REFUSED))
def test_a_model_that_cheats_beside_its_logits_or_inflates_them_fails_the_re_check(fit_glyphs, tmp_path, attack, where):
    kappas, what = REFUSED[attack]
    run = attacked(hostile_file(tmp_path, ATTACKS[attack], fit_glyphs), fit_glyphs, where, kappas)
    _failed_the_re_check(run, what)
    assert not list(tmp_path.glob("**/records"))


@pytest.mark.parametrize("where", WHERE)
def test_a_failed_run_leaves_no_cache_entry_and_its_rerun_fails_again(tiny_glyphs, tmp_path, where):
    path = hostile_file(tmp_path, ATTACKS["context"], tiny_glyphs)
    cache = tmp_path / "cache"
    for _ in range(2):
        run = attacked(path, tiny_glyphs, where, cache=True, cache_dir=str(cache))
        _failed_the_re_check(run, "logits")
        assert not list(cache.glob("**/*.scores"))


@pytest.mark.parametrize("where", WHERE)
def test_a_run_served_by_the_score_cache_is_re_checked_all_the_same(tiny_glyphs, tmp_path, where):
    """An honest run fills the cache; its rerun, in another secret order, forwards nothing and still re-asks a sample
    of the served rows, drawn by that order's seed."""
    path = hostile_file(tmp_path, ATTACKS["own_kappa"].replace("return p * p.mean()", "return p"), tiny_glyphs)
    cache = {"cache": True, "cache_dir": str(tmp_path / "cache")}
    first = attacked(path, tiny_glyphs, where, ("sure",), order_seed=2, **cache)
    again = attacked(path, tiny_glyphs, where, ("sure",), order_seed=3, **cache)
    timings = [run["records"][0]["timings"] for run in (first, again)]
    assert [t["images_forwarded"] for t in timings] == [1440, 0]
    assert [t["recheck_images"] for t in timings] == [256, 256]
    assert "scores of kappa 'sure'" in timings[1]["recheck_compared"] and timings[1]["recheck_worst_share"] <= 1


def test_the_re_check_loads_the_file_only_once_the_runs_sandbox_has_ended(tiny_glyphs, tmp_path):
    """The run's process holds a lock that the re-check's process would find held if both lived at once: it found it
    free (its probe says so in every answer, and it answered as the run's did). As root, then in a user namespace,
    one after the other: two runs at once would find each other's lock."""
    for where in ["root"] + (["user namespace"] if user_namespaces() else []):
        run = attacked(hostile_file(tmp_path, ATTACKS["bus"], tiny_glyphs), tiny_glyphs, where)
        assert "records" in run, run.get("error")
        answered = np.concatenate([np.asarray(v) for v in run["probe"].values()])
        assert answered.size and np.all(answered == 1.0), where
        assert run["records"][0]["timings"]["recheck_process"] == "a fresh sandbox"
