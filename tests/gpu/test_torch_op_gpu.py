"""GPU tier: torch.ops.gemmforge.mm and gemmforge.matmul through it: correct against an fp32
reference, on the current stream, in a CUDA graph, under torch.compile(fullgraph=True),
and every input it can't serve answered by torch.matmul instead (run on the GPU machine)."""
import pytest

from .correctness import operands, relative_error, tolerance

pytestmark = pytest.mark.gpu

SHAPES = [(128, 256, 512), (1000, 4096, 333), (4096, 4096, 4096), (64, 64, 64)]
LAYOUT_CODE = {"nn": 0, "nt": 1}


@pytest.fixture(scope="module")
def torch():
    import torch
    from gemmforge.torch_op import load_op
    load_op()
    return torch


def _check(torch, out, a, b):
    assert out.dtype == torch.float16 and out.shape == (a.shape[0], b.shape[1])
    ref = a.float() @ b.float()
    assert relative_error(out, ref) < tolerance(a.shape[1], "f32")


@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("m, n, k", SHAPES)
def test_matmul_through_the_op(torch, m, n, k, layout):
    """matmul resolves, builds and registers the shape, then the op alone runs it."""
    import gemmforge
    from gemmforge import ops
    from gemmforge.ir import Problem
    from gemmforge.torch_op import bucket
    a, b, b_arg = operands(m, n, k, layout)
    _check(torch, gemmforge.matmul(a, b_arg, layout=layout), a, b)
    choice = ops.choice_for(Problem(bucket(m), n, k, layout), ops._arch_of(ops.device_sm(0)),
                            ops.device_class_of(0), "slower")
    registered = torch.ops.gemmforge._registered(m, n, k, LAYOUT_CODE[layout], 0, 0)
    if choice.cublas:
        assert registered == "cublas"
    elif choice.program.backend != "triton":
        assert registered == str(choice.program)
        b_kn = b_arg if layout == "nn" else b_arg.t()
        _check(torch, torch.ops.gemmforge.mm(a, b_kn), a, b)


def _registered_operands(torch, m=1000, n=1024, k=336):
    """Operands of a shape registered afresh (the op's table and its once-per-reason
    warnings cleared first, and matmul's routes with them). The shape is below
    OP_HOST_BOUND_FLOPS, so the op serves it whatever backend the shipped file names near it
    (a Triton winner is swapped for a program with a C launch entry)."""
    import gemmforge
    from gemmforge import ops
    torch.ops.gemmforge._forget_all()
    ops._routes.clear()
    a, b, _ = operands(m, n, k, "nn")
    gemmforge.matmul(a, b)
    assert torch.ops.gemmforge._registered(m, n, k, 0, 0, 0) != ""
    return a, b


def test_runs_on_the_current_stream(torch):
    a, b = _registered_operands(torch)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = torch.ops.gemmforge.mm(a, b)
    stream.synchronize()
    _check(torch, out, a, b)


def test_cuda_graph_capture_and_replay(torch):
    a, b = _registered_operands(torch)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        torch.ops.gemmforge.mm(a, b)  # warm-up on the capture stream, outside the capture
        with torch.cuda.graph(graph, stream=stream):
            out = torch.ops.gemmforge.mm(a, b)
    torch.cuda.current_stream().wait_stream(stream)
    a.copy_(torch.randn_like(a))
    b.copy_(torch.randn_like(b))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    _check(torch, out, a, b)


def test_torch_compile_fullgraph(torch):
    import gemmforge
    a, b = _registered_operands(torch)
    op = torch.compile(lambda x, y: torch.ops.gemmforge.mm(x, y) * 2, fullgraph=True)
    _check(torch, op(a, b) / 2, a, b)
    face = torch.compile(lambda x, y: gemmforge.matmul(x, y) + 0, fullgraph=True)
    _check(torch, face(a, b), a, b)


@pytest.mark.parametrize("case", ["misaligned", "strided", "float32", "batched", "unregistered"])
def test_what_the_op_cant_serve_goes_to_torch_matmul(torch, case, capfd):
    a, b = _registered_operands(torch)
    m, k = a.shape
    if case == "misaligned":  # a view 2 bytes into its storage: no TMA
        a = torch.randn(m * k + 8, device="cuda").half()[1:1 + m * k].view(m, k)
    elif case == "strided":
        b = torch.randn(k, 2 * b.shape[1], device="cuda").half()[:, ::2]
    elif case == "float32":
        a, b = a.float(), b.float()
    elif case == "batched":
        a = torch.stack([a, a])
    elif case == "unregistered":
        a = a[: m // 2 - 8].contiguous()  # another token bucket
    out = torch.ops.gemmforge.mm(a, b)
    ref = torch.matmul(a.float(), b.float())
    assert out.shape == ref.shape and relative_error(out, ref) < tolerance(k, "f32")
    torch.cuda.synchronize()
    assert "torch.matmul serves it" in capfd.readouterr().err or case == "batched"


def _triton_chosen(monkeypatch):
    pytest.importorskip("triton")
    from gemmforge import ops
    from gemmforge.ir import parse
    from gemmforge.dispatch.choice import Choice
    import torch
    program = parse("triton sm_90a 128x128x64 w2x2 s3 swnone row/8 pred k1 dp c1x1 nows direct")
    real = ops.choice_for

    def choice_for(problem, arch, device_class, cublas="never", exclude=frozenset()):
        if exclude:  # asked for another backend's program: the real resolver's
            return real(problem, arch, device_class, "never", exclude)
        return Choice(program, "heuristic")
    monkeypatch.setattr(ops, "choice_for", choice_for)
    monkeypatch.setattr(ops, "_routes", {})
    torch.ops.gemmforge._forget_all()
    return ops


def test_a_triton_kernel_stays_a_python_kernel(torch, monkeypatch):
    """Above OP_HOST_BOUND_FLOPS a program without a C launch entry (Triton) runs through
    its Python Kernel."""
    import gemmforge
    ops = _triton_chosen(monkeypatch)
    monkeypatch.setattr(ops, "OP_HOST_BOUND_FLOPS", 0)
    a, b, _ = operands(200, 136, 72, "nn")
    _check(torch, gemmforge.matmul(a, b), a, b)
    assert torch.ops.gemmforge._registered(200, 136, 72, 0, 0, 0) == ""
    assert ops._routes[(256, 136, 72, "nn", 0, "f16")] is not None  # its token bucket


def test_a_small_triton_shape_runs_another_backends_program_on_the_op(torch, monkeypatch):
    """Below OP_HOST_BOUND_FLOPS the op registers the program resolved without Triton (a
    neighbour's cuda_wgmma winner or the heuristic's) and runs it."""
    import gemmforge
    ops = _triton_chosen(monkeypatch)
    a, b, _ = operands(208, 136, 72, "nn")
    _check(torch, gemmforge.matmul(a, b), a, b)
    registered = torch.ops.gemmforge._registered(208, 136, 72, 0, 0, 0)
    assert registered and not registered.startswith("triton")
    assert ops._routes[(256, 136, 72, "nn", 0, "f16")] is None
    _check(torch, gemmforge.matmul(a, b), a, b)  # the second call: the op's table
