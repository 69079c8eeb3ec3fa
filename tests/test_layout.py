"""The house's rooms: the method imports without torch, and imports run one way (builder -> harness ->
leaderboard; inside the harness: method <- kappas <- the rest); the floor (one error base, fault points, atomic
writes) serves all."""

import ast
import graphlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dataset_builder", "harness", "leaderboard")
FLOOR = (
    "dataset_builder.errors",
    "dataset_builder.faults",
    "dataset_builder.files",
    "dataset_builder.exports",
    "dataset_builder.console",
    "dataset_builder.zoo_groups",
)  # light; any module may import them
# what the leaderboard may import of the harness: the metric registry's declarations (the standard library and the
# floor; the metric functions load on first use and need numpy only) and the paired statistics (numpy only)
LEADERBOARD_READS = ("harness.method.registry", "harness.method.pairwise", "harness.method.paired")
# what those may import in turn: the method's pure functions they stand on and the harness's error type
READS_STAND_ON = (*FLOOR, *LEADERBOARD_READS, "harness.method.intervals", "harness.errors")
BEFORE_TORCH = (
    "harness.kappas",
    "harness.adapters",
    "harness.runtime",
    "harness.run",
    "harness.submission",
    "dataset_builder",
    "leaderboard",
)
ENTRY_POINTS = (
    "harness.run",
    "harness.cli",
    "harness.worker",
    "harness.loading",
    "harness.benchmarks",
    "harness.outputs",
    "harness.drilldown",
)
# the harness's rooms, left to right: each may import those to its left (and the floors), never those to its right
ROOMS = (
    ("harness.method",),
    ("harness.kappas",),
    ("harness.submission", "harness.bundle"),  # the submission contract and its bundle
    ("harness.adapters",),
    ("harness.runtime",),
    ENTRY_POINTS,
)
# module prefix -> project modules it may never import
FORBIDDEN = {
    "dataset_builder": ("harness", "leaderboard"),
    "leaderboard": ("harness", "dataset_builder"),
    **{
        prefix: (*(name for later in ROOMS[i + 1 :] for name in later), "leaderboard")
        + (("dataset_builder",) if i == 0 else ())
        for i, room in enumerate(ROOMS[:-1])
        for prefix in room
    },
    # what the command line reads before torch is imported
    **dict.fromkeys(("harness.options", "harness.zoo", "harness.config", "harness.kappa_names"), BEFORE_TORCH),
    # the checks before torch read of the builder only a benchmark's manifest and the embedded benchmarks' settings
    "harness.preflight": (
        *(prefix for prefix in BEFORE_TORCH if prefix != "dataset_builder"),
        *(
            name
            for name in (
                ".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "dataset_builder").rglob("*.py")
            )
            if name not in ("dataset_builder.manifest", "dataset_builder.embedded", "dataset_builder.__init__")
        ),
    ),
}


