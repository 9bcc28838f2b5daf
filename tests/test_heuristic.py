"""The heuristic policy proposes only legal programs, for every backend it is given."""
import pytest

from gemmforge.backends import registry
from gemmforge.ir import Arch, check, parse_problem
from gemmforge.ir.text import field_text
from gemmforge.policy import cases, heuristic
from gemmforge.policy.heuristic import SEED_MIN_FLOPS, HeuristicPolicy, default_program

def _leads(problem):
    """Names of policy.cases' cases that hold for `problem`."""
    return {case.name for case in cases.applying(problem)}


SHAPES = ["8192x8192x8192", "64x64x64", "17x33x65 nt f16", "4096x64x8192"]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("arch", list(Arch))
def test_every_backend_gets_legal_distinct_programs(shape, arch):
    problem = parse_problem(shape)
    for name in registry.names():
        programs = HeuristicPolicy(name).propose(problem, arch, 3)
        assert len(set(programs)) == len(programs)
        for p in programs:
            assert p.backend == name and p.arch == arch
            assert check(p, problem) is None, (str(p), check(p, problem))


def test_several_backends_take_turns():
    problem = parse_problem("4096x4096x4096")
    got = HeuristicPolicy(backends=["triton", "cuda_wgmma"]).propose(problem, Arch.SM90A, 4)
    assert [p.backend for p in got] == ["triton", "cuda_wgmma", "triton", "cuda_wgmma"]


def test_seeds_only_for_large_problems():
    big, small = parse_problem("8192x8192x8192"), parse_problem("64x64x64")
    assert big.flops >= SEED_MIN_FLOPS > small.flops
    first = HeuristicPolicy("cuda_wgmma").propose(big, Arch.SM90A, 1)[0]
    assert str(first).endswith("s6 sw128 row/4 pred k1 streamk c1x1 pingpong tma")
    assert HeuristicPolicy("cuda_wgmma").propose(small, Arch.SM90A, 1)[0].tile.bm == 64


@pytest.mark.parametrize("shape, first", [
    ("12288x256x16384", "192x128x64 w1x2 s5"),    # one 192x128 tile per CTA, one wave
    ("12288x8192x1024", "192x128x64 w1x1 s4"),    # M divides by 192: ping-pong
    ("512x12288x8192", "128x192x64 w2x1 s5"),     # short M, N divides by 192
    ("8192x8192x8192", "256x128x64 w1x2 s4"),     # no 192 fits: the best over the sample
    ("12000x4096x2048", "256x128x64 w1x2 s4"),    # 12000 rows: a ragged last 192 row
])
def test_cute_cpp_seeds_take_192_wide_tiles_only_where_they_divide(shape, first):
    problem = parse_problem(shape)
    assert problem.flops >= SEED_MIN_FLOPS
    program = HeuristicPolicy("cute_cpp").propose(problem, Arch.SM90A, 1)[0]
    assert f"{program.tile.bm}x{program.tile.bn}x{program.tile.bk} " \
           f"w{program.warps.wm}x{program.warps.wn} s{program.stages}" == first, str(program)


def test_cuda_wgmma_seeds_ping_pong_192_rows_where_m_divides():
    first = HeuristicPolicy("cuda_wgmma").propose(parse_problem("12288x8192x1024"), Arch.SM90A, 1)
    assert str(first[0]).startswith("cuda_wgmma sm_90a 192x128x64 w1x1 s4")
    assert first[0].warp_spec.value == "pingpong"


def test_default_program_falls_back_where_the_first_backend_cannot_serve(monkeypatch):
    assert default_program(parse_problem("4096x4096x4096"), Arch.SM90A).backend == "cuda_wgmma"
    assert default_program(parse_problem("4096x4096x4096"), Arch.SM80).backend == "cuda_mma"
    # cuda_wgmma has no sm_80 program at all: the next preferred backend serves
    monkeypatch.setitem(heuristic.PREFERRED, Arch.SM80, ("cuda_wgmma", "cuda_mma"))
    assert default_program(parse_problem("4096x4096x4096"), Arch.SM80).backend == "cuda_mma"


