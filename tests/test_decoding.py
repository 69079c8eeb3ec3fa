"""The decoders: the torchvision decoder gives the model the pixels timm's Pillow transform gives it, on real photos;
the tensor resize (the GPU's) is Pillow's within a level; shard groups; the decoded image cache."""

from __future__ import annotations

import io
import platform

import numpy as np
import pytest
import skimage.data
import torch
from PIL import Image

from dataset_builder.errors import BenchmarkError
from harness.runtime.data import shard_groups
from harness.runtime.decoding import PilDecoder, Plan, TensorDecoder, joined, make_decoder, plan_of, resize_crop
from harness.runtime.execution import Execution
from harness.submission import timm_transform

EFFNET = {
    "input_size": (3, 224, 224),
    "interpolation": "bicubic",
    "mean": (0.5,) * 3,
    "std": (0.5,) * 3,
    "crop_pct": 0.875,
}
GLYPH = {"input_size": (1, 32, 32), "mean": (0.5,), "std": (0.5,), "interpolation": "bilinear", "crop_pct": 1.0}
PHOTO = Image.fromarray(skimage.data.chelsea())  # a real photo, 451x300
WHERE = "shard.tar: sample k"


def encoded(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def photos() -> list[bytes]:
    """Real photos as ImageNet has them (landscape, portrait, square, small), plus grey, CMYK and PNG files."""
    jpegs = [
        encoded(PHOTO.resize(size), "JPEG", quality=90) for size in ((500, 375), (333, 500), (500, 500), (180, 120))
    ]
    others = [
        encoded(PHOTO.convert("L").resize((300, 200)), "JPEG"),
        encoded(PHOTO.convert("CMYK").resize((300, 200)), "JPEG"),
        encoded(PHOTO.resize((300, 200)), "PNG"),
        encoded(PHOTO.convert("P").resize((120, 90)), "PNG"),
    ]
    return jpegs + others


@pytest.mark.parametrize(
    "config",
    [EFFNET, {**EFFNET, "interpolation": "bilinear", "crop_pct": 0.95}, GLYPH],
    ids=["bicubic", "bilinear", "glyph"],
)
def test_the_torchvision_decoder_gives_timms_pixels(config):
    transform, channels = timm_transform(config), config["input_size"][0]
    datas = (
        photos()
        if channels == 3
        else [encoded(PHOTO.convert("L").resize((32, 32)), "PNG"), encoded(PHOTO.resize((40, 30)), "JPEG")]
    )
    expected = PilDecoder(transform, channels, 10**8)(datas, [WHERE] * len(datas))
    got = TensorDecoder(plan_of(transform), channels, 10**8)(datas, [WHERE] * len(datas))
    assert got.shape == expected.shape and got.dtype == torch.float32
    level = 1 / 255 / min(config["std"])  # one level of 8-bit pixels after normalising
    assert (got - expected).abs().max().item() <= level * 1.001
    assert (got == expected).float().mean().item() >= 0.999  # measured: identical, every pixel


@pytest.mark.parametrize("filter_name", ["bicubic", "bilinear"])
def test_the_tensor_resize_is_pillows_within_a_level(filter_name):
    """What the GPU path computes; exact where Pillow resamples along the width first (landscape photos, as most of
    ImageNet), within 2 levels on other shapes."""
    resample = Image.Resampling[filter_name.upper()]
    for (width, height), (out_w, out_h), crop, tolerance in [
        ((500, 375), (341, 256), (224, 224), 1),
        ((500, 333), (384, 256), (224, 224), 1),
        ((333, 500), (256, 384), (224, 224), 2),
        ((120, 90), (300, 225), (200, 200), 2),
    ]:
        image = PHOTO.resize((width, height))
        pixels = torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1)
        top, left = int(round((out_h - crop[0]) / 2.0)), int(round((out_w - crop[1]) / 2.0))
        expected = np.asarray(image.resize((out_w, out_h), resample))[
            top : top + crop[0], left : left + crop[1]
        ].astype(int)
        got = resize_crop(pixels, (out_h, out_w), crop, filter_name).permute(1, 2, 0).numpy().astype(int)
        assert got.shape == expected.shape
        assert np.abs(got - expected).max() <= tolerance, (width, height)
        assert np.abs(got - expected).mean() < 0.3, (width, height)


def test_the_tensor_resize_of_a_batch_is_each_images():
    pixels = torch.from_numpy(
        np.stack([np.asarray(PHOTO.resize((500, 375)).rotate(angle)) for angle in (0, 90)])
    ).permute(0, 3, 1, 2)
    batch = resize_crop(pixels, (256, 341), (224, 224), "bicubic")
    assert torch.equal(batch[1], resize_crop(pixels[1], (256, 341), (224, 224), "bicubic"))


