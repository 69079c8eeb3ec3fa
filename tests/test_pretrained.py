"""Pretrained zoo targets: ``timm:`` given no weights file fetches timm's pretrained weights from the (local) Hub
through the Hugging Face cache, pinned to the commit the record names, and ``hf:<owner>/<repo>`` a transformers
classifier alike; offline they read the cache; a Hub that cannot be reached, a repo or revision that is not there, or an
offline empty cache is refused in one line."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import timm
import torch
from huggingface_hub import HfApi, constants
from timm.models import save_for_hf

from dataset_builder.hub_answer import ANSWER_TIMEOUT
from dataset_builder.shards import file_sha256
from harness.adapters import ClassCountMismatch, load_target
from harness.adapters.hub_weights import pin
from harness.errors import HarnessError
from harness.options import check_target
from harness.submission import weights_sha256
from silent_hub import silent_endpoint

GLYPH_REPO = "cood-tester/glyph-efficientnet"  # a repo saved by timm (config.json + model.safetensors)
GLYPH_TARGET = f"timm:hf-hub:{GLYPH_REPO}"
BUILTIN_REPO = "timm/test_efficientnet.r160_in1k"  # where timm's registry fetches test_efficientnet from
MISPLACED_REVISION = (
    "--revision applies to the pretrained weights of hf:, open_clip: and timm: targets given no weights file"
)
GLYPH_DATA = {"input_size": (1, 32, 32), "mean": (0.5,), "std": (0.5,), "crop_pct": 1.0, "interpolation": "bilinear"}


def upload(api: HfApi, repo: str, model: torch.nn.Module, folder: Path, data_config: dict | None = None) -> str:
    """``model`` saved as timm saves a Hub repo (``save_for_hf``: ``model.safetensors`` and ``config.json``), committed
    to ``repo``; returns the commit's sha."""
    save_for_hf(model, folder, safe_serialization=True, data_config=data_config)
    api.create_repo(repo, exist_ok=True)
    return api.upload_folder(repo_id=repo, folder_path=folder).oid


@pytest.fixture(scope="module")
def glyph_repo(hub_server, tiny_glyphs, tmp_path_factory):
    """A random-init timm model for the tiny glyph benchmark (1 channel, 32x32, its ID classes) in the local Hub:
    the model, the sha256 of its weights file, the commit."""
    classes = len(pd.read_parquet(tiny_glyphs / "classes" / "id.parquet"))
    torch.manual_seed(0)
    model = timm.create_model("test_efficientnet", num_classes=classes, in_chans=1).eval()
    folder = tmp_path_factory.mktemp("glyph-repo")
    commit = upload(HfApi(endpoint=hub_server), GLYPH_REPO, model, folder, GLYPH_DATA)
    return model, file_sha256(folder / "model.safetensors"), commit


