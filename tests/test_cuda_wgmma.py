"""cuda_wgmma without a GPU: verify accepts and declines by its capabilities, the lowered
source holds the PTX the program promises, and real nvcc builds for sm_90a hold HGMMA,
UTMALDG and mbarrier (SYNCS) instructions, with no register spills."""
import re
import shutil
import subprocess

import pytest

from gemmforge.backends import registry
from gemmforge.compiler.values import Target
from gemmforge.compiler import nvcc
from gemmforge.emit import emit
from gemmforge.ir import Arch, Problem, check, parse

COOP = "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 dp c1x1 coop direct"
NOWS = "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 row/1 padop k3 persistent c1x1 nows direct"
CLUSTER = "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 row/1 padop k2 dp c2x2 nows direct"
PINGPONG = "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 col/4 padop k1 persistent c1x1 pingpong tma"
ALIGNED = Problem(4096, 4096, 4096, "nt", "f32")


def backend():
    return registry.get("cuda_wgmma")


def with_(text: str, **tokens) -> str:
    """`text` with tokens replaced by position name (tile, warps, stages, swizzle, ...)."""
    names = ("backend arch tile warps stages swizzle raster padding split_k schedule cluster "
             "warp_spec epilogue").split()
    parts = text.split()
    for name, value in tokens.items():
        parts[names.index(name)] = value
    return " ".join(parts)


def test_declares_its_capabilities():
    be = backend()
    assert be.archs == frozenset({Arch.SM90A})
    assert be.instruction == "wgmma.mma_async" and be.unit_threads == 128
    assert be.mma_shape == (64, 8, 16)


def test_sm80_is_refused_naming_wgmma():
    reason = check(parse(with_(COOP, arch="sm_80")))
    assert "wgmma.mma_async" in reason and "sm_80" in reason and "sm_90a" in reason


@pytest.mark.parametrize("text, problem", [
    (COOP, ALIGNED), (COOP, Problem(1000, 4096, 336, "nn", "f16")), (NOWS, None),
    (NOWS, Problem(17, 33, 65, "nn", "f32")),
    (with_(COOP, tile="256x128x64", warps="w4x1", schedule="persistent"), ALIGNED),
    (with_(COOP, tile="64x128x128", warps="w1x1", stages="s3", split_k="k2a"), ALIGNED),
    (with_(COOP, cluster="c2x1", schedule="persistent"), ALIGNED), (CLUSTER, None),
    (with_(COOP, cluster="c1x2"), Problem(1000, 4096, 336, "nt", "f32")),
    (with_(COOP, epilogue="tma"), ALIGNED), (PINGPONG, ALIGNED),
    (with_(COOP, tile="128x128x64", warps="w1x2", cluster="c2x1"), Problem(4096, 4096, 4096, "nn")),
    (with_(COOP, cluster="c1x2"), Problem(4096, 4096, 4096, "nn")),  # 128-column warpgroups
    (with_(PINGPONG, cluster="c2x1"), Problem(4096, 4096, 4096, "nn")),
    (PINGPONG, Problem(17, 33, 65, "nn", "f16")),  # n % 8 != 0: the launch stores C directly
    (with_(PINGPONG, tile="128x256x64", stages="s3"), Problem(64, 64, 64, "nn", "f16")),
    (with_(COOP, tile="192x128x64", warps="w1x2", epilogue="tma"), ALIGNED),
    (with_(PINGPONG, split_k="k3", epilogue="direct"), ALIGNED),
    (with_(PINGPONG, tile="192x128x64"), ALIGNED),  # 192 accumulators of the 232 it gets
    (with_(PINGPONG, schedule="streamk"), ALIGNED), (with_(COOP, schedule="streamk"), ALIGNED),
])
def test_accepts(text, problem):
    assert check(parse(text), problem) is None


