"""What every GPU correctness test shares: operands, the tolerance, the error measure."""
from gemmforge.ir import Problem
from gemmforge.search.measure import gate


def tolerance(k: int, acc: str, dtype: str = "f16") -> float:
    """search.measure.gate's bound: f32 5e-3 (fp16 output rounding alone is ~5e-4); f16 each
    running sum is rounded to fp16, ~sqrt(k) roundings of 2^-11, with a 2x margin; bf16
    (f32 accumulation) 5 units of bf16 roundoff, ~2e-2 (its output rounding alone ~4e-3)."""
    return gate.tolerance(Problem(1, 1, k, "nn", acc, dtype))


def torch_dtype(dtype: str = "f16"):
    import torch
    return {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]


def operands(m, n, k, layout, binary=False, dtype="f16"):
    """Fresh a (m x k) and b (k x n) of `dtype` on the GPU, and b as the layout passes it
    (nt: n x k). `binary`: {0,1} values, for exact checks."""
    import torch
    t = torch_dtype(dtype)
    if binary:
        a = torch.randint(0, 2, (m, k), device="cuda").to(t)
        b = torch.randint(0, 2, (k, n), device="cuda").to(t)
    else:
        a = torch.randn(m, k, device="cuda", dtype=t)
        b = torch.randn(k, n, device="cuda", dtype=t)
    return a, b, (b if layout == "nn" else b.t().contiguous())


def relative_error(out, ref) -> float:
    """Relative Frobenius error of `out` against the fp32 `ref`."""
    import torch
    return (torch.linalg.norm(out.float() - ref) / torch.linalg.norm(ref).clamp_min(1e-30)).item()


BIAS_SCALE = 2.0  # the bias's spread: a bias added at the wrong column shows well above
# the tolerance (about 2 sqrt(2 / k) of C's norm, 0.044 at k = 4096)


def assert_matches_reference(kernel, m, n, k, layout, acc, bias: bool = False,
                             dtype: str = "f16") -> None:
    """Run `kernel` on fresh operands of `dtype` into a NaN-filled output; every element
    written and the relative error against fp32 under the tolerance. `bias`: the kernel is
    a fused-bias program's, called with a fresh random bias of n values that the reference
    adds too."""
    import torch
    a, b, b_arg = operands(m, n, k, layout, dtype=dtype)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch_dtype(dtype))
    ref = a.float() @ b.float()
    if bias:
        vector = (torch.randn(n, device="cuda") * BIAS_SCALE).to(torch_dtype(dtype))
        kernel(a, b_arg, out=out, bias=vector)
        ref += vector.float()
    else:
        kernel(a, b_arg, out=out)
    torch.cuda.synchronize()
    assert not torch.isnan(out).any(), "unwritten (NaN) outputs"
    err = relative_error(out, ref)
    assert err < tolerance(k, acc, dtype), f"relative error {err:.2e}"


def linear_layer(torch, n, k, bias, dtype="f16"):
    """An nn.Linear(k, n) on the GPU of `dtype`, weights normal with std k^-1/2."""
    layer = torch.nn.Linear(k, n, bias=bias, device="cuda", dtype=torch_dtype(dtype))
    torch.nn.init.normal_(layer.weight, std=k ** -0.5)
    if bias:
        torch.nn.init.normal_(layer.bias)
    return layer


def check_linear(torch, y, x, layer):
    """`y` is layer(x) as F.linear computes it in fp32, within the dtype's tolerance."""
    ref = torch.nn.functional.linear(x.float(), layer.weight.float(),
                                     None if layer.bias is None else layer.bias.float())
    dtype = "bf16" if layer.weight.dtype == torch.bfloat16 else "f16"
    assert y.shape == ref.shape and y.dtype == layer.weight.dtype
    assert relative_error(y.reshape(-1, ref.shape[-1]), ref.reshape(-1, ref.shape[-1])) < \
        tolerance(x.shape[-1], "f32", dtype)


def graph_replayed(torch, layer, x):
    """layer(x) captured in a CUDA graph (after a warm-up call on the capture stream), then
    replayed once with fresh values in `x`: the output tensor the replay wrote."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.stream(stream):
        layer(x)
        with torch.cuda.graph(graph, stream=stream):
            y = layer(x)
    torch.cuda.current_stream().wait_stream(stream)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    return y
