"""The package's shape: one import name, floors that import only downwards, no circles.

Walks the installed package (editable or not) with `ast`: every `import` and
`from ... import`, at module level or inside a function, is an arrow from one file to
another. Floors, from the bottom: ir -> compiler (the toolchain) -> backends -> policy ->
dispatch (picking a program at run time) -> search, in floors of its own (measure -> learn
-> tune -> campaign) -> the face (gemmforge/__init__.py, ops, emit, cli). A file may import
its own floor or those below; importing a package's parent (`gemmforge`) is implicit and
not counted.
"""
from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
from pathlib import Path

import pytest

import gemmforge

FLOORS = ("ir", "compiler", "backends", "policy", "dispatch",
          "search.measure", "search.learn", "search.tune", "search.campaign")
"""From the bottom; search's sub-packages are floors of their own inside search."""
FACE = len(FLOORS)
TOP = tuple(dict.fromkeys(f.split(".")[0] for f in FLOORS))  # the folders mapped into gemmforge


def floor(module: str) -> int:
    """The floor of a gemmforge module by its dotted name: that of the longest floor its
    name starts with (the bare `gemmforge.search` package: its lowest sub-floor's)."""
    name = module.removeprefix("gemmforge.")
    if name == module:
        return FACE
    if name == "search":
        return FLOORS.index("search.measure")
    found = [i for i, f in enumerate(FLOORS) if name == f or name.startswith(f + ".")]
    return max(found, key=lambda i: len(FLOORS[i])) if found else FACE


def package_files() -> dict[str, Path]:
    """Dotted module name -> file, for every .py of the installed gemmforge package."""
    files = {}
    roots = {"gemmforge": Path(gemmforge.__file__).parent}
    for sub in TOP:
        roots[f"gemmforge.{sub}"] = Path(importlib.util.find_spec(f"gemmforge.{sub}").origin).parent
    for package, root in roots.items():
        for path in root.rglob("*.py"):
            rel = path.relative_to(root).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if package == "gemmforge" and parts and parts[0] in TOP:
                continue  # a source folder nested under the face's folder: not the package
            files[".".join([package, *parts])] = path
    return files


def _target(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base[:len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The gemmforge modules `module` imports anywhere in its file (functions included)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _target(node, module, path.name == "__init__.py")
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                     for a in node.names]
        else:
            continue
        out |= {n for n in names if n in known and n != "gemmforge"}
    return out - {module}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    files = package_files()
    return {m: imports(m, p, set(files)) for m, p in files.items()}


def test_the_walk_sees_every_floor(graph):
    """The walk found the package: each floor and the face have files, and arrows exist."""
    assert {floor(m) for m in graph} == {*range(len(FLOORS)), FACE}
    assert "gemmforge.backends.pipeline" in graph["gemmforge.search.measure.worker"]


def test_floor_orders_the_sub_floors():
    assert floor("gemmforge.ir.program") == 0 < floor("gemmforge.dispatch.choice")
    assert floor("gemmforge.dispatch.choice") < floor("gemmforge.search.measure.records")
    assert floor("gemmforge.search.measure.records") < floor("gemmforge.search.learn.llm_tasks")
    assert floor("gemmforge.search.learn.llm_tasks") < floor("gemmforge.search.tune.tuner")
    assert floor("gemmforge.search.tune.tuner") < floor("gemmforge.search.campaign.campaign")
    assert floor("gemmforge.search.campaign.ship") < floor("gemmforge.ops") == FACE


def test_no_arrow_points_up_a_floor(graph):
    up = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                if floor(b) > floor(a))
    assert not up, "imports against the floors:\n" + "\n".join(up)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one file (Tarjan's algorithm)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles_between_files(graph):
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_distribution_installs_one_import_name():
    """The installed distribution's files put exactly one name at the top of site-packages
    (an editable install's finder hooks aside)."""
    dist = importlib.metadata.distribution("gemmforge")
    top = (dist.read_text("top_level.txt") or "").split()
    if not top:  # some installers write no top_level.txt: derive it from RECORD
        top = sorted({f.parts[0].removesuffix(".py") for f in dist.files or []
                      if not f.parts[0].endswith((".dist-info", ".pth"))
                      and not f.parts[0].startswith("__editable__")
                      and f.parts[0] not in ("..", "__pycache__")})
    assert top == ["gemmforge"], top


def test_the_runtime_path_needs_neither_optuna_nor_sqlalchemy():
    """matmul's path (pick a program, compile, load) imports neither, and picks the
    heuristic's program where they are missing."""
    import subprocess
    import sys
    code = ("import sys\n"
            "sys.modules['optuna'] = sys.modules['sqlalchemy'] = None\n"
            "import gemmforge, gemmforge.ops, gemmforge.backends.pipeline\n"
            "from gemmforge.ir import Problem\n"
            "from gemmforge.ir.program import Arch\n"
            "from gemmforge.policy.heuristic import default_program\n"
            "p = Problem(1000, 4096, 333)\n"
            "assert gemmforge.ops.program_for(p, Arch.SM90A) == default_program(p, Arch.SM90A)\n"
            "print('ok')\n")
    from gemmforge.compiler.child import SAFE_PATH
    done = subprocess.run([sys.executable, *SAFE_PATH, "-c", code], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_the_runtime_path_imports_nothing_of_search(tmp_path):
    """Picking a program (ops, emit, patch; the shipped file, the ranker, a tuned-database lookup)
    loads dispatch and the floors below it, and no module of search (its measurement,
    tuning, campaign and learning parts), nor optuna or scikit-learn."""
    import subprocess
    import sys
    code = ("import sys\n"
            "import gemmforge, gemmforge.ops, gemmforge.emit, gemmforge.patching\n"
            "from gemmforge.ir import Problem\n"
            "from gemmforge.ir.program import Arch\n"
            "choice = gemmforge.ops.choice_for(Problem(1000, 4096, 333), Arch.SM90A, 'h100')\n"
            "assert choice.program is not None\n"
            "loaded = sorted(m for m in sys.modules if m.startswith('gemmforge.'))\n"
            "assert 'gemmforge.dispatch.choice' in loaded, loaded\n"
            "assert 'gemmforge.dispatch.tuned' in loaded, loaded\n"
            "bad = [m for m in loaded if m.split('.')[1] == 'search']\n"
            "bad += [m for m in ('optuna', 'sklearn') if m in sys.modules]\n"
            "print(' '.join(bad) or 'ok')\n")
    from gemmforge.compiler.child import SAFE_PATH
    env = {**os.environ, "GEMMFORGE_TUNE_DB": f"sqlite:///{tmp_path / 'none.db'}"}
    done = subprocess.run([sys.executable, *SAFE_PATH, "-c", code], capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok", "the runtime path loaded: " + done.stdout


def test_package_modules_import_gemmforge_relatively():
    """Inside the package (the face's folder included) gemmforge modules are imported
    relatively (`from ..ir.program import Problem`): the import resolves the same installed
    or not, and a tool reading the checkout sees each arrow between the floors' folders."""
    absolute = []
    for path in package_files().values():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and not node.level \
                    and (node.module or "").split(".")[0] == "gemmforge":
                absolute.append(f"{path}:{node.lineno}: from {node.module} import ...")
            elif isinstance(node, ast.Import):
                absolute += [f"{path}:{node.lineno}: import {a.name}" for a in node.names
                             if a.name.startswith("gemmforge.")]
    assert not absolute, "absolute imports of gemmforge modules:\n" + "\n".join(absolute)
