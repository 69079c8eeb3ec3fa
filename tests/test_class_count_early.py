"""A model with another number of classes than the benchmark's ID classes is refused as early as its library tells
the count: a weights file's classifier from the file's header (the layer timm's pretrained config names), before the
model is built or the file read in full; a saved ``config.json`` (timm's ``num_classes``, transformers' ``id2label``)
before any weights are fetched or read; a torchvision weights entry's categories before its file is fetched. Each
is the one line of :class:`ClassCountMismatch`."""

import json
import os
import re
import subprocess
import sys

import pytest
import torch
from huggingface_hub import HfApi
from safetensors.torch import save_file

from harness.adapters import ClassCountMismatch, load_target
from harness.adapters.weights import classifier_rows
from test_torchvision_pretrained import dead_proxy

MISMATCH = r"^the model has 1,000 output classes, the benchmark has 36 ID classes"


def test_a_weights_file_classifier_is_read_from_its_header_before_the_model_is_built(tmp_path):
    # files that hold only resnet50's classifier: they could never load into the model, so the class count is the
    # error only when it is read before the model is built and the file loaded
    head = {"fc.weight": torch.zeros(1000, 2048), "fc.bias": torch.zeros(1000)}
    save_file(head, tmp_path / "head.safetensors")
    torch.save({"state_dict": {f"module.{k}": v for k, v in head.items()}}, tmp_path / "head.pth")
    for name in ("head.safetensors", "head.pth"):
        assert classifier_rows(tmp_path / name, "fc") == 1000
        with pytest.raises(ClassCountMismatch, match=MISMATCH):
            load_target("timm:resnet50", weights=str(tmp_path / name), num_classes_expected=36)
    assert classifier_rows(tmp_path / "head.safetensors", "head.fc") is None  # a layer it lacks: left to the load
    (tmp_path / "junk.pth").write_bytes(b"junk")
    assert classifier_rows(tmp_path / "junk.pth", "fc") is None  # unreadable: the full read says why


def test_a_torchvision_entry_is_refused_from_its_categories_before_its_file_is_fetched(tiny_glyphs, tmp_path):
    done = subprocess.run(
        [
            sys.executable, "-c", "from harness.cli import main; main()", "submit", "torchvision:mobilenet_v3_small",
            "--benchmark", tiny_glyphs, "--out", tmp_path / "out",
        ],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "TORCH_HOME": str(tmp_path / "empty"), **dead_proxy()},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    line = r"error: the model has 1,000 output classes, the benchmark \S+ has 36 ID classes: evaluate it on "
    assert re.match(line, done.stderr.splitlines()[-1]), done.stderr
    assert "cannot reach" not in done.stderr and not (tmp_path / "out").exists()


def test_a_folder_config_is_refused_before_the_model_is_built(tmp_path):
    folder = tmp_path / "vit"
    folder.mkdir()  # a config.json of 1,000 labels and no weights: the count is the error, not the missing weights
    labels = {str(i): f"class {i}" for i in range(1000)}
    (folder / "config.json").write_text(json.dumps({"model_type": "vit", "id2label": labels}))
    with pytest.raises(ClassCountMismatch, match=MISMATCH):
        load_target(f"hf:{folder}", num_classes_expected=36)


def test_a_hub_config_is_refused_before_the_weights_are_fetched(hub_server, tmp_path):
    api = HfApi(endpoint=hub_server)
    configs = {  # repos holding a config.json alone: no weights to fetch
        "timm:hf-hub:cood-tester/config-only-timm": {"architecture": "resnet18", "num_classes": 1000},
        "hf:cood-tester/config-only-vit": {"model_type": "vit", "id2label": {str(i): str(i) for i in range(1000)}},
    }
    for target, config in configs.items():
        repo = target.rsplit(":", 1)[-1]
        (tmp_path / "config.json").write_text(json.dumps(config))
        api.create_repo(repo, exist_ok=True)
        api.upload_file(path_or_fileobj=tmp_path / "config.json", path_in_repo="config.json", repo_id=repo)
        with pytest.raises(ClassCountMismatch, match=MISMATCH):
            load_target(target, num_classes_expected=36)
