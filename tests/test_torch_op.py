"""torch.ops.gemmforge.mm on the CPU: the C++ extension builds against the CPU torch; its
registration table; fallbacks to torch.matmul (one warning per reason); fake/meta shapes
and torch.compile(fullgraph=True) tracing; matmul's routing rules. The CUDA path is in
tests/gpu/test_torch_op_gpu.py."""
from __future__ import annotations

import ctypes
import shutil

import pytest

torch = pytest.importorskip("torch")

from gemmforge import torch_op  # noqa: E402
from gemmforge import ops  # noqa: E402

needs_compiler = pytest.mark.skipif(
    shutil.which("c++") is None or shutil.which("ninja") is None,
    reason="no C++ compiler or ninja here: torch.ops.gemmforge can't be built")


@pytest.fixture
def mm():
    """The op, built once per session into the session's private cache; its table and
    warnings cleared."""
    op = torch_op.load_op()
    torch.ops.gemmforge._forget_all()
    yield op
    torch.ops.gemmforge._forget_all()


def _warnings(capfd) -> list[str]:
    return [line for line in capfd.readouterr().err.splitlines() if "gemmforge.mm:" in line]


@needs_compiler
def test_cpu_tensors_fall_back_with_one_warning(mm, capfd):
    a, b = torch.randn(8, 16).half(), torch.randn(16, 4).half()
    assert torch.equal(mm(a, b), torch.matmul(a, b))
    assert torch.equal(mm(a, b), torch.matmul(a, b))
    (line,) = _warnings(capfd)
    assert "operands are not CUDA tensors; torch.matmul serves it" in line


@needs_compiler
def test_wrong_shapes_raise_torch_matmuls_error(mm):
    for device in ("cpu", "meta"):
        with pytest.raises(RuntimeError, match=r"cannot be multiplied|same reduction dim"):
            mm(torch.randn(8, 16).half().to(device), torch.randn(15, 4).half().to(device))


@needs_compiler
@pytest.mark.parametrize("a_shape, b_shape, dtype, out_shape", [
    ((8, 16), (16, 4), torch.float16, (8, 4)),
    ((3, 8, 16), (16, 4), torch.float16, (3, 8, 4)),   # batched: torch.matmul's rules
    ((8, 16), (16, 4), torch.float32, (8, 4)),
    ((8, 16), (16, 4), torch.bfloat16, (8, 4)),
    ((3, 8, 16), (16, 4), torch.bfloat16, (3, 8, 4)),
])
def test_meta_shapes_follow_torch_matmul(mm, a_shape, b_shape, dtype, out_shape):
    a = torch.empty(a_shape, dtype=dtype, device="meta")
    b = torch.empty(b_shape, dtype=dtype, device="meta")
    c = mm(a, b)
    assert c.shape == out_shape and c.dtype == dtype and c.device.type == "meta"


