"""bf16 on the GPU beyond the conformance suite: `gemmforge.matmul` on bfloat16 tensors
resolves and runs a bf16 kernel (aligned and ragged, nn and nt), and an emitted bf16 file's
own self-test passes.

    python3 -m pytest -m gpu tests/gpu/test_bf16_gpu.py -q
"""
import subprocess

import pytest

from gemmforge.ir import DType, parse

from .correctness import operands, relative_error, tolerance

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (77, 4096, 4096), (1000, 4096, 333)])
def test_matmul_runs_bfloat16(shape, layout):
    import torch
    from gemmforge import ops
    a, b, b_arg = operands(*shape, layout, dtype="bf16")
    out = ops.matmul(a, b_arg, layout=layout)
    torch.cuda.synchronize()
    assert out.dtype == torch.bfloat16 and out.shape == (shape[0], shape[1])
    assert relative_error(out, a.float() @ b.float()) < tolerance(shape[2], "f32", "bf16")
    kernels = [k for (p, _), k in ops._kernels.items()
               if (p.m, p.n, p.k, str(p.layout)) == (*shape, layout)]
    assert kernels and all(k.artifact.dtype == DType.BF16 for k in kernels)


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
