"""Hostile zoo targets served by the local Hub: a repo's own code never runs (a ``y`` on stdin answers nothing), a
configuration is checked before any model is built (its size, JSON, the parameters and modules it implies), and a
pickle weights file is refused in one line of the harness's own; each as exit 2 on the command line."""

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from huggingface_hub import CommitOperationAdd, HfApi, try_to_load_from_cache

from harness.adapters import load_target
from harness.adapters.configs import MAX_CONFIG_BYTES, MAX_MODULES, MAX_PARAMETERS
from harness.adapters.hf_models import MAX_INPUT_SIDE, PROCESSOR
from harness.errors import HarnessError

TINY_VIT = {  # no labels: transformers' two, left to the trial forward pass
    "model_type": "vit", "image_size": 32, "patch_size": 8, "hidden_size": 32, "num_hidden_layers": 1,
    "num_attention_heads": 2, "intermediate_size": 37,
}  # fmt: skip
HUGE_VIT = {**TINY_VIT, "image_size": 224, "patch_size": 16, "hidden_size": 8192, "num_hidden_layers": 12,
            "num_attention_heads": 64, "intermediate_size": 32768}  # fmt: skip
TINY_PROCESSOR = {"image_processor_type": "ViTImageProcessor", "size": {"height": 32, "width": 32}}
NO_CODE = "refused: the harness runs no code from a model repo"
PEAK_RSS = """import atexit, re, sys
from harness.cli import main
out = sys.argv.pop(1)
peak = lambda: int(re.search(r"VmHWM:\\s*(\\d+) kB", open("/proc/self/status").read()).group(1)) * 1024
atexit.register(lambda: open(out, "w").write(str(peak())))
main()
"""  # the command line; at its exit (which runs atexit's), its peak resident memory in bytes to the file argv[1] names
# (its own: ru_maxrss would start from the test process's peak, which a process started by vfork and exec inherits)


class Payload:
    """Unpickled, it opens (creates) ``marker``: a pickle that runs code."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def vit_parameters(config: dict) -> int:
    """The parameters of transformers' ViTForImageClassification for ``config`` (timm's VisionTransformer has as many),
    by hand: the patch embedding, the class token and position embeddings, each layer's attention, MLP and two norms,
    the final norm, the head."""
    h, i, labels = config["hidden_size"], config["intermediate_size"], config.get("num_labels", 2)
    patches = (config["image_size"] // config["patch_size"]) ** 2
    embeddings = 3 * config["patch_size"] ** 2 * h + h + h + (patches + 1) * h
    layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 4 * h
    return embeddings + config["num_hidden_layers"] * layer + 2 * h + h * labels + labels


def commit(api: HfApi, repo: str, files: dict[str, bytes | str]) -> str:
    """``files`` (name: content) committed to the model repo ``repo``; its commit's sha."""
    api.create_repo(repo, exist_ok=True)
    operations = [
        CommitOperationAdd(path_in_repo=name, path_or_fileobj=data.encode() if isinstance(data, str) else data)
        for name, data in files.items()
    ]
    return api.create_commit(repo, operations=operations, commit_message="hostile").oid


def harness_cli(*args, stdin: str | None = None, script: str = "from harness.cli import main; main()"):
    return subprocess.run(
        [sys.executable, "-c", script, *map(str, args)], input=stdin, capture_output=True, text=True, timeout=300
    )


def submit_args(target: str, bench: Path, out: Path) -> list:
    return ["submit", target, "--benchmark", bench, "--out", out, "--device", "cpu", "-k", "softmax", "--quiet"]


def remote_code_repo(api: HfApi, repo: str, marker: Path) -> None:
    """A repo whose config.json maps the Auto classes to its own module, which writes ``marker`` when imported."""
    code = f"open({str(marker)!r}, 'w').write('the repo code ran')\nfrom transformers import PretrainedConfig\n"
    code += "class CustomConfig(PretrainedConfig):\n    model_type = 'cood-custom'\n"
    auto_map = {"AutoConfig": "custom.CustomConfig", "AutoModelForImageClassification": "custom.CustomModel"}
    config = {**TINY_VIT, "model_type": "cood-custom", "auto_map": auto_map}
    commit(api, repo, {"config.json": json.dumps(config), "custom.py": code})


