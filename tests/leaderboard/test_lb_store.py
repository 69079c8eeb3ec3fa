import hashlib
import json
import multiprocessing
import threading

import pandas as pd
import pytest

from lb_records import GLYPHS, record
from leaderboard import store
from leaderboard.errors import LeaderboardError
from leaderboard.schema import entry_id
from leaderboard.store import add_files, add_records, current_table, init_leaderboard, load_config
from leaderboard.table import CSV, PARQUET


def _snapshot(directory):
    """Every file under ``directory`` (except the lock) with its sha256."""
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


@pytest.fixture
def board(tmp_path):
    directory = tmp_path / "board"
    init_leaderboard(directory, GLYPHS)
    add_records(directory, [record()])
    return directory


def test_init_and_add(tmp_path):
    directory = tmp_path / "b"
    config = init_leaderboard(directory, GLYPHS, num_levels=11)
    assert config == {"format_version": 1, "benchmark": GLYPHS, "num_levels": 11}
    assert current_table(directory).empty
    ids = add_records(directory, [record(kappa="softmax"), record(kappa="entropy", aurocs=[0.9] * 11)])
    table = current_table(directory)
    assert table["entry_id"].tolist() == ids and table["seq"].tolist() == [1, 2]
    assert table["kappa"].tolist() == ["softmax", "entropy"]
    assert table["mean_ood_auroc"].tolist() == pytest.approx([0.85, 0.9])
    assert table["ood_auroc_l10"].tolist() == pytest.approx([0.75, 0.9])
    assert table["mean_fpr_at_95_tpr"].tolist() == pytest.approx([0.35, 0.35])
    assert table.loc[0, "manifest_sha256"] == GLYPHS["manifest_sha256"]
    csv = pd.read_csv(directory / CSV)
    assert csv["entry_id"].tolist() == ids
    with pytest.raises(LeaderboardError, match="is already a leaderboard"):
        init_leaderboard(directory, GLYPHS)
    with pytest.raises(LeaderboardError, match="benchmark.manifest_sha256: not a lowercase 64-digit hex sha256"):
        init_leaderboard(tmp_path / "c", {**GLYPHS, "manifest_sha256": "abc"})
    with pytest.raises(LeaderboardError, match=r"^num_levels: out of range \[2, 1000\]: 1$"):
        init_leaderboard(tmp_path / "c", GLYPHS, num_levels=1)
    with pytest.raises(LeaderboardError, match=r"^num_levels: out of range \[2, 1000\]: 1180591620717411303424$"):
        init_leaderboard(tmp_path / "c", GLYPHS, num_levels=2**70)
    assert not (tmp_path / "c" / "leaderboard.json").exists()


def test_files_are_stored_byte_for_byte(tmp_path, board):
    raw = json.dumps(record(kappa="energy"), indent=4, sort_keys=True).encode() + b"\n\n"
    path = tmp_path / "r.json"
    path.write_bytes(raw)
    [key] = add_files(board, [path])
    stored = board / "records" / f"000002-{key}.json"
    assert stored.read_bytes() == raw
    row = current_table(board).set_index("entry_id").loc[key]
    assert row["record_sha256"] == hashlib.sha256(raw).hexdigest()
    assert row["record_file"] == f"records/000002-{key}.json"


def test_create_from_first_record(tmp_path):
    directory = tmp_path / "new" / "board"
    add_records(directory, [record(num_levels=5)], create=True)
    assert load_config(directory)["num_levels"] == 5
    assert load_config(directory)["benchmark"] == GLYPHS


def test_not_a_leaderboard(tmp_path):
    with pytest.raises(LeaderboardError, match="is not a leaderboard"):
        add_records(tmp_path / "missing", [record()])
    assert not (tmp_path / "missing").exists()


def _mismatch(field, value):
    r = record(kappa="entropy")
    r["benchmark"][field] = value
    return r


REJECTED = [
    ("malformed", lambda: {"schema_version": 1}, "record 2: record: missing field 'benchmark'"),
    (
        "nan",
        lambda: record(kappa="entropy", aurocs=[float("nan")] * 11),
        "record 2: levels[0].ood_auroc: must be a finite number, got nan",
    ),
    (
        "out of range",
        lambda: record(kappa="entropy", aurocs=[1.5] * 11),
        "record 2: levels[0].ood_auroc: out of range [0, 1]: 1.5",
    ),
    (
        "levels",
        lambda: record(kappa="entropy", num_levels=10),
        "record 2: wrong number of levels: 10, this leaderboard uses 11",
    ),
    (
        "unknown benchmark",
        lambda: _mismatch("id", "imagenet"),
        "record 2: unknown benchmark 'imagenet'; this leaderboard holds 'glyphs'",
    ),
    (
        "revision",
        lambda: _mismatch("manifest_sha256", "cd" * 32),
        f"record 2: benchmark revision mismatch: benchmark.manifest_sha256 is '{'cd' * 32}',"
        f" this leaderboard holds '{'ab' * 32}'",
    ),
    (
        "version",
        lambda: _mismatch("version", "1.1.0"),
        "record 2: benchmark revision mismatch: benchmark.version is '1.1.0'",
    ),
    (
        "classes",
        lambda: _mismatch("num_ood_classes", 431),
        "record 2: benchmark revision mismatch: benchmark.num_ood_classes is 431",
    ),
]


