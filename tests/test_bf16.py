"""bf16 operands without a GPU: Problem.dtype's text and round trips, verify's refusals from
the backends' declared dtypes, the space and prompts by dtype, bf16 types in the lowered
sources (and none in f16 ones), kernels and files named apart, the gate's bound, the
resolver keyed by dtype, `matmul` and `emit --dtype`; real nvcc builds (wgmma sm_90a,
mma.sync sm_80) and a Triton AOT compile for sm_90a hold the bf16 instructions."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given

from gemmforge.backends import registry
from gemmforge.compiler.artifacts import ArtifactCache, cache_key
from gemmforge.compiler.values import Artifact, Target
from gemmforge.ir import DType, IRError, Problem, check, parse, parse_problem
from gemmforge.ir.capabilities import serves_dtypes
from gemmforge.ir.program import lowered_name
from gemmforge.ir.space import Space
from gpu.conformance import PROGRAMS  # the GPU suite's programs, lowered here
from strategies import problems

WGMMA = "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 persistent c1x1 coop tma"
MMA = "cuda_mma sm_80 128x128x32 w2x2 s4 sw128 row/8 pred k3 dp c1x1 nows direct"
TRITON_TMA = "triton sm_90a 128x128x64 w2x2 s3 swnone row/8 pred k1 persistent c1x1 nows tma"
CUTE_SM80 = "cute_cpp sm_80 256x128x32 w2x1 s3 swnone row/2 pred k1 dp c1x1 nows smem"
SIMT = "cuda_simt sm_80 64x64x32 w2x2 s3 swpad col/4 pred k1 dp c1x1 nows direct"
BF16 = Problem(1000, 4096, 336, "nt", "f32", "bf16")
SERVING = {"cuda_wgmma", "cuda_mma", "cute_cpp", "triton"}


# ---- the IR ----------------------------------------------------------------------------

def test_dtype_defaults_to_f16_and_f16_texts_keep_their_meaning():
    assert Problem(64, 64, 64).dtype == DType.F16
    assert str(Problem(64, 64, 64, "nt", "f16")) == "64x64x64 nt f16"
    assert parse_problem("64x64x64 nt f16") == Problem(64, 64, 64, "nt", "f16", "f16")
    assert str(Problem(4096, 4096, 4096, "nn", "f32", "bf16")) == "4096x4096x4096 nn f32 bf16"


@given(problems())
def test_problem_text_round_trips(problem):
    assert parse_problem(str(problem)) == problem


@pytest.mark.parametrize("text, says", [
    ("64x64x64 nn f32 bf17", "dtype: 'bf17' is not one of f16, bf16"),
    ("64x64x64 nn f16 bf16", "acc: f16 accumulation is for f16 operands"),
    ("64x64x64 nn f32 bf16 x", "not of the form MxNxK [nn|nt] [f32|f16] [f16|bf16]"),
])
def test_bad_dtype_texts_are_refused_by_name(text, says):
    with pytest.raises(IRError, match=re.escape(says)):
        parse_problem(text)


def test_bf16_kernels_are_named_apart_and_f16_names_stay():
    p = parse(WGMMA)
    assert lowered_name(p, Problem(1, 1, 1)) == p.name
    name = lowered_name(p, BF16)
    assert name != p.name and "_bf16_" in name and name.endswith(p.key[:8])


# ---- verify, space and prompts --------------------------------------------------------

def test_backends_declare_their_dtypes():
    """bf16 where the instruction path has it; f16 alone for the rest (and for entries
    that declare nothing)."""
    for be in registry.all():
        assert (DType.BF16 in serves_dtypes(be)) == (be.name in SERVING), be.name
        assert DType.F16 in serves_dtypes(be)
    assert serves_dtypes(object()) == {DType.F16}


@pytest.mark.parametrize("text", [SIMT, "cuda_wmma sm_80 64x128x32 w2x2 s3 swpad row/8 pred "
                                  "k1 dp c1x1 nows direct"])
def test_a_backend_without_bf16_refuses_with_a_reason(text):
    reason = check(parse(text), BF16)
    assert reason == f"dtype: {text.split()[0]} computes f16 operands, not bf16"
    assert check(parse(text), Problem(1000, 4096, 336, "nt")) is None


@pytest.mark.parametrize("text", [WGMMA, MMA, TRITON_TMA, CUTE_SM80])
def test_bf16_backends_accept(text):
    assert check(parse(text), BF16) is None


def test_space_and_prompts_leave_out_backends_without_bf16():
    from gemmforge.ir.program import Arch
    from gemmforge.policy.prompts import compact_prompt, PromptConfig, problem_section, \
        usable_backends
    space = Space.build([Arch.SM80], problem=BF16)
    assert set(space.backends) <= SERVING and "cuda_mma" in space.backends
    assert {be.name for be in usable_backends(BF16, Arch.SM80)} <= SERVING
    assert "bf16 operands and output" in problem_section(BF16, Arch.SM90A)
    f16 = Problem(1000, 4096, 336, "nt")
    assert "fp16 operands and output" in problem_section(f16, Arch.SM90A)
    assert "bf16" in compact_prompt(BF16, Arch.SM90A, [], PromptConfig()).user
    assert "bf16" not in compact_prompt(f16, Arch.SM90A, [], PromptConfig()).user


# ---- lowering --------------------------------------------------------------------------

@pytest.mark.parametrize("text, needles", [
    (WGMMA, ["wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16",
             "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", "#include <cuda_bf16.h>", "__nv_bfloat16*",
             "__floats2bfloat162_rn"]),
    (MMA, ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "#include <cuda_bf16.h>",
           "__nv_bfloat16* __restrict__ C"]),
    (TRITON_TMA, ["tl.bfloat16"]),
    (CUTE_SM80, ["cutlass::bfloat16_t, LayoutA", "#include <cuda_bf16.h>"]),
])
def test_bf16_sources_hold_bf16_types(text, needles):
    program = parse(text)
    source = registry.get(program.backend).lower(program, BF16)
    for needle in needles:
        assert needle in source.text, needle
    assert lowered_name(program, BF16) in source.text
    code = "\n".join(line.split("//")[0] for line in source.text.splitlines())
    assert not re.search(r"\bhalf2?\b|__float2half\b|TYPE_FLOAT16\b", code)


def test_triton_plan_types_the_operands_bf16():
    from gemmforge.backends.triton.plan import make_plan
    plan = make_plan(parse(TRITON_TMA), BF16)
    signature = plan.kernels[0].signature
    assert signature["a_desc"] == "tensordesc<bf16[128, 64]>" and signature["c_desc"].startswith(
        "tensordesc<bf16[")
    assert "bf16" not in json.dumps(make_plan(parse(TRITON_TMA), Problem(256, 256, 256)).as_json())


def test_f16_sources_say_nothing_of_bf16_and_builds_are_keyed_apart():
    """Every program the GPU suite checks lowers for f16 without a bf16 word, and its bf16
    lowering builds under another key."""
    f16, bf16 = Problem(1000, 4096, 336, "nn"), Problem(1000, 4096, 336, "nn", "f32", "bf16")
    served = 0
    for backend, texts in PROGRAMS.items():
        be = registry.get(backend)
        for program in map(parse, texts):
            if check(program, f16) is not None:
                continue
            source = be.lower(program, f16)
            assert not re.search(r"bf16|bfloat16|BFLOAT16", source.text), str(program)
            if check(program, bf16) is None:
                served += 1
                other = be.lower(program, bf16)
                assert (cache_key(other, Target(), "fp", "tc")
                        != cache_key(source, Target(), "fp", "tc"))
    assert served > 50


def test_artifact_cache_keeps_the_dtype(tmp_path):
    cache = ArtifactCache(tmp_path)

    def build(folder):
        (folder / "k.so").write_bytes(b"x")
        return Artifact("", "cuda_so", folder / "k.so", "p", BF16.layout, BF16.acc,
                        dtype=DType.BF16)
    cache.put("abc123", build)
    artifact = cache.get("abc123")
    assert artifact.dtype == DType.BF16
    from gemmforge.search.measure.records import ArtifactRecord
    record = ArtifactRecord.from_artifact(artifact)
    assert ArtifactRecord.from_dict(record.to_dict()).to_artifact() == artifact
    old = {k: v for k, v in record.to_dict().items() if k != "dtype"}  # a record from before
    assert ArtifactRecord.from_dict(old).to_artifact().dtype == DType.F16


# ---- running: the kernel's checks, the gate, measuring ---------------------------------

class HostKernel:
    """A Kernel of a bf16 artifact on CPU tensors that records its launches."""

    @staticmethod
    def make(dtype=DType.BF16):
        from gemmforge.compiler.runtime import Kernel

        class Recording(Kernel):
            device_flag = "is_cpu"
            launches: list = []

            def _stream(self, index):
                return 0

            def workspace_bytes(self, m, n, k):
                return 0

            def launch(self, *args):
                self.launches.append(args)
        return Recording(Artifact("k", "test", None, "test", BF16.layout, BF16.acc,
                                  dtype=dtype))


def test_a_bf16_kernel_takes_and_returns_bfloat16():
    import torch
    kernel = HostKernel.make()
    a, b = torch.randn(4, 8).bfloat16(), torch.randn(4, 8).bfloat16()  # nt: b is n x k
    out = kernel(a, b)
    assert out.dtype == torch.bfloat16 and out.shape == (4, 4) and len(kernel.launches) == 1
    with pytest.raises(ValueError, match="a must be a bfloat16 CPU tensor"):
        kernel(a.half(), b)
    with pytest.raises(ValueError, match=r"out must be a contiguous bfloat16 tensor"):
        kernel(a, b, out=torch.empty(4, 4, dtype=torch.float16))


def test_gate_bound_and_exact_check_in_bf16():
    """The bf16 bound is 5 units of bf16 roundoff; an output rounded to bf16 passes it and
    the exact {0,1} check (sums past bf16's exact integers round the same in both), and a
    dropped K step fails."""
    import torch
    from gemmforge.search.measure import gate
    assert gate.tolerance(BF16) == pytest.approx(0.0195, abs=1e-4)
    assert gate.tolerance(Problem(1, 1, 1)) == gate.F32_TOLERANCE
    problem = Problem(64, 48, 600, "nn", "f32", "bf16")
    for binary in (False, True):
        a, b = gate.random_inputs(problem, device="cpu", seed=3, binary=binary)
        assert a.dtype == torch.bfloat16
        ref = gate.reference(a, b, problem.layout)
        assert gate.check(ref.bfloat16(), ref, gate.tolerance(problem), exact=binary) < 5e-3
        dropped = (a[:, 16:].float() @ b[16:].float()).bfloat16()
        with pytest.raises(gate.GateFailure):
            gate.check(dropped, ref, gate.tolerance(problem), exact=binary)


def test_a_bf16_request_builds_and_measures_bf16():
    """The request carries the dtype to the builder (its problem) and the worker."""
    from gemmforge.search.measure.records import MeasureRequest
    request = MeasureRequest.make(parse(WGMMA), BF16)
    assert request.problem() == BF16 and request.dtype == "bf16"


# ---- the resolver, matmul and emit -----------------------------------------------------

def _shipped(tmp_path, rows) -> Path:
    path = tmp_path / "shipped.json"
    path.write_text(json.dumps({"format": "gemmforge-shipped/1", "measurements": {}, "rows": [
        {"device_class": "h200", "layout": "nn", "acc": "f32", "m": 4096, "n": 4096,
         "k": 4096, "program": program, "kernel_us": 200.0, "speedup": 1.01, **extra}
        for program, extra in rows]}))
    return path


def test_shipped_rows_are_keyed_by_dtype(tmp_path):
    from gemmforge.dispatch.shipped import read
    other = WGMMA.replace("s4", "s3")
    book = read(_shipped(tmp_path, [(WGMMA, {}), (other, {"dtype": "bf16"})]))
    f16, bf16 = Problem(4096, 4096, 4096), Problem(4096, 4096, 4096, "nn", "f32", "bf16")
    assert [r.program_text for r in book.group("h200", f16)] == [WGMMA]
    assert [r.program_text for r in book.group("h200", bf16)] == [other]
    assert "dtype" not in book.exact("h200", f16).to_json("m")
    assert book.exact("h200", bf16).to_json("m")["dtype"] == "bf16"


@pytest.mark.parametrize("rule", ["nearest", "waves", "learned"])
def test_an_f16_row_never_serves_a_bf16_problem(tmp_path, rule):
    from gemmforge.ir.program import Arch
    from gemmforge.dispatch.choice import resolve
    bf16 = Problem(4096, 4096, 4096, "nn", "f32", "bf16")
    only_f16 = _shipped(tmp_path, [(WGMMA, {})])
    assert resolve(Problem(4096, 4096, 4096), Arch.SM90A, "h200", shipped_path=only_f16,
                   use_tuned=False, rule=rule).provenance == "shipped-exact"
    choice = resolve(bf16, Arch.SM90A, "h200", shipped_path=only_f16, use_tuned=False,
                     rule=rule)
    assert choice.provenance == "heuristic" and check(choice.program, bf16) is None
    both = _shipped(tmp_path, [(WGMMA, {}), (WGMMA, {"dtype": "bf16"})])
    assert resolve(bf16, Arch.SM90A, "h200", shipped_path=both, use_tuned=False,
                   rule=rule).provenance == "shipped-exact"


def test_matmul_picks_the_operands_dtype(monkeypatch):
    import torch
    from gemmforge import ops
    asked = []
    monkeypatch.setattr(ops, "kernel_for", lambda problem, device: asked.append(problem) or (
        lambda a, b, out=None: "ran"))
    monkeypatch.setitem(ops._op_state, "ready", False)  # the Python path: kernel_for
    monkeypatch.setattr("gemmforge.operands._devices", lambda *args, **kw: None)  # CPU stand-ins
    a, b = torch.randn(8, 16).bfloat16(), torch.randn(32, 16).bfloat16()
    assert ops.matmul(a, b, layout="nt") == "ran"
    assert asked == [Problem(8, 32, 16, "nt", "f32", "bf16")]
    with pytest.raises(ValueError, match="acc: bfloat16 operands accumulate in f32 only"):
        ops.matmul(a, b, layout="nt", acc="f16")
    through = []  # with the op loaded, bf16 goes to it as fp16 does (its table keyed by dtype)
    monkeypatch.setitem(ops._op_state, "ready", True)
    monkeypatch.setattr(ops, "_through_op", lambda a, b_kn: through.append(b_kn.shape) or "op")
    assert ops.matmul(a, b, layout="nt") == "op" and through == [(16, 32)]
    monkeypatch.setitem(ops._op_state, "ready", False)
    with pytest.raises(ValueError, match="a: expected dtype torch.float16 or torch.bfloat16"):
        ops.matmul(a.float(), b.float(), layout="nt")


def test_emit_dtype_argument(tmp_path, capsys):
    from gemmforge.cli import main
    args = ["emit", "--shape", "1000x4096x336", "--arch", "sm_90a", "-o", str(tmp_path)]
    assert main([*args, "--dtype", "bf16", "--program", WGMMA]) == 0
    (path,) = tmp_path.glob("*.cu")
    assert path.name == f"{lowered_name(parse(WGMMA), BF16)}_nn_f32.cu" and "bf16" in path.read_text()
    capsys.readouterr()
    simt = SIMT.replace("sm_80", "sm_90a")
    for bad, says in ((["--dtype", "bf17"], "--dtype: 'bf17' is not one of f16, bf16"),
                      (["--dtype", "bf16", "--acc", "f16"],
                       "--acc: f16 accumulation is for f16 operands"),
                      (["--dtype", "bf16", "--program", simt],
                       "dtype: cuda_simt computes f16 operands, not bf16")):
        assert main([*args, *bad]) == 2
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err


# ---- real builds, no GPU ---------------------------------------------------------------

@pytest.mark.nvcc
@pytest.mark.parametrize("text, sass", [(f"{WGMMA} bias", "HGMMA.64x256x16.F32.BF16"),
                                        (MMA, "HMMA.16816.F32.BF16"),
                                        (CUTE_SM80, "HMMA.16816.F32.BF16")],
                         ids=["wgmma", "mma", "cute_cpp-sm80"])
def test_bf16_builds_hold_bf16_instructions(tmp_path, text, sass):
    """The emitted file, self-test main() included, builds for its arch (sm_90a, sm_80)."""
    from gemmforge.compiler import nvcc
    from gemmforge.emit import build_selftest, emit
    program = parse(text)
    missing = registry.get(program.backend).unavailable()
    if missing:
        pytest.skip(missing)
    exe = build_selftest(emit(BF16, program, tmp_path), program)
    assert exe.exists()
    if nvcc.cuobjdump():
        assert sass in nvcc.disassemble(exe)


def test_triton_aot_compiles_bf16_for_sm90a(tmp_path):
    pytest.importorskip("triton")
    program = parse(f"{TRITON_TMA} bias")
    be = registry.get("triton")
    artifact = be.build(be.lower(program, BF16), Target(), tmp_path)
    ptx = "".join((tmp_path / k["ptx"]).read_text() for k in artifact.meta["kernels"])
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16" in ptx
    assert "cp.async.bulk.tensor" in ptx and artifact.dtype == DType.BF16
