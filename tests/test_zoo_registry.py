"""The zoo registry: a kind added by one module and its entry point alone reaches the command line's help and errors,
the harness's loading and the leaderboard's request validation."""

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from harness.adapters import load_target
from harness.errors import HarnessError
from harness.options import check_target, misplaced_revision
from harness.zoo import zoo_kinds
from leaderboard import requests as queue
from leaderboard.errors import LeaderboardError

CNN = Path(__file__).resolve().parents[1] / "examples" / "glyph_cnn.py"

ADAPTER = """
import numpy as np
import torch
from harness.adapters.weights import load_weights
from harness.submission import Submission


def transform(image):
    return torch.from_numpy(np.asarray(image.convert("RGB").resize((4, 4)), dtype=np.float32) / 255).permute(2, 0, 1)


def tiny_target(target):
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, target.num_classes))
    sha = load_weights(model, target.weights if target.weights else f"{target.name}/w.safetensors")
    name = target.name.rsplit("/", 1)[-1]
    return Submission(name=f"tiny-{name}", model=model.eval(), transform=transform, channels=3,
                      preprocessing={"input_size": [3, 4, 4]}, source=f"tiny:{name}", file_sha256=sha)
"""


@pytest.fixture
def register(tmp_path, monkeypatch):
    """A function that installs, for this test only, a distribution with the module ``tiny_zoo`` and the given
    ``entry_points.txt``; returns its folder."""

    def install(entry_points: str):
        (tmp_path / "tiny_zoo.py").write_text(ADAPTER)
        info = tmp_path / "tiny_zoo-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-zoo\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(entry_points)
        monkeypatch.syspath_prepend(str(tmp_path))
        zoo_kinds.cache_clear()
        return tmp_path

    yield install
    zoo_kinds.cache_clear()
    sys.modules.pop("tiny_zoo", None)


@pytest.fixture
def registered(register):
    """A weights-file kind ``tiny`` and a folder kind ``tinydir``."""
    return register(
        "[cood_bench.zoo]\ntiny = tiny_zoo:tiny_target\n[cood_bench.zoo_folders]\ntinydir = tiny_zoo:tiny_target\n"
    )


def harness_cli(*args, path) -> subprocess.CompletedProcess:
    """``cood-harness ARGS`` with ``path`` on the import path."""
    return subprocess.run(
        [sys.executable, "-c", "from harness.cli import main; main()", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(path)},
    )


def listed(text: str, before: str, after: str) -> list[str]:
    """The comma-separated kinds ``text`` lists between ``before`` and ``after``."""
    found = re.search(re.escape(before) + r"(.*?)" + re.escape(after), text)
    assert found, text
    return found[1].split(", ")


def test_before_registration_the_kind_is_refused(tmp_path):
    assert "tiny" not in zoo_kinds()
    with pytest.raises(LeaderboardError, match=r"^target 'tiny:net': give ") as refused:
        queue.parse_target("tiny:net", "org/weights", "w.safetensors")
    assert "tiny:<name>" not in listed(str(refused.value), "give ", " (with --weights")
    with pytest.raises(
        HarnessError, match=r"^submission file tiny:net not found, and tiny: is no zoo target kind \("
    ) as no:
        check_target("tiny:net", str(tmp_path / "w.safetensors"))
    assert listed(str(no.value), "kind (", ")") == [f"{kind}:" for kind in zoo_kinds()]


def test_a_registered_kind_reaches_the_command_line(registered):
    done = harness_cli("submit", "--help", path=registered)
    assert done.returncode == 0, done.stderr
    shown = " ".join(done.stdout.split())
    assert "tiny:NAME" in listed(shown, "or a model-zoo target: ", " (with --weights)")
    assert "tinydir:FOLDER" in listed(shown, "(with --weights) or ", ".")
    assert "tiny:" in listed(shown.replace(" and ", ", "), ".bin) for ", " targets.")
    done = harness_cli("submit", "tiny:net", path=registered)
    assert (done.returncode, done.stderr) == (
        2,
        "error: tiny:net needs a weights file (--weights); nothing is downloaded\n",
    )
    done = harness_cli("submit", "keras:net", path=registered)
    assert done.stderr.startswith("error: submission file keras:net not found, and keras: is no zoo target kind (")
    assert {"tiny:", "tinydir:"} <= set(listed(done.stderr, "kind (", ")"))
    done = harness_cli("submit", CNN, "--weights", "w.pt", path=registered)
    assert done.returncode == 2 and done.stderr.endswith(f" targets, not to the file {CNN}\n")
    kinds = listed(done.stderr.replace(" and ", ", "), "--weights applies to ", " targets")
    assert "tiny:" in kinds and "tinydir:" not in kinds


