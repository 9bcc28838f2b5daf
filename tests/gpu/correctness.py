"""What every GPU correctness test shares: operands, the tolerance, the error measure."""
from gemmforge.ir import Problem
from gemmforge.search.measure import gate


def tolerance(k: int, acc: str) -> float:
    """search.measure.gate's bound: f32 5e-3 (fp16 output rounding alone is ~5e-4); f16 each
    running sum is rounded to fp16, ~sqrt(k) roundings of 2^-11, with a 2x margin."""
    return gate.tolerance(Problem(1, 1, k, "nn", acc))


def operands(m, n, k, layout, binary=False):
    """Fresh a (m x k) and b (k x n) on the GPU, and b as the layout passes it (nt: n x k).
    `binary`: {0,1} values, for exact checks."""
    import torch
    if binary:
        a = torch.randint(0, 2, (m, k), device="cuda").half()
        b = torch.randint(0, 2, (k, n), device="cuda").half()
    else:
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    return a, b, (b if layout == "nn" else b.t().contiguous())


def relative_error(out, ref) -> float:
    """Relative Frobenius error of `out` against the fp32 `ref`."""
    import torch
    return (torch.linalg.norm(out.float() - ref) / torch.linalg.norm(ref).clamp_min(1e-30)).item()


BIAS_SCALE = 2.0  # the bias's spread: a bias added at the wrong column shows well above
# the tolerance (about 2 sqrt(2 / k) of C's norm, 0.044 at k = 4096)


def assert_matches_reference(kernel, m, n, k, layout, acc, bias: bool = False) -> None:
    """Run `kernel` on fresh operands into a NaN-filled output; every element written and
    the relative error under the tolerance. `bias`: the kernel is a fused-bias program's,
    called with a fresh random bias of n values that the reference adds too."""
    import torch
    a, b, b_arg = operands(m, n, k, layout)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    ref = a.float() @ b.float()
    if bias:
        vector = (torch.randn(n, device="cuda") * BIAS_SCALE).half()
        kernel(a, b_arg, out=out, bias=vector)
        ref += vector.float()
    else:
        kernel(a, b_arg, out=out)
    torch.cuda.synchronize()
    assert not torch.isnan(out).any(), "unwritten (NaN) outputs"
    err = relative_error(out, ref)
    assert err < tolerance(k, acc), f"relative error {err:.2e}"