def dead_endpoint() -> str:
    """A local URL nothing listens at (connections are refused at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def harness(*args, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from harness.cli import main; main()", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def submit_glyphs(bench: Path, out: Path, *extra, env: dict | None = None) -> subprocess.CompletedProcess:
    return harness(
        "submit", GLYPH_TARGET, "--benchmark", bench, "--out", out, "--device", "cpu", "-k", "softmax", "--quiet",
        "--no-cache", *extra, env=env,
    )  # fmt: skip


def test_submit_fetches_the_pretrained_weights_then_runs_offline_from_the_cache(glyph_repo, tiny_glyphs, tmp_path):
    model, file_sha, commit = glyph_repo
    online = submit_glyphs(tiny_glyphs, tmp_path / "online")
    assert online.returncode == 0, online.stderr
    record = json.loads((tmp_path / "online" / "records" / "softmax.json").read_text())["model"]
    assert record["hub_weights"] == {"repo": GLYPH_REPO, "revision": commit, "file": "model.safetensors"}
    assert (record["name"], record["source"]) == ("glyph-efficientnet", GLYPH_TARGET)
    assert record["file_sha256"] == file_sha  # the file the harness read, hashed
    assert record["weights_sha256"] == weights_sha256(model)  # the uploaded weights, not a random init
    assert record["preprocessing"]["input_size"] == [1, 32, 32]
    # offline, with no Hub at all: the same weights from the cache
    offline = submit_glyphs(
        tiny_glyphs, tmp_path / "offline", env={"HF_HUB_OFFLINE": "1", "HF_ENDPOINT": dead_endpoint()}
    )
    assert offline.returncode == 0, offline.stderr
    again = json.loads((tmp_path / "offline" / "records" / "softmax.json").read_text())["model"]
    assert {k: again[k] for k in ("hub_weights", "file_sha256", "weights_sha256")} == {
        k: record[k] for k in ("hub_weights", "file_sha256", "weights_sha256")
    }


def test_what_cannot_be_fetched_is_refused_in_one_line(glyph_repo, tiny_glyphs, tmp_path, hub_server):
    empty = {"HF_HOME": str(tmp_path / "empty-home"), "HF_HUB_CACHE": str(tmp_path / "empty-home" / "hub")}
    cache = empty["HF_HUB_CACHE"]
    down = dead_endpoint()
    with silent_endpoint() as silent:
        unanswered = [  # refused, or silent (with the default timeouts, not the test session's long ones)
            (
                {**empty, "HF_ENDPOINT": url, "HF_HUB_ETAG_TIMEOUT": str(constants.DEFAULT_ETAG_TIMEOUT)},
                (),
                f"error: timm: cannot reach the Hugging Face Hub at {url} to fetch {GLYPH_REPO}, and it is not in the "
                f"cache ({cache}): check the network, or give --weights",
            )
            for url in (down, silent)
        ]
        refused(tiny_glyphs, tmp_path, unanswered)
    cases = [
        (
            {**empty, "HF_HUB_OFFLINE": "1"},
            (),
            f"error: timm: {GLYPH_REPO} is not in the Hugging Face cache ({cache}) and HF_HUB_OFFLINE is set: fetch it "
            "once online, or give --weights",
        ),
        ({}, ("--revision", "v9"), f"error: timm: the Hub model repo {GLYPH_REPO} has no revision 'v9'"),
    ]
    refused(tiny_glyphs, tmp_path, cases)
    done = harness("submit", "timm:hf-hub:cood-tester/absent", "--benchmark", tiny_glyphs, "--out", tmp_path / "out")
    assert (done.returncode, done.stderr.splitlines()[-1]) == (
        2,
        f"error: timm: the Hub at {hub_server} has no model repo cood-tester/absent (or it is private or gated)",
    )


def refused(bench: Path, tmp_path: Path, cases: list[tuple[dict, tuple, str]]) -> None:
    """Each ``(env, extra arguments, line)`` of ``cases`` submits the glyph repo and is refused with that last line,
    status 2, no traceback and no outputs."""
    for env, extra, line in cases:
        done = submit_glyphs(bench, tmp_path / "out", *extra, env=env)
        assert (done.returncode, done.stderr.splitlines()[-1]) == (2, line), done.stderr
        assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()


def test_a_silent_hub_is_given_up_after_one_short_timeout_for_the_cache(glyph_repo, tmp_path, monkeypatch):
    commit = glyph_repo[2]
    assert pin("timm", GLYPH_REPO, ["model.safetensors"], None).revision == commit  # cached while the Hub answers
    monkeypatch.setattr(constants, "HF_HUB_ETAG_TIMEOUT", constants.DEFAULT_ETAG_TIMEOUT)  # not the session's 30 s
    with silent_endpoint() as silent:
        monkeypatch.setattr(constants, "ENDPOINT", silent)
        start = time.monotonic()
        cached = pin("timm", GLYPH_REPO, ["model.safetensors"], None)  # from the cache, the Hub asked once
        assert (cached.revision, cached.path.is_file()) == (commit, True)
        assert time.monotonic() - start < ANSWER_TIMEOUT + 1.5
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
        start = time.monotonic()
        with pytest.raises(HarnessError) as error:
            pin("timm", GLYPH_REPO, ["model.safetensors"], None)
        assert time.monotonic() - start < ANSWER_TIMEOUT + 1.5
    assert str(error.value) == (
        f"timm: cannot reach the Hugging Face Hub at {silent} to fetch {GLYPH_REPO}, and it is not in the cache "
        f"({tmp_path / 'empty'}): check the network, or give --weights"
    )


def test_a_revision_pins_the_weights_of_its_commit(glyph_repo, hub_server, tmp_path):
    model, file_sha, first = glyph_repo
    torch.manual_seed(1)
    newer = timm.create_model("test_efficientnet", num_classes=model.num_classes, in_chans=1).eval()
    repo = "cood-tester/glyph-efficientnet-revised"
    api = HfApi(endpoint=hub_server)
    old = upload(api, repo, model, tmp_path / "old", GLYPH_DATA)
    new = upload(api, repo, newer, tmp_path / "new", GLYPH_DATA)
    assert old != new
    latest = load_target(f"timm:hf-hub:{repo}")
    pinned = load_target(f"timm:hf-hub:{repo}", revision=old)
    assert latest.hub_weights["revision"] == new and latest.weights_sha256 == weights_sha256(newer)
    assert pinned.hub_weights["revision"] == old and pinned.weights_sha256 == weights_sha256(model)
    assert pinned.file_sha256 == file_sha
    with pytest.raises(HarnessError, match=f"^timm: hf-hub:{repo}@main names revision 'main', --revision '{old}'"):
        load_target(f"timm:hf-hub:{repo}@main", revision=old)


def test_a_registered_name_fetches_from_its_timm_repo(hub_server, tmp_path):
    torch.manual_seed(2)
    model = timm.create_model("test_efficientnet").eval()
    commit = upload(HfApi(endpoint=hub_server), BUILTIN_REPO, model, tmp_path / "repo")
    submission = load_target("timm:test_efficientnet")  # its default tag, r160_in1k
    assert submission.hub_weights == {"repo": BUILTIN_REPO, "revision": commit, "file": "model.safetensors"}
    assert submission.weights_sha256 == weights_sha256(model)
    assert submission.file_sha256 == file_sha256(tmp_path / "repo" / "model.safetensors")
    assert submission.preprocessing["input_size"] == [3, 160, 160] and submission.name == "test_efficientnet"


def test_a_classifier_of_another_width_is_refused_before_any_download(hub_server):
    # test_resnet.r160_in1k is in no repo of the local Hub: its 1,000 classes are refused from timm's registry alone
    with pytest.raises(ClassCountMismatch, match=r"^the model has 1,000 output classes, the benchmark has 36 ID"):
        load_target("timm:test_resnet", num_classes_expected=36)
    with pytest.raises(HarnessError, match=r"^timm: Invalid pretrained tag \(nope\) for resnet50; did you mean "):
        load_target("timm:resnet50.nope")


def test_a_misplaced_revision_is_refused_before_torch(tmp_path):
    probe = "import atexit, sys; atexit.register(lambda: print('torch:', 'torch' in sys.modules)); " + (
        "from harness.cli import main; main()"
    )
    (tmp_path / "w.pt").write_bytes(b"")
    done = subprocess.run(
        [sys.executable, "-c", probe, "submit", "timm:resnet18", "--weights", tmp_path / "w.pt", "--revision", "main"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stderr, done.stdout) == (
        2,
        f"error: {MISPLACED_REVISION}\n",
        "torch: False\n",
    )


def test_a_revision_applies_only_to_fetched_weights(tmp_path):
    (tmp_path / "model.py").write_text("")
    for target, weights in (("timm:resnet18", "w.pt"), ("torchvision:resnet18", "w.pt"), (tmp_path / "model.py", None)):
        with pytest.raises(HarnessError, match=f"^{MISPLACED_REVISION}$"):
            check_target(str(target), weights, "main")
    with pytest.raises(HarnessError, match=f"^{MISPLACED_REVISION}$"):  # torch.hub's weights have no revision
        check_target("torchvision:resnet18", None, "main")
    check_target(
        "torchvision:resnet18"
    )  # its weights entry's, through torch.hub (tests/test_torchvision_pretrained.py)
    check_target("timm:resnet18", None, "main")


def test_an_hf_hub_repo_is_fetched_pinned_and_read_offline_from_the_cache(hub_server, tmp_path):
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    torch.manual_seed(3)
    config = ViTConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37,
        num_labels=7,
    )  # fmt: skip
    model = ViTForImageClassification(config).eval()
    model.save_pretrained(tmp_path / "vit")
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(tmp_path / "vit")
    repo, api = "cood-tester/tiny-vit", HfApi(endpoint=hub_server)
    api.create_repo(repo)
    commit = api.upload_folder(repo_id=repo, folder_path=tmp_path / "vit").oid
    submission = load_target(f"hf:{repo}", num_classes_expected=7)
    assert submission.hub_weights == {"repo": repo, "revision": commit, "file": "model.safetensors"}
    assert submission.file_sha256 == file_sha256(tmp_path / "vit" / "model.safetensors")
    assert submission.weights_sha256 == weights_sha256(torch.nn.ModuleDict({"model": model}))  # LogitsOf's keys
    assert (submission.name, submission.source) == ("hf-tiny-vit", f"hf:{repo}")
    offline = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from harness.adapters import load_target; print(load_target('hf:{repo}').hub_weights)",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": dead_endpoint()},
    )
    assert offline.stdout.strip() == repr(submission.hub_weights), offline.stderr
    with pytest.raises(HarnessError, match=f"^hf: the Hub model repo {repo} has no revision 'v2'$"):
        load_target(f"hf:{repo}", revision="v2")
    with pytest.raises(HarnessError, match="is a folder: --revision applies to a Hub repo"):
        load_target(f"hf:{tmp_path / 'vit'}", revision=commit)


def test_an_open_clip_tag_fetches_its_hub_weights(hub_server, tmp_path, monkeypatch):
    import open_clip
    from open_clip import pretrained as registry
    from safetensors.torch import save_file

    from clip_fixtures import tiny_open_clip

    classes = ["cat", "dog", "car"]
    clip, from_file = tiny_open_clip(tmp_path, classes)  # registers cood-tiny-clip; its weights as a file
    save_file(clip.state_dict(), tmp_path / "open_clip_model.safetensors")
    repo, api = "cood-tester/tiny-clip", HfApi(endpoint=hub_server)
    api.create_repo(repo)
    commit = api.upload_file(
        path_or_fileobj=tmp_path / "open_clip_model.safetensors",
        path_in_repo="open_clip_model.safetensors",
        repo_id=repo,
    ).oid
    # a pretrained tag, as open_clip registers them: its Hub repo (trailing '/': open_clip's default file name)
    save_file({"x": torch.zeros(2)}, tmp_path / "broken.safetensors")
    api.create_repo(f"{repo}-broken")
    api.upload_file(
        path_or_fileobj=tmp_path / "broken.safetensors", path_in_repo="w.safetensors", repo_id=f"{repo}-broken"
    )
    tags = {"cood": registry._pcfg(hf_hub=f"{repo}/"), "broken": registry._pcfg(hf_hub=f"{repo}-broken/w.safetensors")}
    monkeypatch.setitem(registry._PRETRAINED, "cood-tiny-clip", tags)
    assert open_clip.get_pretrained_cfg("cood-tiny-clip", "cood")["hf_hub"] == f"{repo}/"
    fetched = load_target("open_clip:cood-tiny-clip/cood", num_classes_expected=3, classnames=classes)
    assert fetched.hub_weights == {"repo": repo, "revision": commit, "file": "open_clip_model.safetensors"}
    assert fetched.weights_sha256 == from_file.weights_sha256  # the same weights as from the file, and head
    assert fetched.file_sha256 == file_sha256(tmp_path / "open_clip_model.safetensors")
    with pytest.raises(HarnessError, match=f"^open_clip: cannot load w.safetensors of {repo}-broken: "):
        load_target("open_clip:cood-tiny-clip/broken", classnames=classes)
    with pytest.raises(HarnessError, match=r"^open_clip: cood-tiny-clip \(no /TAG\) has no weights on the Hugging"):
        load_target("open_clip:cood-tiny-clip", classnames=classes)