def test_a_registered_kind_is_built_by_its_adapter(registered):
    torch.manual_seed(0)
    layer = torch.nn.Linear(48, 5)
    state = {"1.weight": layer.weight.detach(), "1.bias": layer.bias.detach()}
    (registered / "net").mkdir()
    save_file(state, registered / "net" / "w.safetensors")
    with_file = load_target("tiny:net", weights=str(registered / "net" / "w.safetensors"), num_classes_expected=5)
    in_folder = load_target(f"tinydir:{registered / 'net'}", num_classes_expected=5)
    image = torch.rand(1, 3, 4, 4)
    for submission in (with_file, in_folder):
        assert submission.name == "tiny-net"
        torch.testing.assert_close(submission.model(image), layer(image.flatten(1)))
    np.testing.assert_array_equal(with_file.transform(Image.new("RGB", (8, 8), (255, 0, 0)))[:, 0, 0], [1.0, 0.0, 0.0])
    with pytest.raises(HarnessError, match=r"^tinydir: targets take their weights from the folder; drop --weights$"):
        load_target(f"tinydir:{registered / 'net'}", weights="w.pt")


def test_a_registered_kind_is_accepted_by_the_request_queue(registered):
    assert queue.parse_target("tiny:net", "org/weights", "w.safetensors") == {
        "target": "tiny:net",
        "repo": "org/weights",
        "file": "w.safetensors",
    }
    assert queue.parse_target("tinydir:org/net", None, None) == {
        "target": "tinydir:org/net",
        "repo": "org/net",
        "file": None,
    }
    with pytest.raises(LeaderboardError, match=r"^target 'tinydir:org/net' is its own Hub repo \(tinydir:<owner>/"):
        queue.parse_target("tinydir:org/net", "org/weights", "w.pt")
    with pytest.raises(LeaderboardError, match=r"^tiny: targets need --weights <owner>/<name>"):
        queue.parse_target("tiny:net", None, None)
    usage = queue.target_usage()
    assert "tiny:<name>" in listed(usage, "", " (with --weights and --file)")
    assert "tinydir:<owner>/<name>" in listed(usage, "--file) or ", " (a model repo)")


def test_the_harness_and_the_leaderboard_read_the_same_registration(registered):
    kinds = queue.zoo_kinds()
    assert {name: kind.folder for name, kind in zoo_kinds().items()} == kinds
    assert (kinds["tiny"], kinds["tinydir"]) == (False, True)


def test_a_kind_registered_twice_is_an_error(register):
    register("[cood_bench.zoo_folders]\ntimm = tiny_zoo:tiny_target\n")
    with pytest.raises(HarnessError, match=r"^zoo kind 'timm' is registered twice \(harness\.adapters\.timm_models:"):
        zoo_kinds()


def test_a_kind_naming_no_adapter_is_an_error(register):
    register("[cood_bench.zoo]\nbroken = tiny_zoo:no_such_target\n")
    with pytest.raises(HarnessError, match=r"^zoo kind 'broken' \(tiny_zoo:no_such_target\) failed to load: Attr"):
        load_target("broken:net", weights="w.pt")


def test_a_kinds_abilities_come_from_its_entry_point(register):
    folder = register(
        "[cood_bench.zoo]\ntiny = tiny_zoo:tiny_target [pretrained, hub]\nlocal = tiny_zoo:tiny_target [pretrained]\n"
    )
    kinds = zoo_kinds()
    assert [(kinds[k].pretrained, kinds[k].hub) for k in ("tiny", "local")] == [(True, True), (True, False)]
    check_target("tiny:net", None, "main")  # no weights file: fetched from the Hub at the revision
    check_target("local:net")
    with pytest.raises(HarnessError, match=r"^--revision applies to the pretrained weights of ") as refused:
        check_target("local:net", None, "main")
    fetched = listed(str(refused.value).replace(" and ", ", "), " weights of ", " targets given no weights file")
    assert fetched == [f"{name}:" for name, kind in kinds.items() if kind.hub] and "tiny:" in fetched
    assert str(refused.value) == misplaced_revision()
    done = harness_cli("submit", "--help", path=folder)
    shown = " ".join(done.stdout.replace("│", " ").split()).replace(" or ", ", ")
    assert "tiny:" in listed(shown, "Without it, ", " targets fetch their pretrained weights from the Hugging Face Hub")
    assert "local:" in listed(shown, "the cache only), ", " targets theirs through")
    assert "tiny:" in listed(shown, "pretrained weights of ", " targets without --weights")


@pytest.mark.parametrize(
    ("abilities", "refused"),
    [
        ("[pretrianed]", r"declares unknown abilities pretrianed; known: pretrained, hub$"),
        ("[hub]", r"declares hub without pretrained$"),
    ],
)
def test_a_kind_declaring_unknown_abilities_is_an_error(register, abilities, refused):
    register(f"[cood_bench.zoo]\ntiny = tiny_zoo:tiny_target {abilities}\n")
    with pytest.raises(
        HarnessError, match=rf"^zoo kind 'tiny' \(tiny_zoo:tiny_target {re.escape(abilities)}\) {refused}"
    ):
        zoo_kinds()
