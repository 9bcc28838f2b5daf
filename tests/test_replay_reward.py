"""The replay reward model: recorded GPU measurements replayed, the rest estimated."""
import lzma
import math

import pytest

from gemmforge.ir import parse, parse_problem
from gemmforge.search.measure.env import WORST_REWARD, reward
from gemmforge.search.learn.replay_reward import (
    DATA_FILE, ESTIMATE_PENALTY, Measured, ReplayReward, is_estimated, program_distance,
    read_measured)

WGMMA = "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 row/8 pred k1 persistent c1x1 coop tma"


def _rows():
    p1 = parse_problem("4096x4096x4096")
    p2 = parse_problem("8192x8192x8192")
    a = str(parse(WGMMA))
    b = str(parse(WGMMA.replace("s4", "s3")))
    return [Measured(p1, a, 1.05, 100.0, 105.0, 3), Measured(p1, b, 0.90, 110.0, 99.0, 1),
            Measured(p2, a, 1.10, 800.0, 880.0, 2)]


def test_shipped_file_is_small_and_readable():
    assert DATA_FILE.stat().st_size < 4 * 2 ** 20
    with lzma.open(DATA_FILE, "rt") as f:
        assert f.readline().strip().startswith("m,n,k,layout,acc,device,program,speedup")
    rows = read_measured()
    assert len(rows) > 1000 and all(r.speedup > 0 and r.count >= 1 for r in rows)
    assert len(read_measured(device="H200")) > 100  # other devices are kept apart


def test_replays_a_measured_pair_with_the_recorded_ratio():
    model = ReplayReward(rows=_rows())
    result = model.result(WGMMA, parse_problem("4096x4096x4096"))
    assert result.ok and not is_estimated(result)
    assert result.speedup == pytest.approx(1.05)
    assert reward(result) == pytest.approx(math.log(1.05))
    assert result.flags[0].startswith("replayed")


def test_estimates_an_unmeasured_program_from_its_neighbours():
    model = ReplayReward(rows=_rows())
    problem = parse_problem("4096x4096x4096")
    program = parse(WGMMA.replace("s4", "s5"))
    result = model.result(program, problem)
    assert result.ok and is_estimated(result)
    near = program_distance(program, parse(WGMMA))
    assert near == pytest.approx(math.log2(5 / 4))
    # below the nearest measured ratio: weighted mean of 1.05, 0.90, ... less the penalty
    assert 0.9 < result.speedup < 1.05
    assert result.cublas_us == pytest.approx(105.0)  # the shape's recorded cuBLAS time


def test_estimate_for_an_unmeasured_shape_scales_cublas_by_flops():
    model = ReplayReward(rows=_rows())
    problem = parse_problem("4096x4096x8192")
    result = model.result(WGMMA, problem)
    assert is_estimated(result)
    assert result.cublas_us == pytest.approx(105.0 * 2)
    assert result.speedup < 1.10 * math.exp(-ESTIMATE_PENALTY * 0.999)


def test_illegal_and_unparsable_programs_get_the_worst_reward_with_the_reason():
    model = ReplayReward(rows=_rows())
    problem = parse_problem("4096x4096x4096")
    bad = model.result("cuda_wgmma sm_90a 128x128x64 w3x1", problem)
    assert bad.kind == "invalid" and bad.message
    illegal = WGMMA.replace("s4", "s8").replace("128x128x64", "256x256x128")
    result = model.result(illegal, problem)
    assert result.kind == "invalid" and result.message
    assert model.score([illegal, WGMMA], problem) == [WORST_REWARD,
                                                      pytest.approx(math.log(1.05))]


def test_excluded_problems_are_neither_replayed_nor_neighbours():
    held = parse_problem("4096x4096x4096")
    model = ReplayReward(rows=_rows(), exclude=[held])
    assert model.problems() == [parse_problem("8192x8192x8192")]
    assert is_estimated(model.result(WGMMA, held))
    assert model.best(held) is None
    assert model.best(parse_problem("8192x8192x8192")).speedup == pytest.approx(1.10)


def test_real_data_replays_the_tuned_best():
    model = ReplayReward()
    problem = parse_problem("8192x8192x8192")
    best = model.best(problem)
    assert best is not None and best.speedup > 1.0
    assert model.result(best.program, problem).speedup == pytest.approx(best.speedup)