@pytest.mark.parametrize(("bad", "message"), [(b, m) for _, b, m in REJECTED], ids=[n for n, _, _ in REJECTED])
def test_rejected_batch_writes_nothing(board, bad, message):
    before = _snapshot(board)
    with pytest.raises(LeaderboardError) as info:
        add_records(board, [record(kappa="max_logit"), bad()])
    assert str(info.value).startswith(message)
    assert _snapshot(board) == before
    assert len(current_table(board)) == 1


def test_duplicate_within_a_batch(board):
    lines = []
    ids = add_records(board, [record(kappa="entropy"), record(kappa="entropy")], say=lines.append)
    assert ids[0] == ids[1] and current_table(board)["kappa"].tolist() == ["softmax", "entropy"]
    assert lines == [
        f"record 2: entry {ids[0]} (model 'glyph_cnn', kappa entropy) is already in record 1 with the same results; "
        "skipped"
    ]
    warned = []
    ids = add_records(
        board, [record(kappa="energy"), record(kappa="energy", aurocs=[0.9] * 11)], say=pytest.fail, warn=warned.append
    )
    assert warned == [
        f"record 2: entry {ids[0]} (model 'glyph_cnn', kappa energy) differs from record 1 (model 'glyph_cnn') in "
        "levels[0].ood_auroc; both kept and shown as a conflict until a verified run settles it"
    ]
    rows = current_table(board).iloc[2:]
    assert rows["entry_id"].tolist() == ids and rows["conflict"].tolist() == ["conflict", "conflict"]
    assert rows["mean_ood_auroc"].tolist() == pytest.approx([0.85, 0.9])


def test_duplicate_of_stored_entry_names_its_file(board, capsys):
    before = _snapshot(board)
    rerun = {**record(), "created": "2026-12-03T10:00:00+00:00", "timings": {"total_s": 58.0}, "harness_version": "0.2"}
    [key] = add_records(board, [rerun])  # another run of the same model: other run details, the same results
    assert _snapshot(board) == before
    assert capsys.readouterr().err == (
        f"record 1: entry {key} (model 'glyph_cnn', kappa softmax) is already in 000001-{key}.json with the same "
        "results; skipped\n"
    )
    warned = []
    assert add_records(board, [record(acc=0.5)], warn=warned.append) == [key]
    assert warned == [
        f"record 1: entry {key} (model 'glyph_cnn', kappa softmax) differs from 000001-{key}.json (model "
        "'glyph_cnn') in id.acc; both kept and shown as a conflict until a verified run settles it"
    ]
    assert store.accepted_files(board) == [f"000001-{key}.json", f"000002-{key}.json"]
    assert current_table(board)["id_acc"].tolist() == [0.81, 0.5]


def test_malformed_json_file(tmp_path, board):
    path = tmp_path / "bad.json"
    path.write_text('{"schema_version": 1,')
    before = _snapshot(board)
    with pytest.raises(LeaderboardError, match=r"bad\.json: malformed JSON: "):
        add_files(board, [path])
    assert _snapshot(board) == before


def _add_many(directory, worker, count):
    for i in range(count):
        add_records(directory, [record(model=f"w{worker}-{i}", weights=f"{worker:02x}{i:02x}" * 16)])


def test_concurrent_adds_lose_nothing(board):
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_add_many, args=(board, w, 4)) for w in range(4)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(120)
    assert [p.exitcode for p in workers] == [0, 0, 0, 0]
    table = current_table(board)
    assert len(table) == 17
    assert sorted(table["seq"]) == list(range(1, 18))
    assert set(table["model"]) == {"glyph_cnn"} | {f"w{w}-{i}" for w in range(4) for i in range(4)}
    assert len(list((board / "records").glob("*.json"))) == 17


def test_writers_wait_for_the_lock(board, monkeypatch):
    monkeypatch.setattr(store, "LOCK_TIMEOUT_S", 0.2)
    errors = []
    with store.locked(board):
        thread = threading.Thread(target=lambda: errors.append(_try_add(board)))
        thread.start()
        thread.join()
    assert errors == ["is locked by another writer (waited 0.2s)"]
    assert len(current_table(board)) == 1