@pytest.mark.parametrize("tokens, problem, says", [
    ({"swizzle": "swnone"}, ALIGNED, "use sw128"),
    ({"tile": "128x256x32"}, ALIGNED, "tile.bk: 32 is not a multiple of 64"),
    ({"stages": "s1"}, ALIGNED, "at least 2 stages"),
    ({"stages": "s6"}, ALIGNED, "shared memory"),
    ({"warps": "w1x1"}, ALIGNED, "registers per thread"),
    ({"tile": "64x512x64", "warps": "w1x1", "stages": "s2"}, Problem(64, 64, 64, "nn", "f16"),
     "wgmma's largest N"),
    ({"tile": "128x128x64", "warps": "w1x4"}, Problem(64, 64, 64, "nn"), "swizzle atoms"),
    ({"tile": "512x128x64", "warps": "w4x1", "stages": "s2"}, ALIGNED, "one TMA box"),
    ({"cluster": "c4x2"}, ALIGNED, "at most 4"),
    ({"tile": "128x8x64", "warps": "w1x1", "cluster": "c2x1"}, ALIGNED, "8-row swizzle atoms"),
    ({"epilogue": "smem"}, ALIGNED, "epilogue"),
    ({"schedule": "streamk", "split_k": "k2"}, ALIGNED, "stream_k already divides K"),
    ({"schedule": "streamk", "cluster": "c2x1"}, ALIGNED, "cluster c1x1"),
    ({"schedule": "streamk", "tile": "64x32x64", "warps": "w1x4", "warp_spec": "coop"}, ALIGNED,
     "at least 16 columns"),
    ({"epilogue": "tma", "split_k": "k2"}, ALIGNED, "split-K writes fp32 partials"),
    ({"epilogue": "tma", "tile": "64x32x64", "warps": "w1x1"}, ALIGNED, "64-column boxes"),
    ({"warp_spec": "pingpong"}, ALIGNED, "use w1x1, not w2x1"),
    ({"warp_spec": "pingpong", "tile": "128x256x64", "warps": "w1x1"}, ALIGNED,
     "registers per thread"),
    ({"warp_spec": "pingpong", "tile": "256x128x64", "warps": "w1x1", "stages": "s3"},
     ALIGNED, "registers per thread"),
    ({"epilogue": "tma", "stages": "s5"}, ALIGNED, "shared memory"),
    ({}, Problem(1000, 4096, 333, "nt"), "use padop"),
    ({}, Problem(1000, 4095, 336, "nn"), "n % 8 == 0 for layout nn"),
])
def test_declines_with_a_reason(tokens, problem, says):
    reason = check(parse(with_(COOP, **tokens)), problem)
    assert reason and says in reason, reason


def test_padop_reads_what_predicate_cannot():
    assert check(parse(with_(COOP, padding="padop")), Problem(1000, 4095, 333, "nn")) is None
    assert check(parse(COOP), Problem(1000, 4095, 336, "nt")) is None  # nt: only k matters


def lowered(text: str, problem: Problem) -> str:
    return backend().lower(parse(text), problem).text


def test_cooperative_source_holds_the_promised_ptx():
    text = lowered(COOP, Problem(4096, 4096, 4096, "nn", "f32"))
    for needle in [
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
        "mbarrier.try_wait.parity.shared::cta.b64", "mbarrier.arrive.expect_tx.shared::cta.b64",
        "mbarrier.init.shared::cta.b64", "fence.mbarrier_init.release.cluster",
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16",
        "p, 1, 1, 0, 1;",  # layout nn: B is N-major, wgmma transposes it (imm-trans-b 1)
        "wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned",
        "wgmma.wait_group.sync.aligned", "setmaxnreg.dec.sync.aligned.u32",
        "setmaxnreg.inc.sync.aligned.u32", "constexpr int kProducerRegs = 40, kConsumerRegs = 232;",
        "__launch_bounds__(kThreads, 1)", "const __grid_constant__ CUtensorMap tma_a",
        "cudaGetDriverEntryPointByVersion(\"cuTensorMapEncodeTiled\"", "CU_TENSOR_MAP_SWIZZLE_128B",
        "constexpr bool kProducerWG = true;", "constexpr int kThreads = 384;",
        'extern "C" int gemmforge_launch(', 'extern "C" size_t gemmforge_workspace_bytes(',
        f"// program: {COOP}", "-gencode=arch=compute_90a,code=sm_90a",
    ]:
        assert needle in text, needle


