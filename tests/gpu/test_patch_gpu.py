"""GPU tier: gemmforge.patch and torch.ops.gemmforge.linear on CUDA: a patched Linear equal to
F.linear (fp32 reference) for every leading shape, with and without bias, at buckets served
by a program of ours and by cuBLAS; a new m inside a prepared bucket builds nothing; CUDA
graph capture and replay; torch.compile(fullgraph=True) with no graph break (run on the GPU
machine)."""
import pytest

from .correctness import check_linear, graph_replayed, linear_layer, relative_error

pytestmark = pytest.mark.gpu

# (n, k) with shipped nt rows on the H200 at m = 1 and 16 (a program of ours there), and
# one without any (cuBLAS)
LAYERS = [(4096, 4096), (4096, 14336), (1000, 1024)]


@pytest.fixture(scope="module")
def torch():
    import torch
    from gemmforge.torch_op import load_op
    load_op()
    return torch




@pytest.mark.parametrize("n, k", LAYERS)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("lead", [(1,), (1, 16), (3, 5), (2, 77)])
def test_a_patched_linear_equals_f_linear(torch, n, k, bias, lead):
    import gemmforge
    layer = linear_layer(torch, n, k, bias)
    report = gemmforge.patch(layer)
    assert report.routed == [""]  # the module itself is the Linear
    x = torch.randn(*lead, k, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        check_linear(torch, layer(x), x, layer)
    served = torch.ops.gemmforge._registered(x.numel() // k, n, k, 1, 0, 0)
    if served not in ("", "cublas") and bias:  # ours serves it: the bias twin, fused
        assert served.endswith(" bias"), served


def test_a_new_m_inside_a_bucket_builds_nothing(torch, monkeypatch):
    import gemmforge
    from gemmforge import linears, ops
    layer = linear_layer(torch, 4096, 4096, False)
    gemmforge.patch(layer, tokens=[16])
    builds = []
    monkeypatch.setattr(ops, "_build", lambda *a: builds.append(a))
    with torch.no_grad():
        for m in (9, 12, 15, 16):
            x = torch.randn(m, 4096, device="cuda", dtype=torch.float16)
            check_linear(torch, layer(x), x, layer)
    assert builds == [] and (16, 4096, 4096, 0, "f16") in linears._prepared


def test_cuda_graph_capture_and_replay(torch):
    import gemmforge
    layer = linear_layer(torch, 4096, 4096, True)
    gemmforge.patch(layer, tokens=[1])
    x = torch.randn(1, 4096, device="cuda", dtype=torch.float16)
    y = graph_replayed(torch, layer, x)
    check_linear(torch, y, x, layer)


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph(torch, dynamic):
    import gemmforge
    model = torch.nn.Sequential(linear_layer(torch, 4096, 4096, False), torch.nn.ReLU(),
                                linear_layer(torch, 4096, 4096, True))
    gemmforge.patch(model, tokens=[1, 16, 64])
    compiled = torch.compile(model, fullgraph=True, dynamic=dynamic)
    with torch.no_grad():
        for m in (1, 16, 40):
            x = torch.randn(m, 4096, device="cuda", dtype=torch.float16)
            y = compiled(x)
            ref = model[2](model[1](model[0](x)))
            assert relative_error(y, ref.float()) < 1e-2
