"""GPU tier for the grid campaign: the sustained protocol on a real kernel, and a small
campaign (two shapes, every pass) on the GPU runner, resumed once. Run on the GPU machine:

    python -m pytest tests/gpu/test_campaign_gpu.py -m gpu -v -s
"""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gemmforge.ir.program import Problem  # noqa: E402
from gemmforge.ir.text import parse  # noqa: E402
from gemmforge.search.measure.measure import BuilderPool, DeviceRunner, measure  # noqa: E402
from gemmforge.search.measure.records import BenchSettings, MeasureRequest  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[2]
WGMMA = "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 persistent c1x1 coop tma"


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


@pytest.mark.skipif(not _hopper(), reason="a cuda_wgmma program needs sm_90")
def test_sustained_protocol_on_a_large_shape():
    problem = Problem(4096, 4096, 4096)
    settings = BenchSettings(protocols=("kernel", "sustained"), rounds=3, sustained_s=0.5)
    with BuilderPool(workers=2) as builders, DeviceRunner() as runner:
        [r] = measure([MeasureRequest.make(parse(WGMMA), problem, settings)],
                      builders=builders, runner=runner, progress=False)
    assert r.ok, r.message
    assert r.sustained_us and r.cublas_sustained_us
    # seconds back to back run no faster than the short window, and not wildly slower
    assert 0.9 * r.kernel_us < r.sustained_us < 1.5 * r.kernel_us
    print(f"\n{problem}: kernel {r.kernel_us:.1f} us (x{r.speedup:.3f}), sustained "
          f"{r.sustained_us:.1f} us vs cuBLAS {r.cublas_sustained_us:.1f} "
          f"(x{r.sustained_speedup:.3f})")


@pytest.mark.skipif(not _hopper(), reason="the portfolio is sm_90a")
def test_a_small_campaign_on_the_gpu(tmp_path):
    from gemmforge.search.campaign.campaign import Campaign, CampaignSettings
    from gemmforge.search.campaign.campaign_runners import GridRunner
    from gemmforge.search.measure.campaign_store import CampaignStore
    from gemmforge.search.campaign.portfolio import Portfolio
    from gemmforge.search.measure.records import replace
    settings = CampaignSettings(
        portfolio=Portfolio(per_backend=2, per_shape=6, lists=(
            ("large", str(ROOT / "tests" / "data" / "large_programs.txt")),)),
        threshold=10.0, search_budget=2, search_batch=2, top=2)
    settings = replace(settings, sustained_bench=replace(settings.sustained_bench,
                                                         sustained_s=0.3))
    problems = [Problem(256, 512, 1024), Problem(4096, 4096, 8192)]
    for attempt in range(2):  # the second run resumes and must find nothing to do
        store = CampaignStore(tmp_path / "c.db")
        runner = GridRunner(0, builders=8, settings=BenchSettings(protocols=("kernel",)))
        try:
            summary = Campaign(store, runner, problems, settings, progress=False).run()
        finally:
            runner.close()
            store.close()
        print(summary)
        assert summary["confirmed"] == 2 and summary["stopped"] is None
        if attempt:
            assert summary["this_run"] == {}
    store = CampaignStore(tmp_path / "c.db")
    rows = store.rows()
    assert len(rows) == len(set(rows)) and store.count("search") == 4
    for p in problems:
        last = store.results(p, "confirm", store.last_round(p, "confirm"))
        assert all(r.ok and r.cold_us and r.call_us for r in last), last
        assert all(bool(r.sustained_us) == (p.flops >= 1e11) for r in last)
