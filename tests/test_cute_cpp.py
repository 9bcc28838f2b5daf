"""cute_cpp: legality as declared, lowered sources carrying the IR → CUTLASS mapping, and real
nvcc compiles against the nvidia-cutlass headers (two sm_90a, one sm_80), whose SASS holds
GMMA and TMA. No GPU needed; the compiles skip when nvcc or the CUTLASS headers are missing."""
import pytest

from gemmforge.backends import registry
from gemmforge.compiler.values import BuildError, Target
from gemmforge.backends.cute_cpp import cutlass
from gemmforge.backends.cute_cpp.legality import sm90_smem_bytes
from gemmforge.compiler import nvcc
from gemmforge.emit import emit
from gemmforge.ir import Problem, parse
from gemmforge.ir.verify import check

needs_cutlass = pytest.mark.skipif(
    cutlass.include_dirs() is None,
    reason=f"CUTLASS headers not found: {cutlass.INSTALL_HINT}")

COOP = "cute_cpp sm_90a 128x256x64 w2x1 s3 swnone row/8 pred k1 persistent c2x1 coop tma"
PINGPONG = "cute_cpp sm_90a 128x128x64 w1x1 s4 swnone col/4 padop k1 dp c1x1 pingpong direct"
NOWS = "cute_cpp sm_90a 128x128x64 w1x1 s4 swnone col/1 pred k1 dp c1x1 nows direct"
SPLITK = "cute_cpp sm_90a 128x128x64 w2x1 s4 swnone row/2 padop k4a persistent c1x1 coop direct"
STREAMK = "cute_cpp sm_90a 128x128x64 w2x1 s4 swnone col/8 pred k1 streamk c1x2 coop tma"
# consumer warpgroups split along N: CUTLASS's cooperative kernel on C^T = B^T A^T
COOP_N = "cute_cpp sm_90a 192x128x64 w1x2 s5 swnone row/8 pred k1 persistent c2x1 coop tma"
SM80 = "cute_cpp sm_80 128x128x32 w1x1 s3 swnone col/4 padop k2 dp c1x1 nows smem"
SM80_WIDE = "cute_cpp sm_80 256x128x32 w2x1 s3 swnone row/2 pred k1 dp c1x1 nows smem"
ALIGNED, RAGGED = Problem(1000, 4096, 336), Problem(17, 33, 65)


def lower(text, problem=ALIGNED):
    return registry.get("cute_cpp").lower(parse(text), problem).text


@pytest.mark.parametrize("text", [COOP, PINGPONG, NOWS, SPLITK, STREAMK, COOP_N, SM80, SM80_WIDE])
@pytest.mark.parametrize("layout, acc", [("nn", "f32"), ("nt", "f16")])
def test_declared_programs_are_legal(text, layout, acc):
    assert check(parse(text), Problem(1000, 4096, 336, layout, acc)) is None


