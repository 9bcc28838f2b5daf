"""gemmforge.patch / unpatch and torch.ops.gemmforge.linear on the CPU: which layers are
routed and why others are kept, the state dict untouched, unpatch restoring the stock
forward, the op's answers equal to F.linear wherever it falls back (CPU and meta tensors,
every leading shape, with and without bias), and torch.compile(fullgraph=True) tracing a
patched model. The CUDA path is in tests/gpu/test_patch_gpu.py."""
from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")

import gemmforge  # noqa: E402
from gemmforge import ops, patching, torch_op  # noqa: E402

needs_compiler = pytest.mark.skipif(
    shutil.which("c++") is None or shutil.which("ninja") is None,
    reason="no C++ compiler or ninja here: torch.ops.gemmforge can't be built")


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(64, 128)
        self.down = torch.nn.Linear(128, 64, bias=False)
        self.odd = torch.nn.Linear(64, 12)  # n = 12: no 16-byte rows
        self.norm = torch.nn.LayerNorm(64)

    def forward(self, x):
        return self.odd(self.norm(self.down(torch.relu(self.up(x)))))


@pytest.fixture
def op():
    torch_op.load_op()
    torch.ops.gemmforge._forget_all()
    yield
    torch.ops.gemmforge._forget_all()


def test_a_cpu_model_is_left_alone_and_the_report_says_why():
    model = Block()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = gemmforge.patch(model)
    assert report.routed == [] and set(report.kept) == {"up", "down", "odd"}
    assert set(report.kept.values()) == {"weight not on a CUDA device"}
    assert "0 nn.Linear layers routed" in str(report) and "kept (weight not on a CUDA device)" in str(report)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert "forward" not in vars(model.up)


def test_bad_arguments_name_what_is_expected():
    with pytest.raises(TypeError, match="must be a torch.nn.Module, not list"):
        gemmforge.patch([])
    for tokens in ([0], ["x"], 5):
        with pytest.raises(ValueError, match="tokens must be positive integers"):
            gemmforge.patch(Block(), tokens=tokens)


@needs_compiler
def test_patch_routes_eligible_layers_and_unpatch_restores_them(op, monkeypatch):
    """With eligibility stood in (no GPU here): the n = 12 layer is kept, the others run
    through the op, whose CPU path is at::linear: the same answers, the same state dict."""
    real = patching.ineligible
    monkeypatch.setattr(patching, "ineligible",
                        lambda layer: real(layer) if layer.out_features == 12 else None)
    monkeypatch.setattr(ops, "_op_ready", lambda: True)
    model = Block()
    x = torch.randn(2, 5, 64)
    expected = model(x)
    keys = list(model.state_dict())
    report = gemmforge.patch(model, tokens=())  # no bucket prepared: the op calls at::linear
    assert report.routed == ["up", "down"] and list(report.kept) == ["odd"]
    assert report.shapes == {(128, 64), (64, 128)}
    assert "weight not on a CUDA device" in report.kept["odd"]
    assert "forward" in vars(model.up) and "forward" not in vars(model.odd)
    assert torch.allclose(model(x), expected, atol=1e-6)
    assert list(model.state_dict()) == keys
    assert gemmforge.patch(model, tokens=()).routed == []  # already patched: left as is
    assert gemmforge.unpatch(model) == 2
    assert "forward" not in vars(model.up) and gemmforge.unpatch(model) == 0


