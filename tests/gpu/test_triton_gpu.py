"""GPU tier for the triton backend beyond the conformance suite (test_conformance_gpu.py
checks every program's answers): the raw-pointer launch on a side stream and in a CUDA
graph; pdl programs (programmatic dependent launch) against fp32, and in chains where
each launch reads the previous one's output. A TMA program is not legal where n or k is
not a multiple of 8 (16-byte row strides); there the test runs the same program with
epilogue direct. sm_90a programs need a Hopper device and skip elsewhere.

    pytest -m gpu tests/gpu/test_triton_gpu.py -q -k pdl
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


# ---- pdl: programmatic dependent launch (every kernel waits with gdc_wait first) ---------

PDL = [
    "triton sm_90a 64x32x64 w2x2 s6 swnone row/8 pred k1 dp c1x1 nows direct pdl",
    "triton sm_90a 64x64x64 w1x4 s14 swnone row/8 pred k2i dp c1x1 nows direct pdl",
    "triton sm_90a 64x64x64 w2x2 s4 swnone row/8 pred k4 dp c1x1 nows direct pdl",
    "triton sm_90a 64x64x64 w1x4 s4 swnone row/8 pred k3a persistent c1x1 nows tma pdl",
    "triton sm_90a 128x128x64 w2x2 s3 swnone row/8 pred k1 persistent c1x1 nows tma pdl",
    "triton sm_90a 64x64x64 w1x4 s2 swnone row/8 pred k1 dp c1x1 nows direct swap pdl",
]
# one shape per alignment class of (N, K, M * N): all aligned, none, K only; and M = 4099
PDL_SHAPES = [(1, 4096, 1024), (17, 33, 65), (77, 1000, 4096), (4099, 136, 264)]
PDL_JOBS = ([(text, "nn", "f32") for text in PDL]
            + [(PDL[0], "nt", "f16"), (PDL[3], "nt", "f16")])


@pytest.mark.parametrize("shape", PDL_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("text, layout, acc", PDL_JOBS)
def test_pdl_matches_fp32_reference(cache, text, layout, acc, shape):
    """Each pdl program, ragged and aligned: every element written and right."""
    from .correctness import assert_matches_reference
    m, n, k = shape
    problem = Problem(m, n, k, layout, acc)
    kernel = pipeline.compile_and_load(legal_program(text, problem), problem, cache=cache)
    assert all(kp.launch_pdl for kp in kernel.plan.kernels)
    assert_matches_reference(kernel, m, n, k, layout, acc)


@pytest.mark.parametrize("path", ["raw", "run", "graph"])
@pytest.mark.parametrize("text", PDL[:4])
def test_pdl_chain_reads_each_previous_output(cache, monkeypatch, text, path):
    """y <- y @ W six times back to back on one stream, all through one workspace (each
    launch reads the output the launch before wrote, and split-K reuses the workspace
    the previous launch's reduce kernel reads): with pdl a launch may start before its
    predecessor ends and must still wait for its memory. Through Triton's C launcher
    (raw), through compiled.run (run), and replayed from a CUDA graph. Every output is
    NaN-filled first and checked against fp32 of the previous output times W. All
    tensors, the workspace and the kernel's per-size state (in-kernel split-K's
    counters) are made before the capture, by a warm-up chain on the capture stream."""
    import torch
    monkeypatch.setenv("GEMMFORGE_TRITON_RAW_LAUNCH", "0" if path == "run" else "1")
    m, k, steps = 333, 1024, 6
    problem = Problem(m, k, k, "nn", "f32")
    kernel = pipeline.compile_and_load(legal_program(text, problem), problem, cache=cache)
    assert all(kp.launch_pdl for kp in kernel.plan.kernels)
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(m, k, device="cuda", dtype=torch.float16, generator=gen)
    w = (torch.randn(k, k, device="cuda", generator=gen) / k ** 0.5).half()
    ys = [x] + [torch.empty(m, k, device="cuda", dtype=torch.float16) for _ in range(steps)]
    need = kernel.workspace_bytes(m, k, k)
    ws = torch.empty(max(need, 1), dtype=torch.uint8, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())

    def chain():
        for y, out in zip(ys, ys[1:]):
            kernel.launch(y.data_ptr(), w.data_ptr(), out.data_ptr(), m, k, k,
                          ws.data_ptr() if need else 0, need, stream.cuda_stream)

    with torch.cuda.stream(stream):
        chain()  # warm: per-size state (counters) made here, outside any capture
    stream.synchronize()
    if path == "run":
        assert not any(prepared.raw for prepared in kernel._prepared.values())
    for out in ys[1:]:
        out.fill_(float("nan"))
    torch.cuda.synchronize()
    if path == "graph":
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            chain()
        for out in ys[1:]:  # the capture ran nothing: fill again, then replay
            out.fill_(float("nan"))
        torch.cuda.synchronize()
        graph.replay()
    else:
        with torch.cuda.stream(stream):
            chain()
    torch.cuda.synchronize()
    for i, (y, out) in enumerate(zip(ys, ys[1:])):
        assert not torch.isnan(out).any(), f"launch {i}: unwritten (NaN) outputs"
        assert relative_error(out, y.float() @ w.float()) < 5e-3, f"launch {i}"
