"""A sample's kappa never depends on the samples scored beside it: a split scored in one call, then with its shards
regrouped (shards packed into batches of other sizes, as other batch sizes pack them; for the kappas computed from a
pass's outputs also one call per shard, as the score cache computes them from kept logits), gives every registered
kappa the same scores."""

import io

import numpy as np
import pytest
import torch
from PIL import Image
from pytorch_ood.detector import OpenMax

from dataset_builder.glyphs import render
from dataset_builder.glyphs.classes import ID_CHARS, class_id
from glyph_fixtures import CNN, load_example
from harness.kappas import registry, resolve_kappas
from harness.kappas.openmax import unknown_probability
from harness.method.scores import SplitScores
from harness.runtime.execution import Execution
from harness.runtime.inference import LocalForward, fit_kappas, fit_on_layers, kappa_scores

EVAL_CHARS = ID_CHARS[::2] + "#&@¶Жλ"  # one shard each: half the ID classes, and OOD characters
PER_SHARD, FIT_PER_CLASS = 3, 10
LAYERS = "features.0,features.1,features.2"
REQUESTS = {
    "gram": f"gram:layers={LAYERS}",
    "multi_mahalanobis": f"multi_mahalanobis:layers={LAYERS}",
    "nacue": "nacue:layers=features.1,features.2",
    "mc_dropout": "mc_dropout:passes=2",
}
SEEDS = np.arange(len(EVAL_CHARS) * PER_SHARD, dtype=np.int64) * 7919 + 11  # each evaluation image's own seed


def glyphs(chars: str, per_char: int, split: str) -> torch.Tensor:
    """Benchmark-style glyph images of ``chars`` (``per_char`` each, in order), normalised as the example CNN's."""
    images = [
        np.asarray(Image.open(io.BytesIO(render.render_png(c, render.style_for(0, class_id(c), f"{split}{i}")))))
        for c in chars
        for i in range(per_char)
    ]
    return (torch.from_numpy(np.stack(images)).float()[:, None] / 255.0 - 0.5) / 0.5


@pytest.fixture(scope="module")
def glyph_split():
    """The example CNN exposing the splits RankFeat and MCM read, its forward, a fit split and an evaluation split of
    one-class shards (ID and OOD characters), with the evaluation split's logits and features from one pass."""
    module = load_example(CNN)

    class Split(module.GlyphCNN):
        def forward_features(self, x):
            return self.features[:3](x)

        def forward_head(self, maps):
            return self.head(self.features[3:](maps))

        def encode_image(self, x):
            return self.features(x)

        @property
        def text_embeddings(self):
            return self.head[1].weight.detach()

    model = Split()
    model.load_state_dict(module.build_model().state_dict())
    model.eval()
    forward = LocalForward(model, Execution(torch.device("cpu"), "none", False, False), 36)
    fit_x, x = glyphs(ID_CHARS, FIT_PER_CLASS, "fit"), glyphs(EVAL_CHARS, PER_SHARD, "eval")
    fit = forward(fit_x, np.zeros(len(fit_x), np.int64), [])
    labels = np.repeat(np.arange(36), FIT_PER_CLASS)
    fit_data = SplitScores(
        np.arange(len(fit_x)).astype(str), labels, fit.logits.argmax(1), {}, {}, fit.logits, fit.features
    )
    out = forward(x, SEEDS, [])
    return model, forward, fit_x, fit_data, x, out.logits, out.features


def fitted(request: str, glyph_split):
    model, forward, fit_x, fit_data, *_ = glyph_split
    (spec,) = resolve_kappas([request])
    if "layers" in spec.needs:
        parts = [forward.extract(fit_x[i : i + 64], [spec])[spec.name] for i in range(0, len(fit_x), 64)]
        fit_on_layers([spec], {spec.name: parts}, fit_data.labels, seed=0)
    elif "fit" in spec.needs:
        fit_kappas([spec], fit_data, forward.head, seed=0)
    return spec