def test_the_gpu_path_resizes_each_size_together_and_agrees_with_pillow():
    """The decoder's GPU path (tensor resize of each group of same-sized images), run on the CPU."""
    transform = timm_transform(EFFNET)
    datas = photos() + [encoded(PHOTO.resize((500, 375)).rotate(180), "JPEG", quality=90)]  # a second 500x375
    decoder = TensorDecoder(plan_of(transform), 3, 10**8)
    decoder.tensor_resize = True
    got = decoder.pixels(datas, [WHERE] * len(datas)).to(torch.int32)
    expected = PilDecoder(transform, 3, 10**8)(datas, [WHERE] * len(datas))
    expected = (expected * 0.5 + 0.5).mul(255).round().to(torch.int32)
    assert got.shape == expected.shape == (len(datas), 3, 224, 224)
    assert (got - expected).abs().max().item() <= 2  # exact for landscape photos, within 2 levels otherwise
    assert torch.equal(got[0], expected[0]) and torch.equal(got[-1], expected[-1])
    assert torch.equal(got[-1], decoder.pixels(datas[-1:], [WHERE])[0])  # in a group of two, as alone


@pytest.mark.parametrize("spng", [True, False], ids=["libspng", "torchvision"])
def test_pngs_decode_to_pillows_pixels_with_or_without_libspng(spng, monkeypatch):
    """PNGs are decoded by libspng where the torch extra installs it (not on 64-bit ARM Linux), else by torchvision:
    Pillow's pixels either way, transparency chunks included; a broken one is Pillow's one-line error."""
    import harness.runtime.decoding

    if not spng:
        monkeypatch.setattr(harness.runtime.decoding, "pyspng", None)
    elif platform.machine() != "aarch64":
        assert harness.runtime.decoding.pyspng is not None
    grey, rgb = PHOTO.convert("L").resize((61, 47)), PHOTO.resize((61, 47))
    datas = [
        encoded(grey, "PNG"),
        encoded(rgb, "PNG"),
        encoded(grey, "PNG", transparency=7),
        encoded(rgb, "PNG", transparency=(1, 2, 3)),
    ]
    for channels, mode in ((1, "L"), (3, "RGB")):
        decoder = TensorDecoder(Plan(None, "bilinear", None, None, None), channels, 10**8)
        expected = [np.asarray(Image.open(io.BytesIO(d)).convert(mode)).reshape(47, 61, channels) for d in datas]
        assert np.array_equal(decoder.pixels(datas, [WHERE] * 4).numpy(), np.stack(expected).transpose(0, 3, 1, 2))
        with pytest.raises(BenchmarkError) as error:
            decoder.pixels([datas[0], datas[1][:-40]], ["shard.tar: sample ok", WHERE])
        assert str(error.value).startswith("corrupt shard shard.tar: sample k cannot be decoded") and "\n" not in str(
            error.value
        )


def test_batches_reach_the_model_in_the_recorded_memory_format():
    """Decoded images are ``(H, W, C)`` arrays seen as ``(C, H, W)``: joined into contiguous batches as torch would, and
    the model gets contiguous NCHW or channels_last as the run records it (the layout changes the kernels)."""
    parts = [torch.arange(24, dtype=torch.uint8).view(2, 4, 3).permute(2, 0, 1) + i for i in range(3)]
    for got, expected in [
        (joined(parts, new_axis=True), torch.stack(parts)),
        (joined([p[None] for p in parts]), torch.stack(parts)),
    ]:
        assert torch.equal(got, expected) and got.is_contiguous()
    nhwc = torch.rand(2, 3, 5, 4).contiguous(memory_format=torch.channels_last)
    assert Execution.resolve("cpu").inputs(nhwc).is_contiguous()
    assert (
        Execution.resolve("cpu", channels_last=True)
        .inputs(nhwc.contiguous())
        .is_contiguous(memory_format=torch.channels_last)
    )


def test_a_custom_transform_goes_to_pillow_and_torchvision_says_why():
    custom = lambda image: torch.zeros(3, 8, 8)  # noqa: E731
    assert plan_of(custom) is None
    assert make_decoder("auto", custom, 3, 10**8).name == "pil"
    assert make_decoder("auto", timm_transform(EFFNET), 3, 10**8).name == "torchvision"
    plan = plan_of(timm_transform(EFFNET))
    assert (plan.resize, plan.filter_name, plan.crop, plan.mean) == (256, "bicubic", (224, 224), (0.5, 0.5, 0.5))
    with pytest.raises(ValueError, match="use --decoder pil"):
        make_decoder("torchvision", custom, 3, 10**8)
    with pytest.raises(ValueError, match="--decoder must be one of auto, pil, torchvision"):
        make_decoder("nvidia", custom, 3, 10**8)