@pytest.mark.parametrize("text, problem, reason", [
    (SM80.replace("c1x1", "c2x1"), ALIGNED, "cluster: thread-block clusters need sm_90a"),
    (COOP, RAGGED, "padding: pred needs n and k multiples of 8"),
    (STREAMK.replace("w2x1", "w1x1"), ALIGNED, "warps: coop is CUTLASS's KernelTmaWarpSpecializedCooperative"),
    (PINGPONG.replace("w1x1", "w1x2"), ALIGNED, "warps: pingpong is CUTLASS's KernelTmaWarpSpecializedPingpong"),
    (COOP_N.replace("192x128x64", "128x192x64").replace("s5", "s4"), ALIGNED, "tile.bn: w1x2 runs"),
    (PINGPONG.replace(" dp ", " streamk "), ALIGNED, "schedule: KernelTmaWarpSpecializedPingpong serves"),
    (PINGPONG.replace("k1", "k2"), ALIGNED, "split_k: split-K runs on CUTLASS's stream-K scheduler"),
    (NOWS.replace("direct", "tma"), ALIGNED, "epilogue: KernelTma takes direct"),
    (NOWS.replace("col/1", "row/1"), ALIGNED, "raster: KernelTma launches one CTA per tile along M"),
    (NOWS.replace("s4", "s2"), ALIGNED, "stages: KernelTma's mainloop needs at least 3"),
    (COOP.replace("tma", "smem"), ALIGNED, "epilogue: KernelTmaWarpSpecializedCooperative takes direct, tma"),
    (COOP.replace("c2x1", "c4x4"), ALIGNED, "cluster: 4x4 is 16 CTAs"),
    (COOP.replace("128x256x64", "512x64x64").replace("s3", "s2"), ALIGNED, "tile: a TMA box spans at most 256"),
    (COOP.replace("swnone", "sw128"), ALIGNED, "swizzle: cute_cpp ignores this field"),
    (COOP.replace("row/8", "row/3"), ALIGNED, "raster: cute_cpp accepts"),
    (SM80.replace("smem", "direct"), ALIGNED, "epilogue: CUTLASS 2.x's tensor-op epilogue"),
    (SM80.replace("k2", "k2a"), ALIGNED, "split_k: CUTLASS 2.x reduces split-K serially"),
    (SM80.replace("x32 ", "x16 "), ALIGNED, "tile.bk: CUTLASS 2.x's fp16 crosswise"),
    (SM80.replace("s3", "s2"), ALIGNED, "stages: CUTLASS 2.x's sm80 multistage mainloop"),
    (SM80.replace(" dp ", " persistent "), ALIGNED, "schedule: cutlass::gemm::device::Gemm"),
    (SM80.replace("128x128x32", "128x32x32"), ALIGNED, "warps: on sm_80 each warps unit is 2x2 warps"),
])
def test_declines_with_reason(text, problem, reason):
    got = check(parse(text), problem)
    assert got is not None and got.startswith(reason), got


def test_padop_serves_ragged_problems():
    assert check(parse(PINGPONG), RAGGED) is None
    assert check(parse(SM80), Problem(17, 33, 65, "nt", "f16")) is None


def test_sm90_smem_estimate_follows_the_builder():
    # 3 stages of (128 + 256) x 64 halves, two 128 x 32 D stages, 2 KiB of barriers/alignment
    assert sm90_smem_bytes(parse(COOP)) == 3 * 384 * 64 * 2 + 2 * 128 * 32 * 2 + 2048


def test_sm90_smem_estimate_is_the_verified_budget():
    # the transposed frame stages 128 x 32 pieces of C^T; verify takes the backend's count
    # (5 stages of 192x128 fit, where a whole staged C tile would not)
    assert sm90_smem_bytes(parse(COOP_N)) == 5 * 320 * 64 * 2 + 2 * 128 * 32 * 2 + 2048
    assert registry.get("cute_cpp").smem_bytes(parse(COOP_N)) == sm90_smem_bytes(parse(COOP_N))
    assert registry.get("cute_cpp").smem_bytes(parse(SM80)) is None
    assert check(parse(COOP_N.replace("s5", "s6")), ALIGNED).startswith("stages: 6 stages")


def test_split_along_n_runs_the_transposed_problem():
    """w1x2: CUTLASS's M is our N, so tile, cluster and raster are swapped, B^T is its A
    (N-contiguous for nn, K-contiguous for nt), A^T its B and C^T its column-major D."""
    text = lower(COOP_N)
    for piece in ("using TileShape = Shape<_128, _192, _64>;", "using ClusterShape = Shape<_1, _2, _1>;",
                  "using LayoutA = cutlass::layout::ColumnMajor;  // B^T",
                  "using LayoutB = cutlass::layout::ColumnMajor;  // A^T",
                  "using LayoutD = cutlass::layout::ColumnMajor;  // C^T",
                  "const half* op_a = B;", "const int Mc = N, Nc = M;",
                  "RasterOrderOptions::AlongM;", "KernelTmaWarpSpecializedCooperative"):
        assert piece in text, piece
    nt = lower(COOP_N.replace("row/8", "col/8"), Problem(1000, 4096, 336, "nt", "f16"))
    assert "using LayoutA = cutlass::layout::RowMajor;  // B^T" in nt
    assert "RasterOrderOptions::AlongN;" in nt
    plain = lower(COOP)
    assert "const half* op_a = A;" in plain and "const int Mc = M, Nc = N;" in plain
    assert "using LayoutA = cutlass::layout::RowMajor;" in plain


