"""The house's rooms: the method imports without torch, and imports run one way (builder -> harness ->
leaderboard; inside the harness: method <- kappas <- the rest); the floor (one error base, fault points, atomic
writes) serves all."""

import ast
import graphlib
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

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
# and the severity rules' names and descriptions (the standard library; read from the rules' source, never imported)
LEADERBOARD_READS = (
    "harness.method.registry",
    "harness.method.pairwise",
    "harness.method.paired",
    "harness.method.severity_names",
)
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


# modules that import a module named at run time (``import_module(name)``, ``__import__(name)``, an f-string): what
# each may import that way, as the literal that names it says; a computed import in a module not named here fails
DYNAMIC_IMPORTS = {
    # a package's ``__getattr__`` loads what its ``_EXPORTS`` dict names: counted at each ``from <package> import``;
    # ``harness.method`` also names the modules of the built-in metrics, which the registry imports on first use
    "harness.method": ("harness.method.metrics",),
    "harness.method.registry": (),  # the modules ``harness.method`` names (``load_built_ins_from``): its edges
    "dataset_builder.exports": (),  # the ``__getattr__`` of the three packages, loading their ``_EXPORTS``
    "harness.kappas.registry": ("harness.kappas.detectors.*",),  # every module of the package (``pkgutil``)
    "dataset_builder.embedded": ("dataset_builder.glyphs.settings", "dataset_builder.glyphs.build"),  # ``EMBEDDED``
    "harness.adapters.common": (),  # an adapter's optional dependency (transformers, open_clip): no project module
}
IMPORT_CALLS = ("import_module", "__import__")


@cache
def exports(package: str) -> dict[str, str]:
    """What ``package``'s ``_EXPORTS`` dict loads on first use: name -> module (a bare name is the package's own)."""
    for node in ast.parse((ROOT / package.replace(".", "/") / "__init__.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_EXPORTS" for t in node.targets):
            named = {name: value.partition(":")[0] for name, value in ast.literal_eval(node.value).items()}
            return {name: module if "." in module else f"{package}.{module}" for name, module in named.items()}
    return {}


def import_calls(tree: ast.AST) -> tuple[set[str], int]:
    """The modules named by a literal in ``import_module``/``__import__`` calls, and how many calls compute the name."""
    literal, computed = set(), 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if func in IMPORT_CALLS:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    literal.add(arg.value)
                else:
                    computed += 1
    return literal, computed


def project_imports(path: Path) -> set[str]:
    """The project modules ``path`` imports: ``import``, ``from <module> import``, ``from <package> import <name>`` as
    ``<package>.<name>`` (or the module the package's ``_EXPORTS`` names for it), an ``import_module``/``__import__``
    call's literal name, and what :data:`DYNAMIC_IMPORTS` names for the module's computed ones."""
    tree = ast.parse(path.read_text())
    found, _ = import_calls(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            package = (ROOT / node.module.replace(".", "/") / "__init__.py").is_file()
            lazy = exports(node.module) if package else {}
            found |= (
                {lazy.get(alias.name, f"{node.module}.{alias.name}") for alias in node.names}
                if package
                else {node.module}
            )
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    if path.is_relative_to(ROOT):
        found |= {name for target in DYNAMIC_IMPORTS.get(module_name(path), ()) for name in expanded(target)}
    return {name for name in found if name.split(".")[0] in PACKAGES}


def expanded(target: str) -> list[str]:
    """``target``, or every module of the package where it ends in ``.*``."""
    if not target.endswith(".*"):
        return [target]
    package = ROOT / target.removesuffix(".*").replace(".", "/")
    return [module_name(p) for p in sorted(package.glob("*.py")) if p.name != "__init__.py"]


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


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Each module's imports among ``modules`` (an import of a package's name resolved to the package's module)."""

    def resolved(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    return {name: {resolved(i) for i in project_imports(path)} - {None, name} for name, path in modules.items()}


def circle(graph: dict[str, set[str]]) -> str | None:
    """An import circle of ``graph`` (``a -> b -> a``: a imports b, b imports a), or None."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return " -> ".join(reversed(exc.args[1]))
    return None


def test_no_module_imports_itself_back_through_others():
    """The import graph of the project's modules, ``import_module`` and ``__import__`` included, has no circle: in the
    whole project, and inside each package on its own."""
    modules = {module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")}
    graph = import_graph(modules)
    assert sum(map(len, graph.values())) > 300  # the edges are read
    assert circle(graph) is None, circle(graph)
    for package in PACKAGES:
        inside = {name: path for name, path in modules.items() if within(name, [package])}
        assert len(inside) > 20, package
        assert circle(import_graph(inside)) is None, (package, circle(import_graph(inside)))


def test_every_import_by_a_computed_name_is_declared():
    """A module that imports a module named at run time is in :data:`DYNAMIC_IMPORTS`, so no edge hides; every entry
    there makes such a call and names modules that exist."""
    modules = {module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")}
    computing = {name for name, path in modules.items() if import_calls(ast.parse(path.read_text()))[1]}
    assert computing == set(DYNAMIC_IMPORTS)
    targets = [name for entry in DYNAMIC_IMPORTS.values() for target in entry for name in expanded(target)]
    assert len(targets) > 6 and set(targets) <= set(modules), sorted(set(targets) - set(modules))


def test_an_import_by_import_module_or_dunder_import_is_an_edge(tmp_path):
    scratch = tmp_path / "scratch.py"
    scratch.write_text(
        "import importlib\nfrom importlib import import_module\n"
        "run = import_module('harness.run')\nstore = importlib.import_module('leaderboard.store')\n"
        "shards = __import__('dataset_builder.shards')\nnumpy = import_module('numpy')\n"
        "def pick(name):\n    return import_module(f'harness.{name}')\n"
    )
    assert project_imports(scratch) == {"harness.run", "leaderboard.store", "dataset_builder.shards"}
    assert import_calls(ast.parse(scratch.read_text()))[1] == 1  # the f-string: DYNAMIC_IMPORTS must name it
    assert broken_rules("dataset_builder.scratch", project_imports(scratch)) == [
        "dataset_builder.scratch imports harness.run",
        "dataset_builder.scratch imports leaderboard.store",
    ]
    (tmp_path / "a.py").write_text("from importlib import import_module\nimport_module('harness.b')\n")
    (tmp_path / "b.py").write_text("import harness.c\n")
    (tmp_path / "c.py").write_text("a = __import__('harness.a')\n")
    modules = {f"harness.{name}": tmp_path / f"{name}.py" for name in "abc"}
    assert circle(import_graph(modules)) == "harness.a -> harness.b -> harness.c -> harness.a"


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


def test_run_py_is_the_pipeline():
    """``run.py`` names the steps and leaves the work to the rooms."""
    run = ROOT / "harness" / "run.py"
    assert len(run.read_text().splitlines()) < 400
    assert len(project_imports(run)) <= 13, sorted(project_imports(run))  # a room per step: 13 with the per-image files


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_runs_long(package):
    """No function of the builder, the harness or the leaderboard is longer than 60 lines: a longer one is several."""
    paths = sorted((ROOT / package).rglob("*.py"))
    assert len(paths) > 20
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