@needs_compiler
def test_torch_compile_fullgraph_traces_the_op(mm, capfd):
    """Dynamo and AOT autograd trace the op through its meta kernel (fake tensors): one
    graph, no break; run eagerly on the CPU it falls back to torch.matmul."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    @torch.compile(fullgraph=True, backend=backend)
    def f(a, b):
        return torch.ops.gemmforge.mm(a, b) * 2

    a, b = torch.randn(8, 16).half(), torch.randn(16, 4).half()
    assert torch.equal(f(a, b), torch.matmul(a, b) * 2)
    assert len(graphs) == 1
    assert any(node.target in (torch.ops.gemmforge.mm, torch.ops.gemmforge.mm.default)
               for node in graphs[0].graph.nodes)
    compiled = torch.compile(lambda a, b: torch.ops.gemmforge.mm(a, b), fullgraph=True,
                             backend="aot_eager")
    assert torch.equal(compiled(a, b), torch.matmul(a, b))


@needs_compiler
def test_registration_table(mm):
    libc = ctypes.CDLL(None)
    address = ctypes.cast(libc.abs, ctypes.c_void_p).value
    workspace = torch.empty(64, dtype=torch.uint8)
    torch.ops.gemmforge._register(8, 4, 16, 1, 0, 0, address, 0, workspace, 64, "some program")
    assert torch.ops.gemmforge._registered(8, 4, 16, 1, 0, 0) == "some program"
    # one entry per token bucket: every m from 5 to 8 finds it, 4 and 9 do not
    assert torch.ops.gemmforge._registered(5, 4, 16, 1, 0, 0) == "some program"
    assert torch.ops.gemmforge._registered(4, 4, 16, 1, 0, 0) == ""
    assert torch.ops.gemmforge._registered(9, 4, 16, 1, 0, 0) == ""
    assert [torch.ops.gemmforge._bucket(m) for m in (1, 2, 3, 77, 4096, 4097)] == [
        torch_op.bucket(m) for m in (1, 2, 3, 77, 4096, 4097)] == [1, 2, 4, 128, 4096, 8192]
    assert torch.ops.gemmforge._registered(8, 4, 16, 0, 0, 0) == ""
    assert torch.ops.gemmforge._registered(8, 4, 16, 1, 0, 1) == ""
    with pytest.raises(RuntimeError, match="layout 0 \\(nn\\) or 1 \\(nt\\)"):
        torch.ops.gemmforge._register(8, 4, 16, 2, 0, 0, address, 0, workspace, 64, "p")
    with pytest.raises(RuntimeError, match="m, n and k must be positive"):
        torch.ops.gemmforge._register(0, 4, 16, 0, 0, 0, address, 0, workspace, 64, "p")
    with pytest.raises(RuntimeError, match="holds 64 bytes, not 65"):
        torch.ops.gemmforge._register(8, 4, 16, 0, 0, 0, address, 0, workspace, 65, "p")
    torch_op.register_cublas(64, 8, 16, "nt", 0)  # cuBLAS's bucket: no launch entry at all
    assert torch.ops.gemmforge._registered(40, 8, 16, 1, 0, 0) == torch_op.CUBLAS
    assert torch.ops.gemmforge._forget_all() == 2
    assert torch.ops.gemmforge._registered(8, 4, 16, 1, 0, 0) == ""


def test_layout_of_mirrors_the_op():
    b = torch.empty(16, 4)
    assert torch_op.layout_of(b) == "nn"
    assert torch_op.layout_of(torch.empty(4, 16).t()) == "nt"
    assert torch_op.layout_of(torch.empty(16, 8)[:, ::2]) is None
    assert torch_op.layout_of(torch.empty(8, 32).t()[:, :4]) == "nt"  # rows of (n, k) at stride k
    assert torch_op.layout_of(torch.empty(8, 32)[:, :16].t()) is None   # rows at stride 32 != k


def test_launch_address():
    libc = ctypes.CDLL(None)

    class K:
        _launch = libc.abs

    assert torch_op.launch_address(K()) == ctypes.cast(libc.abs, ctypes.c_void_p).value
    assert torch_op.launch_address(object()) is None


def test_matmul_routes_only_what_the_op_can_serve():
    f16 = torch.float16
    a, b = torch.empty(8, 16, dtype=f16), torch.empty(16, 4, dtype=f16)
    assert ops._key(a, b) is None  # CPU tensors: the op falls back
    meta = dict(dtype=f16, device="meta")
    assert ops._key(torch.empty(8, 16, **meta), torch.empty(16, 4, **meta)) is None


def test_op_unavailable_warns_once_and_matmul_keeps_its_python_path(monkeypatch):
    monkeypatch.setattr(torch_op, "_state", {})
    monkeypatch.setattr(torch_op, "_build_and_load",
                        lambda: (_ for _ in ()).throw(OSError("no compiler")))
    with pytest.warns(UserWarning, match="could not be built: OSError: no compiler"):
        assert torch_op.op_available() is False
    assert torch_op.op_available() is False  # once
    with pytest.raises(torch_op.OpUnavailable, match="no compiler"):
        torch_op.load_op()


def test_torch_op_knob_skips_the_build(monkeypatch):
    monkeypatch.setenv("GEMMFORGE_TORCH_OP", "0")
    monkeypatch.setattr(ops, "_op_state", {})
    monkeypatch.setattr(torch_op, "load_op", lambda: pytest.fail("built the op"))
    assert ops._op_ready() is False


@needs_compiler
def test_matmul_traces_fullgraph_to_the_op(mm, monkeypatch):
    """Under torch.compile, gemmforge.matmul is the op alone (nothing to register on fake
    tensors): one graph holding torch.ops.gemmforge.mm."""
    import gemmforge
    monkeypatch.setattr(ops, "_op_state", {"ready": True})
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    f = torch.compile(lambda a, b: gemmforge.matmul(a, b, layout="nt"), fullgraph=True,
                      backend=backend)
    a, b_nk = torch.randn(8, 16).half(), torch.randn(4, 16).half()
    assert torch.equal(f(a, b_nk), torch.matmul(a, b_nk.t()))
    assert len(graphs) == 1


_BEFORE_LOAD_OP = """
import sys
if sys.argv[1] == "gemmforge-first":
    import gemmforge
    assert "torch" not in sys.modules  # the hint waits for torch's import
    import torch
