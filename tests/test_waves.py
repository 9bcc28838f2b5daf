"""dispatch.waves and the resolver's wave rule: among the shipped neighbours of a shape off the
grid, the program whose tiles waste least there (measured time carried over by waves)."""
from __future__ import annotations

import pytest

from gemmforge.ir.program import Arch, Problem
from gemmforge.ir.text import parse
from gemmforge.dispatch.choice import pick, resolve
from gemmforge.dispatch.devices import multiprocessors
from gemmforge.dispatch.waves import predicted_us, slot_work, waves
from shipped_helpers import shipped_file as _shipped

PINGPONG = "cuda_wgmma sm_90a 128x128x64 w1x1 s6 sw128 row/8 pred k1 persistent c1x1 pingpong tma"
TALL = "cuda_wgmma sm_90a 192x128x64 w1x1 s4 sw128 row/8 pred k1 persistent c1x1 pingpong tma"
STREAMK = "cuda_wgmma sm_90a 128x128x64 w1x1 s6 sw128 row/8 pred k1 streamk c1x1 pingpong tma"
SPLIT = "cuda_wgmma sm_90a 64x64x64 w1x1 s8 sw128 row/8 pred k4 dp c1x1 coop direct"


def test_waves_count_tiles_over_the_sms():
    sms = multiprocessors("h100")
    assert sms == 132 and multiprocessors("a100") == 108 and multiprocessors("l40s") is None
    pingpong, streamk, split = parse(PINGPONG), parse(STREAMK), parse(SPLIT)
    assert waves(pingpong, Problem(512, 4096, 4096), sms) == 1      # 4 x 32 = 128 tiles
    assert waves(pingpong, Problem(700, 3584, 3584), sms) == 2      # 6 x 28 = 168 tiles
    assert waves(streamk, Problem(700, 3584, 3584), sms) == pytest.approx(168 / 132)
    assert waves(streamk, Problem(128, 128, 4096), sms) == 1.0      # never under one wave
    assert waves(split, Problem(64, 1024, 4096), sms) == 1          # 16 tiles x 4 slices
    # the K slice is rounded up to whole bk steps: 4100 / 4 = 1025 -> 17 steps of 64
    assert slot_work(split, Problem(64, 1024, 4100), sms) == 64 * 64 * 17 * 64


def test_predicted_time_scales_by_slot_work():
    p = parse(PINGPONG)
    # one wave of K = 4096 measured at 28 us; two waves of K = 3584 at the new shape
    assert predicted_us(p, Problem(512, 4096, 4096), 28.0, Problem(700, 3584, 3584),
                        132) == pytest.approx(28.0 * 2 * 3584 / 4096)
    assert predicted_us(p, Problem(512, 4096, 4096), 28.0, Problem(512, 4096, 4096),
                        132) == pytest.approx(28.0)


def test_a_ragged_m_picks_the_tile_that_wastes_less(tmp_path):
    # m = 333: 128-row tiles make 3 rows x 48 = 144 tiles (two waves on 132 SMs), 192-row
    # tiles 2 x 48 = 96 (one wave). The nearest neighbour (m = 320) ships the 128-row tile.
    path = _shipped(tmp_path, [(320, 6144, 4096, PINGPONG, 60.0),
                               (512, 6144, 4096, TALL, 70.0)])
    problem = Problem(333, 6144, 4096)
    kw = dict(shipped_path=path, use_tuned=False)
    near = resolve(problem, Arch.SM90A, "h100", rule="nearest", **kw)
    assert str(near.program) == PINGPONG and near.measured == Problem(320, 6144, 4096)
    chosen = resolve(problem, Arch.SM90A, "h100", rule="waves", **kw)
    assert str(chosen.program) == TALL and chosen.provenance == "shipped-nearest"
    assert chosen.predicted_us == pytest.approx(35.0)  # 2 waves at m = 512, 1 at m = 333
    assert "35 us predicted here" in chosen.line()


def test_a_second_wave_loses_to_stream_k(tmp_path):
    # 700x3584x3584: the nearest (512x4096x4096) program's 168 tiles need two waves; the
    # stream-K neighbour shares them out (1.27 waves)
    path = _shipped(tmp_path, [(512, 4096, 4096, PINGPONG, 28.0),
                               (1024, 2048, 4096, STREAMK, 27.4)])
    problem = Problem(700, 3584, 3584)
    chosen = resolve(problem, Arch.SM90A, "h100", shipped_path=path, use_tuned=False,
                     rule="waves")
    assert str(chosen.program) == STREAMK
    assert chosen.predicted_us == pytest.approx(27.4 * (168 / 132) * 3584 / 4096)


def test_an_exact_row_and_equal_predictions_keep_the_old_order(tmp_path):
    path = _shipped(tmp_path, [(320, 6144, 4096, PINGPONG, 80.0),
                               (512, 6144, 4096, TALL, 70.0),
                               (640, 6144, 4096, TALL, 70.0)])
    exact = resolve(Problem(320, 6144, 4096), Arch.SM90A, "h100", shipped_path=path,
                    use_tuned=False)
    assert exact.provenance == "shipped-exact" and str(exact.program) == PINGPONG
    # at m = 576 both 192-row rows predict 70 us (two waves at 512, 576 and 640; the
    # 128-row one 80): the nearer of the two wins
    tie = resolve(Problem(576, 6144, 4096), Arch.SM90A, "h100", shipped_path=path,
                  use_tuned=False, rule="waves")
    assert tie.measured == Problem(640, 6144, 4096) and tie.predicted_us == pytest.approx(70)
    with pytest.raises(ValueError, match="rule"):
        pick(Problem(1, 1, 1), [], ("h100",), "best")
