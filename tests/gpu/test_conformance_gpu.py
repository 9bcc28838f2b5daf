"""GPU conformance: every registered backend computes every legal problem right.

Cases come from the registry (tests/gpu/conformance.py): every backend, every program it
is checked with (its listed programs, or the heuristic's per arch it claims), aligned and
ragged shapes, layouts nn and nt, accumulators f32 and f16, wherever ir.verify accepts the
program for the problem; and, for each backend that serves bf16 operands, its bf16 programs
with the f32 accumulator on the same shapes. Fresh random normal inputs, the output
NaN-filled first, every element compared with an fp32 reference by relative Frobenius
error; an exact check with {0,1} inputs per program (in bf16, against the exact sums
rounded to bf16). A backend needs no test file of its own to be checked. The fused bias
(conformance.BIAS): bias twins of programs covering each epilogue, aligned and ragged, both
layouts, against the fp32 reference plus the bias (`-k bias` runs those alone: about 170
cases from 48 builds).

    python3 -m pytest -m gpu tests/gpu/test_conformance_gpu.py -q -x
    python3 -m pytest -m gpu tests/gpu/test_conformance_gpu.py -q -k cuda_wgmma   # one backend
    python3 -m pytest -m gpu tests/gpu/test_conformance_gpu.py -q -k bias         # the bias
    python3 -m pytest -m gpu tests/gpu/test_conformance_gpu.py -q -k bf16         # bf16 only
"""
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from gemmforge.backends import pipeline
from gemmforge.compiler.artifacts import ArtifactCache
from gemmforge.ir import Problem, check, parse

from .conformance import (
    BF16_BIAS, BF16_KINDS, BINARY, KINDS, bf16_bias_cases, bf16_programs_for, bias_cases, cases,
    programs_for,
)
from .correctness import assert_matches_reference, operands, relative_error, tolerance

pytestmark = pytest.mark.gpu

CASES = cases()
BIAS_CASES = bias_cases()
BF16_BIAS_CASES = bf16_bias_cases()


def _full(case) -> tuple:
    """(text, shape, layout, acc, dtype) of a case (a bias case, which has no dtype, is f16)."""
    return case if len(case) == 5 else (*case, "f16")


def _id(case) -> str:
    text, shape, layout, acc, dtype = _full(case)
    return f"{text}|{'x'.join(map(str, shape))}|{layout}|{acc}|{dtype}"


def _runnable(text: str) -> None:
    """Skip an sm_90a program on a device without sm_90a (an sm_80 one runs anywhere)."""
    import torch
    if parse(text).arch.value == "sm_90a" and torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("sm_90a programs need an sm_90 device")


@pytest.fixture(scope="session")
def cache(tmp_path_factory, request):
    """An artifact cache with every selected case's program built, in parallel, first."""
    os.environ.setdefault("GEMMFORGE_BUILD_TIMEOUT", "1200")  # CUTLASS sm90 builds are slow
    cache = ArtifactCache(tmp_path_factory.mktemp("conformance-artifacts"))
    target = pipeline.current_target()
    wanted = {item.callspec.params["case"] for item in request.session.items
              if hasattr(item, "callspec") and "case" in item.callspec.params}
    jobs = {(text, layout, acc, dtype): shape
            for text, shape, layout, acc, dtype in sorted(map(_full, wanted))}

    def build(job):
        (text, layout, acc, dtype), shape = job
        try:
            pipeline.compile(parse(text), Problem(*shape, layout, acc, dtype), target, cache)
        except Exception:  # noqa: BLE001 - the test of this case reports it
            pass
    with ThreadPoolExecutor(os.cpu_count() or 8) as pool:
        list(pool.map(build, jobs.items()))
    return cache


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_matches_fp32_reference(cache, case):
    text, shape, layout, acc, dtype = case
    _runnable(text)
    problem = Problem(*shape, layout, acc, dtype)
    kernel = pipeline.compile_and_load(parse(text), problem, cache=cache)
    assert_matches_reference(kernel, *shape, layout, acc, dtype=dtype)


@pytest.mark.parametrize("case", BIAS_CASES, ids=[_id(c) for c in BIAS_CASES])
def test_bias_matches_fp32_reference(cache, case):
    text, shape, layout, acc = case
    _runnable(text)
    problem = Problem(*shape, layout, acc)
    kernel = pipeline.compile_and_load(parse(text), problem, cache=cache)
    assert_matches_reference(kernel, *shape, layout, acc, bias=True)