def test_sm90_source_carries_the_mapping():
    text = lower(COOP)
    for piece in ("// program: " + COOP, "CUTLASS ", "using TileShape = Shape<_128, _256, _64>;",
                  "using ClusterShape = Shape<_2, _1, _1>;",
                  "using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;",
                  "using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;",
                  "cutlass::gemm::collective::StageCount<3>", "cutlass::gemm::PersistentScheduler>",
                  "RasterOrderOptions::AlongN;", "max_swizzle_size = 8;",
                  "using LayoutB = cutlass::layout::RowMajor;", "using ElementAccumulator = float;",
                  "constexpr bool kLayoutNT = false;", "constexpr bool kUsesSmCount = true;",
                  'extern "C" int gemmforge_launch(', 'extern "C" size_t gemmforge_workspace_bytes(',
                  "--expt-relaxed-constexpr", "-DNDEBUG", "-gencode=arch=compute_90a,code=sm_90a",
                  "-I$CUTLASS/include -I$CUTLASS/tools/util/include", "#ifdef GEMMFORGE_STANDALONE_MAIN"):
        assert piece in text, piece


def test_split_k_and_stream_k_use_the_stream_k_scheduler():
    text = lower(SPLITK, Problem(17, 33, 65, "nt", "f16"))
    for piece in ("cutlass::gemm::StreamKScheduler>", "DecompositionMode::SplitK;",
                  "ReductionMode::Nondeterministic;", "constexpr int kSplitK = 4;",
                  "using LayoutB = cutlass::layout::ColumnMajor;",
                  "using ElementAccumulator = cutlass::half_t;", "constexpr bool kPadOperands = true;",
                  "GemmKernel::initialize_workspace(args, workspace, s)"):
        assert piece in text, piece
    text = lower(STREAMK)
    assert "DecompositionMode::StreamK;" in text and "ReductionMode::Deterministic;" in text
    assert "RasterOrderOptions::AlongM;" in text and "Shape<_1, _2, _1>" in text


def test_non_warp_specialized_kernel_has_no_scheduler():
    text = lower(NOWS)
    assert "using KernelSchedule = cutlass::gemm::KernelTma;" in text
    assert "CollectiveMainloop, CollectiveEpilogue, void>;" in text
    assert "cutlass::epilogue::NoSmemWarpSpecialized" in text
    assert "constexpr bool kUsesSmCount = false;" in text and "args.scheduler" not in text


def test_sm80_source_is_a_cutlass2_device_gemm():
    text = lower(SM80)
    for piece in ("cutlass::gemm::device::Gemm<", "cutlass::gemm::GemmShape<128, 128, 32>",
                  "cutlass::gemm::GemmShape<64, 64, 32>", "cutlass::gemm::GemmShape<16, 8, 16>",
                  "GemmIdentityThreadblockSwizzle<4>", "/*SplitKSerial=*/true", "cutlass::arch::Sm80",
                  "-gencode=arch=compute_80,code=sm_80"):
        assert piece in text, piece
    assert "cutlass::gemm::GemmShape<64, 64, 32>" in lower(SM80_WIDE)  # w2x1 = 4 x 2 warps
    assert "gf::RowBandSwizzle<2>" in lower(SM80_WIDE)                # row/2: bands of 2 rows


def test_lowering_is_deterministic():
    be, p = registry.get("cute_cpp"), parse(SPLITK)
    assert be.lower(p, RAGGED).files == be.lower(p, RAGGED).files


def test_fingerprint_covers_templates_and_cutlass_version(monkeypatch):
    be = registry.get("cute_cpp")
    before = be.fingerprint()
    monkeypatch.setattr(cutlass, "version", lambda: "9.9.9")
    assert be.fingerprint() != before


