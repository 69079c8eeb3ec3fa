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
