"""policy.wave_fit: tiles and K splits sized to the wave, and the heuristic's use of them."""
from __future__ import annotations

import math

import pytest

from gemmforge.backends import registry
from gemmforge.ir.program import Arch, Layout, Problem, Reduction
from gemmforge.ir.text import parse
from gemmforge.ir.verify import check
from gemmforge.policy import wave_fit
from gemmforge.policy.heuristic import HeuristicPolicy, _seeds, wave_fit_programs

WGMMA = registry.get("cuda_wgmma")


def ctas(problem: Problem, fit) -> int:
    return math.ceil(problem.m / fit.bm) * math.ceil(problem.n / fit.bn) * fit.slices


def test_nothing_outside_the_range_or_for_other_instructions():
    assert wave_fit.fits(Problem(64, 64, 64, Layout.NT), WGMMA) == []          # 5e5 FLOPs
    assert wave_fit.fits(Problem(8192, 8192, 8192, Layout.NN), WGMMA) == []    # large class
    assert wave_fit.fits(Problem(256, 6144, 4096, Layout.NT), registry.get("cuda_mma")) == []


def test_the_first_fits_fill_the_chip_where_powers_of_two_leave_it_short():
    # 256x6144x4096 in 128x128 tiles is 96 CTAs for 132 SMs (the H200 read 0.81x there);
    # the model's first shapes make >= 90 % of a wave and beat that tile's prediction
    problem = Problem(256, 6144, 4096, Layout.NT)
    fits = wave_fit.fits(problem, WGMMA)
    old = wave_fit.predicted_seconds(problem, 128, 128, 1, Reduction.WORKSPACE)
    assert fits and all(f.seconds < old for f in fits[:4])
    for f in fits[:4]:
        n = ctas(problem, f)
        assert n / (math.ceil(n / wave_fit.SMS) * wave_fit.SMS) >= 0.9
    assert [f.seconds for f in fits] == sorted(f.seconds for f in fits)


def test_the_model_charges_waves_splits_and_memory():
    p = Problem(1024, 1024, 4096, Layout.NN)
    one = wave_fit.predicted_seconds(p, 128, 128, 1, Reduction.WORKSPACE)  # 64 CTAs
    assert wave_fit.predicted_seconds(p, 64, 64, 1, Reduction.WORKSPACE) > \
        wave_fit.predicted_seconds(p, 64, 128, 1, Reduction.WORKSPACE)     # 256 CTAs, 2 waves
    ws = wave_fit.predicted_seconds(p, 128, 128, 2, Reduction.WORKSPACE)
    ik = wave_fit.predicted_seconds(p, 128, 128, 2, Reduction.INKERNEL)
    cl = wave_fit.predicted_seconds(p, 128, 128, 2, Reduction.CLUSTER)
    assert cl < ik < ws and ws - ik == pytest.approx(wave_fit.REDUCE_LAUNCH_S)
    assert cl < one  # two slices fill the idle half of the chip
    decode = Problem(1, 4096, 4096, Layout.NT)  # the weights' bytes set a floor
    floor = (4096 * 4096 + 4096 + 4096) * wave_fit.HALF / wave_fit.B_DRAM
    assert wave_fit.predicted_seconds(decode, 8, 64, 1, Reduction.WORKSPACE) >= floor
    assert wave_fit.predicted_seconds(decode, 8, 64, 1, Reduction.WORKSPACE, floor=False) < \
        wave_fit.predicted_seconds(decode, 8, 64, 1, Reduction.WORKSPACE)


def test_clusters_of_slices_count_the_ctas_a_gpc_holds():
    """k4c makes each tile's four slices one cluster, and 30 clusters of four fit at once: 32
    tiles (2048x256 in 128x128) are two waves, 30 tiles one; without a cluster 128 CTAs fit."""
    assert all(wave_fit.RESIDENT_CTAS[c] % c == 0 and wave_fit.RESIDENT_CTAS[c] <= wave_fit.SMS
               for c in range(1, wave_fit.MAX_SLICES + 1))
    full, fits = Problem(2048, 256, 16384, Layout.NN), Problem(1920, 256, 16384, Layout.NN)
    per_tile = {p: wave_fit.predicted_seconds(p, 128, 128, 4, Reduction.CLUSTER, floor=False)
                for p in (full, fits)}
    assert per_tile[full] > 1.8 * per_tile[fits]  # one more wave, nearly the same tiles
    assert wave_fit.predicted_seconds(full, 128, 128, 4, Reduction.WORKSPACE, floor=False) < \
        per_tile[full]


