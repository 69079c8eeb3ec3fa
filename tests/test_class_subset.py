"""An ImageNet-1K classifier (1,000 outputs) evaluated on a small ImageNet benchmark (``--id-classes 12``): the harness
restricts its logits to the columns of the benchmark's ID classes, for a zoo target and for a sandboxed submission
file, and says so in the records; a model of another width is refused in one line."""

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from harness.run import evaluate
from harness.runtime.execution import Execution
from harness.runtime.inference import LocalForward
from harness.submission import ClassSubset, OutputWidthMismatch, fit_to_classes, load_file
from image_fixtures import small_imagenet_benchmark
from leaderboard.schema import validate_record

WIDE = """import torch

DATA_CONFIG = {{"input_size": (3, 16, 16), "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5),
               "interpolation": "bilinear", "crop_pct": 1.0}}
NAME = "wide"
KAPPAS = {{"column_3": lambda logits: logits[:, 3]}}


def build_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(768, {width}))
"""


SUBSET = ClassSubset("ImageNet-1K", 1000, (5, 900, 17))


def test_a_model_of_the_source_width_is_restricted_to_the_subset_columns_and_its_head_rows():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 1000))
    images = torch.randn(4, 3, 2, 2)
    restricted = fit_to_classes(model, images[0], 3, SUBSET, "wide.py")
    with torch.no_grad():
        np.testing.assert_array_equal(restricted(images).numpy(), model(images)[:, [5, 900, 17]].numpy())
    forward = LocalForward(restricted, Execution(torch.device("cpu"), "none", False, False), 3, SUBSET)
    weight, bias = forward.head
    np.testing.assert_array_equal(weight, model[1].weight.detach().double().numpy()[[5, 900, 17]])
    np.testing.assert_array_equal(bias, model[1].bias.detach().double().numpy()[[5, 900, 17]])
    out = forward(images, 0, [])
    np.testing.assert_allclose(out.logits, out.features @ weight.T + bias, rtol=1e-5, atol=1e-5)
    assert fit_to_classes(restricted, images[0], 3, SUBSET, "wide.py") is None  # already 3 outputs: as it is


def test_another_width_is_refused_in_one_line_naming_the_subset():
    narrow = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 999))
    with pytest.raises(OutputWidthMismatch) as refused:
        fit_to_classes(narrow, torch.zeros(3, 2, 2), 3, SUBSET, "narrow.py")
    assert str(refused.value) == (
        "narrow.py: the model gives logits of shape (1, 999) for one image; the benchmark has 3 ID classes; "
        "they are 3 of ImageNet-1K's 1,000 classes: a model of 1,000 outputs is evaluated on their columns, "
        "this one's outputs do not number 1,000"
    )
    with pytest.raises(OutputWidthMismatch, match=r"has 3 ID classes$"):  # no subset: today's line
        fit_to_classes(narrow, torch.zeros(3, 2, 2), 3, None, "narrow.py")


@pytest.fixture(scope="module")
def small_bench(tmp_path_factory):
    """12 of 15 ImageNet-1K classes (5 images each) vs. 130 ImageNet-21K classes (6 each)."""
    return small_imagenet_benchmark(tmp_path_factory.mktemp("subset"), 15, 130, per_val=5, per=6, id_classes=12)


def id_images(bench) -> dict[str, Image.Image]:
    """The benchmark's ID test images by sample key."""
    manifest = json.loads((bench / "manifest.json").read_text())
    images = {}
    for shard in (s for s in manifest["shards"] if s["split"] == "id_test"):
        with tarfile.open(bench / shard["path"]) as tar:
            for member in tar.getmembers():
                if member.name.endswith(".jpg"):
                    images[member.name[:-4]] = Image.open(io.BytesIO(tar.extractfile(member).read())).convert("RGB")
    return images


def own_logits(model: torch.nn.Module, transform, images: dict, keys) -> np.ndarray:
    """The model's logits (all its outputs) for the images of ``keys``, run here one image at a time."""
    with torch.no_grad():
        return np.concatenate([model.eval()(transform(images[k]).unsqueeze(0)).numpy() for k in keys])


def columns_of(bench) -> list[int]:
    """The ID classes' ImageNet-1K indices in the benchmark's ID class order."""
    return pd.read_parquet(bench / "classes" / "id.parquet").sort_values("index")["index"].tolist()


def check_subset_run(done, bench, full: np.ndarray) -> None:
    """The run's ID scores are those of the model's logits restricted to the ID classes' columns, and its records say
    so."""
    columns = columns_of(bench)
    assert columns != list(range(12))  # a real subset: the restriction is not the first 12 columns
    used = full[:, columns]
    scored = done.scores["id_test"]
    np.testing.assert_allclose(scored.scores["max_logit"], used.max(axis=1), rtol=1e-4, atol=1e-4)
    margin = np.sort(used, axis=1)[:, -1] - np.sort(used, axis=1)[:, -2]
    clear = margin > 1e-3
    assert (scored.preds[clear] == used.argmax(axis=1)[clear]).all()
    assert not np.allclose(scored.scores["max_logit"], full.max(axis=1), rtol=1e-4, atol=1e-4)
    labels = pd.read_parquet(bench / "classes" / "id.parquet").sort_values("index")["id"].tolist()
    assert scored.labels.tolist() == [labels.index(str(k).split("__")[0]) for k in scored.keys]
    for record in done.records:
        validate_record(record)
        assert record["model"]["class_subset"] == {"source": "ImageNet-1K", "outputs_used": 12, "model_outputs": 1000}
        assert record["benchmark"]["num_id_classes"] == 12


