"""The fused bias (Program.bias, token `bias`) on a machine with no GPU: verify refuses it,
naming the field, on every backend that doesn't declare it in `fusions`; no search knob or
LLM reply schema can set it; cuda_wgmma and triton lower it in every epilogue (their
sources hold the add, plain programs' sources don't); the launch contract
(gemmforge_launch_bias, meta bias_symbol, Kernel(a, b, bias=t), the op's entry address)
holds on stand-ins; and real builds for sm_90a compile: nvcc for three cuda_wgmma bias
programs, Triton's AOT compiler for one. Triton's arithmetic with a bias, under its
interpreter, is tests/test_triton_backend.py's; on a GPU, tests/gpu/test_conformance_gpu.py."""
import ctypes
import random
import shutil
import subprocess

import jsonschema
import pytest
import torch

from gemmforge.backends import registry
from gemmforge.backends.triton.plan import make_plan
from gemmforge.compiler import nvcc
from gemmforge.compiler import runtime as core
from gemmforge.compiler.values import Artifact, Target
from gemmforge.ir import Arch, Problem, check, parse
from gemmforge.ir.knobs import KNOBS
from gemmforge.ir.program import FUSION_FIELDS, Accum, Layout
from gemmforge.ir.schema import backend_schema, to_json
from gemmforge.ir.space import Space
from gemmforge.torch_op import launch_address
from launch_stand_ins import (  # noqa: F401 (device is a fixture)
    A, B, C, WS, c_library, device, launched, triton_kernel, uncached,
)

WGMMA = "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 row/1 pred k1 dp c1x1 coop direct"
WGMMA_TMA = "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 col/4 pred k1 persistent c1x1 pingpong tma"
WGMMA_SWAP = "cuda_wgmma sm_90a 32x128x64 w1x1 s6 sw128 row/1 pred k1 dp c1x1 coop direct swap"
TRITON = "triton sm_90a 128x128x64 w2x2 s3 swnone row/8 pred k1 persistent c1x1 nows direct"
TRITON_SPLIT = "triton sm_80 64x64x32 w2x2 s3 swnone row/8 pred k4 dp c1x1 nows direct"
TRITON_TMA = "triton sm_90a 128x128x64 w2x2 s3 swnone row/8 pred k1 persistent c1x1 nows tma"
ALIGNED = Problem(1000, 4096, 336, "nt")
BIAS = 0x7F00_0040_0000


def fused(text: str) -> str:
    return text + " bias"


def lowered(text: str, problem: Problem = ALIGNED) -> str:
    program = parse(text)
    assert check(program, problem) is None, check(program, problem)
    return registry.get(program.backend).lower(program, problem).text


# ---- the IR's verdicts --------------------------------------------------------------------

def test_declared_where_lowered():
    lowering = {be.name for be in registry.all() if "bias" in be.fusions}
    assert lowering == {"cuda_wgmma", "triton"}
    assert FUSION_FIELDS == ("bias",) and "bias" not in KNOBS


@pytest.mark.parametrize("name", [be.name for be in registry.all() if not be.fusions])
def test_verify_refuses_bias_naming_the_field(name):
    be = registry.get(name)
    arch = sorted(be.archs)[0]
    problem = Problem(1024, 1024, 1024, sorted(be.layouts)[0])
    plain = Space.build([arch], [name]).sample_legal(problem, random.Random(0))
    assert check(plain, problem) is None
    reason = check(plain.replace(bias=True), problem)
    assert reason == (f"bias: {name} does not fuse a bias add into its epilogue "
                      f"(cuda_wgmma, triton do); leave it off (nobias)")


@pytest.mark.parametrize("text", [WGMMA, WGMMA_TMA, WGMMA_SWAP, TRITON, TRITON_SPLIT,
                                  TRITON_TMA])
def test_a_bias_twin_is_legal_where_the_program_is(text):
    assert check(parse(text), ALIGNED) is None
    assert check(parse(fused(text)), ALIGNED) is None


