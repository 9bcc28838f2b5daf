"""Which shapes a campaign's search pass takes (search.campaign.campaign.Campaign.weak), on the replay
runner: below the large class by their best after another kernel, and what a run that leaves
the search out says of the shapes whose confirmation waits for it."""
from __future__ import annotations

from gemmforge.search.measure.records import Result
from campaign_helpers import campaign


def test_a_shape_is_weak_by_its_best_after_another_kernel_below_the_large_class(tmp_path):
    """The search pass goes where the portfolio loses in a model: a pdl program's
    back-to-back lead (kernel 1.33x) does not hide a small shape whose best after another
    kernel is 0.95x; the large class stays judged by its kernel readings."""
    c = campaign(tmp_path / "c.db", tmp_path / "v.jsonl", shapes="512x512x512,4096x4096x4096",
                 threshold=1.0)
    small, large = c.problems

    def read(p, name, kernel_us, after_us, cublas_us=4.0):
        return Result(name, p.m, p.n, p.k, kernel_us=kernel_us, cublas_us=cublas_us,
                      after_us=after_us, cublas_after_us=cublas_us)
    c.store.record(small, "portfolio", [read(small, "pdl", 3.0, 4.4), read(small, "twin", 4.1, 4.2)])
    c.store.record(large, "portfolio", [read(large, "pdl", 900.0, 1100.0, 1000.0)])
    assert c.weak() == [small]
    c.store.record(small, "portfolio", [read(small, "better", 4.0, 3.9)])
    assert c.weak() == []


def test_a_run_without_the_search_pass_says_which_shapes_wait_for_it(tmp_path):
    """Confirmation waits for a weak shape's search: a run whose passes leave the search out
    counts those shapes and says so; with --search-budget 0 they are confirmed without it."""
    db, bad = tmp_path / "c.db", tmp_path / "v.jsonl"
    lines: list[str] = []
    c = campaign(db, bad)
    c.log = lines.append
    summary = c.run(passes=("build", "portfolio", "confirm"))
    weak = c.weak()
    assert weak and summary["awaiting_search"] == len(weak)
    assert summary["confirmed"] == len(c.problems) - len(weak)
    assert any(f"{len(weak)} weak shapes wait for the search pass" in line for line in lines)
    done = campaign(db, bad, search_budget=0).run(passes=("build", "portfolio", "confirm"))
    assert done["awaiting_search"] == 0 and done["confirmed"] == len(c.problems)
    assert done["measurements"]["search"] == 0 and not bad.exists()