def test_an_in_kernel_sum_over_wide_accumulators_is_charged_its_round_trips():
    """128x256 k8i (128 accumulator registers a thread) read 124 us where the workspace's k8
    read 36 at 2048x256x16384; 128x128 (64 a thread) batches its loads and is not charged."""
    p = Problem(2048, 256, 16384, Layout.NN)
    wide_i = wave_fit.predicted_seconds(p, 128, 256, 8, Reduction.INKERNEL)
    wide_ws = wave_fit.predicted_seconds(p, 128, 256, 8, Reduction.WORKSPACE)
    assert wide_i - wide_ws > 60e-6
    narrow_i = wave_fit.predicted_seconds(p, 128, 128, 4, Reduction.INKERNEL)
    narrow_ws = wave_fit.predicted_seconds(p, 128, 128, 4, Reduction.WORKSPACE)
    assert narrow_i < narrow_ws
    swapped = Problem(16, 4096, 4096, Layout.NT)  # the 16-row token side holds 8 registers
    assert wave_fit.predicted_seconds(swapped, 16, 256, 2, Reduction.INKERNEL, swap_ab=True) < \
        wave_fit.predicted_seconds(swapped, 16, 256, 2, Reduction.WORKSPACE, swap_ab=True)


def test_layout_nn_steps_unswapped_n_tiles_by_whole_swizzle_atoms():
    nn = wave_fit.fits(Problem(128, 12288, 1024, Layout.NN), WGMMA, limit=50)
    assert nn and all(f.bn % 64 == 0 and not f.swap_ab for f in nn)
    nt = wave_fit.fits(Problem(128, 12288, 1024, Layout.NT), WGMMA, limit=50)
    assert any(f.bn % 64 for f in nt) and any(f.swap_ab for f in nt)
    assert all(f.bm % 64 == 0 for f in nt if not f.swap_ab)
    assert all(f.bn % 64 == 0 for f in nt if f.swap_ab)  # the weights on wgmma's 64-row side


@pytest.mark.parametrize("shape, layout", [((256, 6144, 4096), "nt"), ((8, 6144, 4096), "nt"),
                                           ((128, 4096, 14336), "nt"), ((1024, 1024, 4096), "nn"),
                                           ((12288, 64, 16384), "nn"), ((333, 1000, 4096), "nn")])
def test_every_wave_fit_program_is_legal(shape, layout):
    problem = Problem(*shape, Layout(layout))
    programs = list(wave_fit_programs(WGMMA, Arch.SM90A, problem))
    assert programs and all(check(p, problem) is None for p in programs)
    assert all(str(p.warp_spec) == "cooperative" for p in programs)


@pytest.mark.parametrize("shape, layout, text", [
    # winners of the wave-fit round on an H200 (benchmarks/NOTES.md, "Tiles sized to the wave")
    ((256, 6144, 4096), "nt", "cuda_wgmma sm_90a 128x96x64 w2x1 s8 sw128 row/8 pred k1 dp c1x1 coop direct"),
    ((128, 4096, 14336), "nt", "cuda_wgmma sm_90a 128x64x64 w2x1 s8 sw128 row/8 pred k2c dp c1x1 coop direct"),
    ((12288, 64, 16384), "nn", "cuda_wgmma sm_90a 192x64x64 w1x1 s5 sw128 row/8 pred k2c dp c1x1 coop direct"),
])
def test_the_heuristic_proposes_the_round_s_winners(shape, layout, text):
    proposals = HeuristicPolicy("cuda_wgmma").propose(Problem(*shape, Layout(layout)), Arch.SM90A, 16)
    assert parse(text) in proposals


@pytest.mark.parametrize("shape", [(256, 6144, 4096), (128, 4096, 4096)])
def test_wave_fit_comes_after_the_seeds(shape):
    # the untuned default (emit, the op off the shipped file) stays the seeds' first program,
    # and the wave-fit programs follow the seeds
    problem = Problem(*shape, Layout.NT)
    seeds = [p for p in _seeds("cuda_wgmma", Arch.SM90A, problem) if check(p, problem) is None]
    fits = list(wave_fit_programs(WGMMA, Arch.SM90A, problem))
    proposals = HeuristicPolicy("cuda_wgmma").propose(problem, Arch.SM90A, 16)
    assert seeds and proposals[0] == seeds[0]
    first_fit = next(p for p in fits if p not in seeds)
    assert proposals.index(first_fit) == len({*seeds} & {*proposals})


def test_verify_refuses_a_wgmma_wider_than_ptxas_s_register_cap():
    problem = Problem(256, 6144, 4096, Layout.NT)
    base = "cuda_wgmma sm_90a {} w4x1 s4 sw128 row/8 pred k1 dp c1x1 coop direct"
    reason = check(parse(base.format("256x144x64")), problem)
    assert reason and "ptxas" in reason and "640 threads at 96" in reason
    assert check(parse(base.format("256x136x64")), problem) is None
