"""GPU tier: every cuda-family path computes the right answer (run on the GPU machine).

Fresh random normal inputs per test, the output NaN-filled first, every element compared
with an fp32 reference by relative Frobenius error; an exact check with {0,1} inputs.
"""
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from gemmforge.compiler import pipeline
from gemmforge.compiler.emit import build_selftest, emit
from gemmforge.ir import Problem, parse
from tests.gpu.correctness import assert_matches_reference, operands

pytestmark = pytest.mark.gpu

PROGRAMS = [
    "cuda_simt sm_80 64x64x32 w2x2 s3 swpad col/4 pred k1 dp c1x1 nows direct",
    "cuda_simt sm_80 32x64x16 w1x2 s1 swnone row/1 padop k3 dp c1x1 nows direct",
    "cuda_wmma sm_80 64x128x32 w2x2 s3 swpad row/8 pred k1 dp c1x1 nows direct",
    "cuda_wmma sm_80 32x32x16 w2x2 s2 swnone row/2 padop k2a dp c1x1 nows direct",
    "cuda_mma sm_80 128x128x32 w2x2 s4 sw128 row/8 pred k1 dp c1x1 nows direct",
    "cuda_mma sm_80 128x256x32 w2x4 s3 sw64 col/8 pred k1 dp c1x1 nows direct",
    "cuda_mma sm_80 64x64x64 w2x2 s3 swpad row/4 padop k4 dp c1x1 nows direct",
    "cuda_mma sm_80 32x32x32 w1x1 s2 swnone row/1 pred k3a dp c1x1 nows direct",
]
SHAPES = [(1, 1, 1), (17, 33, 65), (64, 64, 64), (256, 256, 256), (1000, 4096, 333),
          (4096, 64, 8192), (129, 255, 1000)]
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




@pytest.mark.parametrize("layout, acc", KINDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("text", PROGRAMS)
def test_matches_fp32_reference(kernels, text, shape, layout, acc):
    assert_matches_reference(kernels[(text, layout, acc)], *shape, layout, acc)


@pytest.mark.parametrize("text", PROGRAMS)
def test_exact_on_binary_inputs(kernels, text):
    """{0,1} inputs with k <= 2048: every partial sum is an integer fp16 holds exactly."""
    import torch
    m, n, k = 200, 136, 520
    for layout in ("nn", "nt"):
        a = torch.randint(0, 2, (m, k), device="cuda").half()
        b = torch.randint(0, 2, (k, n), device="cuda").half()
        out = kernels[(text, layout, "f32")](a, b if layout == "nn" else b.t().contiguous())
        assert torch.equal(out.float(), a.float() @ b.float())


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
    """compiler.ops.matmul picks a program (database or heuristic), builds it once, runs it."""
    import torch
    from gemmforge.compiler.ops import matmul
    a, b, b_arg = operands(1000, 4096, 333, layout)
    out = matmul(a, b_arg, layout=layout)
    ref = a.float() @ b.float()
    assert (torch.linalg.norm(out.float() - ref) / torch.linalg.norm(ref)).item() < 5e-3
