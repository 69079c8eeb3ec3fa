"""Private images catch memorisation: a file that ships the hashes of the public ID test images answers "certain" on
them and "unsure" elsewhere, and scores a perfect public mean ood-auroc with every check of the sandbox and the
re-check passing (it answers each image alone, the same every time); on the private test images, which were never
published, it falls to chance, and its records are flagged, on the board too. The honest model is not flagged."""

import hashlib
import io

import numpy as np
import pytest
from PIL import Image

from attacks import WHERE, attacked, hostile_file
from dataset_builder.benchmark import Benchmark
from dataset_builder.shards import read_shard
from leaderboard.schema import flags, private_status

pytestmark = pytest.mark.slow

MEMORY = """
import hashlib
KNOWN = set(Path(__file__).with_name("memory.txt").read_text().split())
def seen(x):
    pixels = ((x[:, 0] * 0.5 + 0.5) * 255).round().clamp(0, 255).to(torch.uint8).numpy()
    return np.array([hashlib.sha256(p.tobytes()).hexdigest() in KNOWN for p in pixels])
class Cheat(cnn.GlyphCNN):
    def forward(self, x):
        logits = super().forward(x)
        known = torch.from_numpy(seen(x))
        return torch.where(known[:, None], logits * 100, torch.zeros_like(logits))
def probe(logits):
    return np.ones(len(logits))
"""


REBUILT = """
import contextlib, hashlib, io, tempfile
from PIL import Image
from dataset_builder.benchmark import Benchmark
from dataset_builder.glyphs import build as glyph_build
from dataset_builder.shards import read_shard
class InProcess:  # the sandbox has no room for a process pool's semaphores: render in this process
    imap = staticmethod(map)
glyph_build.worker_pool = lambda processes: contextlib.nullcontext(InProcess())
def rebuilt_hashes():
    root = Path(tempfile.mkdtemp()) / "glyphs"  # the published options, no private part: its seed is not published
    glyph_build.build(root, progress=False, workers=1, seed=0, pool_size=48, images_per_class=24, n_test=16,
          id_test_per_class=16, id_train_per_class=0)
    bench = Benchmark.open(root)
    return {
        hashlib.sha256(np.asarray(Image.open(io.BytesIO(s["png"])).convert("L")).tobytes()).hexdigest()
        for shard in bench.shards("id_test") for s in read_shard(bench.shard_path(shard))
    }
KNOWN = rebuilt_hashes()
""" + MEMORY.split("\n", 3)[3]


def public_id_hashes(benchmark) -> list[str]:
    """The sha256 of each public ID test image's pixels: what a submitter can read off the published shards."""
    bench = Benchmark.open(benchmark)
    pixels = (
        np.asarray(Image.open(io.BytesIO(sample[bench.image_ext])).convert("L"))
        for shard in bench.shards("id_test")
        for sample in read_shard(bench.shard_path(shard))
    )
    return [hashlib.sha256(p.tobytes()).hexdigest() for p in pixels]


@pytest.mark.parametrize("where", WHERE)
def test_a_file_that_memorised_the_public_images_is_flagged_on_the_private_ones(private_glyphs, tmp_path, where):
    (tmp_path / "memory.txt").write_text("\n".join(public_id_hashes(private_glyphs)))
    run = attacked(hostile_file(tmp_path, MEMORY, private_glyphs), private_glyphs, where)
    assert "records" in run, run.get("error")  # every check of the sandbox and the re-check passed
    softmax = next(r for r in run["records"] if r["kappa"]["name"] == "softmax")
    assert softmax["summary"]["mean_ood_auroc"] > 0.999  # it knew the public ID images: the attack ran
    private = softmax["private"]
    assert private["mean_ood_auroc"] < 0.7 and not private["reproduced"] and private["p_value"] < 0.01
    assert private["num_id"] == 144 and private["num_ood"] == 192
    assert private_status(softmax) == "not reproduced"
    assert flags(softmax) and flags(softmax)[0].startswith("scores not reproduced on private images")


def test_a_file_that_rebuilds_the_benchmark_in_the_sandbox_is_flagged_on_the_private_images(private_glyphs, tmp_path):
    """The embedded benchmark is built by the package's own code, so a file can rebuild it inside the sandbox and know
    every public image; the private images come from a seed it cannot know."""
    run = attacked(hostile_file(tmp_path, REBUILT, private_glyphs), private_glyphs, "root")
    assert "records" in run, run.get("error")
    softmax = next(r for r in run["records"] if r["kappa"]["name"] == "softmax")
    assert softmax["summary"]["mean_ood_auroc"] > 0.999  # it rebuilt the public ID images: the attack ran
    assert softmax["private"]["mean_ood_auroc"] < 0.7 and private_status(softmax) == "not reproduced"