else:
    import torch
    import gemmforge
a = torch.ones(4, 4, dtype=torch.float16)
try:
    torch.ops.gemmforge.mm(a, a)
except AttributeError as e:
    print(e)
assert not hasattr(torch.ops.gemmforge, "_register")
assert gemmforge.load_op() is torch.ops.gemmforge.mm
assert torch.equal(torch.ops.gemmforge.mm(a, a), a @ a)
print("ok")
"""


@needs_compiler
@pytest.mark.parametrize("order", ["gemmforge-first", "torch-first"])
def test_the_op_before_load_op_says_to_call_it_and_registers_after(mm, order):
    """`import gemmforge`, before or after torch: torch.ops.gemmforge.mm before load_op()
    is an AttributeError that says to call it, in one line; load_op() then registers the
    C++ op as usual and the namespace serves it."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", _BEFORE_LOAD_OP, order], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "torch.ops.gemmforge.mm is not registered yet: call gemmforge.load_op() first "
        "(it builds the op once and registers it)", "ok"]


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler here")
def test_builds_without_ninja(tmp_path):
    """Where ninja is missing (cpp_extension.load needs it), one c++ call builds the same
    library (loading it twice would register the namespace twice: built, not loaded)."""
    lib = torch_op._compile_without_ninja(tmp_path, "gemmforge_op_test")
    assert lib == tmp_path / "gemmforge_op_test.so" and lib.stat().st_size > 0
    assert torch_op._compile_without_ninja(tmp_path, "gemmforge_op_test") == lib  # reused
    assert [p.name for p in tmp_path.iterdir()] == [lib.name]


class _FakeKernel:
    def __init__(self, text, entry):
        self.artifact = type("A", (), {"program_text": text})()
        self.entry = entry


TRITON = "triton sm_90a 64x32x64 w2x2 s6 swnone row/8 pred k1 dp c1x1 nows direct"
WGMMA = "cuda_wgmma sm_90a 64x64x64 w1x1 s8 sw128 row/8 pred k1 dp c1x1 coop direct"


