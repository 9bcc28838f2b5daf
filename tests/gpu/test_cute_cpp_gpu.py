"""GPU tier for cute_cpp: every program computes the right answer on H100/H200 (sm_90a
programs natively, sm_80 programs built from compute_80 code into sm_90 SASS).

Fresh random normal inputs per test, the output NaN-filled first, every element compared
with an fp32 reference by relative Frobenius error; repeated launches with the same
pointers (the launcher's cached-params path, and the stream-K workspace re-arm); an exact
check with {0,1} inputs; a standalone file passing its own main().
"""
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from gemmforge.backends.cute_cpp import cutlass
from gemmforge.compiler import nvcc, pipeline
from gemmforge.compiler.emit import emit
from gemmforge.ir import Problem, parse
from tests.gpu.correctness import operands, relative_error, tolerance

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    cutlass.include_dirs() is None, reason=f"CUTLASS headers not found: {cutlass.INSTALL_HINT}")]

PRED, PADOP = "pred", "padop"
PROGRAMS = [
    "cute_cpp sm_90a 128x256x64 w2x1 s3 swnone row/8 pred k1 persistent c2x1 coop tma",
    "cute_cpp sm_90a 128x128x64 w2x1 s4 swnone col/8 pred k1 streamk c1x2 coop tma",
    "cute_cpp sm_90a 128x128x64 w2x1 s4 swnone row/2 padop k4 dp c1x1 coop direct",
    "cute_cpp sm_90a 128x128x64 w2x1 s4 swnone row/1 padop k3a persistent c1x1 coop direct",
    "cute_cpp sm_90a 128x128x64 w1x1 s4 swnone col/4 padop k1 dp c1x1 pingpong direct",
    "cute_cpp sm_90a 64x128x64 w1x1 s4 swnone row/1 pred k1 persistent c2x1 pingpong tma",
    "cute_cpp sm_90a 128x128x64 w1x1 s4 swnone col/1 pred k1 dp c1x1 nows direct",
    "cute_cpp sm_80 128x128x32 w1x1 s3 swnone col/4 padop k2 dp c1x1 nows smem",
    "cute_cpp sm_80 256x128x32 w2x1 s3 swnone row/2 pred k1 dp c1x1 nows smem",
    # a 192-wide tile (TILE_EXTRAS): the tile cuBLAS picks for 12288x256x16384
    "cute_cpp sm_90a 128x192x64 w2x1 s4 swnone row/8 pred k1 persistent c2x1 coop tma",
    # one ping-pong warpgroup holding 192 accumulators (cute_cpp's consumer budget)
    "cute_cpp sm_90a 192x128x64 w1x1 s4 swnone row/8 pred k1 persistent c1x1 pingpong tma",
    # consumers split along N (w1x2): CUTLASS's cooperative kernel on C^T = B^T A^T, with a
    # cluster and with stream-K, both swapped into its frame
    "cute_cpp sm_90a 192x128x64 w1x2 s5 swnone row/8 pred k1 persistent c2x1 coop tma",
    "cute_cpp sm_90a 256x128x64 w1x2 s4 swnone col/4 pred k1 streamk c1x1 coop tma",
]
SHAPES = [(1000, 4096, 336), (4096, 64, 8192), (256, 256, 256), (17, 33, 65)]
BIG = (8192, 8192, 8192)
KINDS = [("nn", "f32"), ("nt", "f32"), ("nn", "f16"), ("nt", "f16")]




def aligned(n: int, k: int) -> bool:
    return n % 8 == 0 and k % 8 == 0


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


@pytest.mark.parametrize("layout, acc", KINDS)
@pytest.mark.parametrize("shape", [*SHAPES, BIG], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("text", PROGRAMS)
def test_matches_fp32_reference(kernels, text, shape, layout, acc):
    if shape == BIG and os.environ.get("GEMMFORGE_BIG") != "1":
        pytest.skip("8192^3 runs only with GEMMFORGE_BIG=1")
    if f" {PRED} " in text and not aligned(shape[1], shape[2]):
        pytest.skip("pred programs serve n, k multiples of 8 (test_pred_refuses_ragged_shapes)")
    run_checked(kernels[(text, layout, acc)], shape, layout, acc)


@pytest.mark.parametrize("text", [t for t in PROGRAMS if " k1 " not in t or "streamk" in t])
def test_repeated_launches_rearm_the_workspace(kernels, text):
    """Split-K and stream-K reuse their workspace barriers launch after launch."""
    shape = (1000, 4096, 336) if f" {PRED} " in text else (129, 255, 1000)
    run_checked(kernels[(text, "nn", "f32")], shape, "nn", "f32", repeats=3)


@pytest.mark.parametrize("text", [PROGRAMS[0], PROGRAMS[4], PROGRAMS[7]])
def test_exact_on_binary_inputs(kernels, text):
    """{0,1} inputs with k <= 2048: every partial sum is an integer fp16 holds exactly."""
    import torch
    m, n, k = 200, 136, 520
    for layout in ("nn", "nt"):
        a = torch.randint(0, 2, (m, k), device="cuda").half()
        b = torch.randint(0, 2, (k, n), device="cuda").half()
        out = kernels[(text, layout, "f32")](a, b if layout == "nn" else b.t().contiguous())
        assert torch.equal(out.float(), a.float() @ b.float())


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