def test_bias_library_keeps_the_plain_entry(cache):
    """A cuda_wgmma bias program's .so: gemmforge_launch computes C = A @ B (no bias), and
    the op reaches gemmforge_launch_bias at the address torch_op.launch_address gives."""
    import torch
    from gemmforge.torch_op import launch_address
    text, shape, layout, acc = next(c for c in BIAS_CASES if c[0].startswith("cuda_wgmma")
                                    and c[1] == (256, 256, 256))
    _runnable(text)
    kernel = pipeline.compile_and_load(parse(text), Problem(*shape, layout, acc), cache=cache)
    assert launch_address(kernel, "_launch_bias") not in (None, launch_address(kernel))
    a, b, b_arg = operands(*shape, layout)
    out = torch.full(shape[:2], float("nan"), device="cuda", dtype=torch.float16)
    need = kernel.workspace_bytes(*shape)
    ws = torch.empty(max(need, 1), dtype=torch.uint8, device="cuda")
    kernel.launch(a.data_ptr(), b_arg.data_ptr(), out.data_ptr(), *shape, ws.data_ptr(), need,
                  torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    assert relative_error(out, a.float() @ b.float()) < tolerance(shape[2], acc)


@pytest.mark.parametrize("backend", ["cuda_wgmma", "triton"])
@pytest.mark.parametrize("shape", [(256, 256, 256), (17, 33, 65)])
def test_bias_at_a_2_byte_offset(cache, backend, shape):
    """A bias view one element into its storage (2-byte aligned only; cuda_wgmma takes the
    scalar loads, Triton is promised no alignment for it): the same answer."""
    import torch
    text = next(c[0] for c in BIAS_CASES if c[0].startswith(backend)
                and check(parse(c[0]), Problem(*shape, "nt", "f32")) is None)
    _runnable(text)
    m, n, k = shape
    kernel = pipeline.compile_and_load(parse(text), Problem(m, n, k, "nt", "f32"), cache=cache)
    a, b, b_arg = operands(m, n, k, "nt")
    bias = torch.randn(n + 1, device="cuda").half()[1:]
    out = kernel(a, b_arg, bias=bias)
    torch.cuda.synchronize()
    assert relative_error(out, a.float() @ b.float() + bias.float()) < tolerance(k, "f32")


@pytest.mark.parametrize("case", BF16_BIAS_CASES, ids=[_id(c) for c in BF16_BIAS_CASES])
def test_bf16_bias_matches_fp32_reference(cache, case):
    """A bf16 bias twin: a bf16 bias of n values, added in fp32 before C is rounded."""
    text, shape, layout, acc, dtype = case
    _runnable(text)
    kernel = pipeline.compile_and_load(parse(text), Problem(*shape, layout, acc, dtype),
                                       cache=cache)
    assert_matches_reference(kernel, *shape, layout, acc, bias=True, dtype=dtype)


def _binary_cases() -> list[tuple[str, str, str]]:
    from gemmforge.backends import registry
    from .conformance import SEPARATE
    return [(text, layout, dtype) for backend in registry.all() if backend.name not in SEPARATE
            for dtype, texts in (("f16", programs_for(backend)),
                                 ("bf16", bf16_programs_for(backend)))
            for text in texts for layout in ("nn", "nt")
            if check(parse(text), Problem(*BINARY, layout, "f32", dtype)) is None]


@pytest.mark.parametrize("text, layout, dtype", _binary_cases())
def test_exact_on_binary_inputs(cache, text, layout, dtype):
    """{0,1} inputs with k <= 2048: every partial sum is an integer fp32 holds exactly, and
    fp16 too; bf16 output rounds sums past 256, so C must equal the exact sums rounded to
    bf16 (round to nearest even both sides)."""
    import torch
    _runnable(text)
    problem = Problem(*BINARY, layout, "f32", dtype)
    kernel = pipeline.compile_and_load(parse(text), problem, cache=cache)
    a, b, b_arg = operands(*BINARY, layout, binary=True, dtype=dtype)
    out = kernel(a, b_arg)
    torch.cuda.synchronize()
    assert torch.equal(out.float(), (a.float() @ b.float()).to(out.dtype).float())


def test_every_backend_is_checked():
    """The suite covers the registry: every backend has cases, or is checked elsewhere."""
    from gemmforge.backends import registry
    from .conformance import SEPARATE
    covered = {text.split()[0] for text, *_ in CASES}
    assert set(registry.names()) - set(SEPARATE) <= covered
    assert KINDS and {layout for _, _, layout, *_ in CASES} == {"nn", "nt"}
    bf16 = {text.split()[0] for text, *_, dtype in CASES if dtype == "bf16"}
    assert bf16 == {be.name for be in registry.all()
                    if bf16_programs_for(be) and be.name not in SEPARATE}
    assert {(layout, acc) for _, _, layout, acc, dtype in CASES if dtype == "bf16"} == set(
        BF16_KINDS)
    assert ({parse(c[0]).replace(bias=False) for c in BF16_BIAS_CASES}
            == {parse(t) for t in BF16_BIAS})  # every one of BF16_BIAS has cases