@pytest.fixture
def routing(monkeypatch):
    """ops.prepare with the resolver, builds and the op's table stood in: `choices` maps an
    excluded-backends set to the program text resolved (None: cuBLAS); the record lists what
    reached the table."""
    from gemmforge.ir.text import parse
    from gemmforge.dispatch.choice import Choice
    state = {"choices": {frozenset(): TRITON, frozenset({"triton"}): WGMMA}, "table": [],
             "build": lambda program: _FakeKernel(str(program), program.backend != "triton"),
             "asked": [], "built": [], "cublas": []}

    def choice_for(problem, arch, device_class, cublas, exclude):
        state["asked"].append(problem)
        text = state["choices"].get(exclude)
        return Choice(None, "cublas") if text is None else Choice(parse(text), "shipped", 0.0)

    def register(m, n, k, layout, device, kernel):
        if kernel.entry:
            state["table"].append((m, n, k, layout, kernel.artifact.program_text))
        return kernel.entry
    monkeypatch.setattr(ops, "choice_for", choice_for)
    monkeypatch.setattr(ops, "device_sm", lambda device: 90)
    monkeypatch.setattr(ops, "device_class_of", lambda device: "h200")
    monkeypatch.setattr(ops, "_build", lambda program, problem, sm: state["built"].append(
        problem) or state["build"](program))
    monkeypatch.setattr(torch_op, "register", register)

    def register_cublas(m, n, k, layout, device, dtype):
        state["table"].append((m, n, k, layout, "cublas"))
        state["cublas"].append(dtype)
    monkeypatch.setattr(torch_op, "register_cublas", register_cublas)
    monkeypatch.setattr(ops, "_routes", {})
    return state


def test_a_shape_whose_kernel_cant_be_built_goes_to_cublas_with_one_warning(routing):
    from gemmforge.compiler.values import BuildError

    def fail(program):
        raise BuildError("nvcc exited with 1")
    routing["build"] = fail
    key = (8, 4, 16, "nn", 0, "f16")
    with pytest.warns(UserWarning, match="no kernel for 8x4x16 nn f32: nvcc exited with 1; cuBLAS"):
        assert ops._register(key) is None
    assert routing["table"] == [(8, 4, 16, "nn", "cublas")]
    assert ops._routes[key] is None


def test_a_small_shape_without_a_c_entry_runs_another_backends_program_on_the_op(routing):
    """Below OP_HOST_BOUND_FLOPS a Triton kernel (no C launch entry) is swapped for the
    program resolved without Triton, registered with the op; above it the Python Kernel
    serves; where the second resolve says cuBLAS, the bucket is cuBLAS's."""
    assert ops._register((64, 128, 64, "nn", 0, "f16")) is None  # the op runs wgmma
    assert routing["table"] == [(64, 128, 64, "nn", WGMMA)]
    kernel = ops._register((4096, 4096, 4096, "nn", 0, "f16"))
    assert kernel.artifact.program_text == TRITON and len(routing["table"]) == 1
    routing["choices"][frozenset({"triton"})] = None
    assert ops._register((64, 64, 128, "nn", 0, "f16")) is None
    assert routing["table"][-1] == (64, 64, 128, "nn", "cublas")


def test_a_bucket_cublas_won_is_marked_for_the_op(routing):
    routing["choices"][frozenset()] = None
    assert ops.prepare((16, 4096, 4096, "nt", 0, "f16"), "unmeasured") is None
    assert routing["table"] == [(16, 4096, 4096, "nt", "cublas")]


def test_token_buckets_are_the_powers_of_two_at_or_above_m():
    assert torch_op.bucket(77) == 128 and torch_op.bucket(128) == 128 and torch_op.bucket(1) == 1
    assert torch_op.bucket(129) == 256 and torch_op.bucket(2**31 - 1) == 2**31 - 1


def test_resolve_can_leave_a_backend_out():
    from gemmforge.ir.program import Arch, Problem
    from gemmforge.dispatch.choice import resolve
    from gemmforge.dispatch.shipped import shipped
    triton_rows = [r.problem for r in shipped().rows
                   if r.device_class == "h100" and r.program.backend == "triton"
                   and r.problem.flops < 1e9]
    assert triton_rows  # the shipped file has small shapes won by Triton
    others = [(p, resolve(p, Arch.SM90A, "h100", exclude=frozenset({"triton"})))
              for p in triton_rows]
    assert all(c.program.backend != "triton" for _, c in others)
    # a shipped program that serves is a neighbour's, or the sibling class's (an H200's) exact
    # row: the H100's own exact row is Triton's
    shipped_ones = [c for _, c in others if c.source == "shipped"]
    assert shipped_ones and all(c.distance > 0 or c.device_class != "h100" for c in shipped_ones)
    assert any(c.distance > 0 for c in shipped_ones)
    alone = resolve(Problem(3, 5, 7), Arch.SM90A, None, exclude=frozenset({"triton"}))
    assert alone.source == "heuristic" and alone.program.backend == "cuda_wgmma"


