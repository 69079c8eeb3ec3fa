"""The shard reader of the data path: the same samples as webdataset's tar reader, corrupt shards refused in one
line."""

import io
import tarfile

import pytest

from dataset_builder.benchmark import Benchmark
from dataset_builder.errors import BenchmarkError
from dataset_builder.glyphs.build import build
from dataset_builder.shards import iter_samples, read_shard, samples_from_bytes
from glyph_fixtures import TINY


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reader") / "glyphs"
    build(folder, progress=False, **TINY)
    return Benchmark.open(folder)


def test_the_same_samples_as_the_tar_reader(tiny):
    shards = [s for split in ("id_test", "ood_estimation", "ood_test") for s in tiny.shards(split)]
    assert len(shards) > 3
    for shard in shards:
        path = tiny.shard_path(shard)
        assert list(read_shard(path)) == list(iter_samples(path))


def _tar(members, fmt=tarfile.PAX_FORMAT) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_long_names_folders_and_formats(tmp_path):
    long = "g" * 130
    members = [(f"{long}/a.json", b"{}"), (f"{long}/a.jpg", b"\xff" * 700), ("b.json", b"[]"), ("b.jpg", b"")]
    for fmt in (tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT):
        if fmt == tarfile.USTAR_FORMAT:
            members = [("x/" + n.split("/")[-1] if "/" in n else n, d) for n, d in members]
        data = _tar(members, fmt)
        path = tmp_path / f"s{fmt}.tar"
        path.write_bytes(data)
        assert list(samples_from_bytes(data)) == list(iter_samples(path))


def test_corrupt_shards_are_one_line_errors(tmp_path):
    data = bytearray(_tar([("a.json", b"{}"), ("a.png", b"p" * 2000)]))
    truncated = tmp_path / "truncated.tar"
    truncated.write_bytes(bytes(data[:1500]))
    with pytest.raises(BenchmarkError, match=r"corrupt shard .*truncated.tar: a truncated tar header at byte 1024"):
        list(read_shard(truncated))
    truncated.write_bytes(bytes(data[:2000]))
    with pytest.raises(
        BenchmarkError, match=r"corrupt shard .*truncated.tar: the member at byte 1024 runs past the end"
    ):
        list(read_shard(truncated))
    data[1030] ^= 0xFF  # a name byte of the second header: its checksum no longer matches
    with pytest.raises(BenchmarkError, match=r"bad tar header checksum at byte 1024"):
        list(samples_from_bytes(bytes(data), "bent.tar"))
    empty = tmp_path / "empty.tar"
    empty.write_bytes(b"")
    with pytest.raises(BenchmarkError, match=r"corrupt shard .*empty.tar"):
        list(read_shard(empty))
    link = _tar([("a.json", b"{}")])
    header = bytearray(link[:512])
    header[156:157] = b"2"  # a symlink member
    header[148:156] = b"%06o\0 " % (sum(header[:148]) + 256 + sum(header[156:]))
    with pytest.raises(BenchmarkError, match=r"member type b'2' at byte 0 is not a file"):
        list(samples_from_bytes(bytes(header) + link[512:]))
