"""GPU tier for the triton backend (run on the GPU machine): every program computes the
right answer through compiler.pipeline.compile_and_load.

Fresh random normal inputs per test, the output NaN-filled first, every element compared
with an fp32 reference by relative Frobenius error (5e-3 with an fp32 accumulator; with
fp16, max(5e-3, 2 * 2^-11 * sqrt(k))). A TMA program is not legal where n or k is not a
multiple of 8 (16-byte row strides); for those shapes the test runs the same program with
epilogue direct, which is what a search would be told to do. sm_90a programs need a
Hopper device and skip elsewhere; sm_80 programs run everywhere (on Hopper they are
compiled for sm_90 with tl.dot kept on mma.sync).
"""

import pytest

from gemmforge.compiler import pipeline
from gemmforge.compiler.artifacts import ArtifactCache
from gemmforge.ir import Problem, check, parse
from gemmforge.ir.program import Epilogue
from tests.gpu.correctness import assert_matches_reference, operands, relative_error

pytestmark = pytest.mark.gpu

PROGRAMS = [
    "triton sm_80 64x64x32 w2x2 s3 swnone row/8 pred k1 dp c1x1 nows direct",
    "triton sm_80 64x64x64 w2x2 s3 swnone col/4 pred k4 dp c1x1 nows direct",
    "triton sm_80 128x64x32 w2x2 s4 swnone row/8 pred k3a persistent c1x1 nows direct",
    "triton sm_90a 128x128x64 w2x2 s3 swnone row/8 pred k1 dp c1x1 nows direct",
    "triton sm_90a 128x128x64 w2x2 s3 swnone row/8 pred k1 persistent c1x1 nows tma",
    "triton sm_90a 128x64x64 w1x4 s4 swnone col/4 pred k4 dp c1x1 nows tma",
]
SHAPES = [(1, 1, 1), (17, 33, 65), (1000, 4096, 333), (4096, 64, 8192), (256, 256, 256)]
KINDS = [("nn", "f32"), ("nt", "f32"), ("nn", "f16"), ("nt", "f16")]




@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    return ArtifactCache(tmp_path_factory.mktemp("triton-artifacts"))


def legal_program(text: str, problem: Problem):
    """`text` for `problem`, with TMA swapped for epilogue direct where strides forbid it;
    skips sm_90a programs on devices that aren't Hopper."""
    import torch
    program = parse(text)
    if program.arch.value == "sm_90a" and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("sm_90a programs need an sm_90 device")
    if check(program, problem) and program.epilogue == Epilogue.TMA:
        program = program.replace(epilogue=Epilogue.DIRECT)
    reason = check(program, problem)
    assert reason is None, reason
    return program






@pytest.mark.parametrize("layout, acc", KINDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("text", PROGRAMS)
def test_matches_fp32_reference(cache, text, shape, layout, acc):
    m, n, k = shape
    problem = Problem(m, n, k, layout, acc)
    kernel = pipeline.compile_and_load(legal_program(text, problem), problem, cache=cache)
    assert_matches_reference(kernel, m, n, k, layout, acc)


@pytest.mark.parametrize("text", PROGRAMS)
def test_exact_on_binary_inputs(cache, text):
    """{0,1} inputs with k <= 2048: every partial sum is an integer fp16 holds exactly."""
    import torch
    m, n, k = 200, 136, 520
    problem = Problem(m, n, k, "nt", "f32")
    kernel = pipeline.compile_and_load(legal_program(text, problem), problem, cache=cache)
    a, b, b_arg = operands(m, n, k, "nt", binary=True)
    out = kernel(a, b_arg)
    torch.cuda.synchronize()
    assert torch.equal(out.float(), a.float() @ b.float())


@pytest.mark.parametrize("text", [PROGRAMS[2], PROGRAMS[4]])
def test_raw_pointer_launch_on_a_side_stream_and_in_a_cuda_graph(cache, text):
    """Kernel.launch with plain ints on a non-default stream, then replayed from a graph
    (the benchmark's path): host descriptors and the split-K kernels must be capturable."""
    import torch
    m, n, k = 512, 384, 1024
    problem = Problem(m, n, k, "nn", "f32")
    kernel = pipeline.compile_and_load(legal_program(text, problem), problem, cache=cache)
    a, b, _ = operands(m, n, k, "nn")
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    need = kernel.workspace_bytes(m, n, k)
    ws = torch.empty(max(need, 1), dtype=torch.uint8, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())  # the inputs were made on the default one

    def launch():
        kernel.launch(a.data_ptr(), b.data_ptr(), out.data_ptr(), m, n, k,
                      ws.data_ptr() if need else 0, need, stream.cuda_stream)

    with torch.cuda.stream(stream):
        launch()
    stream.synchronize()
    ref = a.float() @ b.float()
    assert relative_error(out, ref) < 5e-3
    out.fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        launch()
    graph.replay()
    torch.cuda.synchronize()
    assert not torch.isnan(out).any() and relative_error(out, ref) < 5e-3