@needs_compiler
def test_the_table_is_keyed_by_dtype(mm):
    """An fp16 and a bf16 kernel of one shape are two entries; a key of the other dtype
    finds nothing (the op's lookup reads the same key from the operands' dtype)."""
    libc = ctypes.CDLL(None)
    address = ctypes.cast(libc.abs, ctypes.c_void_p).value
    workspace = torch.empty(64, dtype=torch.uint8)
    f16, bf16 = torch_op.DTYPE_CODES["f16"], torch_op.DTYPE_CODES["bf16"]
    torch.ops.gemmforge._register(8, 4, 16, 1, f16, 0, address, 0, workspace, 64, "fp16 one")
    assert torch.ops.gemmforge._registered(8, 4, 16, 1, bf16, 0) == ""
    torch.ops.gemmforge._register(8, 4, 16, 1, bf16, 0, address, 0, workspace, 64, "bf16 one")
    assert torch.ops.gemmforge._registered(8, 4, 16, 1, f16, 0) == "fp16 one"
    assert torch.ops.gemmforge._registered(7, 4, 16, 1, bf16, 0) == "bf16 one"
    with pytest.raises(RuntimeError, match=r"dtype 0 \(f16\) or 1 \(bf16\)"):
        torch.ops.gemmforge._register(8, 4, 16, 1, 2, 0, address, 0, workspace, 64, "p")
    torch_op.register_cublas(64, 8, 16, "nt", 0, "bf16")
    assert torch.ops.gemmforge._registered(64, 8, 16, 1, bf16, 0) == torch_op.CUBLAS
    assert torch.ops.gemmforge._registered(64, 8, 16, 1, f16, 0) == ""
    assert torch.ops.gemmforge._forget_all() == 3


@needs_compiler
def test_bf16_operands_fall_back_on_the_cpu_in_bf16(mm):
    a, b = torch.randn(8, 16).bfloat16(), torch.randn(16, 4).bfloat16()
    c = mm(a, b)
    assert c.dtype == torch.bfloat16 and torch.equal(c, torch.matmul(a, b))
    assert torch.ops.gemmforge.linear(a, b.t().contiguous(), None).dtype == torch.bfloat16


def test_matmul_keys_bf16_operands_apart():
    """bf16 operands key the op's table by their dtype; mixed dtypes are the op's fallback."""
    meta = dict(device="meta")
    a, b = torch.empty(8, 16, dtype=torch.bfloat16, **meta), torch.empty(16, 4, **meta)
    assert ops._key(a, b.bfloat16()) is None  # not CUDA: the op falls back
    assert ops._key(a, b.half()) is None


def test_a_bf16_bucket_resolves_builds_and_registers_bf16(routing):
    """prepare resolves and builds the bf16 problem (never the fp16 one) and marks a
    cuBLAS bucket under bf16."""
    from gemmforge.ir.program import DType
    assert ops.prepare((64, 128, 64, "nn", 0, "bf16"), "unmeasured") is None
    assert {p.dtype for p in routing["asked"]} == {DType.BF16}
    assert routing["built"] and {p.dtype for p in routing["built"]} == {DType.BF16}
    routing["choices"][frozenset()] = None
    assert ops.prepare((16, 4096, 4096, "nt", 0, "bf16"), "unmeasured") is None
    assert routing["cublas"] == ["bf16"]