@pytest.mark.parametrize("name", ["pil", "torchvision"])
def test_a_broken_or_oversized_image_is_one_line_naming_it(name):
    decoder = make_decoder(name, timm_transform(EFFNET), 3, 400 * 300)
    good = encoded(PHOTO.resize((300, 200)), "JPEG")
    for data, message in [
        (good[: len(good) // 2], "corrupt shard shard.tar: sample k cannot be decoded"),
        (b"\xff\xd8\xff" + b"x" * 64, "corrupt shard shard.tar: sample k cannot be decoded"),
        (
            encoded(PHOTO.resize((500, 375)), "JPEG"),
            "shard shard.tar: sample k is 500x375 pixels, above the benchmark's max_image_pixels",
        ),
        (encoded(PHOTO.convert("L").resize((500, 375)), "PNG"), "shard shard.tar: sample k is 500x375 pixels"),
    ]:
        with pytest.raises(BenchmarkError) as error:
            decoder([good, data], ["shard.tar: sample ok", WHERE])
        assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_shard_groups_fill_batches_in_manifest_order():
    shards = [{"path": f"{i}.tar", "num_samples": n} for i, n in enumerate([50, 50, 50, 50, 50, 50, 300, 10, 250, 6])]
    groups = shard_groups(shards, 256)
    assert [[s["path"] for s in g] for g in groups] == [
        ["0.tar", "1.tar", "2.tar", "3.tar", "4.tar"],
        ["5.tar"],
        ["6.tar"],
        ["7.tar"],
        ["8.tar", "9.tar"],
    ]
    assert [s for g in groups for s in g] == shards
    assert all(sum(s["num_samples"] for s in g) <= 256 for g in groups if len(g) > 1)


@pytest.fixture(scope="module")
def decoder_runs(tiny_glyphs, tmp_path_factory):
    """The example CNN on the tiny glyph benchmark, on the CPU (where decoders agree exactly and the decoded cache is
    used): with each decoder, and twice through a decoded image cache."""
    from glyph_fixtures import CNN, load_example
    from harness.run import evaluate

    cnn = load_example(CNN)
    cache = tmp_path_factory.mktemp("cache")

    def run(decoder, **options):
        return evaluate(
            cnn.build_model(),
            cnn.DATA_CONFIG,
            benchmark=tiny_glyphs,
            decoder=decoder,
            device="cpu",
            num_levels=3,
            progress=False,
            **options,
        )

    runs = {
        "pil": run("pil"),
        "torchvision": run("torchvision"),
        "filling": run("torchvision", cache=True, cache_dir=cache),
    }
    entries = sorted((cache / "decoded").rglob("*.decoded"))
    runs["reading"] = run(
        "auto", cache=True, cache_dir=cache, kappas=["entropy", "max_logit"]
    )  # new kappas: a pass, from decoded images
    return runs, entries


def levels(evaluation, kappa: str) -> np.ndarray:
    result = next(r for r in evaluation.results if r.kappa == kappa)
    return np.array([row["ood_auroc"] for row in result.rows])


def test_every_decoder_and_the_decoded_cache_give_the_same_levels(decoder_runs):
    runs, entries = decoder_runs
    reference = levels(runs["pil"], "entropy")
    for name in ("torchvision", "filling", "reading"):
        np.testing.assert_allclose(levels(runs[name], "entropy"), reference, rtol=0, atol=1e-12)
    assert [r.records[0]["model"]["preprocessing"]["decoder"] for r in runs.values()] == [
        "pil",
        "torchvision",
        "torchvision",
        "torchvision",
    ]
    bench = runs["pil"].benchmark
    assert len(entries) == sum(len(bench.shards(split)) for split in ("id_test", "ood_estimation", "ood_test"))


def test_a_damaged_decoded_entry_is_decoded_again(tiny_glyphs, tmp_path, capfd):
    from glyph_fixtures import CNN, load_example
    from harness.run import evaluate

    cnn = load_example(CNN)

    def run():
        return evaluate(
            cnn.build_model(),
            cnn.DATA_CONFIG,
            benchmark=tiny_glyphs,
            device="cpu",
            num_levels=3,
            progress=False,
            cache=True,
            cache_dir=tmp_path,
            kappas=["softmax"],
        )

    first = run()
    entry = sorted((tmp_path / "decoded").rglob("*.decoded"))[0]
    entry.write_bytes(entry.read_bytes()[:100])
    for scores in tmp_path.glob("*/*/*.scores"):  # the scores too: the images are needed again
        scores.unlink()
    capfd.readouterr()
    second = run()
    assert f"warning: decoded image cache entry {entry} is unusable" in capfd.readouterr().err
    np.testing.assert_array_equal(levels(second, "softmax"), levels(first, "softmax"))
    assert len(entry.read_bytes()) > 100  # written again, whole