def test_small_problems_get_the_small_hopper_forms():
    """Below SEED_MIN_FLOPS on sm_90a: a token side of <= 48 rows (nt) on wgmma's narrow side in
    the smallest tile of 8/16/32/48 holding it; a decode step (<= 32 tokens, K >= 2048)
    streams the weights 256 deep, unsplit, in as many stages as fit; otherwise split in the
    kernel where N's 64-row tiles fill under a wave; long K over few tiles split through the
    workspace; deep rings, coop."""
    def first(text):
        return default_program(parse_problem(text), Arch.SM90A)
    decode = first("1x4096x4096 nt f32")
    assert decode.swap_ab and decode.tile.bm == 8 and decode.tile.bk == 256
    assert field_text("split_k", decode.split_k) == "k1" and decode.stages == 6
    assert (first("16x4096x4096 nt f32").tile.bm, first("32x4096x14336 nt f32").tile.bm) == (16, 32)
    assert first("1x4096x1024 nt f32").tile.bk == 64  # a short K: the 64-deep form
    wider = first("40x4096x4096 nt f32")  # past decode: 64 deep, split in the kernel
    assert wider.tile.bm == 48 and field_text("split_k", wider.split_k) == "k2i"
    assert first("16x28672x4096 nt f32").split_k.slices == 1  # 448 weight tiles: no split
    assert not first("16x4096x4096 nn f32").swap_ab           # swap needs layout nt
    long_k = first("128x128x16384 nn f32")
    assert long_k.split_k.slices * 4 <= heuristic.SMS and long_k.split_k.slices == 8
    assert first("256x4096x4096 nt f32").tile.bn == 128       # 256 64x64 tiles: a wave
    for text in ("1x4096x4096 nt f32", "128x128x16384 nn f32", "333x1024x4096 nt f32"):
        program = first(text)
        # deep rings: 512 or more of K in flight (8 stages of 64, or 4-6 of 128)
        assert program.stages * program.tile.bk >= 512
        assert program.warp_spec.value == "cooperative"
    unaligned = first("17x33x65 nn f32")
    assert unaligned.backend == "cuda_wgmma" and unaligned.padding.value == "pad_operands"


def test_pdl_below_seed_flops_on_sm90a_only():
    """Untuned small and medium programs launch with programmatic dependent launch where the
    backend lowers it (sm_90a); the large class, sm_80 and backends without it do not."""
    def first(text, arch=Arch.SM90A, backend=None):
        return default_program(parse_problem(text), arch, backend)
    for text in ("1x4096x4096 nt f32", "64x64x1024", "333x1024x4096 nt f32", "17x33x65"):
        assert first(text).pdl, text
    assert not first("8192x8192x8192").pdl
    assert not first("64x64x1024", Arch.SM80).pdl
    small = parse_problem("64x64x1024")
    for program in heuristic.HeuristicPolicy("cuda_wgmma").propose(small, Arch.SM90A, 8):
        assert program.pdl == (small.flops < heuristic.SEED_MIN_FLOPS)


@pytest.mark.parametrize("shape, bound", [
    ("16384x16384x128", True), ("2048x12288x64", True), ("12288x2048x128", True),
    ("2048x8192x128", False),     # M x N 2^24: the ping-pong programs kept these rows
    ("16384x16384x256", False),   # K 256: the MMAs take as long as writing C
    ("16384x16384x128 nt f32", True),
])
def test_output_bound_problems_lead_with_persistent_coop_direct_stores(shape, bound):
    """K <= 128 over M x N >= 3 * 2^23: the 128x256 persistent cooperative form with direct
    stores first (pdl below the seeds' FLOPs, as the round's winners there), its 128-deep
    twin next; elsewhere neither leads."""
    problem = parse_problem(shape)
    assert bool(_leads(problem) & {"output-bound", "output-bound-pdl"}) == bound
    first, second = HeuristicPolicy("cuda_wgmma").propose(problem, Arch.SM90A, 2)
    lead = "128x256x64 w2x1 s4 sw128 row/8 pred k1 persistent c1x1 coop direct"
    assert (lead in str(first)) == bound, str(first)
    if bound:
        assert "128x256x128 w2x1 s2" in str(second) and first.epilogue.value == "direct"
        assert first.pdl == (problem.flops < SEED_MIN_FLOPS)
        assert default_program(problem, Arch.SM90A) == first


