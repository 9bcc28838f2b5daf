"""GPU tier for the triton backend's small-problem values (run on the GPU machine): swap_ab
(tl.dot(B^T, A^T), C stored transposed), 16-row token tiles, deep rings, and split-K
reduced inside the kernel (per-tile counters the last slice resets, so repeated launches,
launches on a second stream and CUDA-graph replays stay right with no memset).

Fresh random normal inputs per test, the output NaN-filled first, every element compared
with an fp32 reference (tests/gpu/correctness.py); M from 1 to 4099, odd N and K, both
layouts and both accumulators. TMA programs run with epilogue direct where n or k is not a
multiple of 8 (tests/gpu/test_triton_gpu.legal_program).

    python3 -m pytest -m gpu tests/gpu/test_triton_small_gpu.py -q -x
"""
import pytest

from gemmforge.backends import pipeline
from gemmforge.compiler.artifacts import ArtifactCache
from gemmforge.ir import Problem, Reduction, parse
from .correctness import assert_matches_reference, operands, relative_error
from .test_triton_gpu import legal_program

pytestmark = pytest.mark.gpu

PROGRAMS = [
    "triton sm_90a 16x64x64 w1x4 s16 swnone row/1 pred k1 dp c1x1 nows direct swap",
    "triton sm_90a 16x128x64 w1x4 s8 swnone row/1 pred k4i dp c1x1 nows direct swap",
    "triton sm_90a 64x64x64 w1x4 s12 swnone row/8 pred k2i persistent c1x1 nows direct swap",
    "triton sm_90a 32x128x64 w1x4 s6 swnone row/1 pred k2i dp c1x1 nows tma swap",
    "triton sm_90a 64x64x64 w1x4 s12 swnone row/8 pred k3i dp c1x1 nows direct",
    "triton sm_80 16x32x32 w1x1 s8 swnone row/1 pred k3i dp c1x1 nows direct swap",
    "triton sm_80 32x64x32 w1x2 s6 swnone row/1 pred k2 dp c1x1 nows direct swap",
]
IN_KERNEL = [t for t in PROGRAMS if parse(t).split_k.reduction == Reduction.INKERNEL]
SHAPES = [(1, 1, 1), (1, 4096, 1024), (7, 200, 520), (16, 333, 1001), (77, 1000, 4096),
          (333, 1024, 256), (4099, 136, 264)]
KINDS = [("nn", "f32"), ("nt", "f32"), ("nn", "f16"), ("nt", "f16")]


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    return ArtifactCache(tmp_path_factory.mktemp("triton-small-artifacts"))


@pytest.mark.parametrize("layout, acc", KINDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("text", PROGRAMS)
def test_matches_fp32_reference(cache, text, shape, layout, acc):
    m, n, k = shape
    problem = Problem(m, n, k, layout, acc)
    kernel = pipeline.compile_and_load(legal_program(text, problem), problem, cache=cache)
    assert_matches_reference(kernel, m, n, k, layout, acc)


@pytest.mark.parametrize("text", IN_KERNEL)
def test_in_kernel_split_k_needs_no_clearing(cache, text):
    """Five launches on one stream, five on a second, then graph replays, through a raw
    workspace filled with garbage (0xFF: NaN as fp32) each time: the partials are written
    before they are read, and each launch leaves its counters at zero."""
    import torch
    m, n, k = 77, 1000, 4096
    problem = Problem(m, n, k, "nt", "f32")
    kernel = pipeline.compile_and_load(legal_program(text, problem), problem, cache=cache)
    assert kernel.zeroed_bytes(m, n, k) > 0
    a, b, b_arg = operands(m, n, k, "nt")
    ref = a.float() @ b.float()
    need = kernel.workspace_bytes(m, n, k)
    ws = torch.full((max(need, 1),), 255, dtype=torch.uint8, device="cuda")
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())

    def launch(stream):
        kernel.launch(a.data_ptr(), b_arg.data_ptr(), out.data_ptr(), m, n, k,
                      ws.data_ptr(), need, stream.cuda_stream)

    for stream in (torch.cuda.current_stream(), side):
        with torch.cuda.stream(stream):
            for _ in range(5):
                out.fill_(float("nan"))
                ws.fill_(255)
                launch(stream)
                stream.synchronize()
                assert relative_error(out, ref) < 5e-3
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        launch(side)
    for _ in range(3):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert not torch.isnan(out).any() and relative_error(out, ref) < 5e-3
