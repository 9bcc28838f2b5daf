"""cute_dsl on the CPU: capabilities and refusals, lowering without the DSL, a clear build
error without it, and (where nvidia-cutlass-dsl is installed) real AOT compiles for sm_80
and sm_90a whose code holds the instructions the programs promise."""
import ctypes
from concurrent.futures import ThreadPoolExecutor

import pytest

from gemmforge.backends import registry
from gemmforge.compiler.values import BuildError, Target
from gemmforge.backends.cute_dsl import suite, toolchain
from gemmforge.backends import pipeline
from gemmforge.compiler import nvcc
from gemmforge.ir import Problem, parse
from gemmforge.ir.verify import check

SM90 = "cute_dsl sm_90a 128x256x64 w8x1 s3 sw128 row/8 pred k1 persistent c1x1 coop tma"
SM90_CLUSTER = "cute_dsl sm_90a 128x128x64 w4x1 s4 sw128 col/4 pred k1 dp c2x1 coop tma"
SM80 = "cute_dsl sm_80 128x128x32 w2x2 s4 sw128 row/8 pred k1 dp c1x1 nows smem"
DSL_MISSING = toolchain.missing()
needs_dsl = pytest.mark.skipif(DSL_MISSING is not None, reason=f"{DSL_MISSING}: "
                               "pip install -e '.[cute-dsl]' to run the AOT compiles")


def test_registered_with_its_capabilities():
    be = registry.get("cute_dsl")
    assert {a.value for a in be.archs} == {"sm_80", "sm_90a"}
    assert be.unit_threads == 32 and be.mma_shape == (16, 8, 16)


@pytest.mark.parametrize("text", suite.PROGRAMS)
def test_suite_programs_verify(text):
    assert check(parse(text), Problem(1000, 4096, 336, "nt", "f16")) is None


@pytest.mark.parametrize("text, problem, reason", [
    (SM90.replace("w8x1", "w4x2"), None, "warps: sm_90a issues wgmma per warpgroup"),
    (SM90.replace("sw128", "sw64"), None, "swizzle: sm_90a wgmma operands use 128B"),
    (SM90.replace(" tma", " direct"), None, "cute_dsl accepts smem, tma"),
    (SM90.replace("128x256x64", "128x256x32"), None, "tile.bk: 32 must be a multiple of 64"),
    (SM90, Problem(100, 100, 100), "TMA needs n and k multiples of 8"),
    (SM80.replace("swnone", "swpad").replace("sw128", "swpad"), None, "swizzle: cute_dsl accepts"),
    (SM80.replace("128x128x32", "128x128x16"), None, "tile.bk: 16 < 32"),
    (SM80.replace(" dp ", " persistent "), None, "schedule: cute_dsl sm_80 kernels are"),
    (SM80.replace("c1x1", "c2x1"), None, "cluster: thread-block clusters need sm_90a"),
    (SM80.replace("pred k1", "pred k2"), None, "split_k: cute_dsl ignores this field"),
])
def test_illegal_programs_are_refused_with_the_reason(text, problem, reason):
    got = check(parse(text), problem)
    assert got is not None and reason in got, got


def test_lowering_needs_no_dsl_and_is_deterministic():
    be, p = registry.get("cute_dsl"), parse(SM90_CLUSTER)
    problem = Problem(1000, 4096, 336, "nn", "f16")
    src = be.lower(p, problem)
    assert src.files == be.lower(p, problem).files
    plan = src.files["plan.json"]
    assert '"b_k_major": false' in plan and '"acc_f16": true' in plan and '"cm": 2' in plan
    launcher = src.files["launcher.cu"]
    assert f"// program: {p}" in launcher
    assert f"cute_dsl_gf_{p.key}_wrapper(" in launcher
    assert 'extern "C" int gemmforge_launch(' in launcher
    assert "constexpr int kAlign = 8;" in launcher
    odd = be.lower(parse(SM80), Problem(17, 33, 65)).files["launcher.cu"]
    assert "constexpr int kAlign = 1;" in odd


def test_build_without_the_dsl_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(toolchain, "missing", lambda: "the CuTe DSL is not installed")
    with pytest.raises(BuildError, match=r"not installed; install gemmforge\[cute-dsl\].* or "
                                         r"prebuild with scripts/prebuild_cute_dsl.py"):
        pipeline.compile(parse(SM80), Problem(64, 64, 64), Target(90))


def _has(code: str, *needles: str) -> dict:
    return {n: code.count(n) for n in needles if code.count(n) == 0}


@needs_dsl
@pytest.mark.nvcc
def test_aot_compiles_hold_the_promised_instructions():
    """One sm_80 (for an A100) and one sm_90a build, in parallel: PTX (and SASS where a
    disassembler is at hand) holds mma.sync + ldmatrix + cp.async, or wgmma + TMA; the
    shared library exports the gemmforge API."""
    jobs = [(SM80, Problem(1000, 4096, 336, "nn", "f32"), Target(80)),
            (SM90, Problem(1000, 4096, 336, "nt", "f16"), Target(90))]
    with ThreadPoolExecutor(2) as pool:
        sm80, sm90 = pool.map(lambda j: pipeline.compile(parse(j[0]), j[1], j[2]), jobs)
    ptx80 = (sm80.path.parent / "kernel.ptx").read_text()
    ptx90 = (sm90.path.parent / "kernel.ptx").read_text()
    assert ".target sm_80" in ptx80 and ".target sm_90a" in ptx90
    assert not _has(ptx80, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
                    "ldmatrix.sync.aligned.m8n8.x4.trans", "cp.async.cg.shared.global")
    assert not _has(ptx90, "wgmma.mma_async.sync.aligned.m64n256k16.f16.f16.f16",
                    "cp.async.bulk.tensor.2d.shared::cta.global", "setmaxnreg",
                    "cp.async.bulk.tensor.2d.global.shared::cta", "stmatrix")
    sass80 = nvcc.disassemble(sm80.path.parent / "kernel.cubin")
    sass90 = nvcc.disassemble(sm90.path.parent / "kernel.cubin")
    if sass80 and sass90:
        assert "HMMA" in sass80 and "LDSM" in sass80 and "LDGSTS" in sass80
        assert "HGMMA" in sass90 and "UTMALDG" in sass90 and "UTMASTG" in sass90
    for artifact in (sm80, sm90):
        assert artifact.kind == "cuda_so"
        lib = ctypes.CDLL(str(artifact.path))
        lib.gemmforge_program.restype = ctypes.c_char_p
        assert lib.gemmforge_program().decode() == artifact.program_text
        assert lib.gemmforge_workspace_bytes(64, 64, 64) == 0