def test_long_k_over_half_a_wave_takes_128_deep_k_steps():
    """K >= 2048 and at least half a wave of 64x64 tiles: the dp seed steps K by 128 (its
    bk=128 twin read 1.039x over 48 grid shapes); a short K keeps the 64-deep step."""
    from gemmforge.ir.program import Arch, Layout, Problem
    from gemmforge.policy.heuristic import default_program
    long_k = default_program(Problem(4096, 256, 4096, Layout.NN), Arch.SM90A)
    assert long_k.backend == "cuda_wgmma" and long_k.tile.bk == 128
    assert long_k.tile.bm * long_k.tile.bn <= 64 * 128
    short_k = default_program(Problem(4096, 256, 1024, Layout.NN), Arch.SM90A)
    assert short_k.tile.bk == 64


@pytest.mark.parametrize("shape, lead", [
    ("2048x256x16384", "128x128x64 w2x1 s7 sw128 row/8 pred k4 dp c1x1 coop direct"),
    ("512x512x16384", "128x128x64 w2x1 s6 sw128 row/8 pred k8 dp c1x1 coop direct"),
    ("1024x512x12288 nt f32", "128x128x64 w2x1 s7 sw128 row/8 pred k4 dp c1x1 coop direct"),
    ("512x512x12288", None),      # 16 tiles: the k8 form was behind at K = 12288
    ("2048x256x8192", None),      # K 8192: the unsplit 64x64 program stayed ahead
    ("128x2048x16384", None),     # 128 on a side: other forms stayed ahead
])
def test_long_k_over_few_tiles_leads_with_a_workspace_split(shape, lead):
    """16 or 32 output tiles of 128x128 with a long K: the tile split 8 or 4 ways through the
    workspace first (benchmarks/NOTES.md, Split-K at few-tile long-K shapes); elsewhere it
    does not lead."""
    problem = parse_problem(shape)
    first = default_program(problem, Arch.SM90A)
    assert bool(_leads(problem) & {"long-k-split-16", "long-k-split-32"}) == (lead is not None)
    if lead:
        assert str(first) == f"cuda_wgmma sm_90a {lead}"
    else:
        assert first.split_k.slices == 1 or "128x128x64 w2x1" not in str(first)


@pytest.mark.parametrize("shape, lead", [
    ("12288x128x2048", "192x64x64 w1x1 s7 sw128 row/8 pred k1 dp c1x2 coop direct pdl"),
    ("12288x128x16384 nt f32", "192x64x64 w1x1 s7 sw128 row/8 pred k1 dp c1x2 coop direct pdl"),
    ("128x12288x4096", "64x192x64 w1x1 s6 sw128 row/8 pred k1 dp c1x1 coop direct l2first"),
    ("64x12288x8192", "64x192x64 w1x1 s6 sw128 row/8 pred k1 dp c1x1 coop direct l2first"),
    ("128x8192x8192", "64x128x64 w1x1 s9 sw128 row/8 pred k1 dp c1x1 coop direct l2first"),
    ("16384x128x4096", None),     # 172 CTAs of 192x64: more than a wave
    ("128x12288x512", None),      # K < 1024
    ("4096x4096x4096", None),
])
def test_a_narrow_side_leads_with_the_streaming_forms(shape, lead):
    """A narrow side whose other side fills ~128 CTAs: 192x64 tiles in clusters along N at
    N = 128, 64-row tiles loading B evict-first at M <= 128 (the streaming round); elsewhere
    none of them leads."""
    problem = parse_problem(shape)
    first = default_program(problem, Arch.SM90A)
    assert any(name.startswith("stream-") for name in _leads(problem)) == (lead is not None)
    if lead:
        assert str(first) == f"cuda_wgmma sm_90a {lead}"
    else:
        assert first.cluster.cn == 1 and first.l2_hint.value == "none"