def test_searches_never_set_bias():
    space = Space.build([Arch.SM90A], ["cuda_wgmma", "triton"])
    rng = random.Random(1)
    assert not any(space.sample(rng).bias for _ in range(200))
    schema = backend_schema("cuda_wgmma", Arch.SM90A, Layout.NT)
    plain = to_json(parse(WGMMA))
    jsonschema.validate(plain, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(to_json(parse(fused(WGMMA))), schema)


# ---- lowered sources -------------------------------------------------------------------------

@pytest.mark.parametrize("text, problem", [
    (WGMMA, ALIGNED),
    (WGMMA_TMA, Problem(1000, 4096, 336, "nn")),
    (WGMMA.replace("k1", "k3i"), ALIGNED),
    (WGMMA.replace("k1 dp", "k1 streamk").replace("coop", "pingpong"), ALIGNED),
    (WGMMA.replace("k1", "k2c"), ALIGNED),
])
def test_wgmma_adds_the_bias_before_the_store(text, problem):
    src = lowered(fused(text), problem)
    assert "const half* __restrict__ bias = nullptr;" in src  # GemmArgs
    assert "    add_bias(args, w, row0, col0, acc);\n    if (kEpiTma && args.c_by_tma)" in src
    assert "acc_set(acc, i, j, h, 0, acc_get(acc, i, j, h, 0) + b.x);" in src
    assert 'extern "C" int gemmforge_launch_bias(const void* A, const void* B, void* C, ' \
           'const void* bias, int M,' in src
    assert "return gemmforge_launch_bias(A, B, C, nullptr, M, N, K, workspace" in src
    assert "args.bias = static_cast<const half*>(bias);" in src
    plain = lowered(text, problem)
    assert "bias" not in plain  # a program without the field: not a word of it


def test_wgmma_swap_ab_adds_along_the_kernels_rows():
    src = lowered(fused(WGMMA_SWAP))
    assert "constexpr bool kSwapAB = true;" in src
    assert "const float b = r < a.M ? __half2float(__ldg(a.bias + r)) : 0.f;" in src


@pytest.mark.parametrize("split", ["k3", "k3a"])
def test_wgmma_split_k_adds_the_bias_in_the_reduce(split):
    src = lowered(fused(WGMMA.replace("k1", split)))
    assert "if (kSplitK > 1 && !kInKernelReduce && !kClusterReduce) return;" in src
    assert "if (bias) s += __half2float(bias[kSwapAB ? i / N : i % N]);" in src
    assert "kAtomicReduce ? 1 : kSplitK, args.bias);" in src


def test_wgmma_self_test_checks_the_bias_path():
    program = parse(fused(WGMMA))
    text = registry.get("cuda_wgmma").standalone(program, ALIGNED)
    assert "GF_CHECK(static_cast<cudaError_t>(gemmforge_launch_bias(A, B, C, bias, M, N, K" in text
    assert "(A, B, R, M, N, K, bias);" in text and "s + __half2float(bias[col]);" in text
    plain = registry.get("cuda_wgmma").standalone(parse(WGMMA), ALIGNED)
    assert "bias" not in plain


@pytest.mark.parametrize("text, problem", [
    (TRITON, ALIGNED), (TRITON_TMA, ALIGNED), (TRITON.replace("k1", "k2i"), ALIGNED),
    (TRITON.replace("k1 persistent", "k1 dp") + " swap", ALIGNED),
])
def test_triton_adds_the_bias_before_the_store(text, problem):
    src = lowered(fused(text), problem)
    assert "def add_bias(acc, bias_ptr, N, pid_n, BLOCK_N: tl.constexpr):" in src
    assert "add_bias(acc, bias_ptr, N, pid_n, BLOCK_N)" in src or \
        "total = add_bias(total, bias_ptr, N, pid_n, BLOCK_N)" in src
    swap = "bias[:, None]" if " swap" in text else "bias[None, :]"
    assert f"return acc.to(tl.float32) + {swap}" in src
    gemm = make_plan(parse(fused(text)), problem).kernels[0]
    assert list(gemm.signature)[:5][-1] == "bias_ptr"  # the per-call arguments lead
    assert "bias" not in lowered(text, problem)


@pytest.mark.parametrize("split", ["k4", "k3a"])
def test_triton_split_k_adds_the_bias_once_in_the_reduce(split):
    text = fused(TRITON_SPLIT.replace("k4", split))
    src = lowered(text)
    assert "= add_bias(" not in src  # the slices store plain partials
    assert "total += tl.load(bias_ptr + offs % N, mask=mask, other=0.0).to(tl.float32)" in src
    reduce = make_plan(parse(text), ALIGNED).kernels[-1]
    assert reduce.role == "reduce" and list(reduce.signature)[:5] == [
        "ws_ptr", "c_ptr", "bias_ptr", "N", "NUMEL"]


# ---- the launch contract, on stand-ins -------------------------------------------------------

@pytest.mark.parametrize("text", [TRITON, TRITON_SPLIT, TRITON_TMA])
def test_triton_launch_bias_hands_the_bias_to_its_kernels(device, tmp_path, text):
    kernel = triton_kernel(fused(text), Problem(256, 256, 256), tmp_path)
    assert kernel.fused_bias
    for m, n, k in ((256, 256, 256), (100, 120, 72)):
        need = kernel.workspace_bytes(m, n, k)
        for _ in range(2):  # prepares, then from the caches
            kernel.launch_bias(A, B, C, BIAS, m, n, k, WS, need, 0x5)
            got = launched(device)
            assert got == uncached(kernel, (A, B, C, WS, BIAS), m, n, k, 0x5)
            assert any(BIAS in args for *_, args in got)
    with pytest.raises(ValueError, match="a fused-bias program launches through launch_bias"):
        kernel.launch(A, B, C, 256, 256, 256, WS, 1 << 30, 0)
    with pytest.raises(ValueError, match=r"the bias must be the device address of fp16 "
                                         r"values \(2-byte aligned\)"):
        kernel.launch_bias(A, B, C, BIAS + 1, 256, 256, 256, WS, 1 << 30, 0)
    kernel.launch_bias(A, B, C, BIAS + 2, 256, 256, 256, WS, 1 << 30, 0)  # any fp16 vector
    assert launched(device)
    plain = triton_kernel(text, Problem(256, 256, 256), tmp_path)
    with pytest.raises(ValueError, match="no fused bias"):
        plain.launch_bias(A, B, C, BIAS, 256, 256, 256, WS, 1 << 30, 0)


STUB_C = r"""
#include <stddef.h>
unsigned long long seen[10]; int which;
int gemmforge_launch(const void* a, const void* b, void* c, int m, int n, int k, void* ws,
                     size_t ws_bytes, void* stream) {
  which = 1; seen[3] = m; return 0;
}
int gemmforge_launch_bias(const void* a, const void* b, void* c, const void* bias, int m, int n,
                          int k, void* ws, size_t ws_bytes, void* stream) {
  const unsigned long long got[10] = {(size_t)a, (size_t)b, (size_t)c, (size_t)bias, m, n, k,
                                      (size_t)ws, ws_bytes, (size_t)stream};
  for (int i = 0; i < 10; ++i) seen[i] = got[i];
  which = 2; return 0;
}
size_t gemmforge_workspace_bytes(int m, int n, int k) { return 64; }
"""


@pytest.fixture
def bias_library(tmp_path):
    return c_library(tmp_path, STUB_C)


def _host_kernel(lib, meta: dict):
    kernel = core.load(Artifact(key="k", kind="cuda_so", path=lib, program_text="p",
                                layout=Layout.NT, acc=Accum.F32, meta=meta))
    kernel.device_flag = "is_cpu"
    kernel._stream = lambda index: 0x77
    return kernel


def test_shared_library_bias_entry(bias_library):
    kernel = _host_kernel(bias_library, {"symbol": "gemmforge_launch",
                                         "bias_symbol": "gemmforge_launch_bias"})
    seen = (ctypes.c_ulonglong * 10).in_dll(kernel._lib, "seen")
    which = ctypes.c_int.in_dll(kernel._lib, "which")
    kernel.launch_bias(A, B, C, BIAS, 256, 128, 64, WS, 64, 0x1234)
    assert which.value == 2 and list(seen) == [A, B, C, BIAS, 256, 128, 64, WS, 64, 0x1234]
    a, b, bias = torch.randn(16, 8).half(), torch.randn(4, 8).half(), torch.randn(4).half()
    out = kernel(a, b, bias=bias)
    assert list(seen)[:7] == [a.data_ptr(), b.data_ptr(), out.data_ptr(), bias.data_ptr(),
                              16, 4, 8]
    entry = ctypes.cast(kernel._lib.gemmforge_launch_bias, ctypes.c_void_p).value
    assert launch_address(kernel, "_launch_bias") == entry != launch_address(kernel)
    for wrong, says in ((torch.randn(5).half(), r"got torch.float16 of shape \(5,\)"),
                        (torch.randn(4), "got torch.float32"),
                        (torch.randn(4, 1).half(), r"shape \(4, 1\)")):
        with pytest.raises(ValueError, match=r"bias: expected a contiguous float16 CPU tensor "
                                             rf"of shape \(4,\) .*{says}"):
            kernel(a, b, bias=wrong)
    with pytest.raises(ValueError, match=r"bias: p adds a fused bias; pass bias=, a float16 "
                                         r"tensor of shape \(4,\)"):
        kernel(a, b)


def test_a_plain_library_refuses_a_bias(bias_library):
    kernel = _host_kernel(bias_library, {"symbol": "gemmforge_launch"})
    assert launch_address(kernel, "_launch_bias") is None and launch_address(kernel) is not None
    a, b = torch.randn(16, 8).half(), torch.randn(4, 8).half()
    with pytest.raises(ValueError, match="bias: p has no fused bias"):
        kernel(a, b, bias=torch.randn(4).half())
    kernel(a, b)
    assert ctypes.c_int.in_dll(kernel._lib, "which").value == 1


# ---- real builds for sm_90a, no GPU ----------------------------------------------------------

@pytest.mark.nvcc
@pytest.mark.parametrize("text, problem", [
    (WGMMA, Problem(1000, 4096, 336, "nn")),
    (WGMMA_TMA, Problem(1000, 4096, 336, "nn", "f16")),
    (WGMMA_SWAP, Problem(77, 4096, 4096, "nt")),
], ids=["direct-nn", "tma-nn-f16", "swap-nt"])
def test_wgmma_bias_builds_for_sm90a(tmp_path, text, problem):
    program = parse(fused(text))
    be = registry.get("cuda_wgmma")
    artifact = be.build(be.lower(program, problem), Target(), tmp_path)
    assert artifact.meta["bias_symbol"] == "gemmforge_launch_bias"
    if shutil.which("nm"):
        symbols = subprocess.run(["nm", "-D", "--defined-only", str(artifact.path)],
                                 capture_output=True, text=True, check=True).stdout
        for entry in ("gemmforge_launch", "gemmforge_launch_bias", "gemmforge_workspace_bytes"):
            assert f" T {entry}\n" in symbols, entry
    if nvcc.cuobjdump():
        assert "HGMMA" in nvcc.disassemble(artifact.path)


@pytest.mark.nvcc
def test_plain_wgmma_build_keeps_one_entry(tmp_path):
    be, program = registry.get("cuda_wgmma"), parse(WGMMA)
    artifact = be.build(be.lower(program, ALIGNED), Target(), tmp_path)
    assert "bias_symbol" not in artifact.meta


def test_triton_bias_aot_compiles_for_sm90a(tmp_path):
    pytest.importorskip("triton")
    problem = Problem(1000, 4096, 336, "nt")
    program = parse(fused(TRITON_TMA))
    be = registry.get("triton")
    artifact = be.build(be.lower(program, problem), Target(90), tmp_path)
    gemm = artifact.meta["kernels"][0]
    ptx = (tmp_path / gemm["ptx"]).read_text()
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx
    assert ["bias_ptr", "*fp16"] in artifact.meta["plan"]["kernels"][0]["signature"]


@pytest.mark.nvcc
def test_wgmma_bias_self_test_builds_without_spills(tmp_path):
    """192 fp32 accumulators a thread (one ping-pong warpgroup's 192x128 tile) and the bias of
    the 64 columns each thread holds: ptxas still spills nothing; the self-test main()'s bias
    path builds with it."""
    import re
    from gemmforge.emit import emit
    text = fused("cuda_wgmma sm_90a 192x128x64 w1x1 s4 sw128 row/8 pred k1 persistent c1x1 "
                 "pingpong tma")
    cu = emit(Problem(1000, 4096, 336, "nn"), parse(text), tmp_path)
    cmd = [nvcc.knobs().nvcc, *nvcc.BASE_FLAGS, *nvcc.gencode(Arch.SM90A), "-Xptxas", "-v",
           "-DGEMMFORGE_STANDALONE_MAIN", "-o", str(tmp_path / "selftest"), str(cu)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", done.stderr)
    assert spills and all(pair == ("0", "0") for pair in spills), spills  # every function