def test_remote_code_never_runs_even_with_yes_on_stdin(hub_server, tiny_glyphs, tmp_path):
    repo, marker = "cood-tester/remote-code", tmp_path / "remote-code-ran"
    remote_code_repo(HfApi(endpoint=hub_server), repo, marker)
    # the attack: transformers itself, asked without trust_remote_code, prompts and runs the repo's code on a `y`
    library = harness_cli(stdin="y\n", script=f"import transformers; transformers.AutoConfig.from_pretrained({repo!r})")
    assert "Do you wish to run the custom code? [y/N]" in library.stdout and marker.read_text() == "the repo code ran"
    marker.unlink()
    done = harness_cli(*submit_args(f"hf:{repo}", tiny_glyphs, tmp_path / "out"), stdin="y\n")
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        f"error: hf: {repo}: config.json names code of its own (auto_map), {NO_CODE}\n",
    )
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_a_model_type_transformers_does_not_know_is_refused(hub_server, tmp_path):
    import transformers

    repo = "cood-tester/unknown-type"
    commit(HfApi(endpoint=hub_server), repo, {"config.json": json.dumps({**TINY_VIT, "model_type": "cood-custom"})})
    with pytest.raises(HarnessError) as caught:
        load_target(f"hf:{repo}")
    assert str(caught.value) == (
        f"hf: {repo}: config.json names the model_type 'cood-custom', which transformers {transformers.__version__} "
        f"does not know (a model with code of its own), {NO_CODE}"
    )
    folder = tmp_path / "custom"  # a folder saved with its own code is refused alike
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**TINY_VIT, "auto_map": {"AutoConfig": "custom.CustomConfig"}}))
    with pytest.raises(HarnessError, match=f"^hf: {folder}: config.json names code of its own \\(auto_map\\), "):
        load_target(f"hf:{folder}")


def test_the_stdin_of_a_library_prompt_is_closed(hub_server, tmp_path, monkeypatch):
    """open_clip loads the transformers text tower an architecture names with no trust_remote_code switch: the prompt
    that follows reads no answer (stdin is closed while a target builds), shows nothing, and refuses."""
    import open_clip

    repo, marker = "cood-tester/text-tower-code", tmp_path / "text-tower-code-ran"
    remote_code_repo(HfApi(endpoint=hub_server), repo, marker)
    text = {"hf_model_name": repo, "hf_tokenizer_name": repo, "hf_proj_type": "linear", "hf_pooler_type": "mean_pooler",
            "hf_model_pretrained": False}  # fmt: skip
    vision = {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16}
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "cood-hf-text.json").write_text(
        json.dumps({"embed_dim": 16, "vision_cfg": vision, "text_cfg": text})
    )
    register = f"import open_clip; open_clip.add_model_config({str(tmp_path / 'cfg')!r}); "
    library = harness_cli(stdin="y\n", script=register + "open_clip.create_model('cood-hf-text')")
    assert "Do you wish to run the custom code? [y/N]" in library.stdout and marker.exists()  # the attack
    marker.unlink()
    open_clip.add_model_config(tmp_path / "cfg")
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    with pytest.raises(HarnessError, match=f"^open_clip: cannot build cood-hf-text: The repository {repo} contains"):
        load_target("open_clip:cood-hf-text", weights=str(tmp_path / "unread.pt"))
    assert not marker.exists() and sys.stdout.getvalue() == "" and sys.stdin.read() == "y\n"  # stdin left unread


def test_a_huge_config_is_refused_before_anything_is_allocated(hub_server, tiny_glyphs, tmp_path):
    repo = "cood-tester/huge-vit"
    commit(HfApi(endpoint=hub_server), repo, {"config.json": json.dumps(HUGE_VIT)})
    parameters = vit_parameters(HUGE_VIT)
    assert parameters == 9_672_908_802 > MAX_PARAMETERS  # 38.7 GB of float32 weights
    rss, start = tmp_path / "peak-rss", time.monotonic()
    done = harness_cli(rss, *submit_args(f"hf:{repo}", tiny_glyphs, tmp_path / "out"), script=PEAK_RSS)
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        f"error: hf: {repo}: its configuration describes a model of {parameters:,} parameters, over the cap of "
        f"{MAX_PARAMETERS:,}\n",
    )
    assert time.monotonic() - start < 120 and int(rss.read_text()) < 2 * 2**30  # torch and transformers loaded: ~0.8 GB
    assert try_to_load_from_cache(repo, "model.safetensors") is None


def test_the_buffers_a_config_implies_are_counted(hub_server):
    """A Swin window of 300 has few parameters and a relative-position index of 300**4 int64s (65 GB)."""
    swin = {"model_type": "swin", "image_size": 32, "patch_size": 4, "embed_dim": 8, "depths": [1], "num_heads": [1],
            "window_size": 300}  # fmt: skip
    repo = "cood-tester/swin-window"
    commit(HfApi(endpoint=hub_server), repo, {"config.json": json.dumps(swin)})
    embeddings = 3 * 4 * 4 * 8 + 8 + 2 * 8  # the patch convolution and its norm
    table = (2 * 300 - 1) ** 2  # the relative-position bias table of the one head
    block = 2 * 8 + 3 * (8 * 8 + 8) + table + (8 * 8 + 8) + 2 * 8 + (8 * 32 + 32) + (32 * 8 + 8)
    parameters = embeddings + block + 2 * 8 + 8 * 2 + 2  # then the final norm and the two-label head
    with pytest.raises(HarnessError) as caught:
        load_target(f"hf:{repo}")
    assert str(caught.value) == (
        f"hf: {repo}: its configuration describes a model of {parameters + 300**4:,} parameters, over the cap of "
        f"{MAX_PARAMETERS:,}"
    )