@pytest.mark.slow  # a real run of the harness over a built benchmark
def test_a_timm_imagenet_classifier_is_restricted_to_the_id_classes(small_bench, tmp_path):
    import timm
    from safetensors.torch import save_file

    torch.manual_seed(0)
    model = timm.create_model("test_efficientnet", num_classes=1000)
    save_file(model.state_dict(), tmp_path / "w.safetensors")
    done = evaluate(
        "timm:test_efficientnet", weights=tmp_path / "w.safetensors", benchmark=small_bench,
        kappas=["max_logit", "ash", "odin"], decoder="pil", cache=False, progress=False, out=tmp_path / "out",
    )  # fmt: skip
    images = id_images(small_bench)
    keys = done.scores["id_test"].keys
    check_subset_run(done, small_bench, own_logits(model, done.submission.transform, images, keys))
    assert {r["kappa"]["name"] for r in done.records} == {"max_logit", "ash", "odin"}  # head and in-model kappas ran
    assert done.records[0]["timings"]["recheck_images"] > 0
    written = json.loads((tmp_path / "out" / "records" / "ash.json").read_text())
    assert written["model"]["class_subset"]["outputs_used"] == 12
    # the model's identity is its own: the same weights hash as the unrestricted model's
    assert written["model"]["weights_sha256"] == load_full_hash(tmp_path / "w.safetensors")


def load_full_hash(weights) -> str:
    from harness.adapters import load_target

    return load_target("timm:test_efficientnet", weights=str(weights)).weights_sha256


@pytest.mark.slow  # a real run of the harness over a built benchmark
def test_a_sandboxed_submission_of_1000_logits_is_restricted_to_the_id_classes(small_bench, tmp_path):
    (tmp_path / "wide").mkdir()
    path = tmp_path / "wide" / "wide.py"
    path.write_text(WIDE.format(width=1000))
    done = evaluate(
        str(path), benchmark=small_bench, kappas=["max_logit", "ash", "column_3"], decoder="pil", cache=False,
        progress=False,
    )  # fmt: skip
    timings = done.records[0]["timings"]
    assert timings["isolation"]["mode"] == "sandbox" and timings["recheck_process"] == "a fresh sandbox"
    assert timings["recheck_images"] > 0  # the re-check's fresh sandbox restricts the model alike, or it would differ
    mine = load_file(path)
    keys = done.scores["id_test"].keys
    full = own_logits(mine.model, mine.transform, id_images(small_bench), keys)
    check_subset_run(done, small_bench, full)
    # the file's own kappa reads the restricted logits: its column 3 is the fourth ID class's ImageNet-1K column
    np.testing.assert_allclose(
        done.scores["id_test"].scores["column_3"], full[:, columns_of(small_bench)[3]], rtol=1e-4, atol=1e-4
    )
    assert done.submission.weights_sha256 == mine.weights_sha256


def submit(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from harness.cli import main; main()", "submit", *map(str, args)],
        capture_output=True,
        text=True,
    )


@pytest.mark.slow  # a real run of the harness over a built benchmark
def test_a_999_output_model_is_refused_in_one_line(small_bench, tmp_path):
    import timm
    from safetensors.torch import save_file

    save_file(timm.create_model("test_efficientnet", num_classes=999).state_dict(), tmp_path / "w.safetensors")
    (tmp_path / "narrow").mkdir()
    (tmp_path / "narrow" / "narrow.py").write_text(WIDE.format(width=999))
    for target in (
        ["timm:test_efficientnet", "--weights", tmp_path / "w.safetensors"],
        [tmp_path / "narrow" / "narrow.py"],
    ):
        done = submit(*target, "--benchmark", small_bench, "--out", tmp_path / "out", "--no-progress")
        assert done.returncode == 2, done.stderr[-2000:]
        line = done.stderr.strip().splitlines()[-1]
        assert "999" in line and "12 ID classes" in line and "ImageNet-1K's 1,000 classes" in line, done.stderr
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_the_subset_is_an_imagenet_benchmark_of_fewer_than_1000_id_classes_in_its_id_order():
    from dataset_builder.benchmark import Benchmark
    from harness.loading import class_subset

    def bench(kind: str, indices: list[int]) -> Benchmark:
        ids = pd.DataFrame({"index": indices, "id": [f"n{i:08d}" for i in indices]})
        return Benchmark(Path("b"), {"source": {"kind": kind}}, "0" * 64, ids, pd.DataFrame())

    assert class_subset(bench("imagenet", [7, 130, 999])) == ClassSubset("ImageNet-1K", 1000, (7, 130, 999))
    assert class_subset(bench("imagenet", list(range(1000)))) is None
    assert class_subset(bench("folder", [0, 1, 2])) is None
    assert class_subset(None) is None
