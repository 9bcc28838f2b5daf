"""benchmarks/template_ab.py, run as its users run it (a subprocess), and the cuda_wgmma
template folder it points the backend at (GEMMFORGE_CUDA_WGMMA_TEMPLATES): an earlier
commit's templates extracted, builds from them keyed apart, and the old-against-new table
over the shapes every run measured."""
import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "template_ab.py"
TEMPLATE_DIR = "backends/cuda_wgmma/templates"


def _tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)

LOWER = """
from gemmforge.backends.cuda_wgmma.backend import CudaWgmma, TEMPLATES
from gemmforge.ir import Problem, parse
be = CudaWgmma()
source = be.lower(parse("cuda_wgmma sm_90a 64x64x64 w1x1 s8 sw128 row/8 pred k1 dp c1x1 coop direct"),
                  Problem(256, 256, 256))
print(TEMPLATES)
print(be.fingerprint())
print("AB-MARKER" in "".join(source.files.values()))
"""


def _lower(env_folder: Path | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "GEMMFORGE_CUDA_WGMMA_TEMPLATES"}
    if env_folder:
        env["GEMMFORGE_CUDA_WGMMA_TEMPLATES"] = str(env_folder)
    done = subprocess.run([sys.executable, "-c", LOWER], env=env, capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_prepare_extracts_a_commits_templates(tmp_path):
    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode:
        pytest.skip("not a git checkout")
    done = _tool("prepare", "HEAD", str(tmp_path / "old"))
    assert done.returncode == 0, done.stderr
    committed = subprocess.run(["git", "show", f"HEAD:{TEMPLATE_DIR}/kernel.cuh.jinja"],
                               cwd=ROOT, capture_output=True, check=True).stdout
    assert (tmp_path / "old" / "kernel.cuh.jinja").read_bytes() == committed
    assert (tmp_path / "old" / "units.cuh.jinja").is_file()
    assert _tool("prepare", "no-such-commit-xyz", str(tmp_path / "bad")).returncode == 2


def test_backend_renders_from_the_folder_given_and_keys_its_builds_apart(tmp_path):
    folder = tmp_path / "templates"
    default = ROOT / TEMPLATE_DIR
    folder.mkdir()
    for path in default.rglob("*.jinja"):
        target = folder / path.relative_to(default)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    kernel = folder / "kernel.cuh.jinja"
    kernel.write_text("// AB-MARKER\n" + kernel.read_text())
    plain_dir, plain_fp, plain_marked = _lower(None)
    ab_dir, ab_fp, ab_marked = _lower(folder)
    assert Path(plain_dir) == default and Path(ab_dir) == folder
    assert plain_marked == "False" and ab_marked == "True"
    assert plain_fp != ab_fp


def _row(m, backend, side, pair, kernel_us, after_us, status="ok"):
    return {"m": str(m), "n": "64", "k": "64", "backend": backend, "status": status,
            "templates": side, "pair": str(pair), "kernel_us": str(kernel_us), "cublas_us": "10",
            "after_us": str(after_us), "cublas_after_us": "10"}


def _write(path, rows):
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_summary_compares_old_and_new_over_shapes_measured_in_every_run(tmp_path):
    rows = []
    for pair in (0, 1):
        for side, wgmma_us in (("old", 10.0), ("new", 9.0)):
            rows.append(_row(1, "cuda_wgmma", side, pair, wgmma_us, wgmma_us + 1))
            rows.append(_row(2, "triton", side, pair, 5.0, 5.0))
            rows.append(_row(3, "cuda_wgmma", side, pair, 40.0, 40.0))
    rows.append(_row(4, "cuda_wgmma", "old", 0, 1.0, 1.0))  # missing from the other runs
    rows.append(_row(5, "triton", "old", 0, 1.0, 1.0, status="build_failed"))
    path = tmp_path / "ab.csv"
    _write(path, rows)
    done = _tool("summary", str(path))
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("| ") and " us |" in line]
    assert len(lines) == 3  # (cuda_wgmma, under), (cuda_wgmma, over), (triton, under)
    fast = next(line for line in lines if "| cuda_wgmma | under 30 us |" in line)
    assert "| 1 | 1.000x -> 1.111x (+11.1 %)" in fast  # shape 4, measured once, left out
    assert any("| triton | under 30 us | 1 | 2.000x -> 2.000x (+0.0 %)" in line for line in lines)


def test_summary_prints_one_line_per_class(tmp_path):
    path = tmp_path / "ab.csv"
    rows = [_row(1, "cuda_wgmma", side, 0, us, us) for side, us in (("old", 10.0), ("new", 8.0))]
    _write(path, rows)
    done = _tool("summary", str(path))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "| cuda_wgmma | under 30 us | 1 | 1.000x -> 1.250x (+25.0 %)" in out
    empty = tmp_path / "empty.csv"
    empty.write_text("m,n,k,backend,status,templates,pair,kernel_us,cublas_us,after_us,cublas_after_us\n")
    assert _tool("summary", str(empty)).returncode == 1


def test_run_refuses_a_folder_that_was_not_prepared(tmp_path):
    done = _tool("run", str(tmp_path / "missing"), "--shapes", "64x64x64", "--pairs", "1",
                 "--report-dir", str(tmp_path))
    assert done.returncode == 2 and "no prepared templates" in done.stderr
