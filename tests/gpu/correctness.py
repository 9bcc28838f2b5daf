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


def assert_matches_reference(kernel, m, n, k, layout, acc) -> None:
    """Run `kernel` on fresh operands into a NaN-filled output; every element written and
    the relative error under the tolerance."""
    import torch
    a, b, b_arg = operands(m, n, k, layout)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    kernel(a, b_arg, out=out)
    torch.cuda.synchronize()
    assert not torch.isnan(out).any(), "unwritten (NaN) outputs"
    err = relative_error(out, a.float() @ b.float())
    assert err < tolerance(k, acc), f"relative error {err:.2e}"