def test_tma_epilogue_and_pingpong_source():
    text = lowered(PINGPONG, Problem(4096, 4096, 4096, "nt", "f32"))
    for needle in [
        "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group", "cp.async.bulk.commit_group",
        "cp.async.bulk.wait_group.read %0", "cp.async.bulk.wait_group 0",
        "fence.proxy.async.shared::cta", "bar.sync %0, %1",
        "const __grid_constant__ CUtensorMap tma_c", "constexpr bool kPingpong = true;",
        "constexpr bool kEpiTma = true;", "constexpr int kConsumers = 2, kWN = 1;",
        "constexpr int kThreads = 384;", "constexpr int kEmptyArrivals = 1;",
        "kEpiBytes = 32768;",  # two consumers x two 64 x 64 boxes of 8 KB
        "aligned16(C) && N % kTmaRowAlign == 0",  # any other C is stored directly
        "(ta, tb, tc, args)",
    ]:
        assert needle in text, needle
    direct = lowered(COOP, ALIGNED)
    assert "tma_c" not in direct and "bulk_group" not in direct and "kEpiBytes = 0;" in direct


@pytest.mark.parametrize("raster, streamed", [("row/4", "B"), ("col/4", "A")])
def test_l2_hint_marks_the_operand_the_raster_streams(raster, streamed):
    """l2first: the hinted TMA load (a constant evict_first policy) takes the operand each
    wave reads once -- B under a row raster, A under a column raster; without it, none."""
    hinted = lowered(with_(PINGPONG, raster=raster) + " l2first", ALIGNED)
    assert "constexpr bool kL2StreamFirst = true;" in hinted
    assert ".L2::cache_hint" in hinted and "0x12F0000000000000ull" in hinted
    loads = re.findall(r"load_box\(r\.(\w)_stage\(s\)[^;]*?, (!?kRasterCol)\);", hinted)
    assert sorted(loads) == [("a", "kRasterCol"), ("b", "!kRasterCol"), ("b", "!kRasterCol")]
    raster_col = raster.startswith("col")
    assert f"constexpr bool kRasterCol = {str(raster_col).lower()};" in hinted
    marked = {op.upper() for op, flag in loads if (flag == "kRasterCol") == raster_col}
    assert marked == {streamed}
    assert "constexpr bool kL2StreamFirst = false;" in lowered(PINGPONG, ALIGNED)


def test_l2_hint_is_declined_with_a_cluster_and_elsewhere():
    reason = check(parse(with_(CLUSTER, padding="pred", split_k="k1") + " l2first"), ALIGNED)
    assert reason.startswith("l2_hint:") and "c1x1" in reason
    for other in ("cute_cpp sm_90a 256x128x64 w1x2 s4 swnone row/8 pred k1 persistent c1x1 "
                  "coop tma l2first",
                  "cuda_mma sm_90a 128x128x32 w2x2 s3 swnone row/1 pred k1 dp c1x1 nows "
                  "direct l2first"):
        assert "ignores this field" in check(parse(other))
    sm80 = "cuda_mma sm_80 128x128x32 w2x2 s3 swnone row/1 pred k1 dp c1x1 nows direct l2first"
    assert check(parse(sm80)).startswith("l2_hint: TMA loads with L2 cache hints need sm_90a")


def test_direct_epilogue_stores_16_byte_vectors_where_c_allows():
    """A whole block inside a 16-byte aligned C: the quad's pairs transposed by shuffles, one
    16-byte store per row and four column blocks; half2 and clipped stores stay beside it."""
    text = lowered(COOP, ALIGNED)
    for needle in ("c_in_vectors(a)", "quad_transpose(v, q);", "__shfl_xor_sync",
                   "make_uint4(v[0], v[1], v[2], v[3])", "kWgN % 32 == 0",
                   "*reinterpret_cast<half2*>(p) = __floats2half2_rn(v0, v1);"):
        assert needle in text, needle


def test_tma_epilogue_counts_its_boxes_in_shared_memory():
    be = backend()
    ring = be.smem_bytes(parse(COOP))
    assert be.smem_bytes(parse(with_(COOP, epilogue="tma"))) == ring + 2 * 2 * 8192
    assert be.smem_bytes(parse(PINGPONG)) == be.smem_bytes(parse(with_(PINGPONG, epilogue="direct"))) + 32768


