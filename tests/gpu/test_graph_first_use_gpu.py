"""A kernel's first launch at a size may be inside a CUDA graph capture (torch.cuda.graph
captures on a stream of its own): in-kernel split-K's self-resetting counters are then
allocated and zeroed outside the capture, so the graph's replays and later launches outside
it are right. For each backend with in-kernel split-K (cuda_wgmma, triton), with and
without pdl.

    pytest -m gpu tests/gpu/test_graph_first_use_gpu.py -q
"""
import pytest

from gemmforge.backends import pipeline
from gemmforge.ir import Problem, check, parse
from .correctness import operands, relative_error, tolerance

pytestmark = pytest.mark.gpu

PROGRAMS = [
    "cuda_wgmma sm_90a 64x64x64 w1x1 s8 sw128 row/8 pred k4i dp c1x1 coop direct",
    "cuda_wgmma sm_90a 64x64x64 w1x1 s8 sw128 row/8 pred k4i dp c1x1 coop direct pdl",
    "triton sm_90a 64x64x64 w1x4 s4 swnone row/8 pred k2i dp c1x1 nows direct",
    "triton sm_90a 64x64x64 w1x4 s4 swnone row/8 pred k2i dp c1x1 nows direct pdl",
]


@pytest.mark.parametrize("text", PROGRAMS)
def test_first_launch_inside_a_capture(text):
    import torch
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("sm_90a programs need an sm_90 device")
    m, n, k = 200, 1000, 4096
    problem = Problem(m, n, k, "nn", "f32")
    program = parse(text)
    assert check(program, problem) is None
    kernel = pipeline.compile_and_load(program, problem)
    torch.manual_seed(5)
    a, b, _ = operands(m, n, k, "nn")
    ref = a.float() @ b.float()
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernel(a, b, out=out)  # the kernel's first launch at this size
    for _ in range(3):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert relative_error(out, ref) < tolerance(k, "f32")
    eager = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    for _ in range(3):  # outside the graph, on the counters the capture left
        kernel(a, b, out=eager)
        torch.cuda.synchronize()
        assert relative_error(eager, ref) < tolerance(k, "f32")
