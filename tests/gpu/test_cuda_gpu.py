"""GPU tier for the cuda family beyond the conformance suite (test_conformance_gpu.py
checks every program's answers): bad operands are refused, an emitted standalone file
passes its own check, and `gemmforge.ops.matmul` works as a drop-in.
"""
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from gemmforge.backends import pipeline
from gemmforge.emit import build_selftest, emit
from gemmforge.ir import Problem, parse
from .conformance import CUDA
from .correctness import operands

pytestmark = pytest.mark.gpu

PROGRAMS = CUDA  # the conformance suite's programs for this backend
KINDS = [("nn", "f32"), ("nt", "f32"), ("nn", "f16"), ("nt", "f16")]


@pytest.fixture(scope="session")
def kernels():
    """Every (program, layout, acc) built once, in parallel."""
    target = pipeline.current_target()
    jobs = [(text, lay, acc) for text in PROGRAMS for lay, acc in KINDS]

    def build(job):
        text, lay, acc = job
        return job, pipeline.compile(parse(text), Problem(1, 1, 1, lay, acc), target)
    with ThreadPoolExecutor(16) as pool:
        return {job: pipeline.load(art) for job, art in pool.map(build, jobs)}


def test_bad_operands_are_refused(kernels):
    import torch
    kernel = kernels[(PROGRAMS[0], "nn", "f32")]
    a = torch.randn(8, 16, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="b must be \\(k, n\\)"):
        kernel(a, torch.randn(8, 8, device="cuda", dtype=torch.float16))
    with pytest.raises(ValueError, match="float16 CUDA tensor"):
        kernel(a.float(), a)


@pytest.mark.parametrize("text", [PROGRAMS[0], PROGRAMS[2], PROGRAMS[4], PROGRAMS[6]])
@pytest.mark.parametrize("layout, acc", [("nn", "f32"), ("nt", "f16")])
def test_standalone_file_passes_its_own_check(tmp_path, text, layout, acc):
    """An emitted .cu, built with plain nvcc (no torch, no gemmforge), passes its main()."""
    program = parse(text)
    cu = emit(Problem(1000, 4096, 333, layout, acc), program, tmp_path)
    exe = build_selftest(cu, program)  # sm_80 code + compute_80 PTX: JIT on Hopper
    for args in ([], ["17", "33", "65"], ["4096", "64", "8192"]):
        done = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "PASS" in done.stdout


@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_ops_matmul_drop_in(layout):
    """gemmforge.ops.matmul picks a program (database or heuristic), builds it once, runs it."""
    import torch
    from gemmforge.ops import matmul
    a, b, b_arg = operands(1000, 4096, 333, layout)
    out = matmul(a, b_arg, layout=layout)
    ref = a.float() @ b.float()
    assert (torch.linalg.norm(out.float() - ref) / torch.linalg.norm(ref)).item() < 5e-3