def _try_add(board):
    try:
        add_records(board, [record(kappa="entropy")])
    except LeaderboardError as exc:
        return str(exc).split(" ", 1)[1]


def test_crash_while_writing_the_table_after_the_commit(board, monkeypatch):
    parquet = (board / PARQUET).read_bytes()

    def crash(self, path, **kwargs):
        open(path, "wb").write(b"PAR1 half a table")
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", crash)
    with pytest.raises(KeyboardInterrupt):
        add_records(board, [record(kappa="entropy")])
    monkeypatch.undo()
    assert (board / PARQUET).read_bytes() == parquet  # the half-written file never replaced it
    assert not list(board.glob("*.partial"))
    assert current_table(board)["kappa"].tolist() == ["softmax", "entropy"]  # committed: readers rebuild the table
    assert pd.read_csv(board / CSV)["kappa"].tolist() == ["softmax", "entropy"]
    add_records(board, [record(kappa="max_logit")])  # the next add writes the table of every accepted record
    assert pd.read_parquet(board / PARQUET)["kappa"].tolist() == ["softmax", "entropy", "max_logit"]


def test_crash_before_the_commit_leaves_nothing(board, monkeypatch):
    before = _snapshot(board)

    def crash(directory, names):
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(store, "_write_index", crash)
    with pytest.raises(KeyboardInterrupt):
        add_records(board, [record(kappa="entropy"), record(kappa="energy")])
    monkeypatch.undo()
    assert _snapshot(board) == before
    assert current_table(board)["kappa"].tolist() == ["softmax"]
    assert add_records(board, [record(kappa="entropy"), record(kappa="energy")])
    assert current_table(board)["seq"].tolist() == [1, 2, 3]


def test_leftovers_of_an_interrupted_add_are_ignored_then_removed(board):
    records = board / "records"
    first = f"000001-{entry_id(record())}.json"
    (records / "000002-0123456789abcdef.json").write_bytes(b'{"half": "a batch"}')
    (records / "000003-fedcba9876543210.json.partial").write_bytes(b'{"half')
    (records / "000004-00112233445566ff.json.0123456789ab.partial").write_bytes(b'{"half')  # a writer's own name
    assert current_table(board)["kappa"].tolist() == ["softmax"]
    [key] = add_records(board, [record(kappa="entropy")])
    assert sorted(p.name for p in records.iterdir()) == [first, f"000002-{key}.json"]
    assert (board / "index.txt").read_text() == f"{first}\n000002-{key}.json\n"


def test_a_leaderboard_without_an_index_lists_every_record_file(board):
    (board / "index.txt").unlink()
    (board / "records" / "notes.json").write_text("{}")  # not a record file name: never listed nor removed
    assert current_table(board)["kappa"].tolist() == ["softmax"]
    add_records(board, [record(kappa="entropy")])
    assert (board / "index.txt").read_text().splitlines()[0] == f"000001-{entry_id(record())}.json"
    assert current_table(board)["seq"].tolist() == [1, 2]
    assert (board / "records" / "notes.json").read_text() == "{}"


def test_records_passed_as_objects_are_checked_for_depth_before_encoding(tmp_path):
    deep = record()
    for _ in range(100_000):
        deep["timings"] = {"t": deep["timings"]}
    with pytest.raises(LeaderboardError, match="^record 1: nested deeper than 16 levels$"):
        add_records(tmp_path / "b", [deep], create=True)
    assert not (tmp_path / "b").exists()


def test_a_new_leaderboard_never_takes_over_existing_record_files(tmp_path):
    foreign = tmp_path / "b" / "records" / "000001-0123456789abcdef.json"
    foreign.parent.mkdir(parents=True)
    foreign.write_bytes(b"someone else's file")
    with pytest.raises(
        LeaderboardError, match=r"records already holds files; create the leaderboard in an empty directory"
    ):
        add_records(tmp_path / "b", [record()], create=True)
    assert foreign.read_bytes() == b"someone else's file"
    assert not (tmp_path / "b" / "leaderboard.json").exists()


def test_a_failure_after_the_index_rename_keeps_the_batch(board, monkeypatch):
    from dataset_builder import files

    real = files.fsync_dir

    def failing(path):
        if path == board:
            raise OSError(5, "Input/output error", str(path))
        real(path)

    monkeypatch.setattr(files, "fsync_dir", failing)
    with pytest.raises(OSError, match="Input/output error"):
        add_records(board, [record(kappa="entropy"), record(kappa="energy")])
    monkeypatch.undo()
    names = (board / "index.txt").read_text().splitlines()
    assert len(names) == 3 and all((board / "records" / name).is_file() for name in names)
    assert current_table(board)["kappa"].tolist() == ["softmax", "entropy", "energy"]
