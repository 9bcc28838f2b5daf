"""search.campaign.wave_footprint: the operand bytes a grid's waves read, by raster, and the raster twins
a campaign re-run times beside each incumbent (`--twins raster`)."""
from __future__ import annotations

import pytest

from gemmforge.ir import check, parse
from gemmforge.ir.program import Arch, Problem, Raster, RasterOrder
from gemmforge.search.campaign.portfolio import Portfolio
from gemmforge.search.campaign.wave_footprint import footprint_bytes, raster_twins, tile_order

LARGE = "cuda_wgmma sm_90a 192x128x64 w1x1 s5 sw128 row/8 pred k1 persistent c2x1 pingpong tma"
SMALL = "cuda_wgmma sm_90a 128x128x64 w1x1 s6 sw128 row/1 pred k1 persistent c1x1 pingpong tma"


def test_tile_order_walks_groups_of_rows_then_across():
    # row/2 over 4 x 3 tiles: rows 0-1 down each column, then rows 2-3
    assert tile_order(4, 3, Raster(RasterOrder.ROW, 2))[:8] == [
        (0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2), (2, 0), (3, 0)]
    assert tile_order(4, 3, Raster(RasterOrder.COL, 1))[:4] == [(0, 0), (1, 0), (2, 0), (3, 0)]


@pytest.mark.parametrize("order", list(RasterOrder))
@pytest.mark.parametrize("group", [1, 2, 3, 8])
def test_tile_order_visits_every_tile_once(order, group):
    got = tile_order(5, 7, Raster(order, group))  # ragged last group
    assert sorted(got) == [(i, j) for i in range(5) for j in range(7)]


def test_footprint_counts_distinct_panels_per_wave():
    problem = Problem(512, 512, 64)
    # 4 x 4 tiles of 128, waves of 4 CTAs: row/1 takes one row of tiles a wave (1 A panel, 4 B)
    assert footprint_bytes(parse(SMALL), problem, sms=4) == 4 * (128 + 4 * 128) * 64 * 2
    # row/2: a 2 x 2 block a wave (2 A panels, 2 B)
    row2 = parse(SMALL.replace("row/1", "row/2"))
    assert footprint_bytes(row2, problem, sms=4) == 4 * (2 * 128 + 2 * 128) * 64 * 2
    # a cluster of two along M: waves of 2 clusters, each cluster two tile rows
    c2 = parse(SMALL.replace("c1x1", "c2x1"))
    assert footprint_bytes(c2, problem, sms=4) == 4 * (2 * 128 + 2 * 128) * 64 * 2


def test_raster_twins_read_less_and_are_legal():
    problem = Problem(12288, 2048, 12288)
    incumbent = parse(LARGE)
    own = footprint_bytes(incumbent, problem, 132)
    twins = raster_twins(incumbent, problem, 132)
    assert 1 <= len(twins) <= 2
    got = [footprint_bytes(t, problem, 132) for t in twins]
    assert got == sorted(got) and all(b <= 0.9 * own for b in got)
    for twin in twins:
        assert twin.raster != incumbent.raster and check(twin, problem) is None
    # the best raster has no twin that beats it by 10 %; other backends get none
    assert raster_twins(twins[0], problem, 132) == []
    triton = parse("triton sm_90a 128x128x64 w2x2 s4 swnone row/8 pred k1 dp c1x1 nows direct")
    assert raster_twins(triton, problem, 132) == []


def test_portfolio_times_the_incumbent_then_its_raster_twins():
    problem = Problem(12288, 2048, 12288)
    portfolio = Portfolio(per_backend=0, incumbents={problem: LARGE}, twins=("raster",))
    got = portfolio.programs_for(problem, (Arch.SM90A,))
    assert got[0] == LARGE and got[1:] == [str(t) for t in raster_twins(parse(LARGE), problem, 132)]
    assert Portfolio(twins=("raster",)).signature() != Portfolio().signature()
    with pytest.raises(ValueError, match="pdl, raster"):
        Portfolio(twins=("stages",))
