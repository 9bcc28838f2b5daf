"""GPU tier for cuda_wgmma's small-problem kernels (an H100/H200): operand swap (C^T =
B^T A^T, C written transposed), token-side tiles in steps of 8, deep rings, split-K
reduced inside the kernel (the last slice to arrive sums the planes and leaves its counter
at zero, so repeated launches and launches on two streams stay right), and split-K summed
through a cluster's shared memory (k2c..k8c).

Fresh random normal inputs per test, the output NaN-filled first, every element compared
with an fp32 reference (tests/gpu/correctness.py); shapes from M = 1 to 4099, odd N and K.

    python3 -m pytest -m gpu tests/gpu/test_cuda_wgmma_small_gpu.py -q -x
"""
from concurrent.futures import ThreadPoolExecutor

import pytest

from gemmforge.backends import pipeline
from gemmforge.ir import Problem, check, parse
from .correctness import assert_matches_reference, operands

pytestmark = pytest.mark.gpu

SWAPPED = [  # layout nt only: both swapped operands are read K-major
    "cuda_wgmma sm_90a 16x64x64 w1x1 s12 sw128 row/8 pred k1 dp c1x1 coop direct swap",
    "cuda_wgmma sm_90a 40x128x64 w1x1 s8 sw128 row/8 pred k1 dp c1x1 nows direct swap",
    "cuda_wgmma sm_90a 8x128x64 w1x1 s8 sw128 row/8 padop k4i dp c1x1 coop direct swap",
    "cuda_wgmma sm_90a 56x64x64 w1x1 s8 sw128 row/8 pred k2 dp c1x1 coop direct swap",
    "cuda_wgmma sm_90a 24x128x64 w1x1 s8 sw128 row/8 pred k2a dp c1x1 coop direct swap",
    "cuda_wgmma sm_90a 64x128x64 w1x2 s6 sw128 row/8 pred k3i persistent c1x1 coop direct swap",
]
IN_KERNEL = [  # both layouts
    "cuda_wgmma sm_90a 64x64x64 w1x1 s8 sw128 row/8 pred k4i dp c1x1 coop direct",
    "cuda_wgmma sm_90a 128x128x64 w2x1 s4 sw128 row/8 padop k3i persistent c1x1 coop direct",
    "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 row/1 pred k2i persistent c1x1 pingpong direct",
]
CLUSTER_K = [  # split-K summed through the cluster's shared memory (k2c/k4c/k8c)
    "cuda_wgmma sm_90a 64x64x128 w1x1 s6 sw128 row/8 pred k2c dp c1x1 coop direct pdl",
    "cuda_wgmma sm_90a 64x64x64 w1x1 s8 sw128 row/8 padop k4c dp c1x1 nows direct",
    "cuda_wgmma sm_90a 128x128x64 w2x1 s4 sw128 row/8 pred k8c dp c1x1 coop direct",
]
CLUSTER_K_SWAPPED = [
    "cuda_wgmma sm_90a 8x64x256 w1x1 s5 sw128 row/8 pred k2c dp c1x1 coop direct swap pdl",
    "cuda_wgmma sm_90a 16x64x256 w1x1 s5 sw128 row/8 pred k4c dp c1x1 coop direct swap pdl",
]
PDL = [  # programmatic dependent launch: launched early, waits for the previous kernel
    "cuda_wgmma sm_90a 64x64x64 w1x1 s8 sw128 row/8 pred k1 dp c1x1 coop direct pdl",
    "cuda_wgmma sm_90a 64x64x64 w1x1 s8 sw128 row/8 pred k4i dp c1x1 coop direct pdl",
    "cuda_wgmma sm_90a 128x128x64 w1x1 s6 sw128 row/4 pred k1 persistent c1x1 pingpong tma pdl",
    "cuda_wgmma sm_90a 128x192x64 w1x1 s4 sw128 row/4 pred k1 persistent c2x1 pingpong tma pdl",
]
SHAPES = [(1, 1, 1), (1, 4096, 1024), (7, 200, 520), (17, 33, 65), (77, 1000, 4096),
          (333, 1024, 256), (4099, 136, 264)]
