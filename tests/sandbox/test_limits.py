"""Which limits a sandbox gets (:mod:`harness.runtime.limits`), decided from a fake cgroup file system: a cgroup v2 of
its own for memory and processes where the host hands those controllers out and the harness may write there, a v1
pids cgroup where the host keeps that controller on v1, rlimits elsewhere; and how the record names them."""

from pathlib import Path

import pytest

from harness.runtime import limits
from harness.runtime.limits import MAX_PROCESSES, STARTUP_RESERVE, Budget, at_once, cgroup_parents, share

GIB = 1 << 30
STARTUP = GIB // 8  # the child's start-up, as it measured it
FALLBACK = (
    "RLIMIT_AS start-up + 402653184, /tmp 268435456, shared memory 2 x 268435456, memfd_create and shmget refused, "
    "one process (threads alone)"
)


def cgroup(folder: Path, handed: str = "") -> Path:
    """A fake cgroup folder whose children get the controllers ``handed``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cgroup.procs").write_text("")
    (folder / "cgroup.subtree_control").write_text(handed + "\n")
    return folder


def v2(point: Path, root: str = "/") -> str:
    return f"41 31 0:38 {root} {point} rw,relatime - cgroup2 cgroup2 rw\n"


def v1_pids(point: Path) -> str:
    return f"39 31 0:36 / {point} rw,relatime - cgroup cgroup rw,pids\n"


def test_at_the_root_of_cgroup_v2_the_root_is_used(tmp_path):
    root = cgroup(tmp_path / "v2", "cpu memory pids")
    assert cgroup_parents(v2(root), "0::/\n") == {"memory": root, "pids": root}


def test_elsewhere_the_cgroup_holding_the_harnesss_is_used(tmp_path):
    slice_ = cgroup(tmp_path / "v2" / "user.slice", "memory pids")
    cgroup(slice_ / "session.scope")  # the harness's own: it holds processes, so it hands nothing to children
    cgroup(tmp_path / "v2", "memory pids")
    assert cgroup_parents(v2(tmp_path / "v2"), "0::/user.slice/session.scope\n") == {"memory": slice_, "pids": slice_}


def test_pids_come_from_cgroup_v1_where_the_host_keeps_them_there(tmp_path):
    slice_ = cgroup(tmp_path / "v2" / "user.slice", "memory")
    cgroup(slice_ / "session.scope")
    pids = cgroup(tmp_path / "pids") / "user.slice"
    cgroup(pids)
    mounts = v1_pids(tmp_path / "pids") + v2(tmp_path / "v2")
    found = cgroup_parents(mounts, "8:pids:/user.slice\n0::/user.slice/session.scope\n")
    assert found == {"memory": slice_, "pids": pids}  # v1 has no rule against processes in a cgroup with children


def test_a_hybrid_host_without_memory_on_v2_gets_pids_only(tmp_path):
    cgroup(tmp_path / "unified", "")  # cgroup v2 mounted beside v1, its controllers all on v1
    cgroup(tmp_path / "pids")
    mounts = "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n" + v1_pids(tmp_path / "pids")
    found = cgroup_parents(mounts + v2(tmp_path / "unified"), "8:pids:/\n2:cpu:/\n0::/\n")
    assert found == {"pids": tmp_path / "pids"}


@pytest.mark.parametrize(
    "case", ["a_container_namespace_root_with_processes", "no_cgroup_mounted", "outside_the_mounted_subtree"]
)
def test_nothing_is_used_where_the_host_hands_out_no_controller(tmp_path, case):
    cgroup(tmp_path / "v2", "")
    mounts, own = {
        "a_container_namespace_root_with_processes": (v2(tmp_path / "v2"), "0::/\n"),
        "no_cgroup_mounted": ("22 1 0:21 / /proc rw - proc proc rw\n", "0::/\n"),
        "outside_the_mounted_subtree": (v2(tmp_path / "v2", "/docker/abc"), "0::/docker/other\n"),
    }[case]
    assert cgroup_parents(mounts, own) == {}


def test_nothing_is_used_where_the_harness_may_not_write(tmp_path, monkeypatch):
    root = cgroup(tmp_path / "v2", "memory pids")
    monkeypatch.setattr(limits.os, "access", lambda path, mode: False)
    assert cgroup_parents(v2(root), "0::/\n") == {}


def test_the_shares_are_quarters_in_whole_pages():
    assert share(GIB) == GIB // 4 and share(1) == limits.PAGE
    assert Budget(GIB, cuda=False).for_child() == {"rlimit": "RLIMIT_AS", "beyond_budget": GIB // 2, "sandboxes": 1}
    assert Budget(GIB, cuda=True).for_child()["rlimit"] == "RLIMIT_DATA"


def test_the_run_and_its_re_check_share_one_budget():
    """Under 8 GiB the re-check's sandbox starts once the run's has ended; from 8 GiB they are alive at once, and each
    counts the other's start-up (measured by the child, else reserved in the cgroup)."""
    small, large = Budget(8 * GIB - 1, cuda=False), Budget(8 * GIB, cuda=False)
    assert (small.sandboxes, large.sandboxes) == (1, 2) and at_once(8 * GIB - 1) == 1
    assert small.beyond_start(STARTUP) == (8 * GIB - 1) - 2 * share(8 * GIB - 1) - STARTUP
    assert large.beyond_start(STARTUP) == 4 * GIB - 2 * STARTUP and large.cgroup_memory == 7 * GIB
    assert Budget(GIB, cuda=False).beyond_start(GIB) == 0  # a start-up the budget cannot hold leaves nothing


