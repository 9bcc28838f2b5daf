"""GPU tier for `gemmforge tune`'s confirmation (search.tune.confirm) below the large class: the
trials are timed with the kernel protocol, the confirmation after another kernel too, and
the database entry is its best there. Run on the GPU machine:

    python -m pytest tests/gpu/test_tune_confirm_gpu.py -m gpu -v -s
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gemmforge.ir.program import Problem  # noqa: E402
from gemmforge.search.measure.records import BenchSettings  # noqa: E402
from gemmforge.search.measure.selection import selection_ratio  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.skipif(not torch.cuda.is_available()
                    or torch.cuda.get_device_capability()[0] != 9,
                    reason="the heuristic's cuda_wgmma proposals need sm_90")
def test_a_small_shape_is_confirmed_after_another_kernel(tmp_path):
    from gemmforge.policy.heuristic import HeuristicPolicy
    from gemmforge.search.tune.database import TunedDatabase
    from gemmforge.search.measure.runners import HarnessRunner
    from gemmforge.search.tune.tuner import Budget, Tuner, TuneSettings
    problem = Problem(512, 1024, 512)
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    database = TunedDatabase(url)
    runner = HarnessRunner(0, builders=8, settings=BenchSettings(protocols=("kernel",)))
    try:
        tuner = Tuner(runner, HeuristicPolicy(), url,
                      TuneSettings(budget=Budget(8), batch=8, seed=0, confirm=3,
                                   backends=("cuda_wgmma",)),
                      database=database)
        outcome = tuner.tune(problem)
    finally:
        runner.close()
    assert outcome.confirmed and outcome.best.ok
    assert outcome.best.after_us and outcome.best.cublas_after_us  # timed after the add
    kept = tuner.study(problem).user_attrs["confirmed"]
    assert kept["protocols"] == ["kernel", "after"]
    assert max(kept["selected"].values()) == pytest.approx(selection_ratio(problem,
                                                                           outcome.best))
    assert str(database.best(runner.device, problem).program) == outcome.best.program
    trials = [t for t in tuner.study(problem).trials if t.user_attrs.get("measured")]
    assert all(t.user_attrs["result"].get("after_us") is None for t in trials)  # kernel only
    print(f"\n{problem}: {outcome.best.program}: after {outcome.best.after_speedup:.3f}x, "
          f"kernel {outcome.best.speedup:.3f}x; contenders {kept['programs']}")
