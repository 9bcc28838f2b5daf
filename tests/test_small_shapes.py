"""The heuristic's small-problem rules (policy.small_shapes): token-side tiles in steps of 8,
swap_ab where the backend takes it, split-K toward one wave (in the kernel where the
backend can), the deepest ring verify accepts; all from capabilities, none for large
problems."""
import math

import pytest

from gemmforge.backends import registry
from gemmforge.ir import Arch, check, parse_problem
from gemmforge.ir.program import Reduction
from gemmforge.policy import small_shapes
from gemmforge.policy.heuristic import HeuristicPolicy, _small_candidates


@pytest.mark.parametrize("m, tile", [(1, 8), (7, 8), (16, 16), (40, 40), (64, 64), (77, 40),
                                     (333, 56), (256, 64)])
def test_token_tile_is_the_smallest_multiple_of_8_or_even_tiles_of_at_most_64(m, tile):
    assert small_shapes.token_target(m) == tile


def test_token_tiles_follow_the_backends_declared_values():
    triton, wgmma = registry.get("triton"), registry.get("cuda_wgmma")
    assert small_shapes.token_tiles(77, triton)[:2] == [64, 128]     # powers of two only
    assert small_shapes.token_tiles(77, wgmma)[:3] == [40, 48, 56]   # steps of 8


@pytest.mark.parametrize("shape", ["1x4096x4096", "256x4096x4096", "4096x64x8192 nt",
                                   "100x50x30"])
def test_small_problems_only(shape):
    assert small_shapes.is_small(parse_problem(shape))
    assert not small_shapes.is_small(parse_problem("8192x8192x8192"))
    assert list(_small_candidates(registry.get("triton"), Arch.SM90A,
                                  parse_problem("8192x8192x8192"))) == []


@pytest.mark.parametrize("arch", list(Arch))
@pytest.mark.parametrize("shape", ["1x4096x4096 nt", "7x4095x4097", "16x14336x4096 nt f16"])
def test_triton_swaps_a_short_token_side_onto_a_16_row_tile(shape, arch):
    problem = parse_problem(shape)
    first = HeuristicPolicy("triton").propose(problem, arch, 1)[0]
    assert check(first, problem) is None
    assert first.swap_ab and first.tile.bm == 16 and first.tile.bn in (64, 128)
    assert first.stages >= 8                       # a deep ring where shared memory holds it


def test_split_k_in_the_kernel_fills_about_a_wave():
    problem = parse_problem("1x4096x4096 nt")
    first = HeuristicPolicy("triton").propose(problem, Arch.SM90A, 1)[0]
    tiles = math.ceil(problem.m / first.tile.bm) * math.ceil(problem.n / first.tile.bn)
    assert first.split_k.reduction == Reduction.INKERNEL
    assert small_shapes.SMS / 2 <= tiles * first.split_k.slices <= 2 * small_shapes.SMS
    long_k = HeuristicPolicy("triton").propose(parse_problem("128x128x16384"), Arch.SM90A, 1)[0]
    assert long_k.split_k.slices >= 8 and long_k.split_k.reduction == Reduction.INKERNEL


def test_backends_without_inkernel_split_through_the_workspace():
    mma = registry.get("cuda_mma")
    assert Reduction.INKERNEL not in mma.reductions
    slices, reduction = small_shapes.split_for(parse_problem("128x128x16384"), 4, 64, mma)
    assert slices > 1 and reduction == Reduction.WORKSPACE
    first = HeuristicPolicy("cuda_mma").propose(parse_problem("128x128x16384"), Arch.SM80, 1)[0]
    assert first.split_k.slices > 1 and first.split_k.reduction == Reduction.WORKSPACE
    assert not first.swap_ab and check(first, parse_problem("128x128x16384")) is None


def test_the_ring_stops_at_the_k_steps_a_slice_has():
    problem = parse_problem("64x64x64")
    first = HeuristicPolicy("triton").propose(problem, Arch.SM90A, 1)[0]
    assert first.stages == 2 and check(first, problem) is None
