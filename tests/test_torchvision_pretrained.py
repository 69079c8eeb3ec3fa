"""``torchvision:<name>`` given no weights file: the weights of its weights entry (``DEFAULT``, or ``@ENTRY``) read
from torch.hub's cache (``$TORCH_HOME/hub/checkpoints/<the url's file name>``), named in the record with the file's
sha256 and preprocessed by the entry's transform; an empty cache offline or with the server unreachable is one line.
Nothing is downloaded: the cache is primed with a random-init model's state dict under the entry's file name."""

import json
import os
import socket
import subprocess
import sys
import urllib.request

import pytest
import torch
import torchvision
from torchvision.models import MobileNet_V3_Small_Weights

from dataset_builder.shards import file_sha256
from harness.adapters import load_target
from harness.errors import HarnessError
from harness.submission import weights_sha256
from image_fixtures import small_imagenet_benchmark
from leaderboard.schema import validate_record

ENTRY = MobileNet_V3_Small_Weights.IMAGENET1K_V1
FILE = "mobilenet_v3_small-047dcff4.pth"  # the url's file name, where torch.hub caches it


def dead_proxy() -> dict[str, str]:
    """Every https request through a local port nothing listens at: the network unreachable, refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        proxy = f"http://127.0.0.1:{sock.getsockname()[1]}"
    return {"https_proxy": proxy, "HTTPS_PROXY": proxy, "no_proxy": "", "NO_PROXY": ""}


@pytest.fixture(scope="module")
def primed(tmp_path_factory):
    """A TORCH_HOME whose hub cache holds a random-init mobilenet_v3_small under the DEFAULT entry's file name; the
    model."""
    home = tmp_path_factory.mktemp("torch-home")
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v3_small().eval()
    (home / "hub" / "checkpoints").mkdir(parents=True)
    torch.save(model.state_dict(), home / "hub" / "checkpoints" / FILE)
    return home, model


@pytest.fixture(scope="module")
def small_bench(tmp_path_factory):
    """4 of 4 ImageNet-1K classes (6 images each) vs. 24 ImageNet-21K classes (4 each)."""
    return small_imagenet_benchmark(tmp_path_factory.mktemp("tv-bench"), 4, 24, per_val=6, per=4, id_classes=4)


def harness(*args, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from harness.cli import main; main()", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **env},
    )


@pytest.mark.slow  # a real run of the harness over a built benchmark
def test_submit_reads_the_default_entry_from_the_torch_hub_cache(primed, small_bench, tmp_path):
    home, model = primed
    done = harness(
        "submit", "torchvision:mobilenet_v3_small", "--benchmark", small_bench, "--out", tmp_path / "out",
        "--levels", "3", "-k", "softmax", "--device", "cpu", "--no-cache", "--quiet",
        env={"TORCH_HOME": str(home), **dead_proxy()},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((tmp_path / "out" / "records" / "softmax.json").read_text())
    validate_record(record)
    assert record["model"]["torchvision_weights"] == {
        "entry": "MobileNet_V3_Small_Weights.IMAGENET1K_V1",
        "url": ENTRY.url,
    }
    assert record["model"]["file_sha256"] == file_sha256(home / "hub" / "checkpoints" / FILE)
    assert record["model"]["weights_sha256"] == weights_sha256(model)  # the cached weights, not a random init
    assert "hub_weights" not in record["model"]
    preprocessing = record["model"]["preprocessing"]
    assert (preprocessing["weights_entry"], preprocessing["weights_entry_choice"]) == (
        "MobileNet_V3_Small_Weights.IMAGENET1K_V1",
        "DEFAULT",
    )
    assert (preprocessing["input_size"], preprocessing["resize_size"]) == ([3, 224, 224], 256)
    assert preprocessing["mean"] == [0.485, 0.456, 0.406] and preprocessing["std"] == [0.229, 0.224, 0.225]
    assert record["model"]["class_subset"] == {"source": "ImageNet-1K", "outputs_used": 4, "model_outputs": 1000}


def test_a_named_entry_is_read_and_a_weights_file_still_wins(primed, tmp_path, monkeypatch):
    home, model = primed
    monkeypatch.setenv("TORCH_HOME", str(home))
    named = load_target("torchvision:mobilenet_v3_small@IMAGENET1K_V1")
    assert named.torchvision_weights == {"entry": "MobileNet_V3_Small_Weights.IMAGENET1K_V1", "url": ENTRY.url}
    assert named.preprocessing["weights_entry_choice"] == "named in the target"
    assert (
        named.weights_sha256 == weights_sha256(model) and named.source == "torchvision:mobilenet_v3_small@IMAGENET1K_V1"
    )
    torch.manual_seed(1)
    other = torchvision.models.mobilenet_v3_small().eval()
    torch.save(other.state_dict(), tmp_path / "mine.pth")
    mine = load_target("torchvision:mobilenet_v3_small", weights=str(tmp_path / "mine.pth"))
    assert mine.weights_sha256 == weights_sha256(other) and mine.torchvision_weights is None
    assert mine.file_sha256 == file_sha256(tmp_path / "mine.pth")
    with pytest.raises(HarnessError, match=r"^torchvision: mobilenet_v3_small has no weights entry 'V9' \(it has IMA"):
        load_target("torchvision:mobilenet_v3_small@V9")


def test_a_cached_file_that_is_not_the_entrys_is_one_line(tmp_path, monkeypatch):
    cached = tmp_path / "hub" / "checkpoints" / FILE
    cached.parent.mkdir(parents=True)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    torch.save(torchvision.models.squeezenet1_1().state_dict(), cached)  # another model's weights
    with pytest.raises(HarnessError, match=f"^torchvision: the cached {FILE} does not fit mobilenet_v3_small: "):
        load_target("torchvision:mobilenet_v3_small")
    torch.save({"weights": torch.nn.Linear(2, 2)}, cached)  # a pickled module: refused before torch.hub loads it
    with pytest.raises(HarnessError, match=r"refused by torch.load\(weights_only=True\)"):
        load_target("torchvision:mobilenet_v3_small")


def test_an_empty_cache_offline_or_unreachable_is_one_line(small_bench, tmp_path):
    empty = tmp_path / "empty-home"
    cache = empty / "hub" / "checkpoints"
    cases = [
        (  # the real download, through a proxy that refuses it
            dead_proxy(),
            "error: torchvision: cannot reach download.pytorch.org to fetch MobileNet_V3_Small_Weights.IMAGENET1K_V1, "
            f"and it is not in the torch.hub cache ({cache}): check the network, or give --weights",
        ),
        (
            {"HF_HUB_OFFLINE": "1"},
            "error: torchvision: MobileNet_V3_Small_Weights.IMAGENET1K_V1 is not in the torch.hub cache "
            f"({cache}) and HF_HUB_OFFLINE is set: fetch it once online, or give --weights",
        ),
    ]
    for env, line in cases:
        done = harness(
            "submit", "torchvision:mobilenet_v3_small", "--benchmark", small_bench, "--out", tmp_path / "out",
            "--device", "cpu", env={"TORCH_HOME": str(empty), **env},
        )  # fmt: skip
        assert (done.returncode, done.stderr.splitlines()[-1]) == (2, line), done.stderr
        assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()
    assert not list(cache.iterdir())  # nothing half-written left in the cache


def test_a_server_that_sends_nothing_ends_the_fetch_in_one_line(tmp_path, monkeypatch):
    """A network that takes the connection and never answers (here a proxy that accepts and stays silent) ends the
    fetch after the stall timeout rather than hanging the run."""
    from harness.adapters import torchvision_models

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # the kernel accepts the connection; nobody ever reads or writes
    proxy = f"http://127.0.0.1:{silent.getsockname()[1]}"
    for name, value in {"https_proxy": proxy, "HTTPS_PROXY": proxy, "no_proxy": "", "NO_PROXY": ""}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(urllib.request, "_opener", None)  # urlopen reads the proxies once, when it first opens
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(torchvision_models, "STALL_S", 2.0)
    try:
        with pytest.raises(HarnessError) as refused:
            torchvision_models.fetch(ENTRY)
    finally:
        silent.close()
    assert str(refused.value) == (
        "torchvision: download.pytorch.org sent nothing for 2 s to fetch MobileNet_V3_Small_Weights.IMAGENET1K_V1, "
        f"and it is not in the torch.hub cache ({tmp_path / 'hub' / 'checkpoints'}): check the network, or give "
        "--weights"
    )
    assert socket.getdefaulttimeout() is None  # the process's default is back
    assert not list((tmp_path / "hub" / "checkpoints").iterdir())