def test_a_config_that_is_not_a_json_object_is_refused_naming_the_repo(hub_server, tiny_glyphs, tmp_path):
    api, repo = HfApi(endpoint=hub_server), "cood-tester/not-json"
    commit(api, repo, {"config.json": "{'model_type': 'vit'"})
    done = harness_cli(*submit_args(f"hf:{repo}", tiny_glyphs, tmp_path / "out"))
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        f"error: hf: {repo}: config.json is not JSON: Expecting property name enclosed in double quotes: line 1 "
        "column 2 (char 1)\n",
    )
    assert os.environ["HF_HOME"] not in done.stderr
    commit(api, "cood-tester/json-list", {"config.json": json.dumps([TINY_VIT])})
    with pytest.raises(HarnessError, match="^hf: cood-tester/json-list: config.json holds a JSON list, not an object$"):
        load_target("hf:cood-tester/json-list")


def test_a_config_over_the_cap_is_refused_before_it_is_fetched(hub_server, tmp_path):
    repo, padding = "cood-tester/big-config", "x" * MAX_CONFIG_BYTES
    commit(HfApi(endpoint=hub_server), repo, {"config.json": json.dumps({**TINY_VIT, "padding": padding})})
    size = len(json.dumps({**TINY_VIT, "padding": padding}))
    with pytest.raises(HarnessError) as caught:
        load_target(f"hf:{repo}")
    assert str(caught.value) == (
        f"hf: {repo}: config.json is {size:,} bytes, over the cap of {MAX_CONFIG_BYTES:,} on a configuration"
    )
    assert try_to_load_from_cache(repo, "config.json") is None  # never fetched
    folder = tmp_path / "big"  # a folder's, from its size on disk
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**TINY_VIT, "padding": padding}))
    with pytest.raises(HarnessError, match=f"^hf: {folder}: config.json is {size:,} bytes, over the cap of "):
        load_target(f"hf:{folder}")


def test_a_processor_config_is_checked_before_the_weights_are_fetched(hub_server, tiny_glyphs, tmp_path):
    api, weights = HfApi(endpoint=hub_server), torch.zeros(1).numpy().tobytes()
    padded = json.dumps({**TINY_PROCESSOR, "padding": "x" * MAX_CONFIG_BYTES})
    hostile = {
        "big-processor": (padded, f"{PROCESSOR} is {len(padded):,} bytes, over the cap of {MAX_CONFIG_BYTES:,} on a "
                          "configuration"),
        "processor-code": (json.dumps({**TINY_PROCESSOR, "auto_map": {"AutoImageProcessor": "custom.P"}}),
                           f"{PROCESSOR} names code of its own (auto_map), {NO_CODE}"),
        "huge-input": (json.dumps({**TINY_PROCESSOR, "size": {"height": 10**9, "width": 32}}),
                       f"{PROCESSOR} asks for a size of 1000000000 pixels, outside 1 to {MAX_INPUT_SIDE:,}"),
        "no-processor": (None, f"holds no {PROCESSOR}"),
    }  # fmt: skip
    for name, (processor, why) in hostile.items():
        repo = f"cood-tester/{name}"
        files = {"config.json": json.dumps(TINY_VIT), "model.safetensors": weights}
        sha = commit(api, repo, files if processor is None else {**files, PROCESSOR: processor})
        at = {"big-processor": f"{repo}@{sha}:", "no-processor": f"the Hub model repo {repo}@{sha}"}.get(
            name, f"{repo}:"
        )
        done = harness_cli(*submit_args(f"hf:{repo}", tiny_glyphs, tmp_path / "out"))
        assert (done.returncode, done.stdout, done.stderr) == (2, "", f"error: hf: {at} {why}\n"), name
        assert try_to_load_from_cache(repo, "model.safetensors") is None  # refused before the weights are fetched
    assert try_to_load_from_cache("cood-tester/big-processor", PROCESSOR) is None  # nor the processor over the cap
    folder = tmp_path / "folder"  # a folder's alike
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_VIT))
    (folder / PROCESSOR).write_text(json.dumps({**TINY_PROCESSOR, "crop_size": -3}))
    with pytest.raises(HarnessError) as caught:
        load_target(f"hf:{folder}")
    assert str(caught.value) == f"hf: {folder}: {PROCESSOR} asks for a crop_size of -3 pixels, outside 1 to 4,096"
    assert not (tmp_path / "out").exists()