def test_tma_epilogue_keeps_one_box_per_consumer_where_two_do_not_fit():
    """192x128 ping-pong: 4 stages leave room for two boxes per consumer, 5 stages for one
    (each store then has to read its box before the box is written again)."""
    be = backend()
    s4, s5 = (with_(PINGPONG, tile="192x128x64", stages=s) for s in ("s4", "s5"))
    for text, boxes in ((s4, 2), (s5, 1)):
        direct = be.smem_bytes(parse(with_(text, epilogue="direct")))
        assert be.smem_bytes(parse(text)) == direct + 2 * boxes * 8192
        assert check(parse(text), ALIGNED) is None
        source = lowered(text, ALIGNED)
        assert f"kEpiBuffers = {boxes};" in source and f"kEpiBytes = {2 * boxes * 8192};" in source
    assert be.smem_bytes(parse(s5)) <= 232448 < be.smem_bytes(parse(s5)) + 2 * 8192
    assert "shared memory" in check(parse(with_(s5, stages="s6")), ALIGNED)


def test_layout_and_accumulator_pick_the_wgmma_form():
    nt16 = lowered(NOWS, Problem(17, 33, 65, "nt", "f16"))
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f16.f16.f16" in nt16
    assert "p, 1, 1, 0, 0;" in nt16 and '"+r"(d[31])' in nt16  # 128 / 4 half2 registers
    assert "constexpr bool kProducerWG = false;" in nt16 and "constexpr int kThreads = 128;" in nt16
    assert "constexpr int kSplitK = 3;" in nt16 and "constexpr bool kPersistent = true;" in nt16


def test_cluster_source_multicasts_and_releases_across_the_cluster():
    text = lowered(CLUSTER, Problem(17, 33, 65, "nn", "f32"))
    for needle in ["mbarrier::complete_tx::bytes.multicast::cluster", "mapa.shared::cluster.u32",
                   "mbarrier.arrive.shared::cluster.b64", "barrier.cluster.arrive.release.aligned",
                   "mov.u32 %0, %%cluster_ctarank;", "cudaLaunchKernelEx(",
                   "cudaLaunchAttributeClusterDimension", "cudaOccupancyMaxActiveClusters",
                   "constexpr int kClusterM = 2, kClusterN = 2;",
                   "constexpr int kASliceRows = 64, kBSliceRows = 32;",  # nn: B boxes are bk rows
                   "constexpr int kEmptyArrivals = 3;"]:
        assert needle in text, needle


