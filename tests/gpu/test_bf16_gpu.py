"""bf16 on the GPU beyond the conformance suite: `gemmforge.matmul` on bfloat16 tensors
resolves and runs a bf16 kernel (aligned and ragged, nn and nt) through the op, registered
under bf16 beside the same shape's fp16 entry; patched bf16 Linear layers equal F.linear
(every leading shape, with and without bias, eager and captured in a CUDA graph); and an
emitted bf16 file's own self-test passes.

    python3 -m pytest -m gpu tests/gpu/test_bf16_gpu.py -q
"""
import subprocess

import pytest

from gemmforge.ir import DType, parse

from .correctness import check_linear, graph_replayed, linear_layer, operands, relative_error, tolerance

pytestmark = pytest.mark.gpu

BF16, F16 = 1, 0  # gemmforge.torch_op.DTYPE_CODES
LAYOUT_CODE = {"nn": 0, "nt": 1}
LAYERS = [(4096, 4096), (4096, 14336), (1000, 1024)]  # as tests/gpu/test_patch_gpu.py


def _served(torch, m, n, k, layout, dtype) -> str:
    return torch.ops.gemmforge._registered(m, n, k, LAYOUT_CODE[layout], dtype, 0)


@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (77, 4096, 4096), (1000, 4096, 333)])
def test_matmul_runs_bfloat16(shape, layout):
    """The bf16 call's bucket is registered under bf16 only (a Python Kernel where the
    program has no C entry: a bf16 artifact); the fp16 call of the same shape gets its own
    entry, and both answers are right."""
    import torch
    from gemmforge import ops
    from gemmforge.torch_op import bucket, load_op
    load_op()
    torch.ops.gemmforge._forget_all()
    ops._routes.clear()
    a, b, b_arg = operands(*shape, layout, dtype="bf16")
    out = ops.matmul(a, b_arg, layout=layout)
    torch.cuda.synchronize()
    assert out.dtype == torch.bfloat16 and out.shape == (shape[0], shape[1])
    assert relative_error(out, a.float() @ b.float()) < tolerance(shape[2], "f32", "bf16")
    route = ops._routes[(bucket(shape[0]), shape[1], shape[2], layout, 0, "bf16")]
    if route is None:
        assert _served(torch, *shape, layout, BF16) != ""
    else:
        assert route.artifact.dtype == DType.BF16
    assert _served(torch, *shape, layout, F16) == ""  # nothing fp16 was registered
    h, hb, hb_arg = operands(*shape, layout)
    half = ops.matmul(h, hb_arg, layout=layout)
    assert half.dtype == torch.float16
    assert relative_error(half, h.float() @ hb.float()) < tolerance(shape[2], "f32")
    again = ops.matmul(a, b_arg, layout=layout)  # the bf16 entry still serves bf16
    assert again.dtype == torch.bfloat16
    assert relative_error(again, a.float() @ b.float()) < tolerance(shape[2], "f32", "bf16")


def test_the_op_alone_serves_a_registered_bf16_shape():
    import torch
    from gemmforge import ops
    from gemmforge.torch_op import load_op
    load_op()
    a, b, _ = operands(1000, 1024, 336, "nn", dtype="bf16")
    ops.matmul(a, b)
    if _served(torch, 1000, 1024, 336, "nn", BF16) in ("", "cublas"):
        pytest.skip("cuBLAS serves this bf16 bucket here")
    out = torch.ops.gemmforge.mm(a, b)
    assert out.dtype == torch.bfloat16
    assert relative_error(out, a.float() @ b.float()) < tolerance(336, "f32", "bf16")
    with pytest.raises(RuntimeError, match="dtype"):  # mixed dtypes: torch.matmul's error
        torch.ops.gemmforge.mm(a, b.half())




@pytest.mark.parametrize("n, k", LAYERS)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("lead", [(1,), (1, 16), (3, 5), (2, 77)])
def test_a_patched_bf16_linear_equals_f_linear(n, k, bias, lead):
    import torch
    import gemmforge
    layer = linear_layer(torch, n, k, bias, "bf16")
    report = gemmforge.patch(layer)
    assert report.routed == [""] and not report.kept
    x = torch.randn(*lead, k, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        check_linear(torch, layer(x), x, layer)
    served = _served(torch, x.numel() // k, n, k, "nt", BF16)
    if served not in ("", "cublas") and bias:  # ours serves it: the bias twin, fused
        assert served.endswith(" bias"), served


def test_a_bf16_patched_linear_in_a_cuda_graph():
    import torch
    import gemmforge
    layer = linear_layer(torch, 4096, 4096, True, "bf16")
    gemmforge.patch(layer, tokens=[1, 16])
    x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    y = graph_replayed(torch, layer, x)
    check_linear(torch, y, x, layer)


def test_emitted_bf16_selftest_passes(tmp_path):
    import torch
    from gemmforge.emit import build_selftest, emit
    from gemmforge.ir import Problem
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("an sm_90a program needs an sm_90 device")
    program = parse("cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 persistent "
                    "c1x1 coop tma")
    problem = Problem(1000, 4096, 336, "nn", "f32", "bf16")
    exe = build_selftest(emit(problem, program, tmp_path), program)
    done = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "PASS" in done.stdout, done.stdout + done.stderr