def test_a_timm_repo_config_is_sized_on_the_meta_device(hub_server, tmp_path):
    api = HfApi(endpoint=hub_server)
    huge = {"architecture": "vit_base_patch16_224", "pretrained_cfg": {},
            "model_args": {"embed_dim": 8192, "depth": 12, "num_heads": 64}}  # fmt: skip
    commit(api, "cood-tester/timm-huge", {"config.json": json.dumps(huge)})
    refusal = (
        f"timm: cood-tester/timm-huge: its configuration describes a model of "
        f"{vit_parameters({**HUGE_VIT, 'num_labels': 1000}):,} parameters, over the cap of {MAX_PARAMETERS:,}"
    )
    for weights in (None, str(tmp_path / "unread.safetensors")):  # its pretrained weights, or a file given
        with pytest.raises(HarnessError) as caught:
            load_target("timm:hf-hub:cood-tester/timm-huge", weights=weights)
        assert str(caught.value) == refusal
    deep = {"architecture": "vit_base_patch16_224", "pretrained_cfg": {},
            "model_args": {"embed_dim": 8, "depth": 1_000_000, "num_heads": 1}}  # fmt: skip
    commit(api, "cood-tester/timm-deep", {"config.json": json.dumps(deep)})  # a million tiny blocks
    start = time.monotonic()
    with pytest.raises(HarnessError) as caught:
        load_target("timm:hf-hub:cood-tester/timm-deep")
    assert str(caught.value) == (
        f"timm: cood-tester/timm-deep: its configuration describes a model of over {MAX_MODULES:,} modules"
    )
    assert time.monotonic() - start < 60  # the build stopped at the cap, not after a million blocks
    commit(api, "cood-tester/timm-not-json", {"config.json": "architecture: resnet18"})
    with pytest.raises(HarnessError, match="^timm: cood-tester/timm-not-json: config.json is not JSON: Expecting "):
        load_target("timm:hf-hub:cood-tester/timm-not-json")
    for repo in ("cood-tester/timm-huge", "cood-tester/timm-deep"):
        assert try_to_load_from_cache(repo, "model.safetensors") is None


def test_a_pickle_weights_file_is_refused_in_one_line_of_our_own(hub_server, tiny_glyphs, tmp_path):
    api, repo, marker = HfApi(endpoint=hub_server), "cood-tester/pickled-vit", tmp_path / "payload-ran"
    torch.save({"vit.embeddings.cls_token": torch.zeros(1, 1, 32), "payload": Payload(marker)}, tmp_path / "w.bin")
    torch.load(tmp_path / "w.bin", weights_only=False)  # the payload is live: unpickled unsafely, it runs
    assert marker.exists()
    marker.unlink()
    sha = commit(
        api,
        repo,
        {
            "config.json": json.dumps(TINY_VIT),
            PROCESSOR: json.dumps(TINY_PROCESSOR),
            "pytorch_model.bin": (tmp_path / "w.bin").read_bytes(),
        },
    )
    done = harness_cli(*submit_args(f"hf:{repo}", tiny_glyphs, tmp_path / "out"))
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        f"error: hf: pytorch_model.bin of {repo}@{sha[:12]} refused by torch.load(weights_only=True): it holds more "
        "than tensors, or is no torch file (GLOBAL io.open)\n",
    )
    assert not marker.exists() and "weights_only=False" not in done.stderr
    # timm's Hub weights (it wraps torch's refusal in its own error), and a weights file given
    timm_repo = "cood-tester/pickled-timm"
    timm_sha = commit(
        api,
        timm_repo,
        {
            "config.json": json.dumps({"architecture": "test_efficientnet"}),
            "pytorch_model.bin": (tmp_path / "w.bin").read_bytes(),
        },
    )
    with pytest.raises(HarnessError) as caught:
        load_target(f"timm:hf-hub:{timm_repo}")
    assert str(caught.value) == (
        f"timm: the weights of {timm_repo}@{timm_sha[:12]} refused by torch.load(weights_only=True): it holds more "
        "than tensors, or is no torch file (GLOBAL io.open)"
    )
    done = harness_cli(
        *submit_args("timm:test_efficientnet", tiny_glyphs, tmp_path / "out"), "--weights", tmp_path / "w.bin"
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        f"error: weights file {tmp_path / 'w.bin'} refused by torch.load(weights_only=True): it holds more than "
        "tensors, or is no torch file (GLOBAL io.open)\n",
    )
    assert not marker.exists() and "weights_only=False" not in caught.exconly() + done.stderr