def project_imports(path: Path) -> set[str]:
    """The project modules ``path`` imports; ``from <package> import <name>`` counts as ``<package>.<name>``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            package = (ROOT / node.module.replace(".", "/") / "__init__.py").is_file()
            found |= {f"{node.module}.{alias.name}" for alias in node.names} if package else {node.module}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {name for name in found if name.split(".")[0] in PACKAGES}


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def within(name: str, prefixes) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def broken_rules(name: str, imports: set[str]) -> list[str]:
    """The imports of module ``name`` that :data:`FORBIDDEN` bans."""
    return [
        f"{name} imports {imp}"
        for prefix, banned in FORBIDDEN.items()
        if within(name, [prefix])
        for imp in sorted(imports)
        if within(imp, banned)
        and not within(imp, FLOOR)
        and not (within(name, ["leaderboard"]) and imp in LEADERBOARD_READS)
    ]


def test_imports_run_one_way():
    checked, wrong = 0, []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = module_name(path)
            checked += any(within(name, [prefix]) for prefix in FORBIDDEN)
            wrong += broken_rules(name, project_imports(path))
    assert checked > 80  # every module of the builder, the leaderboard and the harness's rooms
    assert not wrong, wrong


def test_the_runtime_never_imports_an_entry_point_and_the_contract_nothing_above_it():
    assert set(ENTRY_POINTS) <= set(FORBIDDEN["harness.runtime"])
    assert {"harness.adapters", "harness.runtime", *ENTRY_POINTS} <= set(FORBIDDEN["harness.submission"])
    assert broken_rules("harness.runtime.x", {"harness.run", "harness.submission", "harness.kappas"}) == [
        "harness.runtime.x imports harness.run"
    ]


def test_no_module_imports_itself_back_through_others():
    """The import graph of the project's modules (package imports resolved to the module they name) has no circle."""
    modules = {module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")}

    def resolved(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {name: {resolved(i) for i in project_imports(path)} - {None, name} for name, path in modules.items()}
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        raise AssertionError(f"an import circle: {' -> '.join(exc.args[1])}") from None
    assert len(order) == len(modules)


def test_a_module_that_breaks_the_rule_is_caught(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import numpy\nfrom harness.run import evaluate\nimport leaderboard.store as store\n"
        "from dataset_builder import faults, shards\nfrom dataset_builder.files import write_atomic\n"
    )
    imports = project_imports(bad)
    assert imports == {
        "harness.run",
        "leaderboard.store",
        "dataset_builder.faults",
        "dataset_builder.shards",
        "dataset_builder.files",
    }
    assert broken_rules("leaderboard.bad", imports) == [
        "leaderboard.bad imports dataset_builder.shards",
        "leaderboard.bad imports harness.run",
    ]
    assert broken_rules("dataset_builder.bad", imports) == [
        "dataset_builder.bad imports harness.run",
        "dataset_builder.bad imports leaderboard.store",
    ]


def test_the_leaderboard_reads_the_metric_registry_and_the_paired_statistics_and_nothing_else_of_the_harness():
    assert broken_rules("leaderboard.x", {"harness.method.registry", "harness.method.metrics"}) == [
        "leaderboard.x imports harness.method.metrics"
    ]
    for name in (*LEADERBOARD_READS, "harness.method.intervals", "harness.errors"):
        assert project_imports(ROOT / (name.replace(".", "/") + ".py")) <= set(READS_STAND_ON), name


def test_the_checks_before_torch_read_the_manifest_and_nothing_heavy():
    imports = {"dataset_builder.manifest", "dataset_builder.embedded", "dataset_builder.benchmark", "harness.kappas"}
    assert broken_rules("harness.preflight", imports) == [
        "harness.preflight imports dataset_builder.benchmark",
        "harness.preflight imports harness.kappas",
    ]
    assert broken_rules("harness.kappa_names", imports) == [
        f"harness.kappa_names imports {name}" for name in sorted(imports)
    ]


def test_the_floor_stands_on_nothing_of_the_project():
    for name in FLOOR:
        path = ROOT / (name.replace(".", "/") + ".py")
        assert project_imports(path) <= set(FLOOR), name


def test_the_method_imports_without_torch(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'torchvision', 'timm', 'pytorch_ood'):\n"
        "            raise ImportError(f'{name} is blocked')\n"
        "sys.meta_path.insert(0, Block())\n"
    )
    code = (
        "import sys, numpy as np\n"
        "import harness.method as m\n"
        "from harness.method import severity_levels, auroc\n"
        "try:\n    import torch\nexcept ImportError:\n    pass\nelse:\n    raise SystemExit('torch was not blocked')\n"
        "assert not any(k.split('.')[0] == 'torch' for k in sys.modules), 'torch got imported'\n"
        "print(auroc(np.array([0.9, 0.8]), np.array([0.1, 0.85])))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) == 0.75


def long_functions(path: Path, limit: int = 60) -> list[str]:
    """The functions of ``path`` longer than ``limit`` lines, from ``def`` to their last line; a command line's option
    declarations (``cli.py``) are the one exception: there the body is held to the limit."""
    label, long = module_name(path) if path.is_relative_to(ROOT) else path.stem, []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = node.body[0].lineno if path.name == "cli.py" else node.lineno
            if node.end_lineno - start + 1 > limit:
                long.append(f"{label}.{node.name}: {node.end_lineno - start + 1} lines")
    return long


def test_run_py_is_the_pipeline_and_no_function_of_the_harness_runs_long():
    """``run.py`` names the steps and leaves the work to the rooms; a function longer than 60 lines is several."""
    run = ROOT / "harness" / "run.py"
    assert len(run.read_text().splitlines()) < 400
    assert len(project_imports(run)) <= 13, sorted(project_imports(run))  # a room per step: 13 with the per-image files
    long = [line for path in sorted((ROOT / "harness").rglob("*.py")) for line in long_functions(path)]
    assert not long, long


def test_no_function_of_the_builder_runs_long():
    paths = sorted((ROOT / "dataset_builder").rglob("*.py"))
    assert len(paths) > 30
    long = [line for path in paths for line in long_functions(path)]
    assert not long, long


def test_a_long_function_is_caught_and_a_command_line_by_its_body(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(58))
    options = "".join(f"    o{i}: int = {i},\n" for i in range(10))
    for name in ("images.py", "cli.py"):
        (tmp_path / name).write_text(
            f"def fits(\n{options}):\n{body}\n\ndef runs_long():\n{body}    y = 1\n    y += 1\n    return y\n"
        )
    assert long_functions(tmp_path / "images.py") == ["images.fits: 70 lines", "images.runs_long: 62 lines"]
    assert long_functions(tmp_path / "cli.py") == ["cli.runs_long: 61 lines"]
