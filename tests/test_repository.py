"""The repository as a product: its size, the benchmark folder's tools, and the documents'
lengths stay within the bars the project set (README under 300 lines, NOTES.md and
benchmarks/README.md under 400, at most 15 benchmark scripts, tracked files under 5 MB), and
no document or tool reads like a diary."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_TRACKED_BYTES = 5_000_000
MAX_BENCHMARK_SCRIPTS = 15
MAX_LINES = {"README.md": 300, "benchmarks/README.md": 400, "benchmarks/NOTES.md": 400}
DIARY = re.compile(r"\bsessions?\b|\bissue \d+", re.IGNORECASE)


def _tracked() -> list[Path]:
    done = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    if done.returncode:
        pytest.skip("not a git checkout")
    return [ROOT / p for p in done.stdout.decode().split("\0") if p and (ROOT / p).is_file()]


def test_tracked_files_stay_under_the_size_bar():
    files = _tracked()
    total = sum(p.stat().st_size for p in files)
    largest = sorted(files, key=lambda p: p.stat().st_size)[-3:]
    assert total < MAX_TRACKED_BYTES, (total, [str(p.relative_to(ROOT)) for p in largest])


def test_benchmarks_keep_at_most_fifteen_scripts_each_saying_how_to_run_it():
    scripts = sorted((ROOT / "benchmarks").glob("*.py")) + sorted((ROOT / "benchmarks").glob("*.sh"))
    assert len(scripts) <= MAX_BENCHMARK_SCRIPTS, [p.name for p in scripts]
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    for script in scripts:
        head = script.read_text()[:3000]
        assert f"benchmarks/{script.name}" in head or script.name == "device_setup.sh", script.name
        assert script.name in readme, f"benchmarks/README.md does not list {script.name}"


@pytest.mark.parametrize("name", sorted(MAX_LINES))
def test_documents_stay_short(name):
    assert len((ROOT / name).read_text().splitlines()) < MAX_LINES[name]


@pytest.mark.parametrize("name", ["README.md", "benchmarks/README.md", "benchmarks/NOTES.md",
                                  "docs/results.md", "docs/llm_finetune.md", "docs/errors.md",
                                  "docs/dispatch.md"])
def test_documents_carry_no_diary_words(name):
    hits = [line for line in (ROOT / name).read_text().splitlines() if DIARY.search(line)]
    assert not hits, hits[:3]



LOADERS = ("spec_from_file_location", "run_path", "import_module", "exec_module")


def benchmark_loads(source: str) -> list[str]:
    """The functions of `source` that load a file from benchmarks/ as a module (a loader
    call and the folder's name in one function), and any `import benchmarks...`."""
    import ast
    tree = ast.parse(source)
    found = [f"import {a.name}" for node in ast.walk(tree) if isinstance(node, ast.Import)
             for a in node.names if a.name.split(".")[0] == "benchmarks"]
    found += [f"from {node.module}" for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "benchmarks"]
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            text = ast.get_source_segment(source, node) or ""
            if "benchmarks" in text and any(loader in text for loader in LOADERS):
                found.append(f"def {node.name}")
    return found


def test_no_test_imports_a_benchmark_script():
    """Tests exercise the package; a benchmark script runs only as a command (a subprocess),
    so its logic worth testing lives in the package."""
    found = {str(p.relative_to(ROOT)): benchmark_loads(p.read_text())
             for p in sorted((ROOT / "tests").rglob("*.py")) if p.name != Path(__file__).name}
    assert not {name: f for name, f in found.items() if f}
    loads = ('def _script(name):\n    path = ROOT / "benchmarks" / f"{name}.py"\n'
             '    spec = importlib.util.spec_from_file_location(name, path)\n')
    assert benchmark_loads(loads) == ["def _script"]
    assert benchmark_loads("from benchmarks.model_forward import plan\n") == ["from benchmarks.model_forward"]
