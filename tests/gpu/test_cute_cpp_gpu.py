"""GPU tier for cute_cpp beyond the conformance suite (test_conformance_gpu.py checks every
program's answers, sm_90a programs natively, sm_80 ones built from compute_80 code into
sm_90 SASS): repeated launches with the same pointers (the launcher's cached-params path,
and the stream-K workspace re-arm), pred refusing ragged shapes, and a standalone file
passing its own main().
"""
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from gemmforge.backends.cute_cpp import cutlass
from gemmforge.backends import pipeline
from gemmforge.compiler import nvcc
from gemmforge.emit import emit
from gemmforge.ir import Problem, parse
from .conformance import CUTE_CPP
from .correctness import operands, relative_error, tolerance

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    cutlass.include_dirs() is None, reason=f"CUTLASS headers not found: {cutlass.INSTALL_HINT}")]

PRED, PADOP = "pred", "padop"
PROGRAMS = CUTE_CPP  # the conformance suite's programs for this backend
KINDS = [("nn", "f32"), ("nt", "f32"), ("nn", "f16"), ("nt", "f16")]


@pytest.fixture(scope="session")
def kernels():
    """Every (program, layout, acc) built once, in parallel, through compile_and_load (for a
    problem the program serves: ragged for padop programs, aligned for pred ones)."""
    os.environ.setdefault("GEMMFORGE_BUILD_TIMEOUT", "1200")  # CUTLASS sm90 builds are slow
    target = pipeline.current_target()
    jobs = [(text, lay, acc) for text in PROGRAMS for lay, acc in KINDS]

    def build(job):
        text, lay, acc = job
        m, n, k = (17, 33, 65) if f" {PADOP} " in text else (1000, 4096, 336)
        return job, pipeline.compile_and_load(parse(text), Problem(m, n, k, lay, acc), target)
    with ThreadPoolExecutor(os.cpu_count() or 8) as pool:
        return dict(pool.map(build, jobs))


def run_checked(kernel, shape, layout, acc, repeats=1):
    import torch
    m, n, k = shape
    a, b, b_arg = operands(m, n, k, layout)
    ref = a.float() @ b.float()
    out = torch.empty((m, n), device="cuda", dtype=torch.float16)
    for _ in range(repeats):  # same pointers each time: the cached-params launch path
        out.fill_(float("nan"))
        kernel(a, b_arg, out=out)
        torch.cuda.synchronize()
        assert not torch.isnan(out).any(), "unwritten (NaN) outputs"
        err = relative_error(out, ref)
        assert err < tolerance(k, acc), f"relative error {err:.2e}"


@pytest.mark.parametrize("text", [t for t in PROGRAMS if " k1 " not in t or "streamk" in t])
def test_repeated_launches_rearm_the_workspace(kernels, text):
    """Split-K and stream-K reuse their workspace barriers launch after launch."""
    shape = (1000, 4096, 336) if f" {PRED} " in text else (129, 255, 1000)
    run_checked(kernels[(text, "nn", "f32")], shape, "nn", "f32", repeats=3)


def test_pred_refuses_ragged_shapes(kernels):
    """A pred program called at run time with n or k off the 8-half grid fails cleanly."""
    kernel = kernels[(PROGRAMS[0], "nn", "f32")]
    a, _, b = operands(17, 33, 65, "nn")
    with pytest.raises(RuntimeError, match="cudaError 801"):
        kernel(a, b)
    run_checked(kernel, (64, 64, 64), "nn", "f32")  # and the library still works after


def test_standalone_file_passes_its_own_check(tmp_path):
    """An emitted .cu, built with the nvcc command its header gives, passes its main()."""
    os.environ.setdefault("GEMMFORGE_BUILD_TIMEOUT", "1200")
    program = parse(PROGRAMS[2])
    cu = emit(Problem(17, 33, 65, "nt", "f16"), program, tmp_path)
    exe = tmp_path / "selftest"
    nvcc.compile_cuda(cu, exe, [*nvcc.gencode(program.arch), "--expt-relaxed-constexpr",
                                *cutlass.include_flags(), "-DGEMMFORGE_STANDALONE_MAIN"],
                      shared=False)
    for args in ([], ["17", "33", "65"], ["4096", "64", "8192"]):
        done = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "PASS" in done.stdout