ACCS = ("f32", "f16")
TMA_ROW_ALIGN = 8


def jobs():
    return ([(t, "nt", acc) for t in SWAPPED + CLUSTER_K_SWAPPED for acc in ACCS]
            + [(t, lay, acc) for t in IN_KERNEL + PDL + CLUSTER_K for lay in ("nn", "nt")
               for acc in ACCS])


@pytest.fixture(scope="session")
def kernels(request):
    """Every job's kernel that a selected test names (so `-k k2c` builds only those)."""
    target = pipeline.current_target()
    named = {item.callspec.params.get("text") for item in request.session.items
             if hasattr(item, "callspec")}

    def build(job):
        text, lay, acc = job
        return job, pipeline.compile(parse(text), Problem(256, 256, 256, lay, acc), target)
    with ThreadPoolExecutor(16) as pool:
        return {job: pipeline.load(art)
                for job, art in pool.map(build, [j for j in jobs() if j[0] in named])}


def readable(text: str, shape, layout: str) -> bool:
    _, n, k = shape
    return " padop " in text or (k % TMA_ROW_ALIGN == 0
                                 and (layout == "nt" or n % TMA_ROW_ALIGN == 0))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("text, layout, acc", jobs())
def test_matches_fp32_reference(kernels, text, layout, acc, shape):
    if not readable(text, shape, layout):
        pytest.skip("predicate program, unaligned rows")
    assert_matches_reference(kernels[(text, layout, acc)], *shape, layout, acc)


@pytest.mark.parametrize("text", [SWAPPED[2], SWAPPED[5], *IN_KERNEL])
def test_in_kernel_split_k_leaves_counters_ready(kernels, text):
    """Five launches back to back on one stream, then on a second stream, each into a fresh
    NaN-filled C: every one right, so each launch left its counters at zero."""
    import torch
    m, n, k = 77, 1000, 4096
    kernel = kernels[(text, "nt", "f32")]
    a, b, b_arg = operands(m, n, k, "nt")
    ref = a.float() @ b.float()
    side = torch.cuda.Stream()
    for stream in (torch.cuda.current_stream(), side):
        with torch.cuda.stream(stream):
            outs = [kernel(a, b_arg) for _ in range(5)]
        stream.synchronize()
        for out in outs:
            err = torch.linalg.norm(out.float() - ref) / torch.linalg.norm(ref)
            assert err.item() < 5e-3


def test_swap_needs_layout_nt():
    """verify refuses a swapped cuda_wgmma program for layout nn, saying why."""
    reason = check(parse(SWAPPED[0]), Problem(64, 64, 64, "nn", "f32"))
    assert reason and "layout nt" in reason


@pytest.mark.parametrize("text", PDL + CLUSTER_K[:1])
@pytest.mark.parametrize("graph", [False, True], ids=["stream", "graph"])
def test_pdl_chain_reads_each_previous_output(kernels, text, graph):
    """y <- y @ W six times back to back (each launch reads the output the launch before
    wrote), on a stream and replayed from a CUDA graph: with pdl a launch may start before
    its predecessor ends, and must still wait for its memory. Compared with the same chain
    through torch.matmul."""
    import torch
    m, k = 333, 1024
    kernel = kernels[(text, "nn", "f32")]
    torch.manual_seed(3)
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    w = (torch.randn(k, k, device="cuda") / k ** 0.5).half()

    def chain(mm):
        y = x
        for _ in range(6):
            y = mm(y, w)
        return y
    ref = chain(torch.matmul)
    if graph:
        chain(kernel)  # warm: workspaces and counters allocated outside the capture
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = chain(kernel)
        g.replay()
    else:
        out = chain(kernel)
    torch.cuda.synchronize()
    err = torch.linalg.norm(out.float() - ref.float()) / torch.linalg.norm(ref.float())
    assert err.item() < 2e-2