@needs_compiler
@pytest.mark.parametrize("shape", [(8, 64), (3, 7, 64), (64,), (2, 2, 2, 64)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_op_equals_f_linear_where_it_falls_back(op, shape, bias):
    w = torch.randn(32, 64)
    b = torch.randn(32) if bias else None
    x = torch.randn(*shape)
    assert torch.equal(torch.ops.gemmforge.linear(x, w, b), torch.nn.functional.linear(x, w, b))
    meta = torch.ops.gemmforge.linear(x.to("meta"), w.to("meta"), None if b is None else b.to("meta"))
    assert meta.shape == (*shape[:-1], 32) and meta.device.type == "meta"


@needs_compiler
def test_linear_op_says_what_is_wrong_with_mismatched_shapes(op):
    with pytest.raises(RuntimeError, match="cannot be multiplied|shapes"):
        torch.ops.gemmforge.linear(torch.randn(4, 63), torch.randn(32, 64), None)


@needs_compiler
def test_a_patched_model_compiles_with_fullgraph(op, monkeypatch):
    monkeypatch.setattr(patching, "ineligible", lambda layer: None)
    monkeypatch.setattr(ops, "_op_ready", lambda: True)
    model = Block()
    x = torch.randn(4, 64)
    expected = model(x)
    gemmforge.patch(model, tokens=())
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        assert torch.allclose(compiled(x), expected, atol=1e-6)
        graph = torch._dynamo.explain(model)(x)
    assert graph.graph_break_count == 0
    assert any("gemmforge.linear" in str(n.target) for g in graph.graphs for n in g.graph.nodes)


def test_training_goes_to_f_linear(monkeypatch):
    """With autograd recording, linear is F.linear itself: the op has no backward."""
    from gemmforge import linears
    calls = []
    monkeypatch.setattr(torch.nn.functional, "linear", lambda *a: calls.append(a) or a[0])
    w = torch.randn(8, 8, requires_grad=True)
    linears.linear(torch.randn(2, 8), w)
    assert len(calls) == 1


class _CudaLike:
    """A CPU tensor that says it is on CUDA: `ineligible` judged without a GPU."""

    is_cuda = True

    def __init__(self, t):
        self.t = t

    def __getattr__(self, name):
        return getattr(self.t, name)


_INELIGIBLE = patching.ineligible  # the real one: tests stand it in


def _judged(layer):
    """patching.ineligible of `layer` as if its tensors were on a CUDA device."""
    from types import SimpleNamespace
    bias = None if layer.bias is None else _CudaLike(layer.bias)
    return _INELIGIBLE(SimpleNamespace(weight=_CudaLike(layer.weight), bias=bias))


@pytest.mark.parametrize("dtype, why", [
    (torch.float16, None), (torch.bfloat16, None),
    (torch.float32, "weight dtype float32, not float16 or bfloat16"),
])
def test_fp16_and_bf16_weights_are_eligible(dtype, why):
    assert _judged(torch.nn.Linear(64, 128, dtype=dtype)) == why


def test_a_bias_of_another_dtype_keeps_the_layer():
    layer = torch.nn.Linear(64, 128, dtype=torch.bfloat16)
    layer.bias = torch.nn.Parameter(layer.bias.detach().half())
    assert _judged(layer) == "bias not a contiguous vector of the weight's dtype on its device"


@needs_compiler
def test_bf16_and_fp16_layers_are_prepared_apart(op, monkeypatch):
    """A model with fp16, bf16 and fp32 layers: the fp32 ones are listed once under one
    reason; an fp16 and a bf16 layer of one (n, k) are built ahead and prepared as two
    shapes, each under its dtype; the bf16 model's answers equal F.linear's."""
    from gemmforge import linears
    prepared, ahead = [], []
    monkeypatch.setattr(patching, "ineligible", _judged)
    monkeypatch.setattr(ops, "_op_ready", lambda: True)
    monkeypatch.setattr(patching, "build_ahead", lambda layers, tokens, device: ahead.extend(layers))
    monkeypatch.setattr(patching, "prepare_buckets",
                        lambda n, k, tokens, device, bias, dtype: prepared.append((n, k, bias, dtype)))
    model = torch.nn.ModuleDict({
        "fp16": torch.nn.Linear(64, 128, dtype=torch.float16),
        "bf16": torch.nn.Linear(64, 128, dtype=torch.bfloat16),
        "bf16_down": torch.nn.Linear(128, 64, bias=False, dtype=torch.bfloat16),
        **{f"full{i}": torch.nn.Linear(64, 64) for i in range(3)}})
    report = gemmforge.patch(model, tokens=(1, 16))
    assert sorted(report.routed) == ["bf16", "bf16_down", "fp16"]
    assert report.shapes == {(128, 64), (64, 128)}
    kept = [line for line in str(report).splitlines() if "kept (" in line]
    assert kept == ["  kept (weight dtype float32, not float16 or bfloat16): full0, full1, full2"]
    assert sorted(prepared) == [(64, 128, False, "bf16"), (128, 64, True, "bf16"),
                                (128, 64, True, "f16")]
    assert sorted(ahead) == [(64, 128, False, "bf16"), (128, 64, True, "bf16"),
                             (128, 64, True, "f16")]
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        y = model["bf16"](x)
    assert y.dtype == torch.bfloat16
    assert torch.equal(y, torch.nn.functional.linear(x, model["bf16"].weight, model["bf16"].bias))
    assert linears._dtype_text(model["bf16"].weight) == "bf16"
    assert linears._dtype_text(model["full0"].weight) is None


@needs_compiler
def test_the_fake_linear_keeps_bf16(op):
    x = torch.empty(2, 5, 64, dtype=torch.bfloat16, device="meta")
    w = torch.empty(32, 64, dtype=torch.bfloat16, device="meta")
    y = torch.ops.gemmforge.linear(x, w, torch.empty(32, dtype=torch.bfloat16, device="meta"))
    assert y.shape == (2, 5, 32) and y.dtype == torch.bfloat16
    from torch._subclasses.fake_tensor import FakeTensorMode
    mode = FakeTensorMode()
    fx, fw = mode.from_tensor(torch.empty(2, 5, 64).bfloat16()), mode.from_tensor(
        torch.empty(32, 64).bfloat16())
    with mode:
        assert torch.ops.gemmforge.linear(fx, fw, None).dtype == torch.bfloat16
