"""verify() rejects illegal programs with a message naming the field and the limit."""
import pytest

from gemmforge.ir import Problem, VerifyError, parse, verify
from gemmforge.ir import graph
from gemmforge.ir.verify import check

OK = "cuda_mma sm_80 128x128x32 w2x2 s3 sw128 row/8 pred k1 dp c1x1 nows direct"


def test_legal_program_passes():
    p = parse(OK)
    assert verify(p) is p
    assert check(p, Problem(1000, 4096, 333, "nt", "f16")) is None


CASES = [
    # unknown backend
    (OK.replace("cuda_mma", "no_such"), "backend: backend 'no_such' is not registered; known: "),
    # shared memory over the arch budget
    (OK.replace("128x128x32", "256x256x64").replace("w2x2", "w4x4").replace("s3", "s4"),
     "stages: 4 stages of 256x256x64 need 262144 B of shared memory; sm_80 allows 166912 B"),
    # tile not divisible by warps x MMA shape
    (OK.replace("128x128x32", "128x16x32"), "tile.bn: 16 is not a multiple of warps.wn x "
                                            "mma.sync.m16n8k16 N (2 x 16 = 32)"),
    (OK.replace("128x128x32", "128x128x8").replace("sw128", "swnone"),
     "tile.bk: 8 is not a multiple of the mma.sync.m16n8k16 K step (16)"),
    # a field the backend ignores set away from its default
    (OK.replace(" dp ", " persistent "), "schedule: cuda_mma ignores this field; leave it at "
                                         "its default (dp), not persistent"),
    (OK.replace("sm_80", "sm_90a").replace("direct", "tma"),
     "epilogue: cuda_mma ignores this field; leave it at its default (direct), not tma"),
    # a value the backend doesn't accept
    (OK.replace("cuda_mma", "cuda_wmma").replace("sw128", "sw64"),
     "swizzle: cuda_wmma accepts swnone, swpad; got sw64"),
    # Hopper features on sm_80
    (OK.replace("c1x1", "c2x1"), "cluster: thread-block clusters need sm_90a; this program is sm_80"),
    (OK.replace("nows", "coop"), "warp_spec: warp specialization with setmaxnreg need sm_90a"),
    # threads per block
    (OK.replace("128x128x32", "256x256x32").replace("w2x2", "w8x8").replace("s3", "s1"),
     "warps: 8x8 units of 32 threads is 2048 threads; the limit is 1024"),
    # tiles beyond powers of two: only where the backend takes them, for the arch that can
    (OK.replace("128x128x32", "128x192x32"), "tile: 128x192: cuda_mma takes powers of two only"),
    ("triton sm_90a 192x128x64 w2x4 s3 swnone row/8 pred k1 persistent c1x1 nows tma",
     "tile: 192x128: triton takes powers of two only"),
    ("cute_cpp sm_80 128x192x32 w2x2 s3 swnone row/8 pred k1 dp c1x1 nows smem",
     "tile: 128x192: the sm_80 mainloops take powers of two"),
    # accumulator registers
    (OK.replace("128x128x32", "256x256x16").replace("w2x2", "w2x2").replace("s3", "s2"),
     "holds 512 f32 accumulator registers per thread; the limit is 160"),
]


@pytest.mark.parametrize("text, message", CASES)
def test_illegal_programs_name_field_and_limit(text, message):
    with pytest.raises(VerifyError) as e:
        verify(parse(text))
    assert message in str(e.value)


def test_arch_lacking_the_instruction(monkeypatch):
    """A backend built on an sm_90a-only instruction is refused on sm_80, naming both."""
    from gemmforge.backends import registry
    from gemmforge.backends.base import Backend
    from gemmforge.ir.program import Arch

    class FakeWgmma(Backend):
        name, archs, instruction, mma_shape, unit_threads = \
            "fake_wgmma", frozenset({Arch.SM90A}), "wgmma.mma_async", (64, 8, 16), 128
        lower = build = None

    registry._load()
    monkeypatch.setitem(registry._entries, "fake_wgmma", FakeWgmma.__new__(FakeWgmma))
    with pytest.raises(VerifyError, match="arch: fake_wgmma emits wgmma.mma_async, which "
                                          "sm_80 lacks \\(needs sm_90a\\)"):
        verify(parse(OK.replace("cuda_mma", "fake_wgmma")))


def test_problem_layout_changes_smem_accounting():
    """Padded rows: an nt B tile has bn rows of bk, an nn B tile bk rows of bn."""
    p = parse(OK.replace("sw128", "swpad"))
    nn = graph.smem_bytes(graph.build(p, 32, Problem(64, 64, 64, "nn").layout))
    nt = graph.smem_bytes(graph.build(p, 32, Problem(64, 64, 64, "nt").layout))
    # A: 3 x 128 x (32+8) x 2; B nn: 3 x 32 x (128+8) x 2; B nt: 3 x 128 x (32+8) x 2
    assert nn == 3 * 128 * 40 * 2 + 3 * 32 * 136 * 2
    assert nt == 3 * 128 * 40 * 2 * 2