def regroupings(n: int, per_shard: bool) -> dict[str, list[np.ndarray]]:
    """The split in one call, shards packed into batches of other sizes (one of a single sample, cut across shard
    boundaries as the harness cuts a shard larger than a batch) and, with ``per_shard``, one call per shard."""
    groups = {"whole": [np.arange(n)], "packed": np.split(np.arange(n), [7, 8, 48])}
    return groups | {"per shard": np.split(np.arange(n), np.arange(PER_SHARD, n, PER_SHARD))} if per_shard else groups


def scored(spec, glyph_split, groups: list[np.ndarray]) -> np.ndarray:
    _, forward, _, _, x, logits, features = glyph_split
    out = np.empty(len(x))
    for idx in groups:
        if spec.in_model:  # its own passes through the model, beside the forward pass
            out[idx] = forward(x[idx], SEEDS[idx], [spec]).scores[spec.name]
        else:  # from one pass's outputs, as a batch's or a cached shard's
            out[idx] = kappa_scores(logits[idx], features[idx], forward.head, [spec])[0][spec.name]
    return out


@pytest.mark.parametrize("name", sorted(registry().defs))
def test_every_kappa_scores_a_sample_alone(name, glyph_split):
    spec = fitted(REQUESTS.get(name, name), glyph_split)
    groupings = regroupings(len(glyph_split[4]), per_shard=not spec.in_model)
    runs = {how: scored(spec, glyph_split, groups) for how, groups in groupings.items()}
    whole = runs.pop("whole")
    assert np.all(np.isfinite(whole)) and np.ptp(whole) > 0
    # float32 passes and matrix products may sum in another order for another batch size (a single row takes
    # another BLAS kernel): the same value to float32 rounding, far below any difference between samples
    for how, run in runs.items():
        np.testing.assert_allclose(run, whole, rtol=1e-5, atol=1e-5 * np.abs(whole).max(), err_msg=f"{name}, {how}")


def test_only_mc_dropout_draws_from_its_images_seeds_and_another_seed_draws_otherwise(glyph_split):
    assert sorted(name for name, kdef in registry().defs.items() if kdef.seeded) == ["mc_dropout"]
    spec = fitted(REQUESTS["mc_dropout"], glyph_split)
    _, forward, _, _, x, _, _ = glyph_split
    first, other = (forward(x[:64], seeds[:64], [spec]).scores[spec.name] for seeds in (SEEDS, SEEDS + 1))
    assert np.all(np.abs(first - other) > 0)  # other masks for every image


def test_openmax_is_pytorch_oods_with_every_distance_whatever_the_batch(glyph_split):
    """Each sample's OpenMax score is pytorch-ood's when every class is predicted in the call (so that it has every
    distance), alone, in any batch and in the whole split; pytorch-ood's own on a batch is not."""
    spec = fitted("openmax", glyph_split)
    logits = glyph_split[5].astype(np.float32)
    every_class = np.full((36, 36), -10.0, dtype=np.float32)
    np.fill_diagonal(every_class, 10.0)
    detector = spec.impl.detector
    assert isinstance(detector, OpenMax)
    reference = detector.predict_logits(torch.from_numpy(np.concatenate([logits, every_class]))).numpy()[: len(logits)]
    whole = unknown_probability(detector, logits)
    alone = np.concatenate([unknown_probability(detector, logits[i : i + 1]) for i in range(len(logits))])
    # the same float64 operations per sample; numpy's vector loops (exp, log) may round an array's tail elements
    # in the last bit otherwise than its scalar loop
    for ours in (whole, alone):
        np.testing.assert_allclose(ours, reference, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(
        kappa_scores(logits, None, None, [spec])[0]["openmax"], -whole
    )  # the kappa negates it
    per_shard = np.concatenate(
        [
            detector.predict_logits(torch.from_numpy(logits[i : i + PER_SHARD])).numpy()
            for i in range(0, len(logits), PER_SHARD)
        ]
    )
    assert np.mean(np.abs(per_shard - whole) > 1e-3) > 0.5  # pytorch-ood's predict, one call per shard: most differ
