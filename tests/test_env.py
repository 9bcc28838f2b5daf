"""CPU tier for search.measure.env: invalid programs never reach a worker, the rest go through the
builder pool and the runner (fakes from fault_hooks), and rewards follow the documented rule."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

import fault_hooks as hooks
from gemmforge.ir.program import Problem
from gemmforge.ir.text import parse
from gemmforge.search.measure import env
from gemmforge.search.measure.measure import BuilderPool, DeviceRunner
from gemmforge.search.measure.records import BenchSettings, Result

HOOKS = f"{Path(hooks.__file__).resolve()}:"
SIMT = "cuda_simt sm_80 64x64x32 w2x2 s3 swnone row/1 pred k1 dp c1x1 nows direct"


@pytest.fixture(scope="module")
def pools():
    with BuilderPool(workers=2, timeout_s=2, builder=HOOKS + "build") as builders, \
            DeviceRunner(runner=HOOKS + "run") as runner:
        yield builders, runner


def test_evaluate_in_order_with_rewards(pools):
    builders, runner = pools
    programs = ["garbage", SIMT.replace("c1x1", "c2x1"), parse(SIMT), SIMT.replace("s3", "s2")]
    results = env.evaluate(programs, Problem(hooks.QUICK_OK, 40, 72), device_runner=runner,
                           builders=builders, settings=BenchSettings(timeout_s=60))
    assert [r.kind for r in results] == ["invalid", "invalid", None, None]
    assert "13 tokens" in results[0].message and "cluster" in results[1].message
    assert results[2].program == SIMT and results[2].key == parse(SIMT).key
    rewards = [env.reward(r) for r in results]
    assert rewards[:2] == [env.WORST_REWARD] * 2
    assert rewards[2] == pytest.approx(math.log(hooks.FAKE_CUBLAS_US / hooks.FAKE_KERNEL_US))
    assert runner.target_sm == 90


def test_evaluate_failures_get_the_worst_reward(pools):
    builders, runner = pools
    for m, kind in ((hooks.WRONG, "wrong"), (hooks.CUDA_ERROR, "runtime"),
                    (hooks.HANG, "timeout")):
        limit = BenchSettings(timeout_s=2 if m == hooks.HANG else 60)
        [r] = env.evaluate([SIMT], Problem(m, 24, 40), device_runner=runner,
                           builders=builders, settings=limit)
        assert r.kind == kind and env.reward(r) == env.WORST_REWARD


def test_reward_rule():
    ok = Result(SIMT, 64, 64, 64, kernel_us=5.0, cublas_us=10.0)
    assert env.reward(ok) == pytest.approx(math.log(2))
    slow = Result(SIMT, 64, 64, 64, kernel_us=1e6, cublas_us=1.0)
    assert env.reward(slow) == env.WORST_REWARD
    flagged = Result(SIMT, 64, 64, 64, kernel_us=5.0, cublas_us=10.0,
                     flags=("implausible kernel: 5 us",))
    assert env.reward(flagged) == env.WORST_REWARD
    assert env.reward(Result(SIMT, 64, 64, 64, status="failed", kind="compile")) \
        == env.WORST_REWARD


def test_reward_names_the_l2_state():
    both = Result(SIMT, 64, 64, 64, kernel_us=5.0, cublas_us=10.0, cold_us=8.0,
                  cublas_cold_us=6.0)
    assert env.reward(both) == pytest.approx(math.log(2))
    assert env.reward(both, l2="cold") == pytest.approx(math.log(0.75))
    warm_only = Result(SIMT, 64, 64, 64, kernel_us=5.0, cublas_us=10.0)
    assert env.reward(warm_only, l2="cold") == env.WORST_REWARD  # cold was not measured
    with pytest.raises(ValueError, match="l2: expected one of warm, cold"):
        env.reward(both, l2="lukewarm")


def test_evaluate_with_nothing_to_measure_starts_no_worker():
    results = env.evaluate(["garbage"], Problem(64, 64, 64), device_runner=None)
    assert results[0].kind == "invalid"