def test_graph_is_a_dag_from_operands_to_c():
    import networkx as nx
    g = graph.build(parse(OK.replace("k1", "k4")))
    assert nx.is_directed_acyclic_graph(g)
    assert nx.has_path(g, "A.gmem", "C.gmem") and nx.has_path(g, "B.gmem", "C.gmem")
    assert "partials" in g
    assert "A.smem[2] --smem_to_reg--> A.frag" in graph.describe(g)


def test_192_wide_tiles_are_legal_where_the_backend_takes_them():
    p = parse("cute_cpp sm_90a 128x192x64 w2x1 s4 swnone row/8 pred k1 persistent c2x1 coop tma")
    assert verify(p, Problem(12288, 256, 16384)) is p and p.tile.extras == (192,)
    assert parse(str(p)) == p


def test_warp_specialized_consumers_may_hold_the_backends_accumulator_budget():
    """cute_cpp's ping-pong consumer runs at 232 registers (setmaxnreg): 192 accumulators
    fit there, 256 do not; cuda_wgmma's consumers may ask setmaxnreg for up to 256 (its own
    check then counts the real budget); everyone else keeps ACCUM_REG_BUDGET."""
    ws = "cute_cpp sm_90a 192x128x64 w1x1 s4 swnone row/8 pred k1 persistent c1x1 pingpong tma"
    assert check(parse(ws)) is None
    with pytest.raises(VerifyError, match="256 f32 accumulator registers per thread; the "
                                          "limit is 192"):
        verify(parse(ws.replace("192x128x64", "128x256x64").replace("s4", "s3")))
    with pytest.raises(VerifyError, match="the limit is 216"):
        verify(parse("cuda_wgmma sm_90a 128x256x64 w1x1 s3 sw128 row/8 pred k1 persistent "
                     "c1x1 coop direct"))
    with pytest.raises(VerifyError, match="the limit is 160"):
        verify(parse("cuda_mma sm_90a 128x256x32 w1x1 s3 sw128 row/8 pred k1 dp "
                     "c1x1 nows direct"))


@pytest.mark.parametrize("text, message", [
    (OK + " swap", "swap_ab: cuda_mma ignores this field; leave it at its default "
                   "(noswap), not swap"),
    (OK.replace("k1 dp", "k4i dp"),
     "split_k.reduction: cuda_mma reduces split-K slices by atomic, workspace; got "
     "inkernel (k4i)"),
    (OK.replace(" s3 ", " s12 "), "stages: cuda_mma builds at most 8 stages; got 12"),
    (OK.replace("128x128x32", "40x128x32"), "tile: 40x128: cuda_mma takes powers of two only"),
])
def test_small_problem_values_are_refused_where_not_declared(text, message):
    """Backends take swap_ab, inkernel split-K, deep rings and tiles in steps of 8 only where
    they declare them (allowed, reductions, max_stages, tile_extras)."""
    with pytest.raises(VerifyError) as e:
        verify(parse(text))
    assert message in str(e.value)


def _fake_small(monkeypatch):
    """A backend declaring every small-problem value: swap_ab, inkernel, 16 stages, tiles
    in steps of 8, on a 64 x 8 x 16 instruction like wgmma's."""
    from gemmforge.backends import registry
    from gemmforge.backends.base import Backend
    from gemmforge.ir.program import TILE_EXTRAS, Arch, Reduction

    class FakeSmall(Backend):
        name, archs, instruction, mma_shape, unit_threads = \
            "fake_small", frozenset(Arch), "fake.mma", (64, 8, 16), 128
        allowed = {"swap_ab": frozenset({False, True})}
        reductions, max_stages, tile_extras = frozenset(Reduction), 16, TILE_EXTRAS
        lower = build = None

    registry._load()
    monkeypatch.setitem(registry._entries, "fake_small", FakeSmall.__new__(FakeSmall))
    return "fake_small sm_90a 40x64x64 w1x1 s12 swnone row/1 pred k4i dp c1x1 nows direct"


def test_swap_puts_the_token_side_on_the_mmas_narrow_side(monkeypatch):
    """With swap_ab, bm (along M, 40 rows) meets the instruction's N step (8) and bn its M
    step (64); without it, 40 rows can't fill a 64-row MMA."""
    text = _fake_small(monkeypatch)
    p = parse(text + " swap")
    assert verify(p, Problem(77, 4096, 4096)) is p and p.mma_mn == (64, 40)
    with pytest.raises(VerifyError, match=r"tile.bm: 40 is not a multiple of warps.wm x "
                                          r"fake.mma M \(1 x 64 = 64\)"):
        verify(parse(text))
    with pytest.raises(VerifyError, match=r"tile.bn: 96 is not a multiple of warps.wn x "
                                          r"fake.mma M \(1 x 64 = 64\) \(swap_ab puts tile.bn"):
        verify(parse(text.replace("40x64x64", "40x96x64") + " swap"))


def test_deep_rings_are_bounded_by_shared_memory(monkeypatch):
    """16 stages pass the backend's own limit; shared memory still bounds the ring."""
    text = _fake_small(monkeypatch).replace("s12", "s16")
    assert check(parse(text + " swap")) is None
    with pytest.raises(VerifyError, match="stages: 16 stages of 40x128x64 need 344064 B of "
                                          "shared memory; sm_90a allows 232448 B"):
        verify(parse(text.replace("40x64x64", "40x128x64") + " swap"))