def test_cutlass_dir_override(monkeypatch, tmp_path):
    monkeypatch.setenv(cutlass.ENV_DIR, str(tmp_path))
    assert cutlass.include_dirs() is None and cutlass.version() == "missing"
    assert "GEMMFORGE_CUTLASS_DIR" in cutlass.missing_reason()
    be = registry.get("cute_cpp")
    with pytest.raises(BuildError, match="CUTLASS headers are not found"):
        be.build(be.lower(parse(NOWS), ALIGNED), Target(90), tmp_path)
    (tmp_path / "include" / "cutlass").mkdir(parents=True)
    (tmp_path / "include" / "cutlass" / "cutlass.h").write_text("")
    (tmp_path / "include" / "cutlass" / "version.h").write_text(
        "#define CUTLASS_MAJOR 4\n#define CUTLASS_MINOR 1\n#define CUTLASS_PATCH 0\n")
    assert cutlass.include_dirs()[0] == tmp_path / "include" and cutlass.version() == "4.1.0"


def shared_statics(path) -> list[str]:
    """gemmforge's STB_GNU_UNIQUE symbols in a kernel library (nm type "u"): the dynamic
    linker shares each between all loaded libraries, so one kernel's state would serve
    another's launches. Checked only where binutils' nm is installed."""
    import shutil
    import subprocess
    if not shutil.which("nm"):
        return []
    out = subprocess.run(["nm", "-D", "-C", "--defined-only", str(path)], text=True,
                         capture_output=True, check=True).stdout
    return [line for line in out.splitlines() if " u " in line and "gf::" in line]


@pytest.fixture
def slow_builds(monkeypatch):
    """CUTLASS sm90 compiles take 1-2 minutes on a small machine."""
    monkeypatch.setenv("GEMMFORGE_BUILD_TIMEOUT", "1200")


@needs_cutlass
@pytest.mark.nvcc
@pytest.mark.parametrize("text", [COOP, COOP_N])
def test_sm90_cooperative_builds_with_gmma_and_tma(tmp_path, slow_builds, text):
    """The pipeline's build (a cuda_so) of the flagship program, and of its split along N:
    its SASS holds warpgroup MMA (HGMMA) and TMA loads (UTMALDG), and its TMA epilogue's
    stores (UTMASTG)."""
    be = registry.get("cute_cpp")
    art = be.build(be.lower(parse(text), ALIGNED), Target(90), tmp_path)
    assert art.kind == "cuda_so" and art.path.stat().st_size > 0
    assert not shared_statics(art.path)
    if nvcc.cuobjdump():
        sass = nvcc.disassemble(art.path)
        assert "HGMMA" in sass and "UTMALDG" in sass and "UTMASTG" in sass


@needs_cutlass
@pytest.mark.nvcc
def test_sm90_split_k_standalone_file_compiles(tmp_path, slow_builds):
    """An emitted file (self-test main included) builds with the command its header gives."""
    p = parse(SPLITK)
    cu = emit(Problem(17, 33, 65, "nt", "f16"), p, tmp_path)
    exe = tmp_path / "selftest"
    nvcc.compile_cuda(cu, exe, [*nvcc.gencode(p.arch), "--expt-relaxed-constexpr",
                                *cutlass.include_flags(), "-DGEMMFORGE_STANDALONE_MAIN"],
                      shared=False)
    if nvcc.cuobjdump():
        assert "HGMMA" in nvcc.disassemble(exe)


@needs_cutlass
@pytest.mark.nvcc
def test_sm80_builds_for_hopper_devices(tmp_path, slow_builds):
    """An sm_80 program built for an H100/H200 (compute_80 code, sm_90 SASS), as the GPU
    tier runs it: CUTLASS 2.x's mma.sync, ldmatrix and cp.async survive (row/4: the
    gemmforge RowBandSwizzle; k2: serial split-K; padop: the padding path)."""
    be = registry.get("cute_cpp")
    p = parse(SM80.replace("col/4", "row/4"))
    art = be.build(be.lower(p, Problem(17, 33, 65, "nt", "f32")), Target(90), tmp_path)
    assert not shared_statics(art.path)
    if nvcc.cuobjdump():
        sass = nvcc.disassemble(art.path)
        assert "HMMA.16816" in sass and "LDSM" in sass and "LDGSTS" in sass