def test_the_cgroups_are_made_with_their_limits_and_joined_before_bubblewrap(tmp_path):
    v2_parent, v1_parent = cgroup(tmp_path / "v2", "memory pids"), cgroup(tmp_path / "pids")
    budget = Budget(GIB, cuda=False)
    budget.make_cgroups({"memory": v2_parent, "pids": v1_parent})
    memory, pids = budget.cgroups["memory"], budget.cgroups["pids"]
    assert memory.parent == v2_parent and pids.parent == v1_parent and memory.name.startswith(limits.PREFIX)
    assert (memory / "memory.max").read_text() == f"{GIB}\n" and (pids / "pids.max").read_text() == f"{MAX_PROCESSES}\n"
    assert budget.rlimit is None and budget.refused_calls == ()  # the memory cgroup counts every page
    assert budget.joining()[-3:] == [str(memory / "cgroup.procs"), str(pids / "cgroup.procs"), "--"]


def test_a_cgroup_that_cannot_be_made_leaves_the_rlimits(tmp_path):
    budget = Budget(GIB, cuda=False)
    budget.make_cgroups({"memory": tmp_path / "missing"})
    assert budget.cgroups == {} and budget.joining() == [] and budget.rlimit == "RLIMIT_AS"


REPORT = {
    "tmp_bytes": GIB // 4,
    "startup_bytes": STARTUP,
    "beyond_start": GIB // 2 - STARTUP,
    "processes": MAX_PROCESSES,
}


def test_the_record_names_the_rlimits_that_held():
    assert Budget(GIB, cuda=False).account(REPORT, 1) == (
        {"memory": FALLBACK, "processes": f"RLIMIT_NPROC {MAX_PROCESSES}"},
        [],
    )
    on_cuda, _ = Budget(GIB, cuda=True).account(REPORT, 1)
    assert on_cuda["memory"].startswith("RLIMIT_DATA start-up + 402653184,")
    assert on_cuda["memory"].endswith(", shared mappings not counted, one process (threads alone)")
    shared, _ = Budget(8 * GIB, cuda=False).account(
        {**REPORT, "tmp_bytes": 2 * GIB, "beyond_start": 4 * GIB - GIB // 4}, 1
    )
    assert shared["memory"].startswith("RLIMIT_AS start-up + 4026531840,") and shared["memory"].endswith(
        ", shared by 2 sandboxes"
    )
    as_root_uid, _ = Budget(GIB, cuda=False, root_uid=True).account(REPORT, 1)
    assert as_root_uid["processes"] == "none (the kernel exempts root's uid from RLIMIT_NPROC)"


@pytest.mark.parametrize(
    "wrong, value", [("tmp_bytes", 1), ("beyond_start", 1), ("startup_bytes", STARTUP_RESERVE + 1), ("processes", 1)]
)
def test_a_limit_the_child_did_not_read_back_is_named(wrong, value):
    _, failed = Budget(GIB, cuda=False).account({**REPORT, wrong: value}, 1)
    address = "the address-space limit"
    named = {"tmp_bytes": "/tmp's size", "beyond_start": address, "startup_bytes": address, "processes": "RLIMIT_NPROC"}
    assert failed == [named[wrong]]


def test_the_cgroups_must_hold_the_sandbox(tmp_path):
    budget = Budget(GIB, cuda=False, root_uid=True)
    budget.make_cgroups({"memory": cgroup(tmp_path / "v2", "memory pids"), "pids": tmp_path / "v2"})
    (budget.cgroups["memory"] / "cgroup.procs").write_text("7\n")
    account, failed = budget.account({"tmp_bytes": GIB // 4, "processes": MAX_PROCESSES}, 7)
    assert failed == [] and account["processes"] == f"cgroup pids.max {MAX_PROCESSES}"
    assert account["memory"] == f"cgroup memory.max {GIB} (no swap), /tmp 268435456, shared memory 2 x 268435456"
    assert budget.account({"tmp_bytes": GIB // 4, "processes": MAX_PROCESSES}, 8)[1] == ["the cgroups"]


def test_a_kill_for_memory_is_told_apart(tmp_path):
    budget = Budget(GIB, cuda=False)
    assert not budget.out_of_memory()  # no memory cgroup
    budget.make_cgroups({"memory": cgroup(tmp_path / "v2", "memory")})
    events = budget.cgroups["memory"] / "memory.events"
    events.write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 0\n")
    assert not budget.out_of_memory()
    events.write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert budget.out_of_memory()
