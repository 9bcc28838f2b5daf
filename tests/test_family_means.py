"""search.campaign.family_means: a round's challengers, and its winners, against the incumbents beside
them in the same confirmation groups; the campaign report's families table."""
from __future__ import annotations

import pytest

from gemmforge.search.measure.campaign_store import CampaignStore
from gemmforge.search.measure.records import Result
from gemmforge.search.measure.shapes import parse_shapes
from campaign_helpers import campaign


def test_a_rounds_challengers_against_the_incumbent_beside_them(tmp_path):
    """search.campaign.family_means: per challenger and FLOP decade, its selection ratio over the
    incumbent's in the same (latest) round, as a geomean over shapes, and where it was ahead."""
    from gemmforge.search.campaign.family_means import (
        against_incumbents, markdown, winners_against_incumbents)
    c = campaign(tmp_path / "c.db", tmp_path / "v.jsonl", shapes="4096x4096x8192,8192x8192x256")
    c.run()
    medium, large = sorted(c.problems, key=lambda p: p.flops)  # 2mnk 3.4e10; 2.7e11 (sustained)

    def plant(p, ratios):  # program -> its ratio to cuBLAS (sustained for `large`)
        base = c.winner(p).cublas_us
        c.store.record(p, "confirm", [Result(
            q, p.m, p.n, p.k, kernel_us=base / x, cublas_us=base, cold_us=base / x,
            cublas_cold_us=base, sustained_us=base / x if p is large else None,
            cublas_sustained_us=base if p is large else None) for q, x in ratios.items()],
            round_=c.store.last_round(p, "confirm") + 1, done=True)
    plant(large, {"inc": 1.00, "a": 1.02, "b": 0.97})
    plant(medium, {"inc": 1.10, "a": 1.10 * 1.04})
    rows = against_incumbents(c, lambda p: "inc")
    table = {(r["program"], r["decade"]): (r["shapes"], r["ahead"]) for r in rows}
    assert table == {("a", "1e10"): (1, 1), ("a", "1e11"): (1, 1), ("a", "all"): (2, 2),
                     ("b", "1e11"): (1, 0), ("b", "all"): (1, 0)}
    by = {(r["program"], r["decade"]): r["vs_incumbent"] for r in rows}
    assert by["a", "all"] == pytest.approx((1.02 * 1.04) ** 0.5)
    assert by["b", "1e11"] == pytest.approx(0.97)
    assert [r["program"] for r in rows][:3] == ["a"] * 3  # most shapes first, "all" last
    assert "| b | 1e11 | 1 | 0.970 | 0 |" in markdown(rows)
    assert against_incumbents(c, lambda p: "not confirmed") == []
    # the round as a whole: each shape's winner ("a" at both) over the incumbent beside it
    won = winners_against_incumbents(c, lambda p: "inc")
    assert (won["shapes"], won["changed"], won["beside_incumbent"]) == (2, 2, 2)
    assert won["geomean"] == pytest.approx((1.02 * 1.04) ** 0.5)
    assert won["median"] == pytest.approx((1.02 + 1.04) / 2)
    kept = winners_against_incumbents(c, lambda p: "a")  # the winner is the incumbent
    assert (kept["changed"], kept["beside_incumbent"], kept["median"]) == (0, 0, None)
    unconfirmed = winners_against_incumbents(c, lambda p: "not confirmed")
    assert (unconfirmed["changed"], unconfirmed["beside_incumbent"]) == (2, 0)


def test_the_report_of_a_run_with_incumbents_lists_its_challengers(tmp_path, capsys):
    """--report on a store whose run named --incumbents: NAME_families.csv, each shape's first
    planned program as its incumbent (a replayed run has none, so one is marked here)."""
    import csv
    from gemmforge.cli import main
    db = tmp_path / "c.db"
    assert main(["campaign", "--storage", str(db), "--shapes", "4096x4096x8192,8192x8192x256",
                 "--replay", "synthetic", "--search-budget", "0", "--per-backend", "3",
                 "--quiet"]) == 0
    with CampaignStore(db).lock() as store:
        store.put("options", {**store.get("options"), "incumbents": "shipped"})
        first = {store.planned(p, "portfolio")[0] for p in parse_shapes(
            "4096x4096x8192,8192x8192x256")}
    capsys.readouterr()
    assert main(["campaign", "--storage", str(db), "--report", "g", "--report-dir",
                 str(tmp_path)]) == 0
    assert "| vs incumbent (geomean) |" in capsys.readouterr().out
    with (tmp_path / "g_families.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert rows and {r["decade"] for r in rows} >= {"all"}
    assert not {r["program"] for r in rows} & first  # incumbents are not their own challengers