@pytest.mark.parametrize("warps", ["w1x1", "w2x1", "w2x2", "w4x1", "w1x4"])
def test_setmaxnreg_stays_inside_the_ctas_register_pool(warps):
    """setmaxnreg.inc only gets what the producer's .dec released: the per-warpgroup counts
    after the moves must fit the launch allocation, or the consumers wait forever."""
    from gemmforge.backends.cuda_wgmma.context import geometry
    g = geometry(parse(with_(COOP, tile="256x256x64", warps=warps)), ALIGNED.layout)
    c, entry = g["consumers"], min(256, (g["entry_regs"] + 7) // 8 * 8)
    assert g["producer_regs"] + c * g["consumer_regs"] <= (c + 1) * entry
    assert g["consumer_regs"] >= g["entry_regs"] or not g["consumer_inc"]


def test_lowering_is_deterministic():
    be, p, pr = backend(), parse(NOWS), Problem(17, 33, 65)
    assert be.lower(p, pr).files == be.lower(p, pr).files


def _ptxas_report(cu, out):
    """Build the self-test executable (kernel, launcher and main) with ptxas's report."""
    cmd = [nvcc.knobs().nvcc, *nvcc.BASE_FLAGS, *nvcc.gencode(Arch.SM90A), "-Xptxas", "-v",
           "-DGEMMFORGE_STANDALONE_MAIN", "-o", str(out), str(cu)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stderr


@pytest.mark.nvcc
def test_cooperative_build_has_hgmma_tma_and_no_spills(tmp_path):
    """The emitted file (self-test main included) builds for sm_90a; ptxas reports no spills
    and no ignored setmaxnreg (C7508) or serialized wgmma; the SASS holds the instructions
    the program promises."""
    cu = emit(Problem(1000, 4096, 336, "nn", "f32"), parse(COOP), tmp_path)
    so = tmp_path / "selftest"
    report = _ptxas_report(cu, so)
    kernel = report[report.index("gf_cuda_wgmma"):]
    assert re.search(r"0 bytes spill stores, 0 bytes spill loads", kernel)
    # the register pool setmaxnreg trades in: 384 threads enter with 65536 / 384 -> 168 each
    assert re.search(r"Used 168 registers", kernel)
    assert "C7508" not in report and "serialized" not in report
    sass = nvcc.disassemble(so)
    if nvcc.cuobjdump():
        for needle in ("HGMMA.64x256x16.F32", "tnspB", "UTMALDG.2D", "SYNCS.PHASECHK",
                       "SYNCS.ARRIVE", "USETMAXREG"):
            assert needle in sass, needle


def test_descriptors_keep_the_start_address_in_its_field():
    """In a cluster the shared address carries the CTA's rank above bit 17; unmasked it
    spilled into B's leading-byte offset (layout nn, warpgroups wider than 64 columns)."""
    text = lowered(with_(PINGPONG, cluster="c2x1"), Problem(4096, 4096, 4096, "nn", "f32"))
    assert "return (addr >> 4) & 0x3FFFu;" in text
    # the mask applies to each k-tile's base; a wgmma's descriptor adds its offset to that
    assert "static_cast<uint32_t>(kBDescHi) | desc_start(b);" in text
    assert "desc_b = desc_plus(b_hi, b_lo, k_b);" in text and ">> 4), desc_b" not in text


def test_descriptor_offsets_never_carry_out_of_the_address_field():
    """mma_k_tile builds a k-tile's base descriptors once (desc_start masks the address, rank
    bits and all) and adds each wgmma's offset to the low word: the same descriptor as masking
    the offset address, for every 16-byte address and offset inside 227 KB of shared memory
    (the start-address field, bits 0-13, never carries into the leading-byte offset above)."""
    lo_const = 0x3FFF0000  # every leading-byte-offset bit (16-29) set: a carry would show
    smem = 227 * 1024

    def desc_start(addr):
        return (addr >> 4) & 0x3FFF

    for rank_bits in (0, 1 << 24, 3 << 24):
        for a in range(0, smem, 1040):
            a -= a % 16
            for off in (0, 32, 8192, 65536, smem - 16 - a):
                if a + off >= smem:
                    continue
                added = (lo_const | desc_start(a | rank_bits)) + (off >> 4)
                assert added == lo_const | desc_start((a + off) | rank_bits)


def test_stream_k_source_shares_out_the_last_wave():
    text = lowered(with_(PINGPONG, schedule="streamk"), Problem(1000, 4096, 336, "nn", "f32"))
    for needle in ["constexpr bool kStreamK = true;", "constexpr bool kPersistent = true;",
                   "sk_publish(args, w, c, place, acc);", "sk_absorb(args, w, c, place, acc);",
                   "red.release.gpu.global.add.s32", "ld.acquire.gpu.global.s32",
                   "cudaMemsetAsync(args.sk_flags", "kSkPlaces = kPingpong ? 1 : kConsumers",
                   "w.kt_end = a.sk_head;", "kStreamKMinShareOfWave = 4",
                   "kStreamKMaxPartsPerSpare = 8"]:
        assert needle in text, needle
    plain = lowered(PINGPONG, Problem(1000, 4096, 336, "nn", "f32"))
    assert "constexpr bool kStreamK = false;" in plain and "sk_publish" not in plain


@pytest.mark.nvcc
@pytest.mark.parametrize("tokens, problem, hgmma", [
    ({"tile": "128x256x64", "stages": "s3"}, Problem(1000, 4096, 336, "nt", "f16"),
     "HGMMA.64x256x16.F16"),
    # 192 f32 accumulators, and one C box per consumer beside five stages
    ({"tile": "192x128x64", "stages": "s5"}, Problem(1000, 4096, 336, "nn", "f32"),
     "HGMMA.64x128x16.F32"),
    ({"stages": "s6", "schedule": "streamk"}, Problem(1000, 4096, 336, "nn", "f32"),
     "HGMMA.64x128x16.F32"),
])
def test_pingpong_tma_build_has_tma_stores_and_no_spills(tmp_path, tokens, problem, hgmma):
    cu = emit(problem, parse(with_(PINGPONG, **tokens)), tmp_path)
    so = tmp_path / "selftest"
    report = _ptxas_report(cu, so)
    kernel = report[report.index("gf_cuda_wgmma"):]
    assert re.search(r"0 bytes spill stores, 0 bytes spill loads", kernel)
    assert "C7508" not in report and "serialized" not in report
    if nvcc.cuobjdump():
        sass = nvcc.disassemble(so)
        for needle in (hgmma, "UTMASTG.2D", "UTMALDG.2D", "USETMAXREG"):
            assert needle in sass, needle
        assert _descriptors_stay_uniform(sass)


@pytest.mark.nvcc
def test_l2_hint_build_keeps_its_loads_straight_line(tmp_path):
    """The hinted loads carry the policy as a uniform operand (desc[UR..]); a policy in a
    vector register would put every load in an elect loop (tenth session: 12 % slower)."""
    sass = {}
    for hint in ("", " l2first"):
        out = tmp_path / f"build{hint.strip()}"
        out.mkdir()
        cu = emit(ALIGNED, parse(with_(PINGPONG, stages="s6", padding="pred") + hint), out)
        report = _ptxas_report(cu, out / "selftest")
        assert "0 bytes spill stores" in report[report.index("gf_cuda_wgmma"):]
        sass[hint] = nvcc.disassemble(out / "selftest") if nvcc.cuobjdump() else ""
    if nvcc.cuobjdump():
        loads = re.findall(r"UTMALDG\.2D[^;]*", sass[" l2first"])
        hinted = [ld for ld in loads if "desc[UR" in ld]
        assert hinted and len(hinted) < len(loads)  # A (col raster: streamed) hinted, B not
        assert not any("desc[UR" in ld for ld in re.findall(r"UTMALDG\.2D[^;]*", sass[""]))
        assert sass[" l2first"].count("ELECT") == sass[""].count("ELECT")


def _descriptors_stay_uniform(sass: str, window: int = 6) -> bool:
    """No R2UR among the few instructions before any HGMMA: its descriptors were computed on
    the uniform datapath. (Stream-K's first fix-up, with thread-dependent control flow,
    pushed them into vector registers: an R2UR before every wgmma, mainloops 20 % slower.)"""
    lines = [ln for ln in sass.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", ln)]
    hgmma = [i for i, ln in enumerate(lines) if "HGMMA" in ln]
    return bool(hgmma) and not any("R2UR" in ln for i in hgmma
                                   for ln in lines[max(0, i - window):i])


@pytest.mark.nvcc
def test_backend_build_for_hopper_device(tmp_path):
    be = backend()
    art = be.build(be.lower(parse(CLUSTER), Problem(17, 33, 65, "nt", "f16")), Target(90), tmp_path)
    assert art.kind == "cuda_so" and art.path.exists()
    assert art.meta["symbol"] == "gemmforge_launch"
    if nvcc.cuobjdump():
        sass = nvcc.disassemble(art.path)
        assert "HGMMA.64x128x16.F16" in sass and "UTMALDG.2D.MULTICAST" in sass
        assert "UCGABAR_WAIT" in sass  # the cluster barrier after the mbarrier inits
        assert "tnspB" not in sass and "USETMAXREG" not in sass
    if shutil.which("nm"):
        # A GNU-unique symbol (a static local of an inline function) is shared by every kernel
        # library in the process: one library's tensor-map cache served another's launches.
        dynamic = subprocess.run(["nm", "-D", str(art.path)], capture_output=True, text=True).stdout
        assert not [line for line in dynamic.splitlines() if " u " in line]
