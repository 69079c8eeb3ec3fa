"""The dataset card: YAML that parses, licence fields per kind of benchmark, the paper's citation, one loading
example per config that runs, and the repo id in the card that publishing uploads (the local folder unchanged)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import PIL.Image
import pytest
import yaml
from huggingface_hub import DatasetCard, HfApi, hf_hub_download
from typer.testing import CliRunner

from dataset_builder.benchmark import Benchmark
from dataset_builder.card import CITATION, LOCAL_PATH, add_levels, card_text, licence
from dataset_builder.cli import app
from dataset_builder.levels import level_table
from dataset_builder.manifest import load_manifest
from dataset_builder.publish import publish
from image_fixtures import write_class

REPO = "cood/card-glyphs"
CONFIG = "tiny-cnn__softmax"
POOL_ESTIMATION = 48 * (24 - 8)  # tiny_glyphs: 48 pool classes, 24 images each, 8 of them test


@pytest.fixture(scope="module")
def bench(tiny_glyphs, tmp_path_factory) -> Path:
    """A copy of the tiny glyph benchmark with one reference level manifest (11 levels of 36 classes over 48)."""
    root = tmp_path_factory.mktemp("card") / "glyphs"
    shutil.copytree(tiny_glyphs, root)
    ids = Benchmark.open(root).ood_classes["id"].tolist()
    n = len(ids) - 36 + 1
    starts = [(level * n) // 10 for level in range(10)] + [n - 1]
    table = level_table(
        [list(range(s, s + 36)) for s in starts],
        [0.01 * i for i in range(len(ids))],
        [0.01 * s for s in starts],
        [level / 10 for level in range(11)],
        ids,
    )
    table.to_parquet(root.parent / "levels.parquet")
    add_levels(root, root.parent / "levels.parquet", "tiny/cnn", "softmax")
    return root


def front_matter(text: str) -> dict:
    return yaml.safe_load(text.split("---\n")[1])


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def run_example(code: str, **replace: str) -> dict:
    for old, new in replace.items():
        code = code.replace(old, new)
    namespace: dict = {}
    exec(compile(code, "<card example>", "exec"), namespace)
    return namespace


def test_the_card_yaml_parses_with_the_glyph_licence_and_the_configs(bench):
    text = (bench / "README.md").read_text()
    card = DatasetCard.load(bench / "README.md")
    meta = front_matter(text)
    assert card.data.to_dict()["configs"] == meta["configs"]
    assert [c["config_name"] for c in meta["configs"]] == ["pool", "id", CONFIG] + [
        f"{CONFIG}__level_{i:02d}" for i in range(11)
    ]
    assert (meta["license"], meta["license_name"]) == ("other", "dejavu-fonts-license")
    assert meta["license_link"].startswith("https://dejavu-fonts.github.io/")
    assert "cood-bench" in meta["tags"] and "arxiv:2302.11893" in meta["tags"]
    assert "DejaVu fonts shipped with matplotlib" in card.text


def test_the_card_cites_the_paper(bench):
    text = (bench / "README.md").read_text()
    assert CITATION in text and "```bibtex\n@inproceedings{galil2023framework," in text
    assert all(
        f in CITATION
        for f in ("Galil, Ido and Dabbah, Mohammed and El-Yaniv, Ran", "year          = {2023}", "2302.11893")
    )
    assert re.fullmatch(r"@inproceedings\{galil2023framework,\n(  \w+ += \{[^{}]*\},?\n)+\}\n?", CITATION), (
        CITATION
    )  # one flat entry


def test_licence_fields_per_kind_of_benchmark():
    def manifest(**source):
        return {"benchmark": {"id": "x"}, "source": source}

    fields, text = licence(manifest(kind="imagenet"))
    assert fields == {
        "license": "other",
        "license_name": "imagenet-terms-of-access",
        "license_link": "https://image-net.org/download.php",
    }
    assert "ImageNet terms of access" in text and "non-commercial" in text
    assert licence(manifest(kind="glyphs"))[0]["license_name"] == "dejavu-fonts-license"
    fields, text = licence(manifest(kind="folder"))
    assert fields == {"license": "unknown"} and "unknown, see the source" in text
    assert licence(manifest(kind="folder", license="cc-by-4.0"))[0] == {"license": "cc-by-4.0"}
    assert licence(manifest(kind="folder", license="https://example.org/terms"))[0] == {
        "license": "other",
        "license_name": "source-license",
        "license_link": "https://example.org/terms",
    }
    assert licence({"benchmark": {"id": "glyphs"}})[0]["license_name"] == "dejavu-fonts-license"  # no source: the id


def test_a_folder_benchmark_records_the_licence_given_to_the_builder(tmp_path):
    for cid in ("cat", "dog"):
        write_class(tmp_path / "id", cid, 2)
    for cid in ("ant", "bee"):
        write_class(tmp_path / "ood", cid, 4)
    args = [
        "folder",
        "--id",
        str(tmp_path / "id"),
        "--ood",
        str(tmp_path / "ood"),
        "--images-per-class",
        "4",
        "--test-fraction",
        "0.25",
        "--min-images",
        "4",
        "--workers",
        "1",
    ]
    runner = CliRunner()
    for out, extra in (("with", ["--license", "cc-by-4.0"]), ("without", [])):
        result = runner.invoke(app, [args[0], str(tmp_path / out), *args[1:], *extra])
        assert result.exit_code == 0, result.output
    assert load_manifest(tmp_path / "with")[0]["source"] == {"kind": "folder", "license": "cc-by-4.0"}
    assert front_matter((tmp_path / "with" / "README.md").read_text())["license"] == "cc-by-4.0"
    assert load_manifest(tmp_path / "without")[0]["source"] == {"kind": "folder"}
    text = (tmp_path / "without" / "README.md").read_text()
    assert front_matter(text)["license"] == "unknown" and "unknown, see the source" in text


def test_the_local_examples_are_plain_load_dataset_calls_and_they_run(bench):
    text = (bench / "README.md").read_text()
    assert "<repo>" not in text and '<model>__<kappa>"' not in text
    pool_block, id_block, level_block, any_level_block = python_blocks(text)
    assert f'load_dataset("{LOCAL_PATH}", "pool", split="ood_estimation", streaming=True)' in pool_block
    assert f'load_dataset("{LOCAL_PATH}", "id", split="id_test")' in id_block  # tiny_glyphs has no id_train
    assert "rename" not in id_block and 'train.features["label"].names' in id_block  # the recipes' columns as loaded
    assert f'load_dataset("{LOCAL_PATH}", "{CONFIG}__level_07", split="level_07")' in level_block
    assert f'load_dataset("{LOCAL_PATH}", "{CONFIG}", split="level_07", streaming=True)' in level_block
    assert all("webdataset" not in b and "dataset_builder" not in b for b in (pool_block, level_block))
    assert f'load_level("{LOCAL_PATH}", "tiny-cnn", "softmax", 7)' in any_level_block
    pool = run_example(pool_block, **{LOCAL_PATH: str(bench)})
    assert sum(1 for _ in pool["pool"]) == POOL_ESTIMATION
    assert pool["class_id"] == Benchmark.open(bench).ood_classes["id"].iloc[pool["label"] - 36]
    assert isinstance(pool["image"], PIL.Image.Image) and type(pool["label"]) is int
    example = run_example(id_block, **{LOCAL_PATH: str(bench)})
    train, ids = example["train"], Benchmark.open(bench).id_classes
    assert len(train) == 36 * 8 and sorted(set(train["label"])) == list(range(36))
    assert isinstance(train[0]["image"], PIL.Image.Image) and example["names"][:36] == ids["name"].tolist()
    level = run_example(level_block, **{LOCAL_PATH: str(bench)})
    assert len(level["level"]) == 36 * 8
    assert sorted(r["key"] for r in level["stream"]) == sorted(level["level"]["key"])
    assert len(run_example(any_level_block, **{LOCAL_PATH: str(bench)})["level"]) == 36 * 8


def test_publish_uploads_a_card_that_names_the_repo_and_leaves_the_folder_as_it_is(bench, hub_server):
    before = {p: (bench / p).read_bytes() for p in ("README.md", "manifest.json")}
    sha = publish(bench, REPO, tag="1.0.0", endpoint=hub_server)
    assert {p: (bench / p).read_bytes() for p in before} == before

    path = hf_hub_download(REPO, "README.md", repo_type="dataset", revision="1.0.0")
    text = Path(path).read_text()
    assert text == card_text(bench, repo_id=REPO, revision="1.0.0")
    assert front_matter(text)["configs"] == front_matter(before["README.md"].decode())["configs"]
    assert LOCAL_PATH not in text and CITATION in text
    pool_block, id_block, level_block, any_level_block = python_blocks(text)
    assert f'load_dataset("{REPO}", "pool", split="ood_estimation", revision="1.0.0", streaming=True)' in pool_block
    assert f'load_dataset("{REPO}", "id", split="id_test", revision="1.0.0")' in id_block
    assert (
        run_example(id_block)["train"]["label"]
        == run_example(id_block, **{REPO: str(bench), ', revision="1.0.0"': ""})["train"]["label"]
    )
    assert f'load_dataset("{REPO}", "{CONFIG}__level_07", split="level_07", revision="1.0.0")' in level_block
    assert f'load_dataset("{REPO}", "{CONFIG}", split="level_07", revision="1.0.0", streaming=True)' in level_block
    assert f'load_level("{REPO}", "tiny-cnn", "softmax", 7, revision="1.0.0")' in any_level_block
    assert sum(1 for _ in run_example(pool_block)["pool"]) == POOL_ESTIMATION
    level = run_example(level_block)
    assert len(level["level"]) == 36 * 8 and sorted(r["key"] for r in level["stream"]) == sorted(level["level"]["key"])
    assert len(run_example(any_level_block)["level"]) == 36 * 8

    api = HfApi(endpoint=hub_server)
    commits = len(api.list_repo_commits(REPO, repo_type="dataset"))
    assert publish(bench, REPO, tag="1.0.0", endpoint=hub_server) == sha  # the rewritten card is what the tag holds
    head = publish(bench, REPO, tag="1.0.1", endpoint=hub_server)  # a new tag: only the card changes
    assert len(api.list_repo_commits(REPO, repo_type="dataset")) == commits + 1 and head != sha
    assert (
        'revision="1.0.1"'
        in Path(hf_hub_download(REPO, "README.md", repo_type="dataset", revision="1.0.1")).read_text()
    )