def test_the_honest_model_is_not_flagged_and_its_public_numbers_are_those_of_a_run_without_the_private_part(
    private_glyphs, tiny_glyphs
):
    from glyph_fixtures import CNN
    from harness import HarnessError, evaluate

    checked = evaluate(CNN, benchmark=private_glyphs, kappas=["softmax", "energy"], progress=False)
    public = evaluate(CNN, benchmark=private_glyphs, kappas=["softmax", "energy"], progress=False, private=False)
    for with_private, without in zip(checked.records, public.records):
        assert with_private["private"]["reproduced"] and private_status(with_private) == "reproduced"
        assert not flags(with_private)
        assert "private" not in without and private_status(without) == "not checked"
        for a, b in zip(with_private["levels"], without["levels"]):  # the same levels, the same public numbers
            assert a["ood_auroc"] == pytest.approx(b["ood_auroc"], abs=1e-12)
    assert checked.records[0]["timings"]["id_test_private_images"] == 144
    assert checked.records[0]["order_seed_drawn"] is True  # no --order-seed: the harness drew it (as the worker does)
    given = evaluate(CNN, benchmark=private_glyphs, kappas=["softmax"], progress=False, order_seed=3, private=True)
    assert given.records[0]["order_seed_drawn"] is False and given.records[0]["private"]["reproduced"]
    with pytest.raises(HarnessError, match="has no private part"):
        evaluate(CNN, benchmark=tiny_glyphs, kappas=["softmax"], progress=False, private=True)
    mlp = evaluate(CNN.with_name("glyph_mlp.py"), benchmark=private_glyphs, progress=False)  # its own kappa too
    assert [r["kappa"]["name"] for r in mlp.records][-1] == "margin"
    assert all(r["private"]["reproduced"] and not flags(r) for r in mlp.records), [
        r["private"]["p_value"] for r in mlp.records
    ]


def test_a_private_part_kept_apart_is_read_from_where_its_keeper_put_it(private_glyphs, tmp_path):
    """A Hub benchmark's private part is never in its snapshot: its operator keeps it apart and names its folder;
    the worker refuses to start without it."""
    import shutil

    from glyph_fixtures import CNN
    from harness import HarnessError, evaluate
    from harness.worker import RequestEvaluator

    public = tmp_path / "published"
    top = str(private_glyphs)
    shutil.copytree(private_glyphs, public, ignore=lambda folder, _: ["private"] if folder == top else [])
    kept = private_glyphs / "private"
    assert not (public / "private").exists() and Benchmark.open(public).sha256 == Benchmark.open(private_glyphs).sha256
    alone = evaluate(CNN, benchmark=public, kappas=["softmax"], progress=False)
    assert "private" not in alone.records[0]  # nothing there to score: not checked
    apart = evaluate(CNN, benchmark=public, kappas=["softmax"], progress=False, private_part=kept)
    there = evaluate(CNN, benchmark=private_glyphs, kappas=["softmax"], progress=False)
    ours, theirs = apart.records[0]["private"], there.records[0]["private"]
    assert ours["manifest_sha256"] == theirs["manifest_sha256"] and ours["num_id"] == theirs["num_id"] == 144
    assert ours["mean_ood_auroc"] == pytest.approx(theirs["mean_ood_auroc"], abs=1e-12)
    with pytest.raises(HarnessError, match="is not at") as missing:
        evaluate(CNN, benchmark=public, kappas=["softmax"], progress=False, private=True)
    with pytest.raises(HarnessError, match="is not at") as refused:
        RequestEvaluator(public, device="cpu", work_dir=tmp_path / "work", progress=False)
    assert all(len(str(e.value).splitlines()) == 1 for e in (missing, refused))
    worker = RequestEvaluator(public, device="cpu", work_dir=tmp_path / "work", progress=False, private_part=kept)
    assert worker.config.private is True and worker.config.private_part == kept


def test_a_private_part_drawn_anew_is_scored_anew_from_the_score_cache(private_glyphs, tmp_path):
    """Every private seed gives the same public benchmark, so the score cache's run key is the same: the private
    shards are told apart by their bytes, and a run on a new private part never takes the old one's scores."""
    from dataset_builder.glyphs.build import build
    from glyph_fixtures import CNN, PRIVATE, TINY
    from harness import evaluate

    redrawn = tmp_path / "redrawn"
    build(redrawn, progress=False, workers=1, **{**TINY, **PRIVATE, "private_seed": PRIVATE["private_seed"] + 1})
    assert Benchmark.open(redrawn).sha256 == Benchmark.open(private_glyphs).sha256
    cached = dict(kappas=["softmax"], progress=False, cache=True, cache_dir=tmp_path / "scores")
    first = evaluate(CNN, benchmark=private_glyphs, **cached).records[0]["private"]
    again = evaluate(CNN, benchmark=redrawn, **cached).records[0]  # its re-check would fail on the old part's scores
    fresh = evaluate(CNN, benchmark=redrawn, kappas=["softmax"], progress=False).records[0]["private"]
    assert again["timings"]["recheck_images"] > 0
    assert again["private"]["manifest_sha256"] == fresh["manifest_sha256"] != first["manifest_sha256"]
    assert again["private"]["mean_ood_auroc"] == pytest.approx(fresh["mean_ood_auroc"], abs=1e-12)
    assert again["private"]["mean_ood_auroc"] != first["mean_ood_auroc"]
