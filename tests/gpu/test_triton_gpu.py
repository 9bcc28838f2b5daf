"""GPU tier for the triton backend beyond the conformance suite (test_conformance_gpu.py
checks every program's answers): the raw-pointer launch on a side stream and in a CUDA
graph. A TMA program is not legal where n or k is not a multiple of 8 (16-byte row
strides); there the test runs the same program with epilogue direct. sm_90a programs need
a Hopper device and skip elsewhere.
"""

import pytest

from gemmforge.backends import pipeline
from gemmforge.compiler.artifacts import ArtifactCache
from gemmforge.ir import Problem, check, parse
from gemmforge.ir.program import Epilogue
from .conformance import TRITON
from .correctness import operands, relative_error

pytestmark = pytest.mark.gpu

PROGRAMS = TRITON  # the conformance suite's programs for this backend
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
